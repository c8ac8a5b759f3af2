"""Recipes of rough fractures: what a dataset's fractures draw, one class per recipe, by name in :data:`RECIPES`.

A recipe holds ranges; fracture ``i`` of a dataset draws its own value of each, uniformly (or log-uniformly where
stated), from ``numpy.random.default_rng([seed, i])``, and synthesises its walls with seed ``seed + i``.

``published`` (the default)
    Walls in contact, each quantity in the range published for real rock joints (data/README.md gives the sources):
    σ/⟨b⟩ of the open gap, contact area by normal closure, mismatch length, roughness below the mean aperture, Hurst
    exponent and the smoothed slope of the mid-surface; every ``special_every`` fractures, five are cases that every
    law must get right (parallel plates, in the first block only, plates tilted along and across the flow, two
    rough gaps with a flat mid-surface). Synthesis: :mod:`flowlearn.fractures.closure`.

``rock``
    The ``published`` construction with the slopes of rock: each map is a window of walls ``extent`` times its size
    (:mod:`flowlearn.fractures.closure`, "Windows of larger walls"), so that the aperture spreads over tens of mean
    apertures (mismatch lengths of 16-40) and the walls slope by about 0.2-1 at the scale of the mean aperture
    (median 0.4), as rock joints' do; the same exact cases. Its rough fractures meet the ranges of
    :data:`flowlearn.fractures.statistics.JOINT_RANGES` (data/README.md gives the measurement).

``winding``
    Two self-affine walls of given rms height, matched above a mismatch length, with the top wall sheared along the
    flow: steep, winding gaps with few contacts (:mod:`flowlearn.fractures.roughness`). The recipe of datasets made before
    ``published``; kept to reproduce them.

Lengths are in pixels (= LBM voxels) unless a name says "ratio" (then in mean apertures).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import numpy as np

from flowlearn.checks import check_setting, is_integer, is_number
from flowlearn.fractures.closure import MAX_EXTENT, ClosureParams, closed_fracture
from flowlearn.fractures.roughness import RoughFracture, RoughnessParams, rough_fracture

Range = float | tuple[float, float]


def as_range(value: Range) -> tuple[float, float]:
    """(low, high) of a setting given as one number or as a pair."""
    if isinstance(value, tuple | list):
        return float(value[0]), float(value[1])
    return float(value), float(value)


@dataclass(frozen=True)
class Recipe(ABC):
    """A family of rough fractures: ranges to draw from (:meth:`draws`) and the walls they make (:meth:`walls`).

    Subclasses are frozen dataclasses whose fields of type :data:`Range` are drawn per fracture; ``LOG_UNIFORM``
    names those drawn log-uniformly.
    """

    name: ClassVar[str]
    LOG_UNIFORM: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.ranged():
            value = getattr(self, name)
            pair = value if isinstance(value, tuple | list) else (value, value)
            check_setting(
                len(pair) == 2 and all(is_number(v) for v in pair) and pair[0] <= pair[1],
                name,
                "must be a number or a pair low <= high",
                value,
            )
        for name in self.LOG_UNIFORM:
            check_setting(as_range(getattr(self, name))[0] > 0, name, "must be > 0", getattr(self, name))

    @classmethod
    def ranged(cls) -> tuple[str, ...]:
        """The fields drawn per fracture."""
        return tuple(f.name for f in fields(cls) if f.type == "Range")

    def draws(self, seed: int, index: int) -> dict[str, float]:
        """The values fracture ``index`` draws from the ranges."""
        rng = np.random.default_rng([seed, index])
        drawn = {}
        for name in self.ranged():
            low, high = as_range(getattr(self, name))
            if name in self.LOG_UNIFORM:
                drawn[name] = float(math.exp(rng.uniform(math.log(low), math.log(high))))
            else:
                drawn[name] = float(rng.uniform(low, high))
        return drawn

    def check(self, shape: tuple[int, int], mean_aperture: float) -> None:
        """Raise :class:`~flowlearn.errors.SettingError` where a range cannot make valid fractures on maps of
        ``shape`` at ``mean_aperture`` (both ends of every range are tried, before any simulation)."""
        for end in (0, 1):
            drawn = {name: as_range(getattr(self, name))[end] for name in self.ranged()}
            for index in self.kinds_of_fracture():
                self.params(shape, mean_aperture, 0, index, drawn)

    def kinds_of_fracture(self) -> tuple[int, ...]:
        """One index of each kind of fracture the recipe makes (each kind may check its settings differently)."""
        return (0,)

    def shaping(self, index: int, drawn: dict[str, float]) -> dict[str, float]:
        """The draws of fracture ``index`` (:meth:`draws`) that shape it: what its provenance records (every one,
        unless a recipe's exact cases or contacts leave some unused)."""
        return dict(drawn)

    def exact_cases(self, count: int) -> dict[int, str]:
        """The exact cases among fractures 0 … ``count`` − 1, by index: their kind."""
        return {i: self.kind(i) for i in range(count) if self.kind(i) != "rough"}

    def kind(self, index: int) -> str:
        """What fracture ``index`` is: one of :data:`flowlearn.fractures.closure.KINDS` (all rough, unless a recipe makes
        exact cases too)."""
        return "rough"

    @property
    def periodic(self) -> bool:
        """Whether the maps' walls are periodic, so that Fourier interpolation of a map's walls refines them exactly
        (what ``flowlearn generate --refine-every`` does); not where they are windows of larger walls."""
        return True

    def walls(self, shape: tuple[int, int], mean_aperture: float, seed: int, index: int) -> RoughFracture:
        """The walls of fracture ``index`` (pixels)."""
        return self.synthesize(self.params(shape, mean_aperture, seed, index, self.draws(seed, index)))

    @abstractmethod
    def params(
        self, shape: tuple[int, int], mean_aperture: float, seed: int, index: int, drawn: dict[str, float]
    ) -> RoughnessParams | ClosureParams:
        """The wall parameters of fracture ``index`` from its ``drawn`` values."""

    @staticmethod
    @abstractmethod
    def synthesize(params: RoughnessParams | ClosureParams) -> RoughFracture:
        """The walls of ``params``."""

    def to_dict(self) -> dict:
        return {"name": self.name, **asdict(self)}


@dataclass(frozen=True)
class Published(Recipe):
    """Walls in contact, each quantity in its published range (see the module docstring and data/README.md).

    Attributes:
        hurst: Hurst exponent of the walls.
        aperture_std: σ/⟨b⟩ of the open gap, before closure; it shapes the fractures without contacts (with
            contacts, the contact fraction alone sets the spread).
        contact_fraction: share of the map where the walls touch, set by the closure.
        mismatch_ratio: mismatch length over the mean aperture, drawn log-uniformly; the upper end must fit twice
            in the map's longest side.
        wavelength_ratio: shortest roughness wavelength over the mean aperture (at least 2 pixels: the grid's).
        mid_slope: rms slope of the mid-surface smoothed over the mean aperture, where the matched wavelengths can
            set it (the independent short wavelengths make a floor that it cannot go under); for tilted plates,
            their slope.
        special_every: of every this many fractures, five are the exact cases (indices 0-4 of each block:
            parallel plates, tilted along, tilted across, two flat mid-surfaces), the parallel plates in the first
            block only; 0 makes none.
    """

    name: ClassVar[str] = "published"
    LOG_UNIFORM: ClassVar[tuple[str, ...]] = ("mismatch_ratio",)
    # The kind of each index within a block of ``special_every`` fractures; the rest are "rough".
    SPECIAL: ClassVar[tuple[str, ...]] = (
        "parallel",
        "tilted_along",
        "tilted_across",
        "flat_mid_surface",
        "flat_mid_surface",
    )

    hurst: Range = (0.5, 0.9)
    aperture_std: Range = (0.25, 0.7)
    contact_fraction: Range = (0.0, 0.3)
    mismatch_ratio: Range = (2.0, 4.0)
    wavelength_ratio: Range = (0.5, 1.5)
    mid_slope: Range = (0.05, 0.4)
    special_every: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        check_setting(
            as_range(self.wavelength_ratio)[1] < as_range(self.mismatch_ratio)[0],
            "wavelength_ratio",
            f"must stay below mismatch_ratio ({_shown(self.mismatch_ratio)}): the walls differ only by the "
            "roughness between the two",
            self.wavelength_ratio,
        )
        check_setting(
            is_integer(self.special_every)
            and (self.special_every == 0 or self.special_every > len(self.SPECIAL)),
            "special_every",
            f"must be 0 (no exact cases) or an integer > {len(self.SPECIAL)} (the exact cases of each block)",
            self.special_every,
        )

    def kinds_of_fracture(self) -> tuple[int, ...]:
        return tuple(range(len(self.SPECIAL) + 1)) if self.special_every else (0,)

    def kind(self, index: int) -> str:
        if self.special_every and index % self.special_every < len(self.SPECIAL):
            kind = self.SPECIAL[index % self.special_every]
            # Parallel plates of one mean aperture are one Darcy problem wherever they lie: a dataset holds them
            # once (the first block's), and later blocks draw a rough fracture in their place, where a copy would
            # be refused by training (flowlearn.data.copies).
            if not (kind == "parallel" and index >= self.special_every):
                return kind
        return "rough"

    def shaping(self, index: int, drawn: dict[str, float]) -> dict[str, float]:
        # Parallel plates are their mean aperture alone, tilted ones their slope too; a flat mid-surface has no
        # slope to draw; with contacts, the closure rescales the open gap's spread away (closed_fracture).
        kind = self.kind(index)
        if kind == "parallel":
            return {}
        if kind in ("tilted_along", "tilted_across"):
            return {"mid_slope": drawn["mid_slope"]}
        used = {
            name: value
            for name, value in drawn.items()
            if not (kind == "flat_mid_surface" and name == "mid_slope")
        }
        if used.get("contact_fraction", 0.0) > 0:
            used.pop("aperture_std", None)
        return used

    def params(
        self, shape: tuple[int, int], mean_aperture: float, seed: int, index: int, drawn: dict[str, float]
    ) -> ClosureParams:
        return self._closure(shape, mean_aperture, seed, index, drawn, extent=1)

    def _closure(
        self,
        shape: tuple[int, int],
        mean_aperture: float,
        seed: int,
        index: int,
        drawn: dict[str, float],
        extent: int,
    ) -> ClosureParams:
        """The :class:`ClosureParams` of fracture ``index``, its map a window of walls ``extent`` times its size (1:
        its own periodic walls)."""
        kind = self.kind(index)
        longest = extent * max(shape)
        mismatch = drawn["mismatch_ratio"] * mean_aperture
        where, needed = ("the longest side", 2 * as_range(self.mismatch_ratio)[1] * mean_aperture)
        if extent > 1:
            where = f"the larger walls' longest side ({extent} times the map's)"
            needed /= extent
        check_setting(
            2 * mismatch <= longest,
            "shape",
            f"is too small for mismatch_ratio up to {as_range(self.mismatch_ratio)[1]:g} mean apertures of "
            f"{mean_aperture:g} pixels: the mismatch length must fit twice in {where}, which needs "
            f">= {math.ceil(needed)} pixels (or lower mismatch_ratio{', or raise extent' if extent > 1 else ''})",
            tuple(shape),
        )
        check_setting(
            drawn["wavelength_ratio"] * mean_aperture >= 2,
            "wavelength_ratio",
            f"times the mean aperture ({mean_aperture:g} pixels) must be >= 2 pixels, the shortest wavelength a grid "
            f"holds: at least {2 / mean_aperture:.3g} here",
            self.wavelength_ratio,
        )
        return ClosureParams(
            shape=tuple(shape),
            mean_aperture=mean_aperture,
            hurst=drawn["hurst"],
            aperture_std=drawn["aperture_std"],
            contact_fraction=drawn["contact_fraction"] if kind in ("rough", "flat_mid_surface") else 0.0,
            mismatch_length=mismatch,
            min_wavelength=drawn["wavelength_ratio"] * mean_aperture,
            mid_slope=drawn["mid_slope"],
            seed=seed + index,
            kind=kind,
            extent=extent,
        )

    @staticmethod
    def synthesize(params: ClosureParams) -> RoughFracture:
        return closed_fracture(params)


@dataclass(frozen=True)
class Rock(Published):
    """Walls in contact whose slopes are those of rock joints: each map a window of larger walls (see the module
    docstring and data/README.md). The settings are :class:`Published`'s, with other defaults, and ``extent``.

    Attributes:
        hurst, aperture_std, special_every: as :class:`Published`'s (the open gap's σ/⟨b⟩ is set over the map).
        contact_fraction: share of the map where the walls touch, set by the closure of the map's own gap. Its upper
            end leaves room for the voxelised map, which closes gaps under half a voxel: up to 0.29 on it at 6 voxels
            per mean aperture. Its lower end keeps b_h/⟨b⟩ of the LCL below 0.9 (more contact, less flow).
        mismatch_ratio: mismatch length over the mean aperture, drawn log-uniformly; it must fit twice in the larger
            walls' longest side. Above the map's length, it makes an aperture that spreads over more than the map.
        wavelength_ratio: shortest roughness wavelength over the mean aperture (at least 2 pixels).
        mid_slope: rms slope of the mid-surface smoothed over the mean aperture, over the map, where the matched
            wavelengths can set it (the independent ones make a floor, about 0.3 here); for tilted plates, their
            slope.
        extent: the walls are drawn ``extent`` times the map along each axis, periodic there; the map is a window
            of them, its inlet and outlet columns wherever the window falls.
    """

    name: ClassVar[str] = "rock"

    contact_fraction: Range = (0.05, 0.25)
    mismatch_ratio: Range = (16.0, 40.0)
    wavelength_ratio: Range = (1.0, 2.0)
    mid_slope: Range = (0.05, 0.3)
    extent: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        check_setting(
            is_integer(self.extent) and 2 <= self.extent <= MAX_EXTENT,
            "extent",
            f"must be an integer in [2, {MAX_EXTENT}]: the map is a window of walls extent times its size (1 would "
            "make it periodic, the published recipe's walls; above, the larger walls take extent² times the map's "
            "memory)",
            self.extent,
        )

    @property
    def periodic(self) -> bool:
        return False

    def params(
        self, shape: tuple[int, int], mean_aperture: float, seed: int, index: int, drawn: dict[str, float]
    ) -> ClosureParams:
        return self._closure(shape, mean_aperture, seed, index, drawn, extent=self.extent)


@dataclass(frozen=True)
class Winding(Recipe):
    """Two self-affine walls of given rms height, the top one sheared along the flow: steep, winding gaps.

    Attributes:
        hurst: Hurst exponent of each wall.
        rms_ratio: rms height of each wall over the mean aperture.
        mismatch_length: the walls match above this wavelength (pixels).
        wavelength_ratio: the shortest roughness wavelength over the mean aperture; 0 keeps every wavelength.
        shear: shift of the top wall along the flow (pixels).
    """

    name: ClassVar[str] = "winding"

    hurst: Range = (0.5, 0.9)
    rms_ratio: Range = (0.1, 0.7)
    mismatch_length: Range = (8.0, 64.0)
    wavelength_ratio: Range = (1.0, 6.0)
    shear: Range = (0.0, 4.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_setting(as_range(self.rms_ratio)[0] >= 0, "rms_ratio", "must be >= 0", self.rms_ratio)

    def check(self, shape: tuple[int, int], mean_aperture: float) -> None:
        longest = max(shape)
        check_setting(
            as_range(self.rms_ratio)[1] * mean_aperture <= longest,
            "rms_ratio",
            f"must keep the walls' rms height within the map's longest side ({longest} pixels): at most "
            f"{longest / mean_aperture:g} for a mean aperture of {mean_aperture:g} pixels",
            self.rms_ratio,
        )
        shortest = as_range(self.wavelength_ratio)[1] * mean_aperture
        check_setting(
            shortest < longest,
            "shape",
            f"is too small for wavelength_ratio up to {as_range(self.wavelength_ratio)[1]:g} mean apertures of "
            f"{mean_aperture:g} pixels: the longest side must exceed {shortest:g} pixels (or lower wavelength_ratio)",
            tuple(shape),
        )
        # A shift by the map's length is no shift (the walls are periodic); half of it is the most that differs.
        check_setting(
            max(abs(v) for v in as_range(self.shear)) < shape[1] / 2,
            "shear",
            f"must stay below half the map's length along the flow ({shape[1] / 2:g} pixels): a periodic wall "
            "shifted by more is the same as one shifted less the other way",
            self.shear,
        )
        super().check(shape, mean_aperture)

    def params(
        self, shape: tuple[int, int], mean_aperture: float, seed: int, index: int, drawn: dict[str, float]
    ) -> RoughnessParams:
        return RoughnessParams(
            shape=tuple(shape),
            hurst=drawn["hurst"],
            rms=drawn["rms_ratio"] * mean_aperture,
            mean_aperture=mean_aperture,
            mismatch_length=drawn["mismatch_length"],
            min_wavelength=drawn["wavelength_ratio"] * mean_aperture,
            shear=drawn["shear"],
            seed=seed + index,
        )

    @staticmethod
    def synthesize(params: RoughnessParams) -> RoughFracture:
        return rough_fracture(params)


def _shown(value: Range) -> str:
    low, high = as_range(value)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


# Recipe name -> class. ``flowlearn generate --recipe NAME``.
RECIPES: dict[str, type[Recipe]] = {cls.name: cls for cls in (Published, Rock, Winding)}
