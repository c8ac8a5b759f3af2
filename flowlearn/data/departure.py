"""How far a fracture's measured flow rate departs from the local cubic law (LCL).

The LCL gives each cell the transmissivity T = Ap³/12 of a parallel-plate gap. Its flow rate Q_LCL is the outlet
flow of the Darcy solve with that T on the same aperture map, unit thickness, square pixels and the fracture's
inlet and outlet heads, so it is in the units of the data's ``flow_rate`` attribute (m³ per unit of head over
viscosity, see :mod:`flowlearn.data.schema`). The departure of a fracture is

    Q_ref / Q_LCL - 1,

negative where the LCL overestimates the flow, as it does in rough fractures (Brown 1987; Zimmerman & Bodvarsson
1996; Brush & Thomson 2003).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import torch

from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.data.schema import Fracture, read_fractures


def lcl_flow_rate(fracture: Fracture) -> float:
    """Q_LCL: the outlet flow rate of the Darcy solve with T = Ap³/12 on ``fracture`` (2D, flow along x).

    Apertures are taken in the fracture's units (metres when ``voxel_size`` is known), so the result is in
    those units cubed times the head drop.
    """
    if fracture.aperture.ndim != 2 or fracture.flow_axis != "x":
        raise ValueError(f"{fracture.name}: the LCL flow rate needs a 2D map with flow along x")
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


@dataclass(frozen=True)
class Departure:
    """One fracture's flow rate against the LCL, with the geometry that explains it.

    Attributes:
        name: the fracture's group.
        flow_rate: Q_ref, the reference (LBM) flow rate, in the file's units.
        flow_rate_lcl: Q_LCL, in the file's units.
        ratio: Q_ref / Q_LCL.
        relative_std, wall_slope, contact_fraction: from the fracture's provenance ("geometry"), NaN if absent.
    """

    name: str
    flow_rate: float
    flow_rate_lcl: float
    ratio: float
    relative_std: float
    wall_slope: float
    contact_fraction: float

    @property
    def departure(self) -> float:
        return self.ratio - 1.0


def departures(path: str | os.PathLike) -> list[Departure]:
    """:class:`Departure` of every fracture of ``path`` that stores a ``flow_rate``, in group order."""
    rows = []
    for fracture in read_fractures(path):
        if fracture.flow_rate is None:
            continue
        q_lcl = lcl_flow_rate(fracture)
        geometry = fracture.provenance.get("geometry", {})
        rows.append(
            Departure(
                name=fracture.name,
                flow_rate=fracture.flow_rate,
                flow_rate_lcl=q_lcl,
                ratio=fracture.flow_rate / q_lcl,
                relative_std=float(geometry.get("relative_std", math.nan)),
                wall_slope=float(geometry.get("wall_slope", math.nan)),
                contact_fraction=float(geometry.get("contact_fraction", math.nan)),
            )
        )
    return rows


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
