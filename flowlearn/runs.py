"""Run directories (what ``python train.py`` writes) and sweep directories (``python train.py -m``): what they hold,
and their logged metrics. Their predicted fields are read by :func:`flowlearn.training.predictions.read_predictions`.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from flowlearn.errors import RunDirectoryError

CONFIG_FILE = Path(".hydra") / "config.yaml"


def read_metrics(run_dir: str | Path) -> dict[str, np.ndarray]:
    """Columns of ``<run_dir>/metrics.csv`` as float arrays (NaN where a row did not log that column).

    Lightning's CSV logger writes one row per logging call, so ``train/*`` and ``val/*`` values of one epoch sit
    on different rows; select rows with ``~np.isnan(columns[name])``.
    """
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no metrics.csv (was the run started with logger=csv?)")
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (UnicodeDecodeError, csv.Error) as error:  # binary damage, or a line no CSV reader takes
        raise RunDirectoryError(f"{path}: not a metrics file of Lightning's CSV logger ({error})") from None
    if not rows or "epoch" not in rows[0]:
        raise RunDirectoryError(f"{path}: no logged epochs (not a metrics file of Lightning's CSV logger)")
    columns = {}
    for name in rows[0]:
        values = []
        for line, row in enumerate(rows, start=2):
            value = row[name]
            try:
                values.append(math.nan if value in ("", None) else float(value))
            except ValueError:
                raise RunDirectoryError(
                    f"{path}: line {line}, column {name!r}: {value!r} is not a number"
                ) from None
        columns[name] = np.array(values)
    return columns


def read_run_yaml(path: Path) -> object:
    """One of the YAML files Hydra keeps in a run's ``.hydra`` folder, as OmegaConf loads it;
    :class:`RunDirectoryError` where it is not YAML."""
    try:
        return OmegaConf.load(path)
    except (yaml.YAMLError, UnicodeDecodeError, OmegaConfBaseException) as error:
        reason = " ".join(str(error).split())
        raise RunDirectoryError(f"{path}: not a readable run config ({reason})") from None


def run_config(run_dir: Path) -> DictConfig:
    """A run's saved config (``.hydra/config.yaml``); :class:`RunDirectoryError` where it is not YAML or lacks the
    law or the model."""
    path = run_dir / CONFIG_FILE
    cfg = read_run_yaml(path)
    named = isinstance(cfg, DictConfig)
    missing = [
        key for key in ("law", "model") if not named or OmegaConf.select(cfg, f"{key}._target_") is None
    ]
    if missing:
        raise RunDirectoryError(f"{path}: not a run's config: it names no {' or '.join(missing)}")
    return cfg


def metric_series(columns: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of one metric, for the rows that logged it."""
    if name not in columns:
        raise KeyError(f"metric {name!r} was not logged; logged: {sorted(columns)}")
    logged = ~np.isnan(columns[name])
    return columns["epoch"][logged].astype(int), columns[name][logged]


def latest_run(outputs: str | Path) -> Path:
    """The newest finished run under ``outputs`` in Hydra's ``<outputs>/<date>/<time>`` layout.

    Hydra's date and time folder names sort chronologically; a run counts as finished once it has written
    ``predictions.h5`` (its last output), so a run still training is passed over.
    """
    finished = sorted(p.parent for p in Path(outputs).glob("*/*/predictions.h5"))
    if not finished:
        raise FileNotFoundError(
            f"no finished run under {outputs}/<date>/<time> (run `python train.py` first)"
        )
    return finished[-1]


def missing_outputs(run_dir: Path) -> list[str]:
    """What a finished run directory lacks, in words (empty when it is complete)."""
    needs = (
        (any((run_dir / "checkpoints").glob("*.ckpt")), "a checkpoint (checkpoints/*.ckpt)"),
        ((run_dir / "metrics.csv").is_file(), "metrics (metrics.csv; the run needs logger=csv)"),
        ((run_dir / CONFIG_FILE).is_file(), f"the run's config ({CONFIG_FILE.as_posix()})"),
        ((run_dir / "predictions.h5").is_file(), "predictions (predictions.h5, written when training ends)"),
    )
    return [what for present, what in needs if not present]


def looks_like_run(path: Path) -> bool:
    """Whether ``path`` holds any run output of its own (a sweep directory does not)."""
    return any((path / name).exists() for name in (".hydra", "checkpoints", "metrics.csv"))


def sweep_runs(sweep_dir: Path) -> list[Path]:
    """The run subdirectories of a sweep, in numeric order of their names where they are numbers (Hydra's)."""
    runs = [p for p in sweep_dir.iterdir() if p.is_dir() and looks_like_run(p)]
    return sorted(runs, key=lambda p: (0, int(p.name), "") if p.name.isdigit() else (1, 0, p.name))
