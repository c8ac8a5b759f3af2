"""Rough fractures from two self-affine walls, by spectral (Fourier) synthesis.

A self-affine surface with Hurst exponent H has, in 2D, a radially averaged power spectral density
PSD(q) ∝ q^(-2-2H). Each wall is Gaussian white noise filtered by the amplitude q^(-1-H). The two walls share
their Fourier modes at wavelengths longer than the mismatch length and are independent at shorter ones (the
"mismatch" model of Brown, J. Geophys. Res. 100 (1995) 5941), so the aperture is smooth at large scales and rough
at small ones. Where the walls touch or overlap the aperture is zero: a contact spot, i.e. an inactive cell.

Two further knobs reach the regimes where the local cubic law fails (steep walls, tortuous gaps):

* ``min_wavelength`` removes every mode shorter than it. Roughness at wavelengths near the aperture makes steep
  walls, where lubrication theory (and so the local cubic law) breaks down; Nyquist (2 pixels) keeps them all.
* ``shear`` shifts the top wall along the flow (x) by that many pixels, as a shear displacement does. The matched
  modes then no longer cancel, so the aperture varies over long wavelengths and the gap's mid-surface winds.

For aperture maps that come without walls (measured ones), :data:`WALL_PLACEMENTS` offers ways to put two walls
around them.

All lengths are in pixels (the in-plane grid spacing, equal to the LBM voxel size). Arrays are (H, W) = (rows y,
columns x) float64, periodic in both directions (but for a map cut as a window from larger walls, see
:class:`RoughFracture`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy import signal

from flowlearn.checks import check_map_shape, check_setting, is_integer, is_number


@dataclass(frozen=True)
class RoughnessParams:
    """Parameters of a rough fracture; lengths in pixels.

    Attributes:
        shape: (H, W) of the aperture map.
        hurst: Hurst exponent H of each wall, in (0, 1].
        rms: rms height of each wall.
        mean_aperture: separation of the two walls' mean planes.
        mismatch_length: wavelength above which the walls are identical (matched) and below which they are
            independent; ``inf`` makes them independent at every wavelength.
        seed: seed of the random generator; equal parameters and seed give identical fractures.
        min_wavelength: the shortest wavelength of the roughness (modes shorter are removed); 0 keeps all.
        shear: shift of the top wall along x relative to the bottom wall (periodic, sub-pixel).
    """

    shape: tuple[int, int]
    hurst: float
    rms: float
    mean_aperture: float
    mismatch_length: float
    seed: int
    min_wavelength: float = 0.0
    shear: float = 0.0

    # Fields that are lengths: scaled with the grid by :func:`refine`.
    LENGTHS = ("rms", "mean_aperture", "mismatch_length", "min_wavelength", "shear")

    def __post_init__(self) -> None:
        shape = check_map_shape(self.shape)
        check_setting(is_number(self.hurst) and 0 < self.hurst <= 1, "hurst", "must be in (0, 1]", self.hurst)
        # Heights beyond the map's extent make no fracture: walls whose rms height, or whose separation, exceeds
        # the longest side rise more steeply than any rock surface, and their voxel box outgrows the map.
        side = max(shape)
        for name in ("rms", "mean_aperture"):
            value = getattr(self, name)
            check_setting(
                is_number(value) and 0 <= value <= side,
                name,
                f"must be in [0, {side}] pixels (the map's longest side)",
                value,
            )
        check_setting(
            isinstance(self.mismatch_length, int | float) and self.mismatch_length > 0,
            "mismatch_length",
            "must be > 0 (inf: independent walls)",
            self.mismatch_length,
        )
        check_setting(is_integer(self.seed) and self.seed >= 0, "seed", "must be an integer >= 0", self.seed)
        check_setting(
            is_number(self.min_wavelength) and 0 <= self.min_wavelength < max(shape),
            "min_wavelength",
            f"must be in [0, {max(shape)}) (the map's longest side)",
            self.min_wavelength,
        )
        check_setting(is_number(self.shear), "shear", "must be a number", self.shear)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


@dataclass(frozen=True)
class RoughFracture:
    """Two walls and the gap between them, float64 (H, W), pixels.

    ``bottom`` and ``top`` are wall heights with the fracture's mid-plane at 0; ``aperture`` is
    ``max(top - bottom, 0)``, so contact spots are exactly 0. ``params`` made them: a :class:`RoughnessParams` or
    a :class:`~flowlearn.fractures.closure.ClosureParams` (a frozen dataclass with ``shape``, ``LENGTHS`` and
    ``to_dict()``).

    A map cut as a window from larger walls keeps them: ``larger`` holds those walls (bottom, top), float64, periodic,
    pixels, and ``origin`` the (row, column) of the map's first pixel in them; the map itself is not periodic. None
    where the map's walls are periodic themselves.
    """

    params: Any
    bottom: np.ndarray
    top: np.ndarray
    aperture: np.ndarray
    larger: tuple[np.ndarray, np.ndarray] | None = None
    origin: tuple[int, int] = (0, 0)


def wavenumbers(shape: tuple[int, int]) -> np.ndarray:
    """|q| in cycles per pixel on the grid of ``np.fft.fft2`` for ``shape`` (H, W)."""
    qy = np.fft.fftfreq(shape[0])[:, None]
    qx = np.fft.fftfreq(shape[1])[None, :]
    return np.hypot(qy, qx)


def self_affine_amplitude(q: np.ndarray, hurst: float) -> np.ndarray:
    amplitude = np.zeros_like(q)
    nonzero = q > 0
    # The q = 0 mode is the mean height, which the caller sets, so it gets no power.
    amplitude[nonzero] = q[nonzero] ** (-1.0 - hurst)
    return amplitude


def _to_rms(field: np.ndarray, rms: float) -> np.ndarray:
    field = field - field.mean()
    std = field.std()
    return field * (rms / std) if std > 0 else field


def self_affine_surface(
    shape: tuple[int, int], hurst: float, rms: float, rng: np.random.Generator
) -> np.ndarray:
    """One periodic self-affine surface: float64 (H, W), zero mean, rms height ``rms`` (pixels).

    Its radially averaged PSD follows q^(-2-2*hurst) from the lowest to the Nyquist wavenumber.
    """
    _check(hurst, rms)
    noise = np.fft.fft2(rng.standard_normal(shape))
    return _to_rms(np.fft.ifft2(noise * self_affine_amplitude(wavenumbers(shape), hurst)).real, rms)


def rough_fracture(params: RoughnessParams) -> RoughFracture:
    """Synthesise the two walls of ``params`` and the aperture between them (see :class:`RoughFracture`)."""
    # RoughnessParams checked its values when it was made.
    rng = np.random.default_rng(params.seed)
    shape = tuple(params.shape)
    q = wavenumbers(shape)
    amplitude = self_affine_amplitude(q, params.hurst)
    if params.min_wavelength > 0:
        amplitude[q > 1.0 / params.min_wavelength] = 0.0
    shared = np.fft.fft2(rng.standard_normal(shape))
    independent = np.fft.fft2(rng.standard_normal(shape))
    matched = q < 1.0 / params.mismatch_length
    # A shift by s along x multiplies each mode by exp(-2 pi i qx s).
    shift = np.exp(-2j * np.pi * np.fft.fftfreq(shape[1])[None, :] * params.shear)
    top = np.fft.ifft2(amplitude * shared * shift).real
    bottom = np.fft.ifft2(amplitude * np.where(matched, shared, independent)).real
    # One common scale keeps the matched modes identical in both walls, so they cancel in the aperture.
    scale = params.rms / np.sqrt(0.5 * (top.var() + bottom.var()))
    top = (top - top.mean()) * scale + params.mean_aperture / 2
    bottom = (bottom - bottom.mean()) * scale - params.mean_aperture / 2
    return RoughFracture(params, bottom, top, np.maximum(top - bottom, 0.0))


def refine(fracture: RoughFracture, factor: int) -> RoughFracture:
    """The same fracture on a grid ``factor`` times finer: walls Fourier-interpolated, lengths in the new pixels.

    The walls are periodic sums of the grid's Fourier modes, so zero-padding their spectra evaluates exactly the
    same surfaces between the old nodes; heights are multiplied by ``factor`` so that the geometry keeps its
    shape in the finer voxels. A window of larger walls (``fracture.larger``) is not periodic, and interpolating it
    so would ring at its ends: the larger walls are refined instead and the window cut from them again. For
    grid-convergence studies of the LBM.
    """
    if fracture.larger is None:
        bottom, top = refine_wall(fracture.bottom, factor), refine_wall(fracture.top, factor)
        larger, origin = None, (0, 0)
    else:
        larger = (refine_wall(fracture.larger[0], factor), refine_wall(fracture.larger[1], factor))
        origin = (fracture.origin[0] * factor, fracture.origin[1] * factor)
        shape = (fracture.bottom.shape[0] * factor, fracture.bottom.shape[1] * factor)
        bottom, top = (window(wall, origin, shape) for wall in larger)
    scaled = {name: getattr(fracture.params, name) * factor for name in fracture.params.LENGTHS}
    params = replace(fracture.params, shape=bottom.shape, **scaled)
    return RoughFracture(params, bottom, top, np.maximum(top - bottom, 0.0), larger, origin)


def refine_wall(wall: np.ndarray, factor: int) -> np.ndarray:
    """A wall (float (H, W), heights in pixels) on a grid ``factor`` times finer, (factor H, factor W), heights in
    the finer pixels: its periodic Fourier interpolation (zero-padded spectrum), exact for the generator's walls."""
    check_setting(is_integer(factor) and factor >= 1, "factor", "must be an integer >= 1", factor)
    height, width = (n * factor for n in wall.shape)
    return factor * signal.resample(signal.resample(wall, height, axis=0), width, axis=1)


def window(wall: np.ndarray, origin: tuple[int, int], shape: tuple[int, int]) -> np.ndarray:
    """The window of ``shape`` (H, W) of ``wall`` (float (H', W') with H' >= row + H, W' >= column + W) whose first
    pixel is ``origin`` (row, column), as a copy."""
    (row, column), (height, width) = origin, shape
    return wall[row : row + height, column : column + width].copy()


@dataclass(frozen=True)
class GeometryStats:
    """What shapes a fracture's flow, measured on its walls; lengths in pixels.

    Attributes:
        mean_aperture: mean gap ⟨a⟩ over all cells (contacts count as 0).
        relative_std: σ(a)/⟨a⟩, the aperture's standard deviation over its mean.
        contact_fraction: fraction of cells where the walls touch (a = 0).
        correlation_length: lag at which the aperture's autocorrelation, averaged over directions, first drops
            below 1/e (pixels); the map's half-width when it never does.
        wall_slope: rms slope of the walls, sqrt(mean |grad h|^2) over both walls (dimensionless).
    """

    mean_aperture: float
    relative_std: float
    contact_fraction: float
    correlation_length: float
    wall_slope: float

    def to_dict(self) -> dict:
        return asdict(self)


def geometry_stats(bottom: np.ndarray, top: np.ndarray) -> GeometryStats:
    """:class:`GeometryStats` of the walls ``bottom`` and ``top``, float (H, W) heights in pixels."""
    aperture = np.maximum(top - bottom, 0.0)
    mean = float(aperture.mean())
    return GeometryStats(
        mean_aperture=mean,
        relative_std=float(aperture.std() / mean) if mean > 0 else float("nan"),
        contact_fraction=float((aperture == 0).mean()),
        correlation_length=_correlation_length(aperture),
        wall_slope=float(
            np.sqrt(np.mean([np.mean(np.sum(np.square(np.gradient(h)), axis=0)) for h in (bottom, top)]))
        ),
    )


def _correlation_length(field: np.ndarray) -> float:
    """First lag where the radially averaged (periodic) autocorrelation of ``field`` drops below 1/e."""
    deviation = field - field.mean()
    power = np.abs(np.fft.fft2(deviation)) ** 2
    correlation = np.fft.ifft2(power).real
    if correlation[0, 0] <= 0:
        return 0.0
    correlation /= correlation[0, 0]
    h, w = field.shape
    ly = np.minimum(np.arange(h), h - np.arange(h))[:, None]
    lx = np.minimum(np.arange(w), w - np.arange(w))[None, :]
    lag = np.rint(np.hypot(ly, lx)).astype(int)
    sums = np.bincount(lag.ravel(), correlation.ravel())
    radial = sums / np.maximum(np.bincount(lag.ravel()), 1)
    below = np.flatnonzero(radial[: min(h, w) // 2 + 1] < np.exp(-1.0))
    if below.size == 0:
        return float(min(h, w) // 2)
    k = int(below[0])
    # Linear interpolation between the last lag above 1/e and the first below.
    r0, r1 = radial[k - 1], radial[k]
    return float(k - 1 + (r0 - np.exp(-1.0)) / (r0 - r1))


def _symmetric(aperture: np.ndarray, rng: np.random.Generator, rms: float, hurst: float) -> tuple:
    return -0.5 * aperture, 0.5 * aperture


def _flat_bottom(aperture: np.ndarray, rng: np.random.Generator, rms: float, hurst: float) -> tuple:
    return np.zeros_like(aperture), aperture.copy()


def _self_affine_mid_surface(
    aperture: np.ndarray, rng: np.random.Generator, rms: float, hurst: float
) -> tuple:
    middle = self_affine_surface(aperture.shape, hurst, rms, rng)
    return middle - 0.5 * aperture, middle + 0.5 * aperture


# How to put two walls around an aperture map that has none, name -> (aperture, rng, rms, hurst) -> (bottom, top):
# a flat mid-plane (the gap mirrored about it), a flat bottom wall (all roughness on the top), or a self-affine
# mid-surface of rms height ``rms`` (a winding gap). The map alone cannot tell them apart; the flow can.
WALL_PLACEMENTS = {
    "symmetric": _symmetric,
    "flat_bottom": _flat_bottom,
    "self_affine": _self_affine_mid_surface,
}


def place_walls(
    aperture: np.ndarray, placement: str, seed: int = 0, rms: float = 0.0, hurst: float = 0.8
) -> tuple[np.ndarray, np.ndarray]:
    """Bottom and top wall heights (float64 (H, W), pixels) around ``aperture`` (pixels) by ``placement``, one of
    :data:`WALL_PLACEMENTS`; ``rms`` and ``hurst`` shape the ``self_affine`` mid-surface."""
    check_setting(
        placement in WALL_PLACEMENTS, "placement", f"must be one of {sorted(WALL_PLACEMENTS)}", placement
    )
    aperture = np.asarray(aperture, dtype=np.float64)
    return WALL_PLACEMENTS[placement](aperture, np.random.default_rng(seed), rms, hurst)


def _check(hurst: float, rms: float) -> None:
    if not 0 < hurst <= 1:
        raise ValueError(f"hurst must be in (0, 1], got {hurst}")
    if rms < 0:
        raise ValueError(f"rms must be >= 0, got {rms}")
