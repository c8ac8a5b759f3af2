"""The training job behind ``python train.py``: build everything from a Hydra config, fit, test, write outputs.

Outputs, in the run directory (Hydra's output directory):

- ``checkpoints/last.ckpt`` and ``checkpoints/best-*.ckpt``;
- ``metrics.csv`` (or TensorBoard event files with ``logger=tensorboard``);
- ``predictions.h5``: per fracture, the aperture, the learned correction, log k, the predicted, baseline and
  reference pressures and flow rates (see :mod:`flowlearn.training.predictions`);
- ``.hydra/config.yaml``: the resolved config, from which ``flowlearn predict`` rebuilds the model.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate, to_absolute_path
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from omegaconf import DictConfig, OmegaConf

from flowlearn.darcy import kernels
from flowlearn.data.copies import Copies
from flowlearn.data.datamodule import FractureDataset, find_fractures, split_fractures
from flowlearn.data.files import list_fractures, read_fracture, validate_file
from flowlearn.data.inputs import NO_VOXEL_SIZE, NO_WALLS, missing_geometry, require_inputs
from flowlearn.data.provenance import recorded_error
from flowlearn.data.schema import Fracture
from flowlearn.errors import ConfigError, SolutionError
from flowlearn.fractures.statistics import aperture_statistics, statistic_ranges
from flowlearn.metrics import LOSS
from flowlearn.models.laws import PermeabilityLaw
from flowlearn.training.build import build_correction, model_dtype, model_inputs
from flowlearn.training.checkpoints import prepare_outputs
from flowlearn.training.config import check_run_groups, validate_config
from flowlearn.training.console import FreshLineOnError, quiet_lightning
from flowlearn.training.module import FractureFlowModule
from flowlearn.training.predictions import write_predictions
from flowlearn.training.sigterm import StopOnSigterm

log = logging.getLogger(__name__)

# The flow-rate weight of ``loss.flow_rate_weight: null`` where the training data has flow rates (see
# configs/train.yaml for the reasoning).
DEFAULT_FLOW_RATE_WEIGHT = 0.01
# Fractures named in the error of a flow-rate loss asked for on data without flow rates.
_LISTED_FRACTURES = 3


def _no_validation(cfg: DictConfig, fractures: int) -> str:
    """Why the run validates at no epoch (empty where it does), from its config and its ``fractures`` of the
    validation split."""
    if not fractures:
        return f"no validation fractures (data.fractions={list(cfg.data.fractions)})"
    if OmegaConf.select(cfg, "trainer.limit_val_batches") == 0:
        return "trainer.limit_val_batches=0"
    every, epochs = (
        OmegaConf.select(cfg, f"trainer.{key}") for key in ("check_val_every_n_epoch", "max_epochs")
    )
    if every is not None and epochs is not None and every > epochs:
        return f"trainer.check_val_every_n_epoch={every} is more than trainer.max_epochs={epochs}"
    return ""


def _monitor_training_loss(callbacks: list[L.Callback], why: str) -> None:
    """Point the checkpoints that monitor a validation metric at the training loss, saying ``why`` in one line:
    without validation they would write no best checkpoint, with a warning from Lightning at every epoch."""
    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.monitor and callback.monitor.startswith("val/"):
            log.info(
                f"{why}: the best checkpoint keeps the epoch of the lowest training loss ({LOSS}) instead of the "
                f"lowest {callback.monitor}"
            )
            callback.monitor = LOSS


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Fit the configured model and write the run's outputs to ``run_dir`` (checkpoints, metrics, figures, and
    from the process of rank 0 ``predictions.h5``); returns the final logged metrics."""
    # Lightning stores epoch-level logged values in the default dtype; keep every metric in float64.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _train(cfg, Path(run_dir))
    finally:
        torch.set_default_dtype(previous)


def check_inputs(cfg: DictConfig) -> None:
    """Everything that can be checked before any heavy start-up: the config's values, then every fracture of the
    data files against the schema and against what the model's inputs need, and that no fracture repeats another
    (:mod:`flowlearn.data.copies`). Raises :class:`ConfigError` or
    :class:`DataValidationError`."""
    check_run_groups(cfg)
    validate_config(cfg)
    paths = cfg.data.path if OmegaConf.is_list(cfg.data.path) else [cfg.data.path]
    paths = [to_absolute_path(str(path)) for path in paths]
    copies = Copies()

    def check(fracture: Fracture, path: str) -> None:
        # The recorded reference errors too, which the dataset reads only when a fracture first loads, mid-run.
        recorded_error(fracture, path)
        copies.add(fracture, path)

    for path in paths:
        validate_file(path, require_pressure=True, check=check)
    copies.check()
    try:
        limit = OmegaConf.select(cfg, "data.max_fractures")
        split_fractures(find_fractures(paths), tuple(cfg.data.fractions), cfg.data.seed, limit=limit)
    except ValueError as error:
        raise ConfigError(
            f"data.fractions: {error}; raise the training fraction, e.g. data.fractions=[0.75,0.125,0.125]"
        ) from None
    require_inputs(paths, model_inputs(cfg.model), needed_by="model.inputs asks for")


def _preparing(paths: list[str]) -> str:
    """The line that says what happens before the first progress bar, for the data files ``paths``: seconds,
    and on the first run of a copy of flowlearn about ten more, in which numba compiles the solver's kernels."""
    count = sum(len(list_fractures(path)) for path in paths)
    line = (
        f"preparing: {count} fractures of {', '.join(map(str, paths))} checked; building the model and the solver, "
        "fitting the power-law baseline"
    )
    if not kernels.compiled():
        line += (
            "; the first solves compile the solver's kernels (numba), about 10 s on this first run, cached in "
            f"{Path(kernels.__file__).parent / '__pycache__'} for the next ones"
        )
    return line


def _train(cfg: DictConfig, run_dir: Path) -> dict[str, float]:
    quiet_lightning()
    check_inputs(cfg)
    paths = cfg.data.path if OmegaConf.is_list(cfg.data.path) else [cfg.data.path]
    cfg.data.path = [to_absolute_path(str(p)) for p in paths]
    log.info(_preparing(list(cfg.data.path)))
    # A missing backend (Julia, GPU) or an engine option out of its range fails here, before the data loads.
    solver = instantiate(cfg.solver)
    L.seed_everything(cfg.seed, workers=True, verbose=False)  # the seed is in the run's config
    datamodule = instantiate(cfg.data, inputs=list(model_inputs(cfg.model)))
    datamodule.setup("fit")
    train_shapes = sorted({ref.shape for ref in datamodule.splits["train"].refs})
    if not train_shapes:
        raise ConfigError(
            f"data: no training fracture in {cfg.data.path} with fractions {list(cfg.data.fractions)}"
        )

    law = instantiate(cfg.law)
    for line in geometry_warnings(cfg.data.path, law):
        log.warning(line)
    weight = flow_rate_weight(OmegaConf.select(cfg, "loss.flow_rate_weight"), law, datamodule.splits["train"])
    train_refs = datamodule.splits["train"].refs
    correction = build_correction(
        cfg.model, law, train_refs, batch_size=cfg.data.batch_size, dtype=model_dtype(cfg)
    )
    statistics = statistic_ranges(
        aperture_statistics(fracture.aperture, fracture.voxel_size)
        for fracture in (read_fracture(ref.path, ref.name, validate=False) for ref in train_refs)
    )
    module = FractureFlowModule(
        correction,
        law,
        solver,
        optimizer=instantiate(cfg.optimizer),
        training_statistics=statistics,
        flow_rate_weight=weight,
        pressure_loss=OmegaConf.select(cfg, "loss.pressure", default="mse"),
    )
    module.build_optimizer()  # a hyperparameter its class refuses fails here, before any output is written

    # A callback set to null is left out (`callbacks.figures=null`), as in lightning-hydra-template.
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c is not None]
    # Not choices: without them a multi-process run hangs on SIGTERM, and an error is printed on the bar's line.
    callbacks += [StopOnSigterm(), FreshLineOnError()]
    logger = instantiate(cfg.logger)
    no_validation = _no_validation(cfg, len(datamodule.splits["val"].refs))
    if no_validation:
        _monitor_training_loss(callbacks, no_validation)
    ckpt_path = to_absolute_path(cfg.ckpt_path) if cfg.ckpt_path else None
    # An unwritable output folder, a broken ckpt_path or one of another law or model fails here, before any training
    # (and before the trainer prints its lines about the hardware).
    resumed = prepare_outputs(run_dir, callbacks, logger, ckpt_path)
    if resumed is not None:
        module.check_checkpoint(resumed, f"ckpt_path: {ckpt_path}")
        module.check_optimizer_state(resumed, f"ckpt_path: {ckpt_path}")
    # Without validation fractures, no validation loop (Lightning would warn of its empty loader every epoch).
    options = {"limit_val_batches": 0} if not datamodule.splits["val"].refs else {}
    # Without its callback, no checkpoints and no progress bar: Lightning would otherwise add its own defaults.
    if not any(isinstance(c, ModelCheckpoint) for c in callbacks):
        options["enable_checkpointing"] = False
        log.warning(
            "callbacks.model_checkpoint is left out: this run keeps no checkpoint, so it cannot be resumed, and "
            "flowlearn predict and report cannot use it"
        )
    if not any(isinstance(c, ProgressBar) for c in callbacks):
        options["enable_progress_bar"] = False
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=logger, **options)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    if datamodule.splits["test"].refs:
        trainer.test(module, datamodule=datamodule, verbose=False)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if trainer.is_global_zero:
        try:
            write_predictions(module, datamodule.splits.items(), run_dir / "predictions.h5")
        except SolutionError as error:
            # Every fracture was solved under the law before training (the test's before the test ran): a solve that
            # breaks now breaks on the trained weights.
            raise module.diverged(f"the trained model's conductivities broke the solve: {error}") from error
    return metrics


def geometry_warnings(paths: list[str], law: PermeabilityLaw) -> list[str]:
    """One warning line for each thing ``law`` reads that fractures of the files ``paths`` lack (walls, a
    voxel size), naming the first such fracture.

    Where no fracture at all has walls, a law that reads them is the local cubic law everywhere, times the
    wedge factor where it also reads the aperture slope and some fracture has a voxel size: one line says so,
    naming the files, instead of listing fractures.
    """
    missing = missing_geometry(paths, law.uses_walls, law.uses_slope)
    fractures = sum(len(list_fractures(path)) for path in paths)
    lines = []
    if law.uses_walls and len(missing.get(NO_WALLS, [])) == fractures:
        del missing[NO_WALLS]
        wedge = law.uses_slope and len(missing.get(NO_VOXEL_SIZE, [])) < fractures
        if not wedge:
            missing.pop(NO_VOXEL_SIZE, None)
        lines.append(
            f"law={law.name}: no fracture of {', '.join(map(str, paths))} has walls ('bottom', 'top' of a 2D "
            "map), so the law reduces to the local cubic law"
            + (" times the wedge factor" if wedge else " (law=lcl)")
            + " everywhere"
        )
    for what, lacking in missing.items():
        lines.append(f"law={law.name}: {len(lacking)} fracture(s) have {what}; the first: {lacking[0]}")
    return lines


def flow_rate_weight(setting: float | None, law: PermeabilityLaw, train: FractureDataset) -> float:
    """The weight of the loss's flow-rate term from ``loss.flow_rate_weight``.

    ``None`` gives :data:`DEFAULT_FLOW_RATE_WEIGHT` where the law has flow-rate units and every training fracture
    has a reference flow rate, else 0, and logs which. A weight > 0 that cannot apply raises :class:`ConfigError`.
    """
    if setting == 0:
        return 0.0
    items = (train[index] for index in range(len(train)))
    missing = [item["name"] for item in items if not torch.isfinite(item["flow_rate"])]
    problem = None
    if not law.has_flow_units:
        problem = (
            f"law={law.name}'s conductivity has no flow-rate units (use law=inclined, law=lcl or law=ap2)"
        )
    elif missing:
        listed = ", ".join(missing[:_LISTED_FRACTURES]) + (
            ", ..." if len(missing) > _LISTED_FRACTURES else ""
        )
        problem = (
            f"{len(missing)} of the {len(train)} training fractures have no reference flow rate ({listed}; the "
            "'flow_rate' attribute)"
        )
    if setting is None:
        weight = 0.0 if problem else DEFAULT_FLOW_RATE_WEIGHT
        log.info(f"loss: flow_rate_weight = {weight:g}" + (f": {problem}" if problem else ""))
        return weight
    if problem:
        raise ConfigError(
            f"loss.flow_rate_weight={setting:g} trains on flow rates, but {problem}: set loss.flow_rate_weight=0"
        )
    return float(setting)
