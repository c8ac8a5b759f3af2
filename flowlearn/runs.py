"""Reading a finished run directory: its logged metrics and its predicted fields."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import h5py
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


@dataclass(frozen=True)
class FractureFields:
    """The fields of one fracture as a finished run predicts them (one group of ``predictions.h5``).

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
        pressure_reference: reference (LBM) pressure.
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
    pressure_reference: np.ndarray

    @property
    def solved(self) -> np.ndarray:
        """bool mask of the pixels where both solves produced a pressure: active and connected to a face."""
        return self.active & np.isfinite(self.pressure) & np.isfinite(self.pressure_cubic)


FIELD_NAMES = (
    "aperture",
    "active",
    "correction",
    "log_k",
    "pressure",
    "pressure_cubic",
    "pressure_reference",
)


def read_predictions(path: str | Path) -> list[FractureFields]:
    """Every fracture of a ``predictions.h5`` file (see :mod:`flowlearn.predict`), in group order.

    Files written before the ``voxel_size`` attribute existed read as NaN (unknown voxel size).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no predictions file {path}")
    with h5py.File(path, "r") as f:
        return [
            FractureFields(
                name=name,
                split=str(group.attrs["split"]),
                law=str(group.attrs["law"]),
                correction_name=str(group.attrs["correction_name"]),
                voxel_size=float(group.attrs.get("voxel_size", math.nan)),
                **{field: group[field][()] for field in FIELD_NAMES},
            )
            for name, group in f.items()
        ]


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
