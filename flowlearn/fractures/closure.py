"""Rough fractures in contact: two self-affine walls brought together by a normal closure.

Real joints are two rough walls that match at long wavelengths and are independent at short ones (the mismatch
model of Brown 1995), pressed together until they touch on part of their area (Pyrak-Nolte et al. 1987; Hakami
1995). This module builds such a pair so that the quantities that shape the flow are set directly, each drawn
in its published range by :mod:`flowlearn.fractures.recipes`:

* the aperture's spread σ/⟨b⟩ of the open gap (before closure),
* the contact area, by the closure that brings the walls together,
* the mismatch length, below which the walls are independent,
* the shortest roughness wavelength, down to below the mean aperture,
* the rms slope of the mid-surface, smoothed over the mean aperture (the inclination the gap winds with).

**Construction.** Three periodic Gaussian fields share the self-affine amplitude q^(-1-H) (Hurst exponent H) up to
the shortest wavelength: S, restricted to wavelengths above the mismatch length, and U, V, restricted to the
wavelengths below it. The walls are

    top    = m_s S + m_u U + (b₀ - c)/2,        bottom = m_s S + m_u V - (b₀ - c)/2,

so the open aperture b₀ + m_u (U - V) has the spread set by m_u, the mid-surface m_s S + m_u (U + V)/2 has the
slope set by m_s, and the closure c is the quantile of the open aperture at the contact fraction: where the walls
overlap (top <= bottom) they touch, and the aperture max(top - bottom, 0) is 0. Finally every height is scaled so
that the mean aperture, contacts counted as 0, is ``mean_aperture`` pixels.

The open gap's spread matters only where nothing touches: a closure to a contact fraction f cuts the Gaussian gap
at its f-quantile and rescales it to the mean aperture, which leaves a shape that depends on f alone (σ/⟨b⟩ about
0.76 at f = 0.15 and 1.0 at f = 0.3, as measured gaps under stress show).

Giving the matched and the independent wavelengths their own amplitude generalises Brown's model (one amplitude
for both), as the two-scale models of Glover et al. (1998) do: it lets the aperture's spread and the mid-surface's
slope be drawn independently, as the published ranges of each are.

Special cases, which every law must get right, share the same fields: parallel plates (no roughness), plates
tilted along or across the flow, and a flat mid-surface (the walls mirror each other about the plane z = 0).

**Windows of larger walls.** A map of rock-like slopes must hold wavelengths longer than itself: an aperture
that spreads by σ over a wavelength λ tilts its walls by about π σ/λ, and real joints carry their spread over
tens of mean apertures. With ``extent`` > 1 the three fields are drawn on walls ``extent`` times the map along
each axis (periodic there), and the map is a window of them, not periodic: its first and last columns, the
inlet and the outlet, are wherever the window falls. Every quantity above is then set on the window itself:
the open gap's spread (U - V over the window's rms), the closure (the window's quantile at the contact fraction),
the mean aperture, and the mid-surface's slope, measured as the inclination law measures it
(:func:`~flowlearn.fractures.inclination.smoothed_gradient`, which assumes no periodicity). Of the ``extent``²
windows that tile the larger walls, taken row by row, the map is the first whose gap, where at least one pixel
wide, joins the inlet to the outlet (4-connected): one that its contacts close off would carry no flow. The
larger walls are kept with the map, and refining them refines the window exactly
(:func:`~flowlearn.fractures.roughness.refine`).

All lengths are in pixels; arrays are float64 (H, W) = (rows y, columns x); flow runs along x.

References:
    Brown, S. R. (1995). Simple mathematical model of a rough fracture. JGR 100(B4), 5941-5952.
    Glover, P. W. J., Matsuki, K., Hikima, R., Hayashi, K. (1998). Synthetic rough fractures in rocks. JGR 103(B5),
        9609-9620.
    Pyrak-Nolte, L. J., et al. (1987). Hydraulic and mechanical properties of natural fractures in low
        permeability rock. Proc. 6th ISRM Congress, 225-231.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import ndimage

from flowlearn.checks import check_map_shape, check_setting, is_integer, is_number
from flowlearn.fractures.inclination import FWHM_PER_SIGMA, smoothed_gradient
from flowlearn.fractures.roughness import RoughFracture, self_affine_amplitude, wavenumbers, window

# The shapes a fracture of this module takes: rough walls in contact, or one of the cases every law must get right.
KINDS = ("rough", "parallel", "tilted_along", "tilted_across", "flat_mid_surface")
# The largest ``extent``: the larger walls and their spectra take extent² times the map's memory (at 16, a 64x64 map's
# synthesis peaks at 145 MiB; at the rock recipe's 10, 57 MiB).
MAX_EXTENT = 16


@dataclass(frozen=True)
class ClosureParams:
    """One fracture of walls in contact; lengths in pixels.

    Attributes:
        shape: (H, W) of the map.
        mean_aperture: the mean aperture ⟨b⟩ after closure, contacts counted as 0.
        hurst: Hurst exponent H of the walls, in (0, 1].
        aperture_std: σ/⟨b⟩ of the open gap, before the closure; with contacts the closure alone sets the spread
            (see the module docstring).
        contact_fraction: the share of the map where the walls touch, in [0, 1).
        mismatch_length: wavelength above which the walls match; at most the larger walls' longest side.
        min_wavelength: the shortest roughness wavelength (>= 2, the Nyquist wavelength).
        mid_slope: rms slope of the mid-surface, smoothed over ``mean_aperture`` (dimensionless); for the tilted
            kinds, the plates' slope.
        seed: seed of the random fields; equal parameters and seed give identical fractures.
        kind: one of :data:`KINDS`.
        extent: the walls are drawn ``extent`` times the map along each axis and the map is a window of them (see
            the module docstring); 1: the map's own periodic walls. The plates ignore it.
    """

    shape: tuple[int, int]
    mean_aperture: float
    hurst: float
    aperture_std: float
    contact_fraction: float
    mismatch_length: float
    min_wavelength: float
    mid_slope: float
    seed: int
    kind: str = "rough"
    extent: int = 1

    # Fields that are lengths: scaled with the grid by :func:`flowlearn.fractures.roughness.refine`.
    LENGTHS = ("mean_aperture", "mismatch_length", "min_wavelength")

    def __post_init__(self) -> None:
        shape = check_map_shape(self.shape)
        check_setting(self.kind in KINDS, "kind", f"must be one of {', '.join(KINDS)}", self.kind)
        check_setting(
            is_integer(self.extent) and 1 <= self.extent <= MAX_EXTENT,
            "extent",
            f"must be an integer in [1, {MAX_EXTENT}] (the larger walls take extent² times the map's memory)",
            self.extent,
        )
        longest = self.extent * max(shape)
        check_setting(
            is_number(self.mean_aperture) and self.mean_aperture > 0,
            "mean_aperture",
            "must be > 0",
            self.mean_aperture,
        )
        check_setting(is_number(self.hurst) and 0 < self.hurst <= 1, "hurst", "must be in (0, 1]", self.hurst)
        check_setting(
            is_number(self.aperture_std) and 0 <= self.aperture_std <= 3,
            "aperture_std",
            "must be in [0, 3] (sigma over the mean aperture of the open gap)",
            self.aperture_std,
        )
        check_setting(
            is_number(self.contact_fraction) and 0 <= self.contact_fraction <= 0.5,
            "contact_fraction",
            "must be in [0, 0.5]: beyond half of the map in contact no open path crosses a fracture of "
            "uncorrelated contacts",
            self.contact_fraction,
        )
        check_setting(
            is_number(self.min_wavelength) and 2 <= self.min_wavelength,
            "min_wavelength",
            "must be >= 2 pixels (the shortest wavelength a grid holds)",
            self.min_wavelength,
        )
        walls = "the map's" if self.extent == 1 else "the larger walls'"
        check_setting(
            is_number(self.mismatch_length) and self.min_wavelength < self.mismatch_length <= longest,
            "mismatch_length",
            f"must be above the shortest wavelength ({self.min_wavelength:g} pixels) and at most {walls} longest "
            f"side ({longest} pixels)",
            self.mismatch_length,
        )
        check_setting(
            is_number(self.mid_slope) and 0 <= self.mid_slope <= 1,
            "mid_slope",
            "must be in [0, 1] (rms slope of the smoothed mid-surface)",
            self.mid_slope,
        )
        check_setting(is_integer(self.seed) and self.seed >= 0, "seed", "must be an integer >= 0", self.seed)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def _field(spectrum: np.ndarray) -> np.ndarray:
    """The real field of ``spectrum`` with zero mean and unit rms (zero where the spectrum is empty)."""
    field = np.fft.ifft2(spectrum).real
    field -= field.mean()
    rms = field.std()
    return field / rms if rms > 0 else field


def _smoothed_slope_rms(surface: np.ndarray, width: float) -> float:
    """rms |∇surface| after Gaussian smoothing of full width at half maximum ``width`` pixels (periodic)."""
    h, w = surface.shape
    qy = np.fft.fftfreq(h)[:, None]
    qx = np.fft.fftfreq(w)[None, :]
    sigma = width / FWHM_PER_SIGMA
    spectrum = np.fft.fft2(surface) * np.exp(-2 * (np.pi * sigma) ** 2 * (qx**2 + qy**2))
    gx = np.fft.ifft2(2j * np.pi * qx * spectrum).real
    gy = np.fft.ifft2(2j * np.pi * qy * spectrum).real
    return float(np.sqrt(np.mean(gx**2 + gy**2)))


def closed_fracture(params: ClosureParams) -> RoughFracture:
    """The walls of ``params`` and the aperture between them (see the module docstring), in pixels."""
    h, w = params.shape
    b = params.mean_aperture
    if params.kind in ("parallel", "tilted_along", "tilted_across"):
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        slope = 0.0 if params.kind == "parallel" else params.mid_slope
        middle = slope * ((x - (w - 1) / 2) if params.kind == "tilted_along" else (y - (h - 1) / 2))
        return RoughFracture(params, middle - b / 2, middle + b / 2, np.full((h, w), b))
    if params.extent > 1:
        return _windowed_fracture(params)
    rng = np.random.default_rng(params.seed)
    q = wavenumbers(params.shape)
    amplitude = self_affine_amplitude(q, params.hurst)
    amplitude[q > 1.0 / params.min_wavelength] = 0.0
    matched = q < 1.0 / params.mismatch_length
    shared, one, other = (np.fft.fft2(rng.standard_normal(params.shape)) for _ in range(3))
    s = _field(amplitude * matched * shared)
    u, v = (_field(amplitude * ~matched * noise) for noise in (one, other))
    spread = float((u - v).std())  # about sqrt(2): u and v are independent
    gap = (u - v) / spread if spread > 0 else u - v  # unit rms
    # In units of the open mean aperture b₀ = 1, then closed by the quantile at the contact fraction.
    open_gap = 1.0 + params.aperture_std * gap
    if params.contact_fraction > 0:
        closure = float(np.quantile(open_gap, params.contact_fraction))
    else:
        # Walls that already overlap are pulled apart until they just do not.
        closure = min(0.0, float(open_gap.min()) - 1e-3)
    separation = open_gap - closure
    scale = b / float(np.maximum(separation, 0.0).mean())
    separation *= scale
    rough_middle = scale * params.aperture_std * (u + v) / (2 * spread) if spread > 0 else np.zeros_like(u)
    if params.kind == "flat_mid_surface":
        middle = np.zeros_like(separation)
    else:
        # The matched field's amplitude that brings the smoothed mid-surface to its rms slope; the two parts have
        # disjoint spectra, so their slopes add in quadrature.
        part = _smoothed_slope_rms(rough_middle, b) if rough_middle.any() else 0.0
        unit = _smoothed_slope_rms(s, b)
        amplitude_s = np.sqrt(max(params.mid_slope**2 - part**2, 0.0)) / unit if unit > 0 else 0.0
        middle = amplitude_s * s + rough_middle
    return RoughFracture(
        params, middle - separation / 2, middle + separation / 2, np.maximum(separation, 0.0)
    )


def _windowed_fracture(params: ClosureParams) -> RoughFracture:
    """The rough walls of ``params`` as a window of walls ``params.extent`` times the map (the module docstring's
    "Windows of larger walls"), in pixels."""
    h, w = params.shape
    larger = (params.extent * h, params.extent * w)
    rng = np.random.default_rng(params.seed)
    q = wavenumbers(larger)
    amplitude = self_affine_amplitude(q, params.hurst)
    amplitude[q > 1.0 / params.min_wavelength] = 0.0
    matched = q < 1.0 / params.mismatch_length
    shared, one, other = (np.fft.fft2(rng.standard_normal(larger)) for _ in range(3))
    s = _field(amplitude * matched * shared)
    u, v = (_field(amplitude * ~matched * noise) for noise in (one, other))
    origins = [(row * h, column * w) for row in range(params.extent) for column in range(params.extent)]
    for origin in origins:
        fracture = _window_of(params, s, u, v, origin)
        if _crossed(fracture.aperture):
            return fracture
    # Every window closed off: the first, which the LBM refuses, naming the fracture and what it drew.
    return _window_of(params, s, u, v, origins[0])


def _window_of(
    params: ClosureParams, s: np.ndarray, u: np.ndarray, v: np.ndarray, origin: tuple[int, int]
) -> RoughFracture:
    """The fracture of ``params`` whose map is the window at ``origin`` of the larger walls made of the matched field
    ``s`` and the independent fields ``u`` and ``v`` (float64, the larger walls' shape, unit rms)."""
    b = params.mean_aperture

    def cut(field: np.ndarray) -> np.ndarray:
        return window(field, origin, params.shape)

    difference = cut(u - v)
    centre, spread = float(difference.mean()), float(difference.std())
    # The open gap in units of its mean b₀ = 1, with the spread set over the window, not over the larger walls (whose
    # longest wavelengths only tilt the window), then closed by the window's quantile at the contact fraction.
    gap = (u - v - centre) / spread if spread > 0 else u - v - centre
    open_gap = 1.0 + params.aperture_std * gap
    if params.contact_fraction > 0:
        closure = float(np.quantile(cut(open_gap), params.contact_fraction))
    else:
        closure = min(0.0, float(cut(open_gap).min()) - 1e-3)
    separation = open_gap - closure
    scale = b / float(np.maximum(cut(separation), 0.0).mean())
    separation *= scale
    rough_middle = scale * params.aperture_std * (u + v) / (2 * spread) if spread > 0 else np.zeros_like(u)
    if params.kind == "flat_mid_surface":
        middle = np.zeros_like(separation)
    else:
        middle = _matched_amplitude(cut(s), cut(rough_middle), b, params.mid_slope) * s + rough_middle
    bottom, top = middle - separation / 2, middle + separation / 2
    map_bottom, map_top = cut(bottom), cut(top)
    return RoughFracture(
        params, map_bottom, map_top, np.maximum(map_top - map_bottom, 0.0), (bottom, top), origin
    )


def _matched_amplitude(matched: np.ndarray, rough: np.ndarray, width: float, slope: float) -> float:
    """The factor a >= 0 of the matched field ``matched`` that brings the rms slope of ``a * matched + rough`` (float
    (H, W), a map, not periodic), smoothed over ``width`` pixels as the inclination law smooths it, to ``slope``; 0
    where ``rough`` alone is steeper. Over a window the two fields' slopes are not orthogonal, so their cross term
    counts: a solves A a² + 2 B a + C = slope²."""
    (mx, my), (rx, ry) = smoothed_gradient(matched, 1.0, width), smoothed_gradient(rough, 1.0, width)
    quadratic = float(np.mean(mx**2 + my**2))
    linear = float(np.mean(mx * rx + my * ry))
    constant = float(np.mean(rx**2 + ry**2))
    if quadratic == 0 or constant >= slope**2:
        return 0.0
    # C < slope², so the discriminant is positive and the larger root is.
    return (-linear + math.sqrt(linear**2 - quadratic * (constant - slope**2))) / quadratic


def _crossed(aperture: np.ndarray) -> bool:
    """Whether the gap of ``aperture`` (float (H, W), pixels), where at least one pixel wide (so that the voxelised
    gap holds a fluid voxel in each of its columns), joins the first column to the last through face neighbours."""
    labels, _ = ndimage.label(aperture >= 1.0)
    return bool(np.intersect1d(labels[:, 0][labels[:, 0] > 0], labels[:, -1]).size)
