"""Building the trained model from config: for a new run (filled in from the data), or from a finished run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from flowlearn.data.datamodule import FractureRef
from flowlearn.data.inputs import DEFAULT_INPUTS
from flowlearn.errors import ConfigError, RunDirectoryError
from flowlearn.models.correction import PixelCorrection
from flowlearn.models.laws import PermeabilityLaw
from flowlearn.training.checkpoints import read_checkpoint
from flowlearn.training.module import TRAINING_DATA, FractureFlowModule


def model_inputs(model_cfg: DictConfig) -> tuple[str, ...]:
    """The input channels the configured model reads: ``model.inputs``, or the aperture for a model without
    that option (a pixel model)."""
    return tuple(OmegaConf.select(model_cfg, "inputs", default=DEFAULT_INPUTS))


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


def load_run(
    run_dir: str | Path, checkpoint: str | Path | None = None
) -> tuple[FractureFlowModule, DictConfig]:
    """Rebuild a trained module from a run directory (its ``.hydra/config.yaml`` and a checkpoint).

    ``checkpoint`` defaults to ``checkpoints/last.ckpt`` in the run directory. What the data decided at training
    time (a pixel model's shape, a network's dimension) is read from the checkpoint's weights; the network's input
    channels and the training split's aperture statistics from its training-data record (checkpoints written
    before that record existed: the inputs of the config, no statistics).
    """
    run_dir = Path(run_dir)
    config_path = run_dir / ".hydra" / "config.yaml"
    checkpoint = Path(checkpoint) if checkpoint else run_dir / "checkpoints" / "last.ckpt"
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    for needed, what in ((config_path, "the run's config"), (checkpoint, "a checkpoint")):
        if needed.is_dir():
            raise FileNotFoundError(f"{needed}: is a directory, not {what} file")
        if not needed.exists():
            raise FileNotFoundError(f"{run_dir}: {what} is missing ({needed} does not exist)")
    saved = read_checkpoint(checkpoint, option=None, weights_only=True)
    cfg = OmegaConf.load(config_path)
    try:
        law = instantiate(cfg.law)
    except InstantiationException as error:
        raise RunDirectoryError(
            f"{config_path}: the run's law ({cfg.law.get('_target_')}) does not exist in this flowlearn; runs "
            "trained with law=cubic or law=transmissivity (now law=ap2, T = Ā·Ap²/12·W, and law=lcl) need training "
            "again"
        ) from error
    state, record = saved["state_dict"], saved.get(TRAINING_DATA, {})
    # A run trained before the power-law baseline existed carries no exponent: that baseline stays absent.
    state.setdefault("power_exponent", torch.tensor(math.nan, dtype=torch.float64))
    if get_class(cfg.model._target_) is PixelCorrection:
        shape = tuple(state["correction.raw"].shape)
        correction = instantiate(cfg.model, shape=shape, initial=law.initial_raw)
    else:
        dim = state["correction.head.weight"].ndim - 2
        inputs = list(record.get("inputs", model_inputs(cfg.model)))
        correction = instantiate(cfg.model, dim=dim, initial=law.initial_raw, inputs=inputs)
    module = FractureFlowModule(correction, law, solver=None, training_statistics=record.get("statistics"))
    module.load_state_dict(state)
    return module, cfg
