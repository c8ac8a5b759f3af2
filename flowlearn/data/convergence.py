"""Grid convergence of the LBM reference: one fracture at 1x, 2x, 3x ... the resolution, compared.

The walls are refined exactly (:func:`~flowlearn.data.roughness.refine`), so only the LBM's resolution changes.
Compared per factor r, against the finest run:

* the flow rate, as the conductance Q mu / (p_in - p_out) in units of the coarse voxel (voxels³ / r³), over the
  coarse grid's length (:func:`coarse_conductance`);
* the 2D pressure's departure from the straight line between inlet and outlet (each run's own line: the runs'
  first and last columns sit at slightly different places), averaged over each r x r block of fine cells (those
  with flow) back onto the coarse grid.

Run ``python -m flowlearn.data.convergence --help`` for the study of a dataset's fracture.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import numpy as np

from flowlearn.data.lbm import LBMResult, LBMSettings, simulate
from flowlearn.data.roughness import RoughFracture, refine
from flowlearn.data.voxels import voxelize


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
    """

    factor: int
    conductance: float
    departure: np.ndarray
    steps: int
    cells: int


def coarse_conductance(result: LBMResult, factor: int) -> float:
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


def coarse_departure(result: LBMResult, factor: int) -> np.ndarray:
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
    fracture: RoughFracture, factors: tuple[int, ...] = (1, 2, 3), settings: LBMSettings | None = None
) -> list[Resolution]:
    """Run the LBM on ``fracture`` refined by each of ``factors`` (ascending)."""
    runs = []
    for factor in factors:
        fine = refine(fracture, factor)
        fluid = voxelize(fine.bottom, fine.top)
        result = simulate(fluid, settings, progress=False)
        runs.append(
            Resolution(
                factor=factor,
                conductance=coarse_conductance(result, factor),
                departure=coarse_departure(result, factor),
                steps=result.steps,
                cells=fluid.size,
            )
        )
    return runs


def refinement_change(walls: RoughFracture, conductance: float, settings: LBMSettings | None = None) -> float:
    """The relative change of the flow rate when the LBM that gave ``conductance`` (voxels³) on ``walls`` runs on a
    grid 2× finer: Q(2×)/Q(1×) - 1 (:func:`coarse_conductance`), the fracture's convergence estimate. Costs about
    16× the 1× run (8× the cells, 2× the steps)."""
    fine = refine(walls, 2)
    result = simulate(voxelize(fine.bottom, fine.top), settings, progress=False)
    return float(coarse_conductance(result, 2) / conductance - 1)


def differences(runs: list[Resolution]) -> list[dict[str, float]]:
    """Per run, its relative flow-rate difference and the rms difference of its pressure departure (in units of
    the inlet-outlet drop) from the finest run."""
    finest = runs[-1]
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
            }
        )
    return rows


def study_walls(
    index: int, shape: tuple[int, int], mean_aperture: float, as_generated: bool
) -> RoughFracture:
    """The walls of the study: fracture ``index`` of the winding recipe with the example dataset's seed (0), either
    exactly as the dataset drew them (``as_generated``: the recipe at its defaults; on 64x64 maps at 8 voxels,
    ``data/fractures.h5``'s fracture) or with the shortest wavelength kept below a 24-pixel map's side.

    Raises:
        SettingError: the recipe's wavelengths do not fit maps of ``shape``.
    """
    from flowlearn.data.recipes import Winding

    recipe = Winding() if as_generated else Winding(wavelength_ratio=(1.0, 2.9))
    recipe.check(shape, mean_aperture)
    return recipe.walls(shape, mean_aperture, 0, index)


def main(argv: list[str] | None = None) -> int:
    from flowlearn.errors import SettingError

    parser = argparse.ArgumentParser(
        prog="python -m flowlearn.data.convergence",
        description="Grid convergence of the LBM on fracture INDEX of the winding recipe (the example dataset's), on a smaller map.",
    )
    parser.add_argument("--index", type=int, default=0, help="which fracture's draws to use")
    parser.add_argument("--shape", type=int, nargs=2, default=[24, 24], help="map size at 1x (H W)")
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 3], help="refinements, ascending")
    parser.add_argument("--mean-aperture", type=float, default=8.0, help="voxels across the mean gap at 1x")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads")
    parser.add_argument(
        "--as-generated",
        action="store_true",
        help="the walls exactly as the example dataset drew them (with --shape 64 64: data/fractures.h5's fracture "
        "INDEX); by default the shortest wavelength is kept below a 24-pixel map's side",
    )
    args = parser.parse_args(argv)
    try:
        fracture = study_walls(args.index, tuple(args.shape), args.mean_aperture, args.as_generated)
    except SettingError as error:
        parser.error(str(error))
    runs = grid_convergence(fracture, tuple(args.factors), LBMSettings(threads=args.threads))
    print(json.dumps({"roughness": fracture.params.to_dict(), "runs": differences(runs)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
