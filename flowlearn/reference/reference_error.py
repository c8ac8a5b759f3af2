"""Each fracture's reference error in its provenance: how far its stored flow rate and pressure lie from the Stokes
flow of its smooth walls, the flow every solver converges to as its grid is refined.

The smooth-wall values come from wall-fitted Stokes solves (``flowlearn stokes DATA --mesh walls
--cells-per-voxel R -o FILE``) at two resolutions r₁ < r₂: the flow rate extrapolated at the mesh's second order,

    Q_smooth = Q(r₂) + (Q(r₂) - Q(r₁)) / ((r₂/r₁)² - 1),

and the pressure taken from the finer solve. ``flowlearn smooth-walls DATA FILE...`` records, per fracture solved at
both,

    "reference_error": {"flow_rate_error": Q_ref/Q_smooth - 1, "departure_error": 1 - R² of the reference's pressure
                        departure against the finer solve's, "pressure_mse": their mean squared difference,
                        "how": MEASURED, "smooth_wall_flow_rate": Q_smooth, "cells_per_voxel": [r₁, r₂]}

and with ``--infer`` gives every other fracture of the file the median of the measured ones, marked as inferred,
with their rms spread: on the embedded dataset the error follows neither the wall slope, the contact area nor the
aperture's variance closely enough (correlation coefficients within ±0.2 over 32 fractures) for a fitted rule to
beat the median.

:func:`flowlearn.data.provenance.recorded_error` reads the record back; the held-out verdict (:mod:`flowlearn.reporting.heldout`) calls a
model's gain over a closed form a gain only where it is larger than this error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flowlearn.data.files import read_fractures, write_fractures

# The record's name, its keys and its reader belong to the data (the training data reads them for every
# fracture); computing what goes in them, here.
from flowlearn.data.provenance import (
    ERRORS,
    RECORD,
    fracture_where,
    provenance_number,
    provenance_record,
    recorded_error,
)
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError

# The solver modules are imported where they are used: reading a record (the training data does, for every
# fracture) must not load them.

MEASURED = (
    "measured: wall-fitted Stokes solves (flowlearn stokes --mesh walls) at two resolutions, the flow rate "
    "extrapolated at second order, the pressure of the finer"
)
INFERRED = "inferred: the median of this file's measured fractures"
# Fewest measured fractures whose median and spread are recorded in the others.
MIN_MEASURED = 3


@dataclass(frozen=True)
class SmoothWalls:
    """One fracture's smooth-wall values from its wall-fitted solves.

    Attributes:
        flow_rate: the extrapolated flow rate, in the solves' units (m³/s for the flowlearn layout).
        finer: the finer solve (its pressure, active map and heads are compared).
        cells_per_voxel: (r₁, r₂), the two resolutions.
    """

    flow_rate: float
    finer: Fracture
    cells_per_voxel: tuple[int, int]


def smooth_walls(paths: Sequence[str | os.PathLike]) -> dict[str, SmoothWalls]:
    """Each fracture's :class:`SmoothWalls`, by group name, from the ``flowlearn stokes --mesh walls`` outputs
    ``paths`` (several files per resolution allowed, where the fractures were split between runs).

    Raises:
        DataValidationError: naming the file and fracture: a solve not on the wall-fitted mesh, other than two
            resolutions, or a fracture solved at only one of them.
    """
    from flowlearn.reference.stokes import extrapolate

    by_resolution: dict[int, dict[str, Fracture]] = {}
    source: dict[int, str] = {}
    for path in paths:
        for fracture in read_fractures(path):
            record = provenance_record(fracture, "stokes", path)
            if record.get("mesh") != "walls":
                raise DataValidationError(
                    f"{path}, {fracture.name}: not a wall-fitted Stokes solve (flowlearn stokes --mesh walls -o FILE)"
                )
            cells = provenance_number(fracture, "stokes.settings.cells_per_voxel", path, default=None)
            if not (cells.is_integer() and cells >= 1):
                raise DataValidationError(
                    f"{fracture_where(fracture, path)}: provenance stokes.settings.cells_per_voxel is {cells!r}; expected an "
                    "integer >= 1"
                )
            cells = int(cells)
            by_resolution.setdefault(cells, {})[fracture.name] = fracture
            source.setdefault(cells, str(path))
    if len(by_resolution) != 2:
        raise DataValidationError(
            f"{', '.join(map(str, paths))}: give wall-fitted solves at two resolutions, got "
            f"{sorted(by_resolution) or 'none'} cells per voxel"
        )
    resolutions = sorted(by_resolution)
    for r, r_other in (resolutions, resolutions[::-1]):
        alone = sorted(by_resolution[r].keys() - by_resolution[r_other].keys())
        if alone:
            raise DataValidationError(
                f"{source[r]}: {', '.join(alone)} solved at {r} cells per voxel but not at {r_other}"
            )
    (r_coarse, coarse), (r_fine, fine) = sorted(by_resolution.items())
    return {
        name: SmoothWalls(
            extrapolate(coarse[name].flow_rate, fine[name].flow_rate, r_fine / r_coarse),
            fine[name],
            (r_coarse, r_fine),
        )
        for name in sorted(fine)
    }


def pressure_metrics(predicted: Fracture, truth: Fracture) -> dict[str, float]:
    """The pressure's :data:`~flowlearn.metrics.METRICS` of ``predicted`` against ``truth``, over the
    pixels active in both, with ``truth``'s heads, by metric name (the flow-rate error NaN)."""
    from flowlearn.metrics import fracture_metrics

    both = predicted.active & truth.active
    one = lambda value: torch.as_tensor(value, dtype=torch.float64)[None]  # noqa: E731
    metrics = fracture_metrics(
        one(predicted.pressure),
        one(truth.pressure),
        torch.as_tensor(both)[None],
        one(truth.inlet_pressure),
        one(truth.outlet_pressure),
        one(math.nan),
        one(math.nan),
    )
    return {name: float(value[0]) for name, value in metrics.items()}


def agreement(reference: Fracture, stokes: Fracture) -> tuple[float, float]:
    """1 - R² and the departure error (:data:`~flowlearn.metrics.DEPARTURE_ERR`) of ``stokes``'s pressure
    against ``reference``'s, over the pixels active in both; NaN where the reference has no pressure."""
    from flowlearn.metrics import DEPARTURE_ERR

    if reference.pressure is None:
        return math.nan, math.nan
    both = reference.active & stokes.active
    p, p_ref = stokes.pressure[both], reference.pressure[both]
    unexplained = float(((p - p_ref) ** 2).sum() / ((p_ref - p_ref.mean()) ** 2).sum())
    return unexplained, pressure_metrics(stokes, reference)[DEPARTURE_ERR]


def measured_record(reference: Fracture, smooth: SmoothWalls) -> dict[str, Any]:
    """The provenance record of ``reference``'s error against its smooth walls: its pressure against the finer
    solve's, its flow rate against the extrapolated one."""
    from flowlearn.metrics import DEPARTURE_ERR, MSE

    metrics = pressure_metrics(reference, smooth.finer)
    return {
        "flow_rate_error": float(reference.flow_rate / smooth.flow_rate - 1),
        "departure_error": metrics[DEPARTURE_ERR],
        "pressure_mse": metrics[MSE],
        "how": MEASURED,
        "smooth_wall_flow_rate": float(smooth.flow_rate),
        "cells_per_voxel": list(smooth.cells_per_voxel),
    }


def is_measured(fracture: Fracture) -> bool:
    """Whether ``fracture``'s provenance holds a measured reference error."""
    record = fracture.provenance.get(RECORD)
    return isinstance(record, dict) and record.get("how") == MEASURED


def record_file(path: str | os.PathLike, stokes_paths: Sequence[str | os.PathLike]) -> list[str]:
    """Record in ``path`` the measured reference error of each of its fractures that ``stokes_paths`` solved
    (:func:`smooth_walls`); the file is rewritten atomically. Returns the fractures recorded.

    Raises:
        DataValidationError: a solved fracture that ``path`` lacks, that stores no reference flow rate or
            pressure, or whose map differs from the solve's (shape or voxel size).
    """
    from flowlearn.reference.refinement import flowlearn_fractures

    fractures, attrs = flowlearn_fractures(path)
    by_name = {fracture.name: fracture for fracture in fractures}
    solved = smooth_walls(stokes_paths)
    for name, smooth in solved.items():
        fracture = by_name.get(name)
        if fracture is None:
            raise DataValidationError(f"{path}: has no fracture {name}, which the Stokes solves hold")
        if fracture.flow_rate is None or fracture.pressure is None:
            raise DataValidationError(f"{path}, {name}: stores no reference flow rate and pressure to judge")
        if fracture.shape != smooth.finer.shape or not math.isclose(
            fracture.voxel_size, smooth.finer.voxel_size, rel_tol=1e-9
        ):
            raise DataValidationError(
                f"{path}, {name}: its map ({fracture.shape}, {fracture.voxel_size:g} m voxels) is not the one "
                f"solved ({smooth.finer.shape}, {smooth.finer.voxel_size:g} m voxels)"
            )
    for name, smooth in solved.items():
        by_name[name].provenance[RECORD] = measured_record(by_name[name], smooth)
    write_fractures(path, fractures, attrs=attrs)
    return list(solved)


def infer_file(path: str | os.PathLike) -> tuple[dict[str, float], int]:
    """Record in every fracture of ``path`` without a measured reference error the median of the measured ones,
    marked as inferred, with their rms spread about it (replacing earlier inferred ones); the file is rewritten
    atomically. Returns (the medians of :data:`ERRORS` by name, how many were measured).

    Raises:
        DataValidationError: fewer than :data:`MIN_MEASURED` measured fractures, or a record that is no JSON object
            or a measured error that is not a number (naming file, group and entry); before anything is written.
    """
    from flowlearn.reference.refinement import flowlearn_fractures

    fractures, attrs = flowlearn_fractures(path)
    for fracture in fractures:
        provenance_record(fracture, RECORD, path)
    measured = np.array([recorded_error(fracture, path) for fracture in fractures if is_measured(fracture)])
    if len(measured) < MIN_MEASURED:
        raise DataValidationError(
            f"{path}: {len(measured)} fracture(s) record a measured reference error, at least {MIN_MEASURED} are "
            "needed to infer the others' (flowlearn smooth-walls DATA FILE... first)"
        )
    median = np.nanmedian(measured, axis=0)
    spread = np.sqrt(np.nanmean((measured - median) ** 2, axis=0))
    record = {
        **{key: float(value) for key, value in zip(ERRORS, median)},
        "how": INFERRED,
        "fitted_on": len(measured),
        "spread": {key: float(value) for key, value in zip(ERRORS, spread)},
    }
    for fracture in fractures:
        if not is_measured(fracture):
            fracture.provenance[RECORD] = dict(record)
    write_fractures(path, fractures, attrs=attrs)
    return dict(zip(ERRORS, map(float, median))), len(measured)
