"""How far a fracture's measured flow rate departs from the local cubic law (LCL).

The LCL gives each cell the transmissivity T = Ap³/12 of a parallel-plate gap. Its flow rate Q_LCL is the outlet
flow of the Darcy solve with that T on the same aperture map, unit thickness, square pixels and the fracture's
inlet and outlet heads, so it is in the units of the data's ``flow_rate`` attribute (m³ per unit of head over
viscosity, see :mod:`flowlearn.data.schema`). The departure of a fracture is

    Q_ref / Q_LCL - 1,

negative where the LCL overestimates the flow, as it does in rough fractures (Brown 1987; Zimmerman & Bodvarsson
1996; Brush & Thomson 2003). :func:`range_summary` then holds the file's geometry, and b_h of its reference flow,
against the ranges of rock joints (:data:`flowlearn.fractures.statistics.JOINT_RANGES`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.data.files import read_fractures
from flowlearn.data.provenance import fracture_where, provenance_number, provenance_record
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError
from flowlearn.fractures.inclination import mid_surface_slope
from flowlearn.fractures.statistics import joint_statistics, joint_table
from flowlearn.reference.refinement import INFERRED

# The mid-surface slope as a statistic of the geometry is smoothed over one mean aperture: the scale at which the gap
# sees its walls, as joint roughness is compared at the gap's scale (the laws take it pixel by pixel).
MID_SLOPE_SMOOTHING = 1.0


def lcl_flow_rate(fracture: Fracture) -> float:
    """Q_LCL: the outlet flow rate of the Darcy solve with T = Ap³/12 on ``fracture`` (2D, flow along x).

    Apertures are taken in the fracture's units (metres when ``voxel_size`` is known), so the result is in
    those units cubed times the head drop.
    """
    check_solvable(fracture)
    active = fracture.active
    problem = DarcyProblem.fracture(
        fracture.aperture.shape,
        inlet=fracture.inlet_pressure,
        outlet=fracture.outlet_pressure,
        active=active,
        pixel_size=1.0,
        thickness=1.0,
        drop_unconnected=True,
    )
    with np.errstate(divide="ignore"):
        log_t = np.where(active, 3 * np.log(fracture.aperture) - math.log(12.0), 0.0)
    log_t = torch.as_tensor(log_t)
    return float(outlet_flow_rate(log_t, solve_pressure(log_t, problem), problem))


def check_solvable(fracture: Fracture, path: str | os.PathLike | None = None) -> None:
    """Raise :class:`DataValidationError` naming file and group unless ``fracture`` is a 2D map with flow along x,
    the maps whose LCL flow rate :func:`lcl_flow_rate` solves for."""
    if fracture.aperture.ndim != 2:
        shape = "x".join(map(str, fracture.shape))
        raise DataValidationError(
            f"{fracture_where(fracture, path)}: the LCL flow rate needs a 2D map with flow along x, this one is "
            f"{fracture.aperture.ndim}D ({shape})"
        )
    if fracture.flow_axis != "x":
        raise DataValidationError(
            f"{fracture_where(fracture, path)}: the LCL flow rate needs a 2D map with flow along x, this one has flow_axis "
            f"{fracture.flow_axis!r} (transpose the map to flow along x)"
        )


def hydraulic_aperture(fracture: Fracture) -> float:
    """b_h: the aperture of the parallel-plate gap on the same map that carries the fracture's reference flow rate,
    in the aperture's units. The LCL's flow rate of a uniform gap b is b³ times that of the unit gap, so
    b_h = (Q_ref / Q_LCL(1))^(1/3)."""
    if fracture.flow_rate is None:
        raise ValueError(f"{fracture.name}: no reference flow rate")
    unit = replace(fracture, aperture=np.ones(fracture.aperture.shape), mask=None)
    return float((fracture.flow_rate / lcl_flow_rate(unit)) ** (1.0 / 3.0))


@dataclass(frozen=True)
class Departure:
    """One fracture's flow rate against the LCL, with the geometry that explains it.

    Attributes:
        name: the fracture's group.
        flow_rate: Q_ref, the reference (LBM) flow rate, in the file's units.
        flow_rate_lcl: Q_LCL, in the file's units.
        ratio: Q_ref / Q_LCL.
        relative_std: σ/⟨b⟩ of the stored aperture map (the gap the reference ran on; contacts count as 0).
        contact_fraction: share of the map's pixels where the aperture is 0.
        hydraulic_ratio: b_h/⟨b⟩, the hydraulic aperture of the reference flow rate (:func:`hydraulic_aperture`)
            over the mean aperture.
        mid_slope: rms slope of the mid-surface smoothed over the mean aperture
            (:func:`~flowlearn.fractures.inclination.mid_surface_slope`); NaN without walls.
        wall_slope: rms slope of the walls from the fracture's provenance ("geometry"), NaN if absent.
        convergence: relative change of the reference flow rate under 2× grid refinement, from the provenance
            ("convergence": measured, or inferred from the geometry); NaN where it records none.
        convergence_inferred: whether ``convergence`` was inferred (:mod:`flowlearn.reference.refinement`), not measured.
        joint: the statistics rock joints are held against (:func:`~flowlearn.fractures.statistics.joint_statistics`
            of the stored map, its walls and voxel size; cells not joined to the inlet or outlet count as open).
        exact_case: whether the fracture is one of a recipe's exact cases (plates, a flat mid-surface: its
            provenance's ``roughness.kind`` is not ``rough``), which are not held against rock joints.
    """

    name: str
    flow_rate: float
    flow_rate_lcl: float
    ratio: float
    relative_std: float
    contact_fraction: float
    hydraulic_ratio: float
    mid_slope: float
    wall_slope: float
    convergence: float
    convergence_inferred: bool = False
    joint: dict[str, float] = field(default_factory=dict)
    exact_case: bool = False

    @property
    def departure(self) -> float:
        return self.ratio - 1.0


@dataclass(frozen=True)
class _Recorded:
    """What a fracture's provenance records for its :class:`Departure`, read and checked before any solve."""

    wall_slope: float
    convergence: float
    convergence_inferred: bool
    exact_case: bool


def _recorded(fracture: Fracture, path: str | os.PathLike | None) -> _Recorded:
    """Check that ``fracture`` can be solved (:func:`check_solvable`) and read the numbers its provenance records
    (``geometry.wall_slope``, ``convergence.flow_rate_change``; NaN where absent), naming file and group where one
    is not a number."""
    check_solvable(fracture, path)
    return _Recorded(
        wall_slope=provenance_number(fracture, "geometry.wall_slope", path),
        convergence=provenance_number(fracture, "convergence.flow_rate_change", path),
        convergence_inferred=provenance_record(fracture, "convergence", path).get("how") == INFERRED,
        exact_case=provenance_record(fracture, "roughness", path).get("kind", "rough") != "rough",
    )


def departure(fracture: Fracture, path: str | os.PathLike | None = None) -> Departure:
    """The :class:`Departure` of ``fracture``, which must store a ``flow_rate``; ``path``, its file, is named by
    the errors.

    Raises:
        DataValidationError: naming file and group: a map that is not 2D with flow along x
            (:func:`check_solvable`), or a provenance entry read here (``geometry.wall_slope``,
            ``convergence.flow_rate_change``) that is not a number; both before the solve.
    """
    return _departure(fracture, _recorded(fracture, path))


def _departure(fracture: Fracture, recorded: _Recorded) -> Departure:
    q_lcl = lcl_flow_rate(fracture)
    aperture = np.where(fracture.active, np.asarray(fracture.aperture, np.float64), 0.0)
    mean = float(aperture.mean())
    return Departure(
        name=fracture.name,
        flow_rate=fracture.flow_rate,
        flow_rate_lcl=q_lcl,
        ratio=fracture.flow_rate / q_lcl,
        relative_std=float(aperture.std() / mean) if mean > 0 else math.nan,
        contact_fraction=float((aperture == 0).mean()),
        hydraulic_ratio=hydraulic_aperture(fracture) / mean if mean > 0 else math.nan,
        mid_slope=mid_surface_slope(fracture, smoothing=MID_SLOPE_SMOOTHING),
        wall_slope=recorded.wall_slope,
        convergence=recorded.convergence,
        convergence_inferred=recorded.convergence_inferred,
        joint=joint_statistics(fracture.bottom, fracture.top, fracture.aperture, fracture.voxel_size),
        exact_case=recorded.exact_case,
    )


def departures(path: str | os.PathLike) -> list[Departure]:
    """:class:`Departure` of every fracture of ``path`` that stores a ``flow_rate``, in group order.

    Raises:
        DataValidationError: naming file and group, for the first fracture that :func:`departure` refuses; every
            fracture is checked before the first solve.
    """
    fractures = [fracture for fracture in read_fractures(path) if fracture.flow_rate is not None]
    recorded = [_recorded(fracture, path) for fracture in fractures]
    return [_departure(fracture, record) for fracture, record in zip(fractures, recorded)]


def range_summary(rows: list[Departure]) -> list[str]:
    """The table of :func:`~flowlearn.fractures.statistics.joint_table` over the fractures of ``rows`` that are not
    exact cases, b_h/⟨b⟩ of the reference flow rate among its statistics, with a line first saying which it holds."""
    rough = [row for row in rows if not row.exact_case]
    left_out = len(rows) - len(rough)
    if not rough:
        return [
            f"against rock joints: no fracture (all {left_out} are exact cases, plates or flat mid-surfaces)"
        ]
    note = f" (left out: {left_out} exact case(s), plates or flat mid-surfaces)" if left_out else ""
    table = joint_table([{**row.joint, "reference_hydraulic_ratio": row.hydraulic_ratio} for row in rough])
    return [f"against rock joints, {len(rough)} fractures{note}:", *table]


def summarize(rows: list[Departure]) -> dict[str, float]:
    """Spread of |Q_ref/Q_LCL - 1| over fractures: median, quartiles, extremes, and the share departing >= 20%."""
    magnitude = np.abs([row.departure for row in rows])
    ratio = np.array([row.ratio for row in rows])
    return {
        "fractures": len(rows),
        "median_departure": float(np.median(magnitude)),
        "quartiles_departure": [float(q) for q in np.percentile(magnitude, [25, 75])],
        "share_departing_20pct": float((magnitude >= 0.2).mean()),
        "ratio_min": float(ratio.min()),
        "ratio_median": float(np.median(ratio)),
        "ratio_max": float(ratio.max()),
        "share_lcl_overestimates": float((ratio < 1).mean()),
    }
