"""Building a correction model from config, writing predicted fields, and applying a trained run to new data.

``predictions.h5`` holds one group per fracture (named like the input, ``<file stem>/<group>`` flattened to
``<file stem>__<group>``), each with float64 datasets shaped like the aperture map:

- ``aperture`` (m), ``active`` (bool);
- ``correction``: the learned W (cubic and transmissivity laws) or exponent w (exponent law);
- ``log_k``: natural log of the conductivity the solve used;
- ``pressure``: predicted pressure (NaN at inactive pixels), ``pressure_cubic``: the plain cubic law's;
- ``pressure_reference``: the reference (LBM) pressure of the input;

and attributes ``law``, ``correction_name``, ``split`` (train/val/test, or ``predict``) and ``voxel_size`` (metres
per pixel, NaN when the input does not say). :func:`flowlearn.runs.read_predictions` reads the file back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import h5py
import numpy as np
import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from flowlearn.config import ConfigError
from flowlearn.data.datamodule import FractureDataModule, FractureDataset, FractureRef, find_fractures
from flowlearn.data.schema import atomic_path, read_fracture
from flowlearn.models import PixelCorrection
from flowlearn.models.laws import PermeabilityLaw
from flowlearn.module import FractureFlowModule


def build_correction(
    model_cfg: DictConfig, law: PermeabilityLaw, train_refs: Sequence[FractureRef]
) -> nn.Module:
    """Instantiate the correction model, filling in what the data decides: the shape of a pixel model, the
    dimension of a CNN, and the law's starting value."""
    target = get_class(model_cfg._target_)
    shapes = sorted({ref.shape for ref in train_refs})
    if issubclass(target, PixelCorrection):
        if len(train_refs) != 1:
            raise ConfigError(
                f"model=pixel learns one W per pixel of one fracture, but the training split has {len(train_refs)} "
                "fractures: use model=cnn, or give one fracture with data.fractions=[1,0,0]"
            )
        return instantiate(model_cfg, shape=shapes[0], initial=law.initial_raw)
    dims = {len(shape) for shape in shapes}
    if len(dims) != 1:
        raise ConfigError(f"the training fractures mix 2D and 3D shapes: {shapes}")
    return instantiate(model_cfg, dim=dims.pop(), initial=law.initial_raw)


@torch.no_grad()
def write_predictions(
    module: FractureFlowModule,
    datamodule: FractureDataModule,
    path: str | Path,
    splits: Iterable[str] = ("train", "val", "test"),
) -> None:
    """Predict every fracture of ``splits`` one at a time and write the fields atomically to ``path``."""
    module.eval()
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as out:
        for split in splits:
            dataset = datamodule.splits[split]
            for index in range(len(dataset)):
                _write_one(out, module, dataset, index, split)
    module.train()


def _as_batch(item: dict) -> dict:
    return {k: [v] if isinstance(v, str) else v.unsqueeze(0) for k, v in item.items()}


def group_name(key: str) -> str:
    """The ``predictions.h5`` group of a fracture key ``"<file stem>/<group>"``: one level, ``<stem>__<group>``."""
    return key.replace("/", "__")


def voxel_size(ref: FractureRef) -> float:
    """Metres per pixel of a fracture, NaN when its file does not say (the original layout)."""
    return read_fracture(ref.path, ref.name, validate=False).voxel_size


@torch.no_grad()
def predicted_fields(module: FractureFlowModule, item: dict) -> dict[str, np.ndarray]:
    """The fields of one dataset item (no batch dimension) under ``module``, as numpy arrays shaped like the
    aperture: ``active`` bool, the others float64 (the datasets of ``predictions.h5``)."""
    batch = _as_batch(item)
    fields = module(batch)
    data = {
        "aperture": batch["aperture"][0],
        "active": batch["active"][0],
        "correction": fields["correction"][0],
        "log_k": fields["log_k"][0],
        "pressure": fields["pressure"][0],
        "pressure_cubic": module.cubic_pressure(batch)[0],
        "pressure_reference": batch["pressure"][0],
    }
    arrays = {name: value.detach().cpu().numpy() for name, value in data.items()}
    return {name: a if a.dtype == bool else a.astype(np.float64) for name, a in arrays.items()}


def _write_one(
    out: h5py.File, module: FractureFlowModule, dataset: FractureDataset, index: int, split: str
) -> None:
    item = dataset[index]
    group = out.create_group(group_name(item["name"]))
    group.attrs.update(
        {
            "law": module.law.name,
            "correction_name": module.law.correction_name,
            "split": split,
            "voxel_size": voxel_size(dataset.refs[index]),
        }
    )
    for name, array in predicted_fields(module, item).items():
        group.create_dataset(name, data=array)


def load_run(
    run_dir: str | Path, checkpoint: str | Path | None = None
) -> tuple[FractureFlowModule, DictConfig]:
    """Rebuild a trained module from a run directory (its ``.hydra/config.yaml`` and a checkpoint).

    ``checkpoint`` defaults to ``checkpoints/last.ckpt`` in the run directory.
    """
    run_dir = Path(run_dir)
    config_path = run_dir / ".hydra" / "config.yaml"
    checkpoint = Path(checkpoint) if checkpoint else run_dir / "checkpoints" / "last.ckpt"
    for needed, what in ((config_path, "the run's config"), (checkpoint, "a checkpoint")):
        if not needed.exists():
            raise FileNotFoundError(f"{run_dir}: {what} is missing ({needed} does not exist)")
    cfg = OmegaConf.load(config_path)
    law = instantiate(cfg.law)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    if get_class(cfg.model._target_) is PixelCorrection:
        shape = tuple(state["correction.raw"].shape)
        correction = instantiate(cfg.model, shape=shape, initial=law.initial_raw)
    else:
        dim = next(v.ndim for k, v in state.items() if k.startswith("correction.body.0.weight")) - 2
        correction = instantiate(cfg.model, dim=dim, initial=law.initial_raw)
    module = FractureFlowModule(correction, law, solver=None)
    module.load_state_dict(state)
    return module, cfg


def predict(run_dir: str | Path, inputs: Sequence[str | Path], output: str | Path, checkpoint=None) -> int:
    """Apply a trained run to the fractures in ``inputs`` (HDF5, either layout) and write ``output``.

    Returns the number of fractures written.
    """
    module, _ = load_run(run_dir, checkpoint)
    refs = find_fractures([str(p) for p in inputs])
    dataset = FractureDataset(refs)
    with atomic_path(output) as tmp, h5py.File(tmp, "w") as out:
        for index in range(len(dataset)):
            _write_one(out, module, dataset, index, "predict")
    dataset.close()
    return len(refs)
