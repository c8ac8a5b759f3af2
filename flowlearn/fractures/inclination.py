"""The inclination tensor of the local cubic law: how a gap that winds with its mid-surface conducts on the map.

**From Ge (1997).** A gap of vertical aperture Ap whose mid-surface m = (bottom + top)/2 is inclined at θ to the
mean plane is narrower normal to its walls, b = Ap·cos θ, and its flow runs along the inclined surface, with the
parallel-plate transmissivity of the normal aperture, t = b³/12 = (Ap cos θ)³/12, along the surface (Ge's
governing equation for rough fractures, written with the aperture normal to the local surface and lengths along
it).

**Derived here.** Projected onto the map (x along the columns, y along the rows), the surface's metric is
g = I + ∇m ∇mᵀ, with √det g = 1/cos θ and cos²θ = 1/(1 + |∇m|²). Flow along the surface with transmissivity t is
flow on the map with the tensor t·√det g·g⁻¹, and g⁻¹ = [[1 + m_y², −m_x m_y], [−m_x m_y, 1 + m_x²]]/(1 + |∇m|²):

    T = Ap³/12 · I,     I = [[1 + m_y², −m_x m_y], [−m_x m_y, 1 + m_x²]] / (1 + m_x² + m_y²)².

A plate sloping along the flow has I_xx = cos⁴θ (a narrower gap and a longer path); across it, cos²θ (a narrower
gap, but a surface wider than its map). The solve takes the whole tensor, cross term included
(:mod:`flowlearn.darcy.tensor`), in the form (log I_xx, log I_yy, ρ) with ρ = I_xy/√(I_xx I_yy).

**The slope is taken where the walls are resolved.** Walls whose roughness stops short of the grid (band-limited:
every generated fracture, whose shortest wavelength spans several pixels) have a slope that central differences
resolve, the slope the reference simulation sees, and sampling them more finely leaves it, the tensor and the flow
rate unchanged (within 2 % for 2× and 4× finer samplings, a test): the default takes it pixel by pixel
(``smoothing`` 0). Measured walls may carry roughness down to the pixel, or noise, whose slope grows without bound
as they are sampled more finely: there ``smoothing`` > 0 takes the slope of the mid-surface smoothed by a Gaussian
of that full width at half maximum, in mean apertures (standard deviation 0.42 of it), which should stay below the
shortest wavelength the walls resolve (docs/laws.md, "The slope"). Smoothing walls that are resolved deletes
geometry the flow sees: over one mean aperture, it made the tensor 1.8-2.2 times too large on fractures whose
mid-surface winds at 0.5-1.5 mean apertures. ∇m is the mid-surface convolved with the Gaussian's derivative, which
leaves the slope of a plane exact everywhere. The aperture map alone cannot show θ: two fractures with the same map
may wind differently, so the tensor needs the walls.

Reference:
    Ge, S. (1997). A governing equation for fluid flow in rough fractures. Water Resources Research 33(1), 53-61,
    doi:10.1029/96WR02588.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
from scipy import ndimage

# The default smoothing of the mid-surface before its slope is taken: the Gaussian's full width at half maximum,
# in mean apertures; 0, pixel by pixel, for walls resolved on the grid (the module docstring).
SMOOTHING = 0.0
# A Gaussian's full width at half maximum over its standard deviation.
FWHM_PER_SIGMA = 2.0 * math.sqrt(2.0 * math.log(2.0))


class Walls(Protocol):
    """What the geometry here reads of a fracture (:class:`flowlearn.data.schema.Fracture` is one): its aperture
    map, float (H, W) metres; its walls ``bottom`` and ``top``, float (H, W) metres or None where unknown; the voxel
    size in metres (NaN where unknown); and ``active``, bool (H, W), the cells that carry flow."""

    aperture: np.ndarray
    bottom: np.ndarray | None
    top: np.ndarray | None
    voxel_size: float

    @property
    def active(self) -> np.ndarray: ...

    @property
    def shape(self) -> tuple[int, ...]: ...


def smoothed_gradient(surface: np.ndarray, voxel_size: float, width: float) -> tuple[np.ndarray, np.ndarray]:
    """(∂/∂x, ∂/∂y) of ``surface`` (H, W) smoothed by a Gaussian whose full width at half maximum is ``width``
    metres, in metres per metre: the surface convolved with the Gaussian's derivative, after extending it beyond the
    map by its point reflection (which continues a plane as itself, so a plane's slope is exact up to the edges).
    ``width`` 0: central differences, one-sided at the edges."""
    surface = np.asarray(surface, dtype=np.float64)
    sigma = width / FWHM_PER_SIGMA / voxel_size
    if sigma <= 0:
        slope_y, slope_x = np.gradient(surface, voxel_size)
        return slope_x, slope_y
    # The Gaussian's derivative (not central differences of the smoothed surface): its response does not depend
    # on the sampling, so the same walls sampled more finely give the same slopes. Both kernels are truncated at
    # 4 standard deviations and normalised so that they keep a constant and differentiate a line exactly.
    radius = math.ceil(4 * sigma)
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    smooth = np.exp(-0.5 * (offsets / sigma) ** 2)
    derivative = offsets * smooth / np.sum(offsets**2 * smooth)
    smooth /= smooth.sum()
    pad = radius + 1
    extended = np.pad(surface, pad, mode="reflect", reflect_type="odd")
    inside = (slice(pad, -pad), slice(pad, -pad))

    def filtered(along_x: np.ndarray, along_y: np.ndarray) -> np.ndarray:
        rows = ndimage.correlate1d(extended, along_x, axis=1, mode="nearest")
        return ndimage.correlate1d(rows, along_y, axis=0, mode="nearest")[inside] / voxel_size

    return filtered(derivative, smooth), filtered(smooth, derivative)


def mean_aperture(fracture: Walls) -> float:
    """The fracture's mean aperture over its active pixels, metres (0 where none is active)."""
    active = fracture.active
    return float(np.asarray(fracture.aperture, np.float64)[active].mean()) if active.any() else 0.0


def inclination_tensor(fracture: Walls, smoothing: float = SMOOTHING) -> np.ndarray:
    """The inclination tensor I of the module docstring in the solve's form (log I_xx, log I_yy, ρ), float64
    (3, H, W), on the map's axes (x the columns); all NaN where it cannot be computed: a fracture without walls,
    with an unknown voxel size (the slope is a ratio of lengths), or a 3D volume.

    Args:
        fracture: the fracture, with its walls ``bottom`` and ``top`` (metres).
        smoothing: the full width at half maximum of the Gaussian that smooths the mid-surface, in mean apertures
            (:func:`mean_aperture`); 0 takes the slope pixel by pixel.
    """
    if fracture.bottom is None or fracture.aperture.ndim != 2 or not math.isfinite(fracture.voxel_size):
        return np.full((3, *fracture.shape), np.nan)
    middle = 0.5 * (np.asarray(fracture.bottom, np.float64) + np.asarray(fracture.top, np.float64))
    m_x, m_y = smoothed_gradient(middle, fracture.voxel_size, smoothing * mean_aperture(fracture))
    log_norm = 2.0 * np.log1p(m_x**2 + m_y**2)
    rho = -m_x * m_y / np.sqrt((1 + m_x**2) * (1 + m_y**2))
    return np.stack([np.log1p(m_y**2) - log_norm, np.log1p(m_x**2) - log_norm, rho])


def mid_surface_slope(fracture: Walls, smoothing: float = SMOOTHING) -> float:
    """rms slope |∇m| of the fracture's mid-surface m = (bottom + top)/2, smoothed over ``smoothing`` mean apertures
    as :func:`inclination_tensor` smooths it, over the active pixels (dimensionless); NaN where the tensor cannot be
    computed (no walls, unknown voxel size, 3D)."""
    if fracture.bottom is None or fracture.aperture.ndim != 2 or not math.isfinite(fracture.voxel_size):
        return math.nan
    middle = 0.5 * (np.asarray(fracture.bottom, np.float64) + np.asarray(fracture.top, np.float64))
    m_x, m_y = smoothed_gradient(middle, fracture.voxel_size, smoothing * mean_aperture(fracture))
    active = fracture.active
    return float(np.sqrt(np.mean((m_x**2 + m_y**2)[active]))) if active.any() else math.nan


def aperture_slope(fracture: Walls) -> np.ndarray:
    """(∂Ap/∂x, ∂Ap/∂y) of the aperture map, dimensionless, float64 (2, H, W): central differences (one-sided at
    the edges), zero aperture at inactive pixels. The map, not the smooth walls: it is the gap the reference
    simulation ran on, voxel steps included, and on the embedded dataset's validation split ``mlcl`` (the
    inclination tensor times the wedge factor) misses the flow rate by 5.1 % with the map's slope and by 9.4 % with
    that of the walls' separation (docs/laws.md, "The closed forms"). All NaN where the voxel size is unknown or
    the map is 3D."""
    if fracture.aperture.ndim != 2 or not math.isfinite(fracture.voxel_size):
        return np.full((2, *fracture.shape), np.nan)
    gap = np.where(fracture.active, np.asarray(fracture.aperture, np.float64), 0.0)
    return np.stack(smoothed_gradient(gap, fracture.voxel_size, 0.0))
