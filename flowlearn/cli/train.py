"""``python train.py``: the Hydra entry point. It trains into Hydra's output directory
(:func:`flowlearn.training.train.train`), then ends with the held-out verdict in one line
(:func:`flowlearn.reporting.heldout.closing_line`) and the run directory on the next; a user's mistake ends it with
one line instead."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from flowlearn.errors import USER_ERRORS, ConfigError, UserErrorExit
from flowlearn.reporting.heldout import closing_line
from flowlearn.training.config import exit_with_user_error
from flowlearn.training.failures import clear_error, record_error
from flowlearn.training.train import train

log = logging.getLogger(__name__)

# What a constructor raises for a config value it refuses (Lightning's own refusals included), as opposed to a bug.
_REFUSED_ARGUMENTS = (ValueError, TypeError, ImportError, MisconfigurationException)


def run(cfg: DictConfig) -> float | None:
    """Hydra entry point: train into Hydra's output directory. A user error exits with one line on stderr, which
    the run directory keeps in ``error.txt`` (:mod:`flowlearn.training.failures`): the folder Hydra made then says
    why the run stopped. A folder Hydra named itself that holds nothing else is removed instead
    (:func:`_remove_refused_run`)."""
    run_dir = HydraConfig.get().runtime.output_dir
    clear_error(run_dir)  # an earlier attempt's (a requeued job, a run repeated in its folder)
    try:
        metrics = train(cfg, run_dir)
    except Exception as error:
        cause = _user_error(error)
        if cause is None:
            raise
        try:
            exit_with_user_error(cause)
        except UserErrorExit as stop:
            if not (rank_zero_only.rank == 0 and _remove_refused_run(Path(run_dir))):
                record_error(run_dir, stop.message)
            raise
    if rank_zero_only.rank == 0:  # the process that wrote predictions.h5
        log.info(closing_line(Path(run_dir) / "predictions.h5"))
        # A line of its own: a path of any length leaves the verdict's line as short as it is.
        log.info(f"outputs in {_shown(Path(run_dir))}")
    return metrics.get("val/mse")


def _shown(run_dir: Path) -> Path:
    """``run_dir`` relative to the working directory where it lies under it (Hydra's outputs/<date>/<time>), else
    as it is."""
    try:
        return run_dir.absolute().relative_to(Path.cwd())
    except ValueError:
        return run_dir


def _remove_refused_run(run_dir: Path) -> bool:
    """Remove ``run_dir``, and its parents that it leaves empty up to the working directory, where it is the folder
    Hydra named itself for a single run (``outputs/<date>/<time>``: no ``hydra.run.dir`` given, not a sweep) and
    holds nothing but Hydra's record (``.hydra/``) and logs; returns whether it did.

    Each refused attempt had left such a folder behind, which held no more than its one line. A folder given with
    ``hydra.run.dir`` (a cluster job's, a script's) and a sweep's run keep their ``error.txt`` instead, which
    ``flowlearn report`` shows; so does any folder that holds outputs (checkpoints of a run that diverged)."""
    hydra = HydraConfig.get()
    named = any(override.lstrip("+~").startswith("hydra.run.dir=") for override in hydra.overrides.hydra)
    if hydra.mode != RunMode.RUN or named or not run_dir.is_dir():
        return False
    if any(entry.name != ".hydra" and entry.suffix != ".log" for entry in run_dir.iterdir()):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    here, parent = Path.cwd().resolve(), run_dir.resolve().parent
    while parent != here and parent.is_relative_to(here) and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    return True


def _user_error(error: BaseException | None) -> BaseException | None:
    """The user-facing error behind ``error`` (Hydra wraps constructor failures), or None."""
    while error is not None:
        if isinstance(error, USER_ERRORS):
            return error
        if isinstance(error, OmegaConfBaseException):
            # An override that does not resolve, e.g. seed=${nope}: the message names the key.
            return ConfigError(" ".join(str(error).split()))
        if isinstance(error, InstantiationException) and isinstance(error.__cause__, _REFUSED_ARGUMENTS):
            # A library's constructor refused a value (trainer.accelerator=gpu without one, a strategy's name):
            # its own message, after the config key Hydra names.
            key = str(error).rpartition("full_key:")[2].strip() or "config"
            return ConfigError(f"{key}: {error.__cause__}")
        error = error.__cause__
    return None
