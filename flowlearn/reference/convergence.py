"""Grid convergence of the LBM reference: one fracture at 1x, 2x, 3x ... the resolution, compared.

The walls are refined exactly (:func:`~flowlearn.fractures.roughness.refine`), so only the LBM's resolution changes.
Compared per factor r, against the finest run:

* the flow rate, as the conductance Q mu / (p_in - p_out) in units of the coarse voxel (voxels³ / r³), over the
  coarse grid's length (:func:`coarse_conductance`);
* the 2D pressure's departure from the straight line between inlet and outlet (each run's own line: the runs'
  first and last columns sit at slightly different places), averaged over each r x r block of fine cells (those
  with flow) back onto the coarse grid.

With ``stokes`` settings, each factor also runs the independent Stokes solve (:mod:`flowlearn.reference.stokes`), either
on the same voxels or on a mesh fitted to the smooth walls with as many cells per voxel as the factor
(``stokes_mesh``), and the finest of those, extrapolated (:func:`smooth_wall_estimate`), estimate the flow rate of the
smooth walls, which the LBM at each resolution is compared with: the voxel solves at the order the three finest show,
the wall-fitted ones at their second order.

Run ``python -m flowlearn.reference.convergence --help`` for the study of a dataset's fracture.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace

import numpy as np

from flowlearn.fractures.roughness import RoughFracture, refine, refine_wall
from flowlearn.reference.lbm import LBMSettings, simulate
from flowlearn.reference.stokes import WALL_MESH_ORDER, StokesSettings, extrapolate, solve_walls
from flowlearn.reference.stokes import solve as solve_stokes
from flowlearn.reference.voxels import ReferenceFlow, voxelize
from flowlearn.reference.wall_mesh import Window


@dataclass(frozen=True)
class Resolution:
    """One run of the study.

    Attributes:
        factor: refinement r.
        conductance: in coarse voxels³.
        departure: float64 (H, W), the pressure minus the straight line, on the coarse grid, NaN where the coarse
            cell has no flow.
        steps: LBM steps run.
        cells: size of the LBM box.
        stokes_conductance: the Stokes solve's conductance, coarse voxels³ (NaN: not run).
        stokes_mesh: what it meshed: "voxels", the same voxels; "walls", the smooth walls at ``factor`` cells per
            coarse voxel.
    """

    factor: int
    conductance: float
    departure: np.ndarray
    steps: int
    cells: int
    stokes_conductance: float = math.nan
    stokes_mesh: str = "voxels"


def coarse_conductance(result: ReferenceFlow, factor: int) -> float:
    """The conductance of a run on the grid ``factor`` times finer, as the coarse grid would measure it: in coarse
    voxels³, and between the coarse grid's end columns.

    The conductance is taken between the centres of the first and last columns, W - 1 voxels apart on the coarse
    grid but (rW - 1)/r coarse voxels apart on the fine one: half a coarse voxel longer at r = 2. A conductance
    falls as 1/length, so the fine one is brought back to the coarse length; without that, refining would seem to
    lower the flow rate by 0.5/(W - 0.5) even where the flow does not change.
    """
    fine_columns = result.pressure.shape[1]
    coarse_columns = fine_columns // factor
    fine_length = (fine_columns - 1) / factor  # in coarse voxels
    return result.conductance / factor**3 * fine_length / (coarse_columns - 1)


def coarse_departure(result: ReferenceFlow, factor: int) -> np.ndarray:
    """The pressure of ``result`` minus its straight line 2 - c/(W-1), averaged over the active cells of each
    ``factor`` x ``factor`` block."""
    h, w = (n // factor for n in result.pressure.shape)
    blocks = (h, factor, w, factor)
    active = result.active.reshape(blocks)
    departure = result.pressure - (2.0 - np.arange(w * factor) / (w * factor - 1))
    total = np.where(result.active, departure, 0.0).reshape(blocks).sum(axis=(1, 3))
    count = active.sum(axis=(1, 3))
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, total / count, np.nan)


def grid_convergence(
    fracture: RoughFracture,
    factors: tuple[int, ...] = (1, 2, 3),
    settings: LBMSettings | None = None,
    stokes: StokesSettings | None = None,
    stokes_mesh: str = "voxels",
) -> list[Resolution]:
    """Run the LBM (and, with ``stokes`` settings, the Stokes solve on ``stokes_mesh``: "voxels" or "walls") on
    ``fracture`` refined by each of ``factors`` (ascending)."""
    runs = []
    for factor in factors:
        fine = refine(fracture, factor)
        fluid = voxelize(fine.bottom, fine.top)
        result = simulate(fluid, settings, progress=False)
        independent = math.nan
        if stokes is not None and stokes_mesh == "walls":
            # The same smooth walls at every factor, meshed finer: measured on the coarse voxels directly.
            walls = replace(stokes, cells_per_voxel=factor)
            window = None if fracture.larger is None else Window(fracture.larger, fracture.origin)
            independent = solve_walls(
                fracture.bottom, fracture.top, walls, progress=False, window=window
            ).conductance
        elif stokes is not None:
            independent = coarse_conductance(solve_stokes(fluid, stokes, progress=False), factor)
        runs.append(
            Resolution(
                factor=factor,
                conductance=coarse_conductance(result, factor),
                departure=coarse_departure(result, factor),
                steps=result.steps,
                cells=fluid.size,
                stokes_conductance=independent,
                stokes_mesh=stokes_mesh,
            )
        )
    return runs


def observed_order(values: tuple[float, float, float], factors: tuple[int, int, int]) -> float:
    """The order p of convergence that three values at refinements r1 < r2 < r3 show, assuming an error C h^p
    (h = 1/r): the root of (v1 - v2)/(v2 - v3) = (r1^-p - r2^-p)/(r2^-p - r3^-p) in [0.5, 3]; NaN where the values
    do not converge monotonically or no such p exists. The bounds bracket the orders a solve can have (first order
    on a staircase's corners, second on smooth walls); outside them the three values are ruled by the voxelisation's
    scatter, not by a power law, and extrapolating them would amplify it."""
    v1, v2, v3 = values
    if not (v1 - v2) * (v2 - v3) > 0:
        return math.nan
    target = (v1 - v2) / (v2 - v3)

    def ratio(p: float) -> float:
        r1, r2, r3 = (factor ** (-p) for factor in factors)
        return (r1 - r2) / (r2 - r3)

    low, high = 0.5, 3.0
    if not min(ratio(low), ratio(high)) <= target <= max(ratio(low), ratio(high)):
        return math.nan
    for _ in range(60):  # ratio(p) rises monotonically with p
        middle = 0.5 * (low + high)
        low, high = (middle, high) if ratio(middle) < target else (low, middle)
    return 0.5 * (low + high)


def smooth_wall_estimate(runs: list[Resolution]) -> tuple[float, float]:
    """The flow rate (conductance, coarse voxels³) of the smooth walls that the finest Stokes solves extrapolate to,
    and the order of convergence used.

    On the wall-fitted mesh, the two finest at its formal second order (bilinear walls between exact corners, a
    second-order scheme: ``test_stokes.py`` shows order 2 on a wavy channel). On voxels, the three finest at the
    order they show (:func:`observed_order`), as the staircase has no formal order; NaN where they do not converge
    monotonically within [0.5, 3]. Both NaN where too few solves ran."""
    solved = [run for run in runs if math.isfinite(run.stokes_conductance)]
    walls = bool(solved) and solved[-1].stokes_mesh == "walls"
    solved = solved[-2:] if walls else solved[-3:]
    if len(solved) < (2 if walls else 3):
        return math.nan, math.nan
    factors = tuple(run.factor for run in solved)
    values = tuple(run.stokes_conductance for run in solved)
    order = WALL_MESH_ORDER if walls else observed_order(values, factors)
    if not math.isfinite(order):
        return math.nan, math.nan
    return extrapolate(values[-2], values[-1], factors[-1] / factors[-2], order), order


def refinement_change(
    bottom: np.ndarray, top: np.ndarray, conductance: float, settings: LBMSettings | None = None
) -> float:
    """The relative change of the flow rate when the LBM that gave ``conductance`` (voxels³) between the walls
    ``bottom`` and ``top`` (float (H, W), heights in voxels) runs on a grid 2× finer, the walls Fourier-interpolated
    (:func:`~flowlearn.fractures.roughness.refine_wall`): Q(2×)/Q(1×) - 1 (:func:`coarse_conductance`), the fracture's
    convergence estimate. Costs about 16× the 1× run (8× the cells, 2× the steps)."""
    fine = voxelize(refine_wall(bottom, 2), refine_wall(top, 2))
    result = simulate(fine, settings, progress=False)
    return float(coarse_conductance(result, 2) / conductance - 1)


def differences(runs: list[Resolution]) -> list[dict[str, float]]:
    """Per run, its relative flow-rate difference and the rms difference of its pressure departure (in units of
    the inlet-outlet drop) from the finest run; with Stokes solves, its flow rate against the Stokes solve's on the
    same voxels and against their smooth-wall estimate (:func:`smooth_wall_estimate`) as well (NaN without)."""
    finest = runs[-1]
    smooth, _ = smooth_wall_estimate(runs)
    rows = []
    for run in runs:
        both = np.isfinite(run.departure) & np.isfinite(finest.departure)
        rows.append(
            {
                "factor": run.factor,
                "conductance": run.conductance,
                "flow_rate_difference": run.conductance / finest.conductance - 1,
                "pressure_rms_difference": float(
                    np.sqrt(np.mean((run.departure - finest.departure)[both] ** 2))
                ),
                "departure_rms": float(np.sqrt(np.mean(run.departure[np.isfinite(run.departure)] ** 2))),
                "steps": run.steps,
                "cells": run.cells,
                "stokes_conductance": run.stokes_conductance,
                # The two solvers on the same voxels, then the LBM against the smooth walls.
                "flow_rate_vs_stokes": run.conductance / run.stokes_conductance - 1,
                "flow_rate_vs_smooth_walls": run.conductance / smooth - 1,
            }
        )
    return rows


def study_walls(
    index: int, shape: tuple[int, int], mean_aperture: float, as_generated: bool, recipe: str = "winding"
) -> RoughFracture:
    """The walls of the study: fracture ``index`` (seed 0) of ``recipe``.

    ``winding`` (the example dataset's) either exactly as the dataset drew them (``as_generated``: the recipe at its
    defaults; on 64x64 maps at 8 voxels, ``data/fractures.h5``'s fracture) or with the shortest wavelength kept
    below a 24-pixel map's side; ``published`` at its defaults (walls in contact, published ranges; its mismatch
    length must fit twice in the map: 32x32 maps at 4 voxels).

    Raises:
        SettingError: the recipe's wavelengths do not fit maps of ``shape``.
    """
    from flowlearn.fractures.recipes import Published, Winding

    if recipe == "published":
        chosen = Published()
    else:
        chosen = Winding() if as_generated else Winding(wavelength_ratio=(1.0, 2.9))
    chosen.check(shape, mean_aperture)
    return chosen.walls(shape, mean_aperture, 0, index)


def main(argv: list[str] | None = None) -> int:
    from flowlearn.errors import SettingError

    parser = argparse.ArgumentParser(
        prog="python -m flowlearn.reference.convergence",
        description="Grid convergence of the LBM on fracture INDEX of a recipe (by default the winding recipe of the "
        "example dataset, on a smaller map); with --stokes, against the independent Stokes solve (of the same voxels, "
        "or of the smooth walls) extrapolated to smooth walls. Prints JSON.",
    )
    parser.add_argument("--index", type=int, default=0, help="which fracture's draws to use")
    parser.add_argument("--recipe", choices=("winding", "published"), default="winding", help="what it draws")
    parser.add_argument("--shape", type=int, nargs=2, default=[24, 24], help="map size at 1x (H W)")
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 3], help="refinements, ascending")
    parser.add_argument("--mean-aperture", type=float, default=8.0, help="voxels across the mean gap at 1x")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads")
    parser.add_argument(
        "--as-generated",
        action="store_true",
        help="the winding walls exactly as the example dataset drew them (with --shape 64 64: data/fractures.h5's "
        "fracture INDEX); by default the shortest wavelength is kept below a 24-pixel map's side",
    )
    parser.add_argument(
        "--stokes",
        action="store_true",
        help="also solve Stokes flow (OpenFOAM) at each resolution; three factors or more (two on --stokes-mesh "
        "walls) give the smooth-wall estimate",
    )
    parser.add_argument(
        "--stokes-mesh",
        choices=("voxels", "walls"),
        default="voxels",
        help="what the Stokes solves mesh: each resolution's voxels, or the smooth walls with as many cells per "
        "voxel as the factor",
    )
    args = parser.parse_args(argv)
    if args.stokes_mesh != "voxels" and not args.stokes:
        parser.error("--stokes-mesh applies with --stokes only")
    if args.as_generated and args.recipe != "winding":
        parser.error("--as-generated applies to --recipe winding only")
    if sorted(set(args.factors)) != args.factors or args.factors[0] < 1:
        parser.error(f"--factors must be distinct integers >= 1 in ascending order, got {args.factors}")
    try:
        fracture = study_walls(
            args.index, tuple(args.shape), args.mean_aperture, args.as_generated, args.recipe
        )
    except SettingError as error:
        parser.error(str(error))
    stokes = None
    if args.stokes:
        from flowlearn.errors import UnavailableError
        from flowlearn.reference.stokes import StokesSettings, check_openfoam

        try:
            check_openfoam()
        except UnavailableError as error:
            parser.error(str(error))
        stokes = StokesSettings()
    runs = grid_convergence(
        fracture, tuple(args.factors), LBMSettings(threads=args.threads), stokes, args.stokes_mesh
    )
    smooth, order = smooth_wall_estimate(runs)
    report = {
        "roughness": fracture.params.to_dict(),
        "runs": differences(runs),
        "smooth_wall_conductance": smooth,
        "stokes_order": order,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
