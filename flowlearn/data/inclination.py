"""The inclination factor of the local cubic law: how a gap that winds with its mid-surface conducts along the map.

A gap of vertical aperture Ap whose mid-surface m = (bottom + top)/2 is inclined at θ to the mean plane is
narrower normal to its walls, Ap·cos θ, and its flow runs along the inclined surface. Parallel-plate flow in the
surface has transmissivity t = (Ap cos θ)³/12 (the aperture normal to the local fracture surface, as in Ge 1997).
Projected onto the map, whose metric on the surface is g = I + ∇m ∇mᵀ (√det g = 1/cos θ), the map's transmissivity
tensor is t·√det g·g⁻¹, and its component along the flow (x, with the other map axis y) is

    T = Ap³/12 · (1 + m_y²) / (1 + m_x² + m_y²)²,    cos²θ = 1 / (1 + |∇m|²):

cos⁴θ for a slope along the flow (a narrower gap and a longer path), cos²θ for a slope across it (a narrower gap,
but a wider surface than its map). The aperture map alone cannot show θ: two fractures with the same map may wind
differently. ∇m is taken by central differences (one-sided at the edges), in metres per metre.

A node carries one conductivity, so the Darcy solve takes this component for every edge; the flow that matters
runs along the flow axis. On the example dataset (``data/README.md``) this factor is what the local cubic law
misses most: see the README's table.

Reference:
    Ge, S. (1997). A governing equation for fluid flow in rough fractures. Water Resources Research 33(1), 53-61,
    doi:10.1029/96WR02588.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from flowlearn.data.schema import Fracture, list_fractures


def log_inclination_factor(fracture: Fracture) -> np.ndarray:
    """log of the factor (1 + m_t²)/(1 + m_f² + m_t²)² (module docstring; m_f along the flow axis, m_t across it),
    float64 (H, W), ≤ 0; all NaN where it cannot be computed: a fracture without walls, with an unknown voxel size
    (the slope is a ratio of lengths), or a 3D volume."""
    if fracture.bottom is None or fracture.aperture.ndim != 2 or not math.isfinite(fracture.voxel_size):
        return np.full(fracture.shape, np.nan)
    middle = 0.5 * (np.asarray(fracture.bottom, np.float64) + np.asarray(fracture.top, np.float64))
    slope_y, slope_x = np.gradient(middle, fracture.voxel_size)
    along, across = (slope_x, slope_y) if fracture.flow_axis == "x" else (slope_y, slope_x)
    return np.log1p(across**2) - 2.0 * np.log1p(along**2 + across**2)


# What a law that reads the inclination does with a fracture that has no walls, for warnings that name it.
NO_WALLS = "no walls, so the mid-surface is taken as flat (cos θ = 1): the inclined law is the LCL there"


def fractures_without_inclination(paths: Sequence[str | os.PathLike]) -> list[str]:
    """``"<path>: group '<name>'"`` for every fracture of ``paths`` without walls or with a 3D map, whose inclination
    factor is therefore unknown; reads no arrays (so a walled map of unknown voxel size, also without a factor, is
    not listed)."""
    return [
        f"{os.fspath(path)}: group '{info.name}'"
        for path in paths
        for info in list_fractures(path)
        if not info.walls or len(info.shape) != 2
    ]
