"""Dimensionless statistics of a fracture, their range over a set of fractures, and the inputs that fall outside it.

A trained model has seen fractures of some roughness, contact, resolution and size only; its checkpoint keeps the
range of each statistic over the training split (:func:`statistic_ranges`), and ``flowlearn predict`` and
``flowlearn evaluate`` name every statistic of a fracture that lies outside it, and by how much
(:func:`out_of_range`). The statistics are pure numbers, as the model's inputs are: a fracture whose apertures,
walls and voxel size are all scaled alike has the same statistics, and the same correction. Per fracture, over all
its cells (contact spots count as aperture 0, as in :class:`flowlearn.fractures.roughness.GeometryStats`):

- ``relative_std``: σ(Ap)/⟨Ap⟩;
- ``contact_fraction``: the fraction of cells with Ap = 0;
- ``aperture_voxels``: ⟨Ap⟩ over the voxel size, the mean gap in pixels: how finely the map resolves it;
- ``length``, ``breadth`` (and ``depth`` for volumes): the map's size along the flow (columns), across it (rows)
  (and in depth), in mean apertures.

The last three need the voxel size (NaN without it: such a fracture is compared on the first two alone, and its
line says so).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Statistic:
    """How a message names a statistic: its label and unit."""

    label: str
    unit: str = ""


STATISTICS = {
    "relative_std": Statistic("aperture std / mean"),
    "contact_fraction": Statistic("contact fraction"),
    "aperture_voxels": Statistic("mean aperture", "pixels"),
    "length": Statistic("map length along the flow", "mean apertures"),
    "breadth": Statistic("map breadth across the flow", "mean apertures"),
    "depth": Statistic("map depth", "mean apertures"),
}
# The statistics that need the voxel size.
NEED_VOXEL_SIZE = ("aperture_voxels", "length", "breadth", "depth")
_SIZES = ("depth", "breadth", "length")  # array axes -3, -2, -1

# What a fracture of unknown voxel size cannot be compared on, said once per fracture.
UNCOMPARED = (
    "its voxel size is unknown, so its mean aperture in pixels and its size in mean apertures are not compared "
    "with the training range"
)


def aperture_statistics(aperture: np.ndarray, voxel_size: float) -> dict[str, float]:
    """The statistics of the module docstring of an aperture map (H, W) or (D, H, W) (any unit) whose pixels are
    ``voxel_size`` (same unit; NaN when unknown), by name (``depth`` only for volumes)."""
    aperture = np.asarray(aperture, dtype=np.float64)
    mean = float(aperture.mean())
    statistics = {
        # std(Ap / mean), not std(Ap) / mean: squaring apertures near float64's largest would overflow (such maps are
        # refused later, in one line, by the solve's range check).
        "relative_std": float((aperture / mean).std()) if mean > 0 else math.nan,
        "contact_fraction": float((aperture == 0).mean()),
        "aperture_voxels": mean / voxel_size if mean > 0 else math.nan,
    }
    for name, size in zip(_SIZES[len(_SIZES) - aperture.ndim :], aperture.shape):
        statistics[name] = size / statistics["aperture_voxels"]
    return statistics


def statistic_ranges(statistics: Iterable[Mapping[str, float]]) -> dict[str, list[float]]:
    """[min, max] of each statistic over the fractures whose ``statistics`` are given (NaN values ignored)."""
    values: dict[str, list[float]] = {}
    for one in statistics:
        for name, value in one.items():
            if not math.isnan(value):
                values.setdefault(name, []).append(value)
    return {name: [min(seen), max(seen)] for name, seen in values.items()}


def out_of_range(statistics: Mapping[str, float], ranges: Mapping[str, Iterable[float]]) -> list[str]:
    """One line per statistic of ``statistics`` outside its range in ``ranges``: the statistic, the value, the
    range and how far outside (the value as a multiple of the nearer end), then, where the statistics that need the
    voxel size are NaN and ``ranges`` has them, one line saying that they are not compared. Statistics that
    ``ranges`` lacks (a checkpoint written before they existed) are not compared."""
    lines = []
    for name, value in statistics.items():
        if name not in ranges or name not in STATISTICS or math.isnan(value):
            continue
        low, high = ranges[name]
        if low <= value <= high:
            continue
        statistic = STATISTICS[name]
        unit = f" {statistic.unit}" if statistic.unit else ""
        end, word = (high, "highest") if value > high else (low, "lowest")
        times = f"{value / end:.3g} times the {word}" if end > 0 else f"{value - end:+.3g} from the {word}"
        lines.append(
            f"{statistic.label} {value:.4g}{unit} is outside the training range [{low:.4g}, {high:.4g}]{unit}: "
            f"{times}"
        )
    if any(math.isnan(statistics.get(name, 0.0)) and name in ranges for name in NEED_VOXEL_SIZE):
        lines.append(UNCOMPARED)
    return lines
