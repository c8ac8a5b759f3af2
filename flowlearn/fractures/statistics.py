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

**What rock joints show.** :func:`joint_statistics` measures a fracture by the five statistics that published
measurements of rock joints bound (:data:`JOINT_RANGES`, with their sources; data/README.md gives the full
references), so that a recipe's fractures, or a dataset's, can be held against them (``flowlearn departure``,
``python -m flowlearn.reference.recipe_statistics``). Over the whole map, contacts counting as aperture 0 and
⟨b⟩ the mean aperture:

- ``relative_std``, ``contact_fraction``: as above;
- ``hydraulic_ratio``: b_h/⟨b⟩, b_h the hydraulic aperture of the local cubic law on the map: the gap of parallel
  plates that the same Darcy solve (T = b³/12, heads fixed on the first and last columns, no flow across the
  sides) gives the same flow rate, b_h³ = 12 Q_LCL μ L/(W Δp) with the grid's own length L and width W. The
  reference flow of a rough fracture is below the LCL's, so its own b_h is lower still; 0 where no open path
  joins the inlet to the outlet;
- ``mid_slope``: rms |∇m| of the mid-surface m = (bottom + top)/2 smoothed by a Gaussian of full width at half
  maximum ⟨b⟩ (:func:`~flowlearn.fractures.inclination.smoothed_gradient`, which assumes no periodicity);
- ``wall_slope``: rms slope of the walls by differences at a lag of half a mean aperture, |z(x + l) - z(x)|/l
  with l = ⟨b⟩/2 rounded to whole pixels (at least 1), along both axes, over both walls: the Z2 of joint profiles
  at the gap's own scale (a plane of slope s along one axis has s/√2: its profiles along the other are flat).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import ndimage

from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.fractures.inclination import smoothed_gradient


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


@dataclass(frozen=True)
class JointRange:
    """What rock joints show for one statistic of :func:`joint_statistics`, to hold a set of fractures against.

    Attributes:
        label: how the table names the statistic.
        median: (low, high): the set's median must lie in it.
        sources: the measurements the range comes from (data/README.md has the references).
        each: (low, high) every fracture's value must lie in, or None.
        share: (threshold, least share): at least that share of the fractures must reach the threshold, or None.
    """

    label: str
    median: tuple[float, float]
    sources: str
    each: tuple[float, float] | None = None
    share: tuple[float, float] | None = None

    def holds(self, values: np.ndarray) -> bool:
        """Whether ``values`` (float (N,), no NaN), one per fracture, meet the range."""
        low, high = self.median
        held = bool(low <= np.median(values) <= high)
        if self.each is not None:
            held &= bool(np.all((self.each[0] <= values) & (values <= self.each[1])))
        if self.share is not None:
            held &= bool(np.mean(values >= self.share[0]) >= self.share[1])
        return held

    def text(self) -> str:
        """The range in words, e.g. ``median 0.4-1.2``."""
        low, high = self.median
        words = (
            [f"median <= {high:g}" if low == 0 else f"median {low:g}-{high:g}"] if self.each is None else []
        )
        if self.each is not None:
            words.append(f"each {self.each[0]:g}-{self.each[1]:g}")
        if self.share is not None:
            words.append(f">= {self.share[1]:.0%} at >= {self.share[0]:g}")
        return ", ".join(words)


# What rock joints show: the statistic of :func:`joint_statistics` -> its range. ``reference_hydraulic_ratio`` is
# b_h/⟨b⟩ of a reference flow rate (``flowlearn departure``), against the same laboratory range as the LCL's.
JOINT_RANGES = {
    "relative_std": JointRange(
        "σ/⟨b⟩", (0.4, 1.2), "Hakami & Larsson 1996; Zimmerman & Bodvarsson 1996; Méheust & Schmittbuhl 2001"
    ),
    "contact_fraction": JointRange(
        "contact area",
        (0.0, 0.3),
        "Pyrak-Nolte et al. 1987; Hakami 1995; Zimmerman & Bodvarsson 1996",
        each=(0.0, 0.3),
        share=(0.05, 0.45),
    ),
    "hydraulic_ratio": JointRange("b_h/⟨b⟩, LCL of the map", (0.0, 0.9), "Zimmerman & Bodvarsson 1996"),
    "reference_hydraulic_ratio": JointRange(
        "b_h/⟨b⟩, reference flow rate", (0.0, 0.9), "Zimmerman & Bodvarsson 1996"
    ),
    "mid_slope": JointRange(
        "mid-surface slope, smoothed over ⟨b⟩", (0.05, 0.4), "Tse & Cruden 1979; Barton 1973"
    ),
    "wall_slope": JointRange(
        "wall slope at lag ⟨b⟩/2", (0.05, 0.6), "Tse & Cruden 1979; Brown 1995; Power & Durham 1997"
    ),
}


def joint_statistics(
    bottom: np.ndarray | None, top: np.ndarray | None, aperture: np.ndarray, voxel_size: float
) -> dict[str, float]:
    """The statistics of the module docstring's "What rock joints show" of one fracture, by name.

    Args:
        bottom, top: its walls, float (H, W), in the aperture's unit; None where unknown (then the slopes are NaN).
        aperture: its aperture map, float (H, W), contacts 0 (the map a reference ran on: voxelised, if so).
        voxel_size: the pixels' size, in the same unit; NaN where unknown (then the slopes are NaN).
    """
    aperture = np.asarray(aperture, dtype=np.float64)
    mean = float(aperture.mean())
    statistics = {
        "relative_std": float((aperture / mean).std()) if mean > 0 else math.nan,
        "contact_fraction": float((aperture == 0).mean()),
        "hydraulic_ratio": hydraulic_ratio(aperture),
        "mid_slope": math.nan,
        "wall_slope": math.nan,
    }
    if bottom is None or top is None or not math.isfinite(voxel_size) or mean == 0:
        return statistics
    bottom, top = np.asarray(bottom, dtype=np.float64), np.asarray(top, dtype=np.float64)
    slope_x, slope_y = smoothed_gradient(0.5 * (bottom + top), voxel_size, mean)
    statistics["mid_slope"] = float(np.sqrt(np.mean(slope_x**2 + slope_y**2)))
    lag = max(1, round(0.5 * mean / voxel_size))
    rises = [
        np.concatenate([(wall[:, lag:] - wall[:, :-lag]).ravel(), (wall[lag:] - wall[:-lag]).ravel()])
        for wall in (bottom, top)
    ]
    statistics["wall_slope"] = float(np.sqrt(np.mean(np.square(np.concatenate(rises))))) / (lag * voxel_size)
    return statistics


def hydraulic_ratio(aperture: np.ndarray) -> float:
    """b_h/⟨b⟩ of the local cubic law on ``aperture`` (float (H, W), any unit, contacts 0, flow along the columns):
    see the module docstring; 0 where no open path (4-connected, as the Darcy grid's edges) joins the first column
    to the last."""
    open_ = aperture > 0
    labels, _ = ndimage.label(open_)
    if not np.intersect1d(labels[:, 0][labels[:, 0] > 0], labels[:, -1]).size:
        return 0.0
    mean = float(aperture.mean())
    # In units of the mean aperture, so that the solve sees numbers near 1 whatever the map's unit.
    with np.errstate(divide="ignore"):
        log_t = np.where(open_, 3 * np.log(aperture / mean) - math.log(12.0), 0.0)
    unit = np.full(aperture.shape, -math.log(12.0))
    return (_lcl_flow_rate(log_t, open_) / _lcl_flow_rate(unit, np.ones_like(open_))) ** (1.0 / 3.0)


def _lcl_flow_rate(log_t: np.ndarray, active: np.ndarray) -> float:
    """The outlet flow rate of the Darcy solve with log transmissivity ``log_t`` (float (H, W)) on the ``active``
    cells, heads 2 and 1 on the first and last columns, unit pixels and thickness."""
    problem = DarcyProblem.fracture(
        log_t.shape, active=active, pixel_size=1.0, thickness=1.0, drop_unconnected=True
    )
    log_k = torch.as_tensor(log_t)
    return float(outlet_flow_rate(log_k, solve_pressure(log_k, problem, one_off=True), problem))


def joint_table(statistics: Sequence[Mapping[str, float]]) -> list[str]:
    """A table of the statistics of :data:`JOINT_RANGES` that ``statistics`` (one mapping per fracture) hold: each
    one's median, quartiles and extremes (and the share its range asks for), the range, whether the set meets it,
    and the sources. Fractures where a statistic is NaN are left out of it; a statistic NaN for all, altogether."""
    lines = [
        f"{'statistic':<38} {'median':>6}  {'quartiles':<11}  {'min-max (share)':<26}  {'rock joints':<31}  "
        f"{'meets':<5}  sources"
    ]
    for name, target in JOINT_RANGES.items():
        values = np.array([one.get(name, math.nan) for one in statistics], dtype=np.float64)
        values = values[np.isfinite(values)]
        if values.size == 0:
            continue
        low, high = np.percentile(values, [25, 75])
        spread = f"{values.min():.3g}-{values.max():.3g}"
        if target.share is not None:
            spread += f" ({np.mean(values >= target.share[0]):.0%} >= {target.share[0]:g})"
        lines.append(
            f"{target.label:<38} {np.median(values):6.3f}  {f'{low:.3f}-{high:.3f}':<11}  {spread:<26}  "
            f"{target.text():<31}  {'yes' if target.holds(values) else 'NO':<5}  {target.sources}"
        )
    return lines
