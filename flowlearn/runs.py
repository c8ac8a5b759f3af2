"""Reading a finished run directory: its logged metrics."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np


def read_metrics(run_dir: str | Path) -> dict[str, np.ndarray]:
    """Columns of ``<run_dir>/metrics.csv`` as float arrays (NaN where a row did not log that column).

    Lightning's CSV logger writes one row per logging call, so ``train/*`` and ``val/*`` values of one epoch sit
    on different rows; select rows with ``~np.isnan(columns[name])``.
    """
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no metrics.csv (was the run started with logger=csv?)")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    names = rows[0].keys() if rows else []
    return {
        name: np.array([float(r[name]) if r[name] not in ("", None) else math.nan for r in rows])
        for name in names
    }


def metric_series(columns: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of one metric, for the rows that logged it."""
    if name not in columns:
        raise KeyError(f"metric {name!r} was not logged; logged: {sorted(columns)}")
    logged = ~np.isnan(columns[name])
    return columns["epoch"][logged].astype(int), columns[name][logged]
