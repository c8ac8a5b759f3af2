"""The voxel box that the reference solvers (LBM, Stokes) run on, and how their 3D flow becomes a dataset's 2D fields.

The box is a bool array (H, W, D) of fluid voxels: rows y, columns x, depth z, cubic voxels. Flow runs along x from
column 0 (inlet) to column W-1 (outlet). Every solver of the reference adds the same open reservoirs (full depth)
before and after the map (:func:`add_reservoirs`) and reports, in the dataset's convention:

* the pressure averaged over each column's gap, weighted by each voxel's in-plane speed,
  p(x, y) = Σ_z |u| p / Σ_z |u| (:func:`flux_weighted_average`): the pressure that the flow carries;
* that pressure normalised so that the inlet column averages 2 and the outlet column 1, and the inlet and outlet
  pressures p_in, p_out it was normalised with (:func:`gap_pressure`);
* the conductance Q μ / (p_in - p_out), in voxels³.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import ndimage

from flowlearn.checks import available_memory
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError, ProblemError

# Bytes per voxel of the box at its peak in :func:`voxelize`: the two comparisons and their result, bool each.
VOXELIZE_BYTES = 3


def voxelize(bottom: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Fluid voxels between two walls: bool (H, W, D), True where bottom <= z-centre < top.

    ``bottom`` and ``top`` are float (H, W) wall heights in voxels; D spans the lowest bottom to the highest top.

    Raises:
        ProblemError: walls so far apart (an rms height of 1e6 voxels on a 32x32 map) that the box would not fit
            in the memory this process has available; checked before it is allocated.
    """
    if bottom.shape != top.shape or bottom.ndim != 2:
        raise ValueError(f"bottom and top must be equal 2D shapes, got {bottom.shape} and {top.shape}")
    z0 = math.floor(float(bottom.min()))
    depth = max(math.ceil(float(top.max())) - z0, 1)
    needed, memory = VOXELIZE_BYTES * bottom.size * float(depth), available_memory()
    if needed > memory:
        raise ProblemError(
            f"walls from z = {float(bottom.min()):.3g} to {float(top.max()):.3g} voxels make a "
            f"{bottom.shape[0]}x{bottom.shape[1]}x{depth:.3g}-voxel box that needs {needed / 2**30:.3g} GiB, "
            f"more than the {memory / 2**30:.3g} GiB available: lower the walls' rms height (rms) or their "
            "separation (mean_aperture)"
        )
    centres = z0 + np.arange(depth) + 0.5
    return (bottom[..., None] <= centres) & (centres < top[..., None])


def voxelize_aperture(aperture: np.ndarray) -> np.ndarray:
    """Fluid voxels of a gap centred on a flat mid-plane: bool (H, W, D) for a float (H, W) aperture in voxels."""
    return voxelize(-0.5 * aperture, 0.5 * aperture)


def flux_weighted_average(values: np.ndarray, weights: np.ndarray, fluid: np.ndarray) -> np.ndarray:
    """Average of ``values`` over the fluid voxels of the last axis, weighted by ``weights``.

    ``values`` and ``weights`` are float (..., D), ``fluid`` bool (..., D). Where the weights of the fluid voxels
    sum to 0 (a column without flow) the plain mean over its fluid voxels is used; NaN where it has none.
    Returns float64 (...): the gap average of the pressure when ``weights`` is the local flux.
    """
    weights = np.where(fluid, weights, 0.0)
    total = weights.sum(axis=-1)
    count = fluid.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        weighted = (np.where(fluid, values, 0.0) * weights).sum(axis=-1) / total
        plain = np.where(fluid, values, 0.0).sum(axis=-1) / count
    return np.where(total > 0, weighted, np.where(count > 0, plain, np.nan))


def check_fluid(fluid: object) -> None:
    """Raise ``ValueError`` unless ``fluid`` is a box of fluid voxels: a bool (H, W, D) numpy array."""
    if not isinstance(fluid, np.ndarray) or fluid.ndim != 3 or fluid.dtype != bool:
        got = f"{fluid.dtype} {fluid.shape}" if isinstance(fluid, np.ndarray) else type(fluid).__name__
        raise ValueError(f"fluid must be a bool (H, W, D) array, got {got}")


def active_cells(fluid: np.ndarray) -> np.ndarray:
    """The cells of the map (bool (H, W)) with fluid (bool (H, W, D)) that a 4-connected path (the Darcy grid's)
    of such cells joins to both the inlet and the outlet column: :func:`flowing_cells` of its open map."""
    return flowing_cells(fluid.any(axis=2))


def flowing_cells(open_map: np.ndarray) -> np.ndarray:
    """The cells of ``open_map`` (bool (H, W), the map's columns with fluid) that a 4-connected path of open cells
    joins to both the inlet column (0) and the outlet column (W-1): the cells that can carry flow.

    A pocket that reaches one end only is fed from that end's reservoir alone and carries none: the 3D solution
    holds it at the reservoir's pressure, which lies outside the heads of the columns' means where contacts close
    most of an end column (rock fracture 12: 2.29 at the inlet, heads 2 and 1), and the Darcy solve would hold
    it at its end's head. It is left out of the mask.

    Raises:
        ProblemError: no fluid path joins the inlet column to the outlet column.
    """
    labels, _ = ndimage.label(open_map)
    both = np.setdiff1d(np.intersect1d(labels[:, 0], labels[:, -1]), [0])  # 0 labels the closed cells
    if not both.size:
        raise ProblemError("no fluid path joins the inlet column to the outlet column; nothing would flow")
    return np.isin(labels, both)


def joined_to_ends(labels: np.ndarray) -> np.ndarray:
    """The cells (bool, shaped like ``labels``) of the components of ``labels`` (ndimage's, 0 for none) that reach
    the first or the last index of axis 1, the flow's: the inlet or the outlet."""
    keep = np.union1d(labels[:, 0], labels[:, -1])
    return np.isin(labels, keep[keep > 0])


def add_reservoirs(fluid: np.ndarray, columns: int) -> np.ndarray:
    """``fluid`` (bool (H, W, D)) with ``columns`` open columns of its full depth before column 0 and after column
    W-1: bool (H, W + 2 columns, D). The pressure conditions sit at the far ends of the reservoirs, where their
    disturbance stays out of the fracture."""
    padded = np.pad(fluid, ((0, 0), (columns, columns), (0, 0)), constant_values=False)
    padded[:, :columns] = True
    padded[:, padded.shape[1] - columns :] = True
    return padded


@dataclass(frozen=True)
class ReferenceFlow:
    """What every reference solver (LBM, Stokes) reports of a fracture, in the dataset's convention.

    Attributes:
        pressure: float64 (H, W), flux-weighted gap-averaged pressure normalised to inlet 2 and outlet 1
            (dimensionless); inactive cells hold the uniform-permeability profile 2 - c/(W-1) as a placeholder.
        flux: float64 (H, W), depth-integrated flux along x per unit width, in the solver's units.
        aperture: int64 (H, W), fluid voxels per column (the voxelised aperture).
        active: bool (H, W), cells whose fluid a 4-neighbour path (the Darcy grid's) joins to inlet and outlet.
        flow_rate: Q, the flow through the outlet, in the solver's units.
        conductance: Q μ / (p_in - p_out), voxels³, p_in and p_out the flux-weighted means of the first and last
            columns' gap-averaged pressures (:func:`gap_pressure`): the flow rate per unit pressure drop and
            viscosity, which is Σ T Δh of a Darcy model with heads dropping by 1 and T in voxels³.
        flux_imbalance: how far the flow is from conserved between inlet and outlet: 0 at an exact steady state.
    """

    pressure: np.ndarray
    flux: np.ndarray
    aperture: np.ndarray
    active: np.ndarray
    flow_rate: float
    conductance: float
    flux_imbalance: float

    def fracture_fields(self, voxel_size: float) -> dict[str, Any]:
        """The :class:`~flowlearn.data.schema.Fracture` fields of this flow on voxels of ``voxel_size`` metres:
        aperture, pressure (heads 2 and 1 along x), mask and flow rate."""
        return {
            "aperture": self.aperture * voxel_size,
            "pressure": self.pressure,
            "mask": self.active,
            "voxel_size": voxel_size,
            "inlet_pressure": 2.0,
            "outlet_pressure": 1.0,
            "flow_axis": "x",
            # The conductance is in voxels³ per unit of (pressure drop / viscosity); the heads drop by 1.
            "flow_rate": self.conductance * voxel_size**3,
        }


@dataclass(frozen=True)
class GapPressure:
    """The 2D pressure of a 3D flow in the dataset's convention.

    Attributes:
        pressure: float64 (H, W), normalised: 1 + (p - p_out) / (p_in - p_out); inactive cells hold the
            uniform-permeability profile 2 - c/(W-1) as a placeholder.
        raw: float64 (H, W), the flux-weighted gap average in the solver's units, NaN where inactive.
        inlet: p_in, the flux-weighted mean of ``raw`` over the active cells of column 0 (:func:`end_pressure`).
        outlet: p_out, the same over column W-1.
    """

    pressure: np.ndarray
    raw: np.ndarray
    inlet: float
    outlet: float


def gap_pressure(
    pressure: np.ndarray, speed: np.ndarray, fluid: np.ndarray, active: np.ndarray
) -> GapPressure:
    """The dataset's 2D pressure of a 3D solution.

    Args:
        pressure: float (H, W, N), the pressure of each of the N cells of a map cell's column, any units.
        speed: float (H, W, N), their in-plane speed |(u_x, u_y)|, the averaging weight.
        fluid: bool (H, W, N), which cells are fluid.
        active: bool (H, W), the cells with flow (:func:`active_cells`).
    """
    raw = np.where(active, flux_weighted_average(pressure, speed, fluid), np.nan)
    column_flux = np.where(fluid, speed, 0.0).sum(axis=-1)
    inlet, outlet = (end_pressure(raw[:, end], column_flux[:, end], active[:, end]) for end in (0, -1))
    width = raw.shape[1]
    placeholder = np.broadcast_to(2.0 - np.arange(width) / (width - 1), raw.shape)
    normalised = np.where(active, 1.0 + (raw - outlet) / (inlet - outlet), placeholder)
    return GapPressure(pressure=normalised, raw=raw, inlet=inlet, outlet=outlet)


def end_pressure(raw: np.ndarray, flux: np.ndarray, active: np.ndarray) -> float:
    """The pressure of an end column (float (H,) gap averages ``raw``, NaN where not ``active``), the mean of its
    cells weighted by their in-plane flux ``flux`` (float (H,)): the uniform head that passes the same flow into
    the next column where each cell's conductance is about the same, and one that cells carrying no flow (a
    contact's rim, a dead end) do not move. The plain mean over the active cells where none flows.

    With the plain mean, the flow rate per unit head changed by 5 % more between meshes of 1 and 2 cells per voxel
    than the flow rate itself on a rock fracture whose inlet column is closed by a contact over two thirds of its
    width (fracture 4), and moved by 4 % on another (fracture 14), with the cells of the rim that each mesh counts.
    """
    total = float(flux[active].sum())
    if total > 0:
        return float((raw[active] * flux[active]).sum() / total)
    return float(np.mean(raw[active]))


def fracture_voxels(fracture: Fracture, voxel_size: float | None = None) -> np.ndarray:
    """The fluid voxels (bool (H, W, D)) of a dataset's fracture: between its walls where it stores them, else a gap
    of its aperture centred on a flat mid-plane.

    ``voxel_size`` (metres per voxel) overrides the fracture's own; one of the two must be known.

    Raises:
        DataValidationError: naming the fracture, for a map that is not 2D with flow along x, an unknown voxel
            size, or one so coarse that no voxel is fluid.
    """
    size = voxel_size_of(fracture, voxel_size)
    if fracture.bottom is not None and fracture.top is not None:
        fluid = voxelize(fracture.bottom / size, fracture.top / size)
    else:
        fluid = voxelize_aperture(np.where(fracture.active, fracture.aperture, 0.0) / size)
    if not fluid.any():
        # Else the first message would be that no fluid path joins the inlet to the outlet, which hides why.
        raise DataValidationError(
            f"fracture {fracture.name!r}: no voxel is fluid at {size:.6g} m per voxel: its widest aperture, "
            f"{float(fracture.aperture.max()):.6g} m, fills none; give a smaller voxel size"
        )
    return fluid


def voxel_size_of(fracture: Fracture, voxel_size: float | None = None) -> float:
    """The metres per voxel of a 3D reference on a dataset's fracture: ``voxel_size``, else the fracture's own.

    Raises:
        DataValidationError: naming the fracture, for a map that is not 2D with flow along x, or an unknown voxel
            size.
    """
    where = f"fracture {fracture.name!r}"
    if fracture.aperture.ndim != 2 or fracture.flow_axis != "x":
        raise DataValidationError(
            f"{where}: a 3D reference runs on 2D maps with flow along x, got shape {fracture.shape} and flow axis "
            f"{fracture.flow_axis}"
        )
    size = fracture.voxel_size if voxel_size is None else voxel_size
    if not (math.isfinite(size) and size > 0):
        raise DataValidationError(
            f"{where}: its voxel size is unknown (or not > 0: {size}), so its aperture cannot be voxelised; give the "
            "metres per voxel (--voxel-size)"
        )
    return size
