"""The baselines every learned model is measured against: fixed transmissivity laws computed from the aperture map.

Each baseline gives the log-transmissivity of a fracture (see :mod:`flowlearn.models.laws` for the units); its
pressure and flow rate come from the same Darcy solve as a learned model's. The baselines, by the name that prefixes
their logged metrics:

- ``uniform``: T = Ā³/12 at every pixel (K ≡ const, Ā the mean aperture): the straight line between the heads on a
  fracture without contact spots, and the parallel-plate cubic law's flow rate of the mean aperture;
- ``ap2``: T = Ā·Ap²/12, i.e. T ∝ Ap², the original work's model (k = Ap²/12 at uniform thickness);
- ``lcl``: T = Ap³/12, the local cubic law (LCL), the law a learned correction must beat; ``improvement`` is
  measured against it;
- ``power``: T = (Ā³/12)·(Ap/Ā)^a, the single power law whose exponent a minimises the pressure MSE of the training
  split (fitted once, at the start of training; see :meth:`FractureFlowModule.fit_power_exponent
  <flowlearn.training.module.FractureFlowModule.fit_power_exponent>`);
- ``wedge``: the LCL with the Stokes-flow correction for non-parallel walls of Nicholl et al. (1999), in the form of
  Brush & Thomson (2003), eq. (33) (see :func:`wedge_factor`). It needs the pixel size (the aperture gradient is a
  ratio of lengths) and is absent for fractures whose voxel size is unknown;
- ``inclined``: T = Ap³/12 · I, the LCL of the gap normal to its inclined mid-surface, projected onto the map
  (I = cos⁴θ for a slope θ along the flow; after Ge 1997; see :mod:`flowlearn.data.inclination`). It needs the
  walls and is absent for fractures without them. Its law, ``law=inclined``, is what the default model corrects.

References:
    Nicholl, M. J., Rajaram, H., Glass, R. J., and Detwiler, R. (1999). Saturated flow in a single fracture:
    evaluation of the Reynolds equation in measured aperture fields. Water Resources Research 35(11), 3361-3373.

    Brush, D. J., and Thomson, N. R. (2003). Fluid flow in synthetic rough-walled fractures: Navier-Stokes, Stokes,
    and local cubic law simulations. Water Resources Research 39(4), 1085, doi:10.1029/2002WR001346.

    Ge, S. (1997). A governing equation for fluid flow in rough fractures. Water Resources Research 33(1), 53-61,
    doi:10.1029/96WR02588.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flowlearn.models.laws import power_law_log_t

# Below this aperture gradient the wedge factor is evaluated by its series: the closed form loses digits to the
# cancellation in g - arctan(g) (the series' first omitted term, g^6/3, is below 4e-13 here).
WEDGE_SERIES_BELOW = 1e-2


@dataclass(frozen=True)
class Baseline:
    """A baseline: its name (the prefix of its metrics, e.g. ``val/lcl_mse``), a short label for tables and figures,
    and its formula in words."""

    name: str
    label: str
    formula: str


BASELINES = (
    Baseline(
        "uniform", "uniform T", "T = Ā³/12 everywhere (K ≡ const: the straight line without contact spots)"
    ),
    Baseline("ap2", "T ∝ Ap²", "T = Ā·Ap²/12 (the original work's k = Ap²/12)"),
    Baseline("lcl", "LCL", "T = Ap³/12 (the local cubic law)"),
    Baseline("power", "T ∝ Ap^a", "T = (Ā³/12)(Ap/Ā)^a, a fitted on the training split"),
    Baseline(
        "wedge", "wedge-corrected LCL", "T = Ap³/12 · 3(g − arctan g)/g³, g = |∂Ap/∂x| (Brush & Thomson 2003)"
    ),
    Baseline(
        "inclined",
        "inclination-corrected LCL",
        "T = Ap³/12 · (1 + m_y²)/(1 + |∇m|²)², m the mid-surface (after Ge 1997)",
    ),
)
BASELINE_NAMES = tuple(b.name for b in BASELINES)
# The baseline ``improvement`` is measured against, and the one figures show beside the learned model.
COMPARED = "lcl"


def wedge_factor(slope: torch.Tensor) -> torch.Tensor:
    """C(g) = 3(g − arctan g)/g³: the ratio of the Stokes flow between two plates that open at the angle θ = arctan g
    to the flow the local cubic law gives them (Brush & Thomson 2003, eq. 33, after Nicholl et al. 1999); C(0) = 1,
    C(g) ≈ 1 − 3g²/5 for small g, C → 3/g² for steep walls.

    Args:
        slope: the aperture gradient g (dimensionless, any sign), float64 of any shape.

    Returns:
        C(|g|), float64, the same shape, in (0, 1].
    """
    g = slope.abs()
    small = g < WEDGE_SERIES_BELOW
    safe = torch.where(small, 1.0, g)
    closed = 3 * (safe - torch.atan(safe)) / safe**3
    series = 1 - 3 * g**2 / 5 + 3 * g**4 / 7
    return torch.where(small, series, closed)


def wedge_corrected_log_t(
    log_aperture: torch.Tensor, active: torch.Tensor, pixel_size: torch.Tensor
) -> torch.Tensor:
    """log T of the wedge-corrected LCL, T = Ap³/12 · C(∂Ap/∂x) (:func:`wedge_factor`).

    The correction is applied at each node, with the central-difference aperture gradient along the flow (x, the
    last axis; one-sided at the first and last column) and zero aperture at inactive pixels (walls in contact).
    Brush & Thomson apply it per half-cell, along each direction of flow; a node-wise transmissivity can only take
    one value, and the through-flow runs along x.

    Args:
        log_aperture, active: (B, *shape) float64 and bool, as for the laws of :mod:`flowlearn.models.laws`.
        pixel_size: (B,) float64, metres per pixel of each fracture (the aperture's unit).

    Returns:
        log T, (B, *shape) float64.
    """
    aperture = torch.where(active, torch.exp(log_aperture), 0.0)
    (per_pixel,) = torch.gradient(aperture, dim=-1)
    slope = per_pixel / pixel_size.to(torch.float64).view(-1, *[1] * (aperture.ndim - 1))
    return 3 * log_aperture - math.log(12.0) + torch.log(wedge_factor(slope))


def baseline_log_t(
    name: str,
    log_aperture: torch.Tensor,
    active: torch.Tensor,
    pixel_size: torch.Tensor,
    power_exponent: float,
    log_inclination: torch.Tensor,
) -> torch.Tensor | None:
    """log T of baseline ``name`` on a batch of fractures, or None where it cannot be computed: ``power`` before its
    exponent is fitted (``power_exponent`` NaN), ``wedge`` when a pixel size is unknown (NaN), ``inclined`` when
    the walls are.

    Args:
        name: one of :data:`BASELINE_NAMES`.
        log_aperture, active: (B, *shape) float64 and bool.
        pixel_size: (B,) float64, metres per pixel (NaN where unknown).
        power_exponent: the fitted exponent a of ``power``.
        log_inclination: (B, *shape) float64, log I of :mod:`flowlearn.data.inclination` (NaN where unknown).
    """
    if name == "uniform":
        return power_law_log_t(log_aperture, active, 0.0)
    if name == "ap2":
        return power_law_log_t(log_aperture, active, 2.0)
    if name == "lcl":
        return power_law_log_t(log_aperture, active, 3.0)
    if name == "power":
        return None if math.isnan(power_exponent) else power_law_log_t(log_aperture, active, power_exponent)
    if name == "wedge":
        known = bool(torch.isfinite(pixel_size).all() and (pixel_size > 0).all())
        return wedge_corrected_log_t(log_aperture, active, pixel_size) if known else None
    if name == "inclined":
        known = bool(torch.isfinite(log_inclination).all())
        return power_law_log_t(log_aperture, active, 3.0) + log_inclination if known else None
    raise ValueError(f"unknown baseline {name!r}; the baselines are {', '.join(BASELINE_NAMES)}")
