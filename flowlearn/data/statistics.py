"""Aperture statistics of a fracture, their range over a set of fractures, and the inputs that fall outside it.

A trained model has seen fractures of some apertures, roughness, contact and size only; its checkpoint keeps the
range of each statistic over the training split (:func:`statistic_ranges`), and ``flowlearn predict`` names every
statistic of an input that lies outside it (:func:`out_of_range`). The statistics, per fracture, over all its
cells (contact spots count as aperture 0, as in :class:`flowlearn.data.roughness.GeometryStats`):

- ``mean_aperture``: ⟨Ap⟩, in the file's unit (metres in the flowlearn layout);
- ``relative_std``: σ(Ap)/⟨Ap⟩;
- ``contact_fraction``: the fraction of cells with Ap = 0;
- ``height``, ``width`` (and ``depth`` for volumes): the map's size in pixels, rows and columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from flowlearn.data.schema import Fracture


@dataclass(frozen=True)
class Statistic:
    """How a message names a statistic: its label and unit (empty for pure numbers)."""

    label: str
    unit: str = ""


STATISTICS = {
    "mean_aperture": Statistic("mean aperture", "m"),
    "relative_std": Statistic("aperture std / mean"),
    "contact_fraction": Statistic("contact fraction"),
    "height": Statistic("map height", "pixels"),
    "width": Statistic("map width", "pixels"),
    "depth": Statistic("map depth", "pixels"),
}
_SIZES = ("depth", "height", "width")  # array axes -3, -2, -1


def aperture_statistics(fracture: Fracture) -> dict[str, float]:
    """The statistics of the module docstring for ``fracture``, by name (``depth`` only for volumes)."""
    aperture = fracture.aperture.astype(np.float64)
    mean = float(aperture.mean())
    statistics = {
        "mean_aperture": mean,
        "relative_std": float(aperture.std() / mean) if mean > 0 else math.nan,
        "contact_fraction": float((aperture == 0).mean()),
    }
    for name, size in zip(_SIZES[len(_SIZES) - aperture.ndim :], aperture.shape):
        statistics[name] = float(size)
    return statistics


def statistic_ranges(statistics: Iterable[Mapping[str, float]]) -> dict[str, list[float]]:
    """[min, max] of each statistic over the fractures whose ``statistics`` are given (NaN values ignored)."""
    values: dict[str, list[float]] = {}
    for one in statistics:
        for name, value in one.items():
            if not math.isnan(value):
                values.setdefault(name, []).append(value)
    return {name: [min(seen), max(seen)] for name, seen in values.items()}


def out_of_range(
    statistics: Mapping[str, float], ranges: Mapping[str, Iterable[float]], voxel_size_known: bool = True
) -> list[str]:
    """One line per statistic of ``statistics`` outside its range in ``ranges``: the statistic, the value and
    the range. Statistics that either side lacks are not compared; ``voxel_size_known`` False adds to the mean
    aperture's line that the input's apertures may not be in metres."""
    lines = []
    for name, value in statistics.items():
        if name not in ranges or math.isnan(value):
            continue
        low, high = ranges[name]
        if low <= value <= high:
            continue
        statistic = STATISTICS[name]
        unit = f" {statistic.unit}" if statistic.unit else ""
        line = (
            f"{statistic.label} {value:.4g}{unit} is outside the training range [{low:.4g}, {high:.4g}]{unit}"
        )
        if name == "mean_aperture" and not voxel_size_known:
            line += " (the input's voxel size is unknown, so its apertures may not be in metres)"
        lines.append(line)
    return lines
