"""``predictions.h5``: the fields a trained model predicts, per fracture, beside its baselines'. Schema, writer and
reader.

One group per fracture (named like the input, ``<file stem>/<group>`` flattened to ``<file stem>__<group>``), each
with datasets shaped like the aperture map (float64 but ``active``):

- ``aperture`` (m), ``active`` (bool);
- ``correction``: the learned W (laws ``inclined``, ``lcl`` and ``ap2``) or exponent w (law ``exponent``);
- ``log_k``: natural log of the conductivity the solve used; for a tensor law (``inclined``) (3, H, W), the solve's
  tensor form (log T_xx, log T_yy, ρ = T_xy/√(T_xx T_yy)) (see :mod:`flowlearn.darcy.conductivity`);
- ``pressure``: the model's pressure (NaN at inactive pixels);
- ``pressure_<baseline>``: each baseline's (:mod:`flowlearn.models.baselines`), for the baselines that apply;
- ``pressure_reference``: the reference (LBM) pressure of the input, absent where the input has none;

and attributes ``law``, ``correction_name``, ``split`` (train/val/test, or ``predict``), ``voxel_size`` (metres per
pixel, NaN when the input does not say), ``power_exponent`` (the ``power`` baseline's a, NaN when none was fitted),
``flow_rate`` (the model's outlet flow rate, NaN for a law without flow-rate units), ``flow_rate_<baseline>`` and
``flow_rate_reference`` (NaN where the input has none); flow rates in the units of the data's ``flow_rate`` for the
heads of the pressures; ``reference_error``, the reference's own error as the input's provenance records it
(:data:`~flowlearn.data.reference_error.ERRORS`; absent where it records none). Files are written atomically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from flowlearn.data.datamodule import FractureDataset
from flowlearn.data.reference_error import ERRORS
from flowlearn.data.schema import atomic_hdf5, open_file
from flowlearn.errors import DataValidationError
from flowlearn.models.baselines import BASELINE_NAMES, COMPARED
from flowlearn.training.batches import as_batch
from flowlearn.training.module import FractureFlowModule

FIELD_NAMES = ("aperture", "active", "correction", "log_k", "pressure", "pressure_reference")
# The attributes every group has.
REQUIRED_ATTRIBUTES = ("split", "law", "correction_name")
# File attribute: the training split's range of each statistic (flowlearn.data.statistics), as JSON.
TRAINING_STATISTICS = "training_statistics"
BASELINE_PREFIX = "pressure_"
FLOW_RATE_PREFIX = "flow_rate_"


@dataclass(frozen=True)
class FractureFields:
    """The fields of one fracture as a trained model and the baselines predict them (one group of
    ``predictions.h5``).

    Arrays are (H, W) or (D, H, W); floats are float64.

    Attributes:
        name: fracture key, e.g. ``"fractures__fracture_003"``.
        split: ``train``, ``val``, ``test`` or ``predict``.
        law: the law's name (``lcl``, ``ap2``, ``exponent``).
        correction_name: ``"W"`` (T = law(Ap)·W) or ``"w"`` (the exponent law's K = Ap^(2·relu(w))).
        voxel_size: metres per pixel, NaN when unknown.
        aperture: aperture map (m, or the source's unit when ``voxel_size`` is NaN).
        active: bool, pixels that carry flow.
        correction: the learned W or w.
        log_k: natural log of the conductivity the solve used, (H, W), or (3, H, W) in the tensor form.
        pressure: the model's pressure, NaN where no flow was solved.
        pressure_reference: reference (LBM) pressure, None where the input had none (an aperture map to predict on).
        baseline_pressures: each applicable baseline's pressure, by baseline name.
        flow_rate: the model's outlet flow rate, NaN for a law without flow-rate units.
        flow_rate_reference: the reference flow rate, NaN where the input has none.
        baseline_flow_rates: each applicable baseline's outlet flow rate, by baseline name.
        power_exponent: the ``power`` baseline's exponent a, NaN when none was fitted.
        flow_rate_interval: (low, high) of an ensemble's interval of the flow rate (:mod:`flowlearn.reporting.
            ensemble`), NaN for a single model.
        reference_error: the reference's own error against the smooth walls' Stokes flow as the input's provenance
            records it, :data:`~flowlearn.data.reference_error.ERRORS`; NaN each where it records none.
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
    pressure_reference: np.ndarray | None
    baseline_pressures: dict[str, np.ndarray]
    flow_rate: float
    flow_rate_reference: float
    baseline_flow_rates: dict[str, float]
    power_exponent: float
    flow_rate_interval: tuple[float, float] = (math.nan, math.nan)
    reference_error: tuple[float, ...] = (math.nan,) * len(ERRORS)

    @property
    def pressure_compared(self) -> np.ndarray:
        """The pressure of the baseline figures show beside the model's: the LCL's."""
        return self.baseline_pressures[COMPARED]

    @property
    def solved(self) -> np.ndarray:
        """bool mask of the pixels where the model's and the LCL's solves produced a pressure: active and
        connected to a face."""
        return self.active & np.isfinite(self.pressure) & np.isfinite(self.pressure_compared)

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


def _numpy(value: torch.Tensor) -> np.ndarray:
    array = value.detach().cpu().numpy()
    return array if array.dtype == bool else array.astype(np.float64)


@torch.no_grad()
def predict_fields(
    module: FractureFlowModule, dataset: FractureDataset, index: int, split: str
) -> FractureFields:
    """The fields of fracture ``index`` of ``dataset`` under ``module`` (in eval mode or not, as it is), with every
    applicable baseline's."""
    item = dataset[index]
    batch = as_batch(item, module.device)
    fields = module(batch)
    baselines = module.baselines.solutions(batch, 0, float(module.power_exponent))
    reference = batch.get("pressure")
    return FractureFields(
        name=group_name(item["name"]),
        split=split,
        law=module.law.name,
        correction_name=module.law.correction_name,
        voxel_size=float(item["voxel_size"]),
        aperture=_numpy(batch["aperture"][0]),
        active=_numpy(batch["active"][0]),
        correction=_numpy(fields["correction"][0]),
        log_k=_numpy(fields["log_k"][0]),
        pressure=_numpy(fields["pressure"][0]),
        pressure_reference=None if reference is None else _numpy(reference[0]),
        baseline_pressures={name: _numpy(pressure) for name, (pressure, _) in baselines.items()},
        flow_rate=float(fields["flow_rate"][0]),
        flow_rate_reference=float(item["flow_rate"]),
        baseline_flow_rates={name: float(flow_rate) for name, (_, flow_rate) in baselines.items()},
        power_exponent=float(module.power_exponent),
        reference_error=tuple(float(value) for value in item["reference_error"]),
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
    try:
        fields = (
            predict_fields(module, dataset, index, split)
            for split, dataset in datasets
            for index in range(len(dataset))
        )
        return write_fields(path, fields, module.training_statistics)
    finally:
        module.train(was_training)


def write_fields(
    path: str | Path,
    fields: Iterable[FractureFields],
    statistics: Mapping[str, Any] | None,
    **attributes: Any,
) -> int:
    """Write ``fields`` (one group each) atomically to the predictions file ``path``, with the training split's
    ``statistics`` ranges and ``attributes`` as file attributes; returns the number of groups written."""
    count = 0
    with atomic_hdf5(path) as out:
        if statistics:
            out.attrs[TRAINING_STATISTICS] = json.dumps(statistics)
        out.attrs.update(attributes)
        for one in fields:
            _write_group(out, one)
            count += 1
    return count


def _write_group(out: h5py.File, fields: FractureFields) -> None:
    group = out.create_group(fields.name)
    group.attrs.update(
        {
            "law": fields.law,
            "correction_name": fields.correction_name,
            "split": fields.split,
            "voxel_size": fields.voxel_size,
            "power_exponent": fields.power_exponent,
            "flow_rate": fields.flow_rate,
            "flow_rate_reference": fields.flow_rate_reference,
            **{f"{FLOW_RATE_PREFIX}{name}": rate for name, rate in fields.baseline_flow_rates.items()},
        }
    )
    if all(math.isfinite(end) for end in fields.flow_rate_interval):
        group.attrs["flow_rate_interval"] = fields.flow_rate_interval
    if any(math.isfinite(value) for value in fields.reference_error):
        group.attrs["reference_error"] = fields.reference_error
    for name in FIELD_NAMES:
        if getattr(fields, name) is not None:
            group.create_dataset(name, data=getattr(fields, name))
    for name, pressure in fields.baseline_pressures.items():
        group.create_dataset(f"{BASELINE_PREFIX}{name}", data=pressure)


def training_statistics(path: str | Path) -> dict[str, list[float]]:
    """The training split's range of each statistic that the predictions file ``path`` records (empty where the
    run's checkpoint had none)."""
    with open_file(path) as f:
        return json.loads(f.attrs.get(TRAINING_STATISTICS, "{}"))


def read_predictions(path: str | Path, split: str | None = None) -> list[FractureFields]:
    """Every fracture of a ``predictions.h5`` file, in group order; with ``split``, only that split's.

    Raises:
        FileNotFoundError: no such file.
        DataValidationError: not HDF5, or a group without the attributes and the ``pressure`` of a predictions
            group (a fracture file, say).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no predictions file {path}")
    with open_file(path) as f:
        for name, group in f.items():
            if (
                not isinstance(group, h5py.Group)
                or "pressure" not in group
                or any(key not in group.attrs for key in REQUIRED_ATTRIBUTES)
            ):
                raise DataValidationError(
                    f"{path}: group '{name}' has no predictions (attributes {', '.join(REQUIRED_ATTRIBUTES)} and "
                    "field 'pressure'): not a predictions file; give a run's predictions.h5 or a file that "
                    "flowlearn predict wrote"
                )
        return [
            _read_group(name, group)
            for name, group in f.items()
            if split is None or str(group.attrs["split"]) == split
        ]


def _read_group(name: str, group: h5py.Group) -> FractureFields:
    attrs = group.attrs
    present = [b for b in BASELINE_NAMES if f"{BASELINE_PREFIX}{b}" in group]
    return FractureFields(
        name=name,
        split=str(attrs["split"]),
        law=str(attrs["law"]),
        correction_name=str(attrs["correction_name"]),
        voxel_size=float(attrs.get("voxel_size", math.nan)),
        **{field: group[field][()] if field in group else None for field in FIELD_NAMES},
        baseline_pressures={b: group[f"{BASELINE_PREFIX}{b}"][()] for b in present},
        flow_rate=float(attrs.get("flow_rate", math.nan)),
        flow_rate_reference=float(attrs.get("flow_rate_reference", math.nan)),
        baseline_flow_rates={b: float(attrs.get(f"{FLOW_RATE_PREFIX}{b}", math.nan)) for b in present},
        power_exponent=float(attrs.get("power_exponent", math.nan)),
        flow_rate_interval=tuple(float(end) for end in attrs.get("flow_rate_interval", (math.nan, math.nan))),
        reference_error=tuple(
            float(value) for value in attrs.get("reference_error", (math.nan,) * len(ERRORS))
        ),
    )
