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
  split (fitted once, at the start of training; see :meth:`BaselineScores.fit_power_exponent
  <flowlearn.training.baselines.BaselineScores.fit_power_exponent>`);
- ``wedge``: the LCL with the Stokes-flow correction for non-parallel walls of Nicholl et al. (1999), in the form of
  Brush & Thomson (2003), eq. (33) (see :func:`wedge_factor`), along each axis: T_xx = Ap³/12 · C(∂Ap/∂x),
  T_yy = Ap³/12 · C(∂Ap/∂y), with the aperture map's gradient (:func:`~flowlearn.fractures.inclination.aperture_slope`,
  which says why the map's and not the walls'); it is a ratio of lengths, so the baseline is absent for fractures
  whose voxel size is unknown;
- ``inclined``: T = Ap³/12 · I, the LCL of the gap normal to its inclined mid-surface, projected onto the map as a
  tensor (I_xx = cos⁴θ for a slope θ along the flow, cos²θ across it; after Ge 1997; see
  :mod:`flowlearn.fractures.inclination`). It needs the walls and is absent for fractures without them. Its law,
  ``law=inclined``, is what the default model corrects;
- ``mlcl``: the strongest closed form, with no fitted parameter: the inclination tensor times the wedge factor
  along each axis, T_xx = Ap³/12 · I_xx · C(∂Ap/∂x), T_yy = Ap³/12 · I_yy · C(∂Ap/∂y), T_xy = Ap³/12 · I_xy ·
  √(C_x C_y) (the tensor's correlation ρ unchanged). It needs the walls and the voxel size. Of the roughness
  corrections, the wedge factor of Brush & Thomson (2003) is the one here; the roughness term of Wang et al.
  (2015) is not implemented.

The closed forms, :data:`CLOSED_FORMS` (``lcl``, ``wedge``, ``inclined``, ``mlcl``: physics with no parameter fitted
to data), are what a learned model must beat: :func:`best_closed_form` picks, per metric, the one that does best,
which every verdict names beside the LCL.

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
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from flowlearn.models.laws import log_wedge, mlcl_log_t, power_law_log_t, tensor_law


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
        "wedge",
        "wedge-corrected LCL",
        "T_ii = Ap³/12 · C(∂Ap/∂i), C(g) = 3(g − arctan g)/g³ (Brush & Thomson 2003)",
    ),
    Baseline(
        "inclined",
        "inclination-tensor LCL",
        "T = Ap³/12 · [[1 + m_y², −m_x m_y], [−m_x m_y, 1 + m_x²]]/(1 + |∇m|²)², m the mid-surface (after Ge 1997)",
    ),
    Baseline("mlcl", "inclination tensor × wedge", "the inclination tensor times C(∂Ap/∂i) along each axis"),
)
BASELINE_NAMES = tuple(b.name for b in BASELINES)
# The baseline ``improvement`` is measured against, and the one figures show beside the learned model.
COMPARED = "lcl"
# The baselines that are physics with no parameter fitted to data: the best of them is what a model must beat.
CLOSED_FORMS = ("lcl", "wedge", "inclined", "mlcl")


def best_closed_form(values: Mapping[str, float]) -> tuple[str, float] | None:
    """(name, value) of the closed form (:data:`CLOSED_FORMS`) with the lowest finite value among ``values`` (a
    metric by baseline name, lower is better), or None where none has one."""
    finite = [(values[name], name) for name in CLOSED_FORMS if name in values and math.isfinite(values[name])]
    if not finite:
        return None
    value, name = min(finite)
    return name, value


def baseline_log_t(
    name: str,
    log_aperture: torch.Tensor,
    active: torch.Tensor,
    power_exponent: float,
    inclination: torch.Tensor,
    aperture_slope: torch.Tensor,
) -> torch.Tensor | None:
    """The conductivity of baseline ``name`` on a batch of fractures in the solve's form (log T (B, *shape), per
    axis (B, 2, H, W), or the tensor form (B, 3, H, W)), or None where it cannot be computed: ``power`` before its
    exponent is fitted (``power_exponent`` NaN), ``wedge`` and ``mlcl`` where the aperture slope is unknown (no
    voxel size), ``inclined`` and ``mlcl`` where the walls are.

    Args:
        name: one of :data:`BASELINE_NAMES`.
        log_aperture, active: (B, *shape) float64 and bool.
        power_exponent: the fitted exponent a of ``power``.
        inclination: (B, 3, *shape) float64, the inclination tensor of :mod:`flowlearn.fractures.inclination` in the
            solve's tensor form (NaN where unknown).
        aperture_slope: (B, 2, *shape) float64, (∂Ap/∂x, ∂Ap/∂y) of
            :func:`~flowlearn.fractures.inclination.aperture_slope` (NaN where unknown).
    """
    if name == "uniform":
        return power_law_log_t(log_aperture, active, 0.0)
    if name == "ap2":
        return power_law_log_t(log_aperture, active, 2.0)
    lcl = power_law_log_t(log_aperture, active, 3.0)
    if name == "lcl":
        return lcl
    if name == "power":
        return None if math.isnan(power_exponent) else power_law_log_t(log_aperture, active, power_exponent)
    walls = bool(torch.isfinite(inclination).all())
    slope = bool(torch.isfinite(aperture_slope).all())
    if name == "wedge":
        return lcl.unsqueeze(1) + log_wedge(aperture_slope) if slope else None
    if name == "inclined":
        return tensor_law(lcl, inclination) if walls else None
    if name == "mlcl":
        return mlcl_log_t(lcl, inclination, aperture_slope) if walls and slope else None
    raise ValueError(f"unknown baseline {name!r}; the baselines are {', '.join(BASELINE_NAMES)}")
