"""Checks of a training config that Hydra's own schema cannot express: value ranges and files that must exist.

Each problem is reported as one line that names the option, e.g. ``optimizer.lr must be > 0, got -0.001``.
(Misspelt keys and unknown group options are caught by Hydra itself, which lists the valid choices.)
"""

from __future__ import annotations

import math
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from flowlearn.errors import ConfigError

# The loosest solver tolerance a training run accepts: the relative accuracy of the reference pressures themselves
# (an LBM run stops when the velocity changes by less than 1e-6 over its check interval).
LOOSEST_SOLVER_TOLERANCE = 1e-6


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _positive(cfg: DictConfig, key: str, integer: bool = False) -> None:
    value = OmegaConf.select(cfg, key)
    if value is None:
        return
    kind = int if integer else (int, float)
    _check(
        isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value) and value > 0,
        f"{key} must be {'a positive integer' if integer else '> 0'}, got {value!r}",
    )


def validate_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` for the first impossible value in ``cfg``."""
    _positive(cfg, "optimizer.lr")
    _positive(cfg, "trainer.max_epochs", integer=True)
    _positive(cfg, "data.batch_size", integer=True)
    _positive(cfg, "model.channels", integer=True)
    _positive(cfg, "model.kernel_size", integer=True)
    for key in ("solver.rtol", "solver.reltol"):
        _positive(cfg, key)
        tolerance = OmegaConf.select(cfg, key)
        _check(
            tolerance is None or tolerance <= LOOSEST_SOLVER_TOLERANCE,
            f"{key}={tolerance!r} is looser than the reference pressures are accurate (their LBM runs converge to "
            f"{LOOSEST_SOLVER_TOLERANCE:g}): the loss and its gradient would follow the solver's error, not the "
            f"data; use {key} <= {LOOSEST_SOLVER_TOLERANCE:g} (the default is 1e-11)",
        )
    workers = OmegaConf.select(cfg, "data.num_workers")
    _check(
        workers is None or (isinstance(workers, int) and workers >= 0),
        f"data.num_workers must be >= 0, got {workers!r}",
    )
    fractions = OmegaConf.select(cfg, "data.fractions")
    if fractions is not None:
        values = list(fractions)
        _check(
            len(values) == 3 and all(isinstance(v, int | float) and v >= 0 for v in values) and values[0] > 0,
            f"data.fractions must be three non-negative numbers (train, val, test) with train > 0, got {values}",
        )
        _check(abs(sum(values) - 1) < 1e-9, f"data.fractions must sum to 1, got {values} (sum {sum(values)})")
    path = OmegaConf.select(cfg, "data.path")
    _check(path is not None, "data.path is not set: give an HDF5 file, e.g. data.path=path/to/fractures.h5")
    for p in path if OmegaConf.is_list(path) else [path]:
        _check(Path(to_absolute_path(str(p))).is_file(), f"data.path: file not found: {p}")
    checkpoint = OmegaConf.select(cfg, "ckpt_path")
    _check(
        checkpoint is None or Path(to_absolute_path(str(checkpoint))).is_file(),
        f"ckpt_path: checkpoint not found: {checkpoint}",
    )
