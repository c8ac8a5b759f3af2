"""``predictions.h5``: the fields a trained model predicts, per fracture. Its schema, writer and reader.

One group per fracture (named like the input, ``<file stem>/<group>`` flattened to ``<file stem>__<group>``), each
with datasets shaped like the aperture map (:data:`FIELD_NAMES`; float64 but ``active``):

- ``aperture`` (m), ``active`` (bool);
- ``correction``: the learned W (cubic and transmissivity laws) or exponent w (exponent law);
- ``log_k``: natural log of the conductivity the solve used;
- ``pressure``: predicted pressure (NaN at inactive pixels), ``pressure_cubic``: the plain cubic law's;
- ``pressure_reference``: the reference (LBM) pressure of the input, absent where the input has none;

and attributes ``law``, ``correction_name``, ``split`` (train/val/test, or ``predict``) and ``voxel_size`` (metres
per pixel, NaN when the input does not say). Files are written atomically.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from flowlearn.data.datamodule import FractureDataset, FractureRef
from flowlearn.data.schema import atomic_hdf5, open_file, read_fracture
from flowlearn.training.module import FractureFlowModule

FIELD_NAMES = (
    "aperture",
    "active",
    "correction",
    "log_k",
    "pressure",
    "pressure_cubic",
    "pressure_reference",
)


@dataclass(frozen=True)
class FractureFields:
    """The fields of one fracture as a trained model predicts them (one group of ``predictions.h5``).

    Arrays are (H, W) or (D, H, W); floats are float64.

    Attributes:
        name: fracture key, e.g. ``"fractures__fracture_003"``.
        split: ``train``, ``val``, ``test`` or ``predict``.
        law: permeability law name (``cubic``, ``transmissivity``, ``exponent``).
        correction_name: ``"W"`` (k = law(Ap)·W) or ``"w"`` (the exponent law's K = Ap^(2·relu(w))).
        voxel_size: metres per pixel, NaN when unknown.
        aperture: aperture map (m, or the source's unit when ``voxel_size`` is NaN).
        active: bool, pixels that carry flow.
        correction: the learned W or w.
        log_k: natural log of the conductivity the solve used.
        pressure: learned-model pressure, NaN where no flow was solved.
        pressure_cubic: plain cubic-law pressure (W = 1).
        pressure_reference: reference (LBM) pressure, None where the input had none (an aperture map to predict on).
    """

    name: str
    split: str
    law: str
    correction_name: str
    voxel_size: float
    aperture: np.ndarray
    active: np.ndarray
    correction: np.ndarray
    log_k: np.ndarray
    pressure: np.ndarray
    pressure_cubic: np.ndarray
    pressure_reference: np.ndarray | None

    @property
    def solved(self) -> np.ndarray:
        """bool mask of the pixels where both solves produced a pressure: active and connected to a face."""
        return self.active & np.isfinite(self.pressure) & np.isfinite(self.pressure_cubic)

    @property
    def compared(self) -> np.ndarray:
        """bool mask of the pixels the metrics compare: the solved ones less the inlet and outlet columns, whose
        heads are fixed in the fracture setup (see :mod:`flowlearn.training.metrics`)."""
        mask = self.solved.copy()
        mask[..., 0] = mask[..., -1] = False
        return mask


def group_name(key: str) -> str:
    """The group of a fracture key ``"<file stem>/<group>"``: one level, ``<stem>__<group>``."""
    return key.replace("/", "__")


def _voxel_size(ref: FractureRef) -> float:
    """Metres per pixel of a fracture, NaN when its file does not say (the original layout)."""
    return read_fracture(ref.path, ref.name, validate=False).voxel_size


def _as_batch(item: dict) -> dict:
    return {k: [v] if isinstance(v, str) else v.unsqueeze(0) for k, v in item.items()}


@torch.no_grad()
def predict_fields(
    module: FractureFlowModule, dataset: FractureDataset, index: int, split: str
) -> FractureFields:
    """The fields of fracture ``index`` of ``dataset`` under ``module`` (in eval mode or not, as it is)."""
    item = dataset[index]
    batch = _as_batch(item)
    fields = module(batch)
    data = {
        "aperture": batch["aperture"][0],
        "active": batch["active"][0],
        "correction": fields["correction"][0],
        "log_k": fields["log_k"][0],
        "pressure": fields["pressure"][0],
        "pressure_cubic": module.cubic_pressure(batch)[0],
    }
    if "pressure" in batch:
        data["pressure_reference"] = batch["pressure"][0]
    arrays = {name: value.detach().cpu().numpy() for name, value in data.items()}
    return FractureFields(
        name=group_name(item["name"]),
        split=split,
        law=module.law.name,
        correction_name=module.law.correction_name,
        voxel_size=_voxel_size(dataset.refs[index]),
        pressure_reference=arrays.pop("pressure_reference", None),
        **{name: a if a.dtype == bool else a.astype(np.float64) for name, a in arrays.items()},
    )


def write_predictions(
    module: FractureFlowModule,
    datasets: Iterable[tuple[str, FractureDataset]],
    path: str | Path,
) -> int:
    """Predict every fracture of the ``(split, dataset)`` pairs one at a time, in eval mode, and write the fields
    atomically to ``path``; returns the number of fractures written."""
    was_training = module.training
    module.eval()
    count = 0
    try:
        with atomic_hdf5(path) as out:
            for split, dataset in datasets:
                for index in range(len(dataset)):
                    _write_group(out, predict_fields(module, dataset, index, split))
                    count += 1
    finally:
        module.train(was_training)
    return count


def _write_group(out: h5py.File, fields: FractureFields) -> None:
    group = out.create_group(fields.name)
    group.attrs.update(
        {
            "law": fields.law,
            "correction_name": fields.correction_name,
            "split": fields.split,
            "voxel_size": fields.voxel_size,
        }
    )
    for name in FIELD_NAMES:
        if getattr(fields, name) is not None:
            group.create_dataset(name, data=getattr(fields, name))


def read_predictions(path: str | Path) -> list[FractureFields]:
    """Every fracture of a ``predictions.h5`` file, in group order.

    Files written before the ``voxel_size`` attribute existed read as NaN (unknown voxel size).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no predictions file {path}")
    with open_file(path) as f:
        return [
            FractureFields(
                name=name,
                split=str(group.attrs["split"]),
                law=str(group.attrs["law"]),
                correction_name=str(group.attrs["correction_name"]),
                voxel_size=float(group.attrs.get("voxel_size", math.nan)),
                **{field: group[field][()] if field in group else None for field in FIELD_NAMES},
            )
            for name, group in f.items()
        ]
