"""What an aperture map alone cannot say: the LBM flow under each way of placing walls around it.

A measured aperture map (such as the original work's fracture) carries no wall shapes, but the 3D flow depends on
them. This study puts walls around the map by each of :data:`~flowlearn.fractures.roughness.WALL_PLACEMENTS`, runs the
LBM, and compares the flux-weighted pressure with the file's reference pressure and with the local cubic law
(LCL, a Darcy solve with T = Ap³/12 on the same voxelised map).

Maps are block-averaged by ``--coarsen`` first (the original fracture's 256 x 260 map with a mean aperture of
47 voxels would take hours per placement on a laptop CPU); the reference pressure is averaged over the same
blocks. Nothing is fitted: the self-affine mid-surface takes the generator's mid-range settings, fixed before
any run (Hurst 0.7, rms 0.4 mean apertures).

    python -m flowlearn.cli.placements ../shared/data/example_fracture.mat --figure placements.png
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.data.schema import Fracture
from flowlearn.fractures.roughness import WALL_PLACEMENTS, place_walls
from flowlearn.reference.lbm import LBMSettings, simulate
from flowlearn.reference.voxels import voxelize

# The self-affine mid-surface's settings: the middle of the default dataset's ranges, not fitted to any map.
MID_SURFACE_HURST = 0.7
MID_SURFACE_RMS_RATIO = 0.4


@dataclass(frozen=True)
class PlacementRun:
    """One placement's outcome; pressures float64 (H, W) on the (coarsened) map, NaN where no flow.

    Attributes:
        placement: the name in WALL_PLACEMENTS.
        pressure: the LBM's flux-weighted pressure (inlet 2, outlet 1).
        conductance: the LBM's flow rate per unit pressure drop and viscosity (voxels³).
        steps: LBM steps.
    """

    placement: str
    pressure: np.ndarray
    conductance: float
    steps: int


def block_mean(field: np.ndarray, factor: int) -> np.ndarray:
    """Mean of ``field`` (H, W) over ``factor`` x ``factor`` blocks; trailing rows and columns are dropped."""
    h, w = (n // factor for n in field.shape)
    return field[: h * factor, : w * factor].reshape(h, factor, w, factor).mean(axis=(1, 3))


def lcl_solution(aperture: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, float]:
    """Pressure (inlet 2, outlet 1; NaN where inactive) and flow rate of the LCL on ``aperture`` (voxels)."""
    problem = DarcyProblem.fracture(aperture.shape, active=active, pixel_size=1.0, thickness=1.0)
    with np.errstate(divide="ignore"):
        log_t = torch.as_tensor(np.where(active, 3 * np.log(aperture) - math.log(12.0), 0.0))
    pressure = solve_pressure(log_t, problem)
    return pressure.numpy(), float(outlet_flow_rate(log_t, pressure, problem))


def mse(a: np.ndarray, b: np.ndarray) -> float:
    both = np.isfinite(a) & np.isfinite(b)
    return float(np.mean((a[both] - b[both]) ** 2))


def run_placements(
    aperture: np.ndarray, settings: LBMSettings | None = None, seed: int = 0
) -> list[PlacementRun]:
    """The LBM on ``aperture`` (float (H, W), voxels) under every wall placement."""
    runs = []
    for name in WALL_PLACEMENTS:
        bottom, top = place_walls(
            aperture, name, seed=seed, rms=MID_SURFACE_RMS_RATIO * aperture.mean(), hurst=MID_SURFACE_HURST
        )
        result = simulate(voxelize(bottom, top), settings, progress=False)
        pressure = np.where(result.active, result.pressure, np.nan)
        runs.append(PlacementRun(name, pressure, result.conductance, result.steps))
    return runs


def placement_study(
    fracture: Fracture, voxels_per_unit: float = 256.0, coarsen: int = 4, threads: int | None = None
) -> tuple[dict, dict[str, np.ndarray]]:
    """The study of the module docstring on ``fracture`` (with a reference pressure): its report (a JSON object:
    the map, the MSE of each placement's pressure and of the LCL's against the reference, each placement's flow rate
    over the LCL's, its LBM steps) and the pressure departures from the straight line, float64 (H, W) on the
    coarsened map, by label (the reference, the LCL, each placement).

    Args:
        voxels_per_unit: voxels per unit of the stored aperture (the original file stores apertures over a
            256-voxel depth).
        coarsen: block size of the averaging before the LBM.
        threads: OpenMP threads of the LBM (None: its default).
    """
    aperture = block_mean(fracture.aperture * voxels_per_unit, coarsen) / coarsen
    reference = block_mean(fracture.pressure, coarsen)
    runs = run_placements(aperture, LBMSettings(threads=threads))
    active = np.isfinite(runs[0].pressure)
    voxelised = voxelize(*place_walls(aperture, "symmetric")).sum(axis=2).astype(float)
    lcl_pressure, lcl_conductance = lcl_solution(voxelised, active)
    line = np.broadcast_to(2.0 - np.arange(aperture.shape[1]) / (aperture.shape[1] - 1), aperture.shape)
    report = {
        "fracture": fracture.name,
        "map": list(aperture.shape),
        "mean_aperture_voxels": float(aperture.mean()),
        "relative_std": float(aperture.std() / aperture.mean()),
        "mse_to_reference": {"straight line": mse(line, reference), "LCL": mse(lcl_pressure, reference)},
        "mse_to_lcl": {},
        "flow_rate_over_lcl": {},
        "steps": {},
    }
    for run in runs:
        report["mse_to_reference"][run.placement] = mse(run.pressure, reference)
        report["mse_to_lcl"][run.placement] = mse(run.pressure, lcl_pressure)
        report["flow_rate_over_lcl"][run.placement] = run.conductance / lcl_conductance
        report["steps"][run.placement] = run.steps
    maps = {"reference (original LBM)": reference, "LCL": lcl_pressure}
    maps.update({f"our LBM, {run.placement} walls": run.pressure for run in runs})
    return report, {label: pressure - line for label, pressure in maps.items()}
