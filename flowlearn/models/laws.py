"""Transmissivity laws: how an aperture map and a raw correction field make the node log-conductivity.

The fracture's Darcy solve is depth-averaged: the conductivity of a node is the transmissivity T of its column of
the gap, the flow per unit width and unit head gradient with the viscosity divided out (m³ for apertures in
metres). The training module solves on a grid of unit pixel size and unit thickness, so that the outlet flow rate
of :func:`~flowlearn.darcy.flux.outlet_flow_rate` is in the units of the data's ``flow_rate`` attribute (see
:mod:`flowlearn.data.schema`). Pressures depend only on ratios of T: a constant factor changes the flow rate and
never the pressure.

Every law maps ``log_aperture`` (natural log of the aperture in metres; any finite value at inactive pixels) and
the correction model's raw output ``raw``, both float64 (B, *shape), and the fractures' :class:`Geometry`: the
``active`` mask, bool (B, *shape); ``inclination``, the mid-surface's inclination tensor I (B, 3, *shape) float64
in the solve's tensor form (log I_xx, log I_yy, ρ), NaN where the walls are unknown (see
:mod:`flowlearn.fractures.inclination`); and ``aperture_slope``, (∂Ap/∂x, ∂Ap/∂y) (B, 2, *shape) float64, NaN where
the voxel size is unknown; to the
conductivity the solve takes, float64: log T (B, *shape), or the tensor form (B, 3, H, W) (log T_xx, log T_yy, ρ)
for a law that gives a tensor (see :mod:`flowlearn.darcy.conductivity`). Values at inactive pixels are finite and
unused.

The laws:

- ``mlcl`` (the default): T = T_mlcl · W, the strongest closed form corrected by W: the local cubic law times the
  inclination tensor I and, along each axis, the wedge factor C of non-parallel walls
  (:func:`~flowlearn.models.baselines.mlcl_log_t`); I is the identity where the walls are unknown, C is 1 where the
  voxel size is;
- ``inclined``: T = Ap³/12 · I · W, the local cubic law of the gap normal to its inclined mid-surface,
  projected onto the map as a tensor (I_xx = cos⁴θ for a slope along the flow, cos²θ across it), W scaling all of
  it; a fracture without walls gets I = the identity, the LCL;
- ``lcl``: T = Ap³/12 · W, the local cubic law (LCL): the parallel-plate law applied to each pixel's aperture;
- ``ap2``: T = Ā·Ap²/12 · W, the original work's k = Ap²/12 over a uniform thickness, here the fracture's mean
  aperture Ā (over its active pixels), so that a parallel-plate fracture gets the cubic law's flow rate; within a
  fracture T ∝ Ap², not Ap³;
- ``exponent``: K = Ap^(2·relu(w)), the original work's law, whose K carries no physical units (a flow rate of it
  means nothing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

# Below this aperture gradient the wedge factor is evaluated by its series: the closed form loses digits to the
# cancellation in g - arctan(g) (the series' first omitted term, g^6/3, is below 4e-13 here).
WEDGE_SERIES_BELOW = 1e-2


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


def log_wedge(aperture_slope: torch.Tensor) -> torch.Tensor:
    """log C of the wedge factor along x and y, (B, 2, *shape), from the aperture slope (B, 2, *shape); 0 (C = 1)
    where the slope is unknown (NaN)."""
    return torch.log(wedge_factor(torch.nan_to_num(aperture_slope, nan=0.0)))


def log_mean_aperture(log_aperture: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """log Ā, the log of each fracture's mean aperture over its active pixels: float64 (B, 1, ..., 1), broadcastable
    against ``log_aperture`` (B, *shape)."""
    mask = active.to(log_aperture.dtype)
    total = (torch.exp(log_aperture) * mask).flatten(1).sum(1)
    count = mask.flatten(1).sum(1).clamp_min(1)
    return torch.log(total / count).view(-1, *[1] * (log_aperture.ndim - 1))


def power_law_log_t(log_aperture: torch.Tensor, active: torch.Tensor, exponent: float) -> torch.Tensor:
    """log T of the power law T = (Ā³/12)·(Ap/Ā)^a with a = ``exponent``: T ∝ Ap^a within a fracture, scaled so that a
    parallel-plate fracture (Ap ≡ Ā) gets the cubic law T = Ā³/12 whatever a. a = 3 is the LCL (exactly Ap³/12),
    a = 2 the ``ap2`` law, a = 0 a uniform T (the straight-line pressure where there is no contact spot).
    Shapes as in the module docstring (``raw`` aside)."""
    log_mean = log_mean_aperture(log_aperture, active)
    return 3 * log_mean - math.log(12.0) + exponent * (log_aperture - log_mean)


def mlcl_log_t(log_t: torch.Tensor, inclination: torch.Tensor, aperture_slope: torch.Tensor) -> torch.Tensor:
    """The tensor form (B, 3, H, W) of the strongest closed form on a scalar law ``log_t`` (B, H, W): T · I with the
    wedge factor along each axis, T_xx = T · I_xx · C(∂Ap/∂x), T_yy = T · I_yy · C(∂Ap/∂y), the correlation ρ of I
    unchanged (so T_xy = T · I_xy · √(C_x C_y)); I the identity where ``inclination`` is NaN, C = 1 where
    ``aperture_slope`` (B, 2, H, W) is."""
    log_xx, log_yy, rho = tensor_law(log_t, inclination).unbind(1)
    log_cx, log_cy = log_wedge(aperture_slope).unbind(1)
    return torch.stack([log_xx + log_cx, log_yy + log_cy, rho], dim=1)


def tensor_law(log_t: torch.Tensor, inclination: torch.Tensor) -> torch.Tensor:
    """The tensor form (B, 3, H, W) of T = exp(log_t) · I: a scalar law ``log_t`` (B, H, W) times the inclination
    tensor I (B, 3, H, W, NaN where unknown: the identity there)."""
    log_xx, log_yy, rho = torch.nan_to_num(inclination, nan=0.0).unbind(1)
    return torch.stack([log_t + log_xx, log_t + log_yy, rho], dim=1)


@dataclass(frozen=True)
class Geometry:
    """What a law may read of a batch of fractures besides the aperture (shapes and dtypes in the module
    docstring)."""

    active: torch.Tensor
    inclination: torch.Tensor
    aperture_slope: torch.Tensor

    @classmethod
    def of(cls, batch: Mapping[str, torch.Tensor]) -> Geometry:
        """The geometry of a training batch (:mod:`flowlearn.data.datamodule`)."""
        return cls(batch["active"], batch["inclination"], batch["aperture_slope"])


class PermeabilityLaw:
    """Base class of the laws a correction model trains through.

    Attributes:
        name: the law's config name (``law=<name>``).
        initial_raw: the raw value a correction model starts from.
        correction_name: what :meth:`correction` returns, for outputs and figures ("W" or "w").
        has_flow_units: whether exp(log_k) is a transmissivity in m³, so that the solve's flow rate is physical
            and can be compared with (and trained on) the reference flow rate.
        uses_walls: whether the law reads ``inclination``, which fractures without walls lack.
        uses_slope: whether the law reads ``aperture_slope``, which fractures of unknown voxel size lack.
    """

    name: str = ""
    initial_raw: float = 0.0
    correction_name: str = "W"
    has_flow_units: bool = True
    uses_walls: bool = False
    uses_slope: bool = False

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor, geometry: Geometry) -> torch.Tensor:
        """The conductivity the solve takes; shapes and dtypes in the module docstring."""
        raise NotImplementedError

    def correction(self, raw: torch.Tensor) -> torch.Tensor:
        """The correction field in the law's own terms (W = exp(raw), or the exponent w for ``exponent``)."""
        return torch.exp(raw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LocalCubicLaw(PermeabilityLaw):
    """T = Ap³/12 · W with W = exp(raw) > 0: the local cubic law corrected by W, which starts at 1 (raw = 0)."""

    name = "lcl"

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor, geometry: Geometry) -> torch.Tensor:
        return 3 * log_aperture - math.log(12.0) + raw


class InclinedCubicLaw(LocalCubicLaw):
    """T = Ap³/12 · I · W with W = exp(raw) > 0 starting at 1: the local cubic law of the gap normal to its inclined
    mid-surface, I its inclination tensor (:mod:`flowlearn.fractures.inclination`), corrected by W; the LCL (I the
    identity) where the walls are unknown. Returns the tensor form (B, 3, H, W) for maps, and the LCL's log T for
    3D volumes, which have no mid-surface."""

    name = "inclined"
    uses_walls = True

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor, geometry: Geometry) -> torch.Tensor:
        lcl = super().log_k(log_aperture, raw, geometry)
        return tensor_law(lcl, geometry.inclination) if lcl.ndim == 3 else lcl


class ApSquaredLaw(PermeabilityLaw):
    """T = Ā·Ap²/12 · W with W = exp(raw) > 0 starting at 1: the original work's k = Ap²/12 over a uniform thickness
    Ā (the fracture's mean aperture), i.e. T ∝ Ap² within a fracture."""

    name = "ap2"

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor, geometry: Geometry) -> torch.Tensor:
        return power_law_log_t(log_aperture, geometry.active, 2.0) + raw


class ExponentLaw(PermeabilityLaw):
    """K = Ap^(2·relu(w)), the original work's law, with w = raw starting at 0.5 (K = Ap); w = 1 gives Ap². K has the
    units of Ap^(2w), not of a transmissivity: flow rates of this law mean nothing."""

    name = "exponent"
    correction_name = "w"
    has_flow_units = False

    def __init__(self, initial_exponent: float = 0.5) -> None:
        self.initial_raw = initial_exponent

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor, geometry: Geometry) -> torch.Tensor:
        return 2 * torch.relu(raw) * log_aperture

    def correction(self, raw: torch.Tensor) -> torch.Tensor:
        return raw

    def __repr__(self) -> str:
        return f"ExponentLaw(initial_exponent={self.initial_raw})"


class ClosedFormLaw(LocalCubicLaw):
    """T = T_mlcl · W with W = exp(raw) > 0 starting at 1: the strongest closed form (the LCL times the inclination
    tensor and the wedge factor along each axis; see :mod:`flowlearn.models.baselines`), corrected by W. Where the
    walls are unknown the tensor is the identity, and where the voxel size is the wedge factor is 1 (the run warns,
    naming the fractures). Returns the tensor form (B, 3, H, W) for maps, and the LCL's log T for 3D volumes."""

    name = "mlcl"
    uses_walls = True
    uses_slope = True

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor, geometry: Geometry) -> torch.Tensor:
        lcl = super().log_k(log_aperture, raw, geometry)
        return mlcl_log_t(lcl, geometry.inclination, geometry.aperture_slope) if lcl.ndim == 3 else lcl
