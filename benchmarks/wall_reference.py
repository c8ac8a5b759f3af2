"""How close the generator's Stokes reference is to the smooth walls' flow, and what it costs.

    python benchmarks/wall_reference.py --recipe published --shape 32 32 --mean-aperture 4 --indices 5 6 7 8 9 10 11 12
    python benchmarks/wall_reference.py --recipe rock --shape 64 64 --mean-aperture 6 --indices 5 6 7 ... --processes 2

Each fracture (seed 0) is solved on the wall-fitted mesh (:func:`flowlearn.reference.stokes.solve_walls`) at
three resolutions r₁ < r₂ < r₃ cells per voxel (``--cells-per-voxel``, default 1 2 3), each solve starting from the
last one's fields: r₁ and r₂ as the reference solves them, r₃ at relaxation 0.7 and tolerance 1e-8 (:data:`CHECK`). The smooth walls' flow is the extrapolation of the two finest (r₂
and r₃, second order); against it the table gives each solve's flow rate and the reference's (r₁ and r₂
extrapolated, what ``flowlearn generate --reference stokes --stokes-cells-per-voxel r₁ r₂`` stores), then the
seconds of the reference (the solves at r₁ and r₂) and of the check at r₃ per fracture. ``--json`` writes every
number.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from flowlearn.fractures.recipes import RECIPES
from flowlearn.reference.stokes import StokesSettings, extrapolate, solve_walls
from flowlearn.reference.wall_mesh import Window
from flowlearn.reference.wall_reference import WallReferenceSettings, steady_solve

# The finest solve's settings: at 3 cells per voxel relaxation 0.9 diverged on the rock recipe's walls, and at 0.7
# the residual must fall further before the flow rate is steady.
CHECK = {"relaxation": 0.7, "tolerance": 1e-8}


def solve_fracture(
    recipe: str, shape: tuple[int, int], mean_aperture: float, index: int, resolutions: tuple[int, ...]
) -> dict:
    """Fracture ``index``'s conductances (voxels³) at ``resolutions`` (cells per voxel), the seconds and iterations
    of each: the first two as the reference solves them, the third as a check (:data:`CHECK`)."""
    walls = RECIPES[recipe]().walls(shape, mean_aperture, 0, index)
    window = None if walls.larger is None else Window(walls.larger, walls.origin)
    settings = WallReferenceSettings(cells_per_voxel=resolutions[:2])
    row: dict = {"index": index, "kind": RECIPES[recipe]().kind(index), "conductance": [], "seconds": []}
    row["iterations"], row["contact"] = [], float((walls.aperture == 0).mean())
    with tempfile.TemporaryDirectory() as folder:
        start = None
        for r in resolutions:
            case = Path(folder, f"r{r}")
            clock = time.perf_counter()
            if r in resolutions[:2]:
                result, _ = steady_solve(walls.bottom, walls.top, settings, r, case, False, window, start)
            else:
                check = StokesSettings(cells_per_voxel=r, reservoir=settings.reservoir, **CHECK)
                result = solve_walls(walls.bottom, walls.top, check, case, False, window, start=start)
            row["seconds"].append(time.perf_counter() - clock)
            row["conductance"].append(result.conductance)
            row["iterations"].append(result.iterations)
            start = case
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="rock")
    parser.add_argument("--shape", type=int, nargs=2, default=[64, 64])
    parser.add_argument("--mean-aperture", type=float, default=6.0)
    parser.add_argument("--indices", type=int, nargs="+", required=True)
    parser.add_argument("--cells-per-voxel", type=int, nargs=3, default=[1, 2, 3], metavar=("R1", "R2", "R3"))
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    r1, r2, r3 = args.cells_per_voxel
    jobs = [(args.recipe, tuple(args.shape), args.mean_aperture, i, (r1, r2, r3)) for i in args.indices]
    rows = []
    with ProcessPoolExecutor(args.processes) as pool:
        for row in tqdm(pool.map(solve_fracture, *zip(*jobs)), total=len(jobs), desc="fractures"):
            rows.append(row)
            if args.json:  # as each finishes: a long study that is stopped keeps what it did
                args.json.with_suffix(".partial.json").write_text(json.dumps(rows, indent=1))
    print(
        f"{args.recipe} recipe, {args.shape[0]}x{args.shape[1]} maps at {args.mean_aperture:g} voxels per mean "
        f"aperture, {args.processes} process(es); flow rates over the smooth walls' ({r2} and {r3} cells per voxel "
        "extrapolated)\n"
    )
    print(
        f"| fracture | kind | contact | {r1} cells | {r2} cells | {r3} cells | reference ({r1}-{r2} extrapolated) | "
        "s, reference | s, check |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    errors = []
    for row in rows:
        q1, q2, q3 = row["conductance"]
        smooth = extrapolate(q2, q3, r3 / r2)
        reference = extrapolate(q1, q2, r2 / r1)
        row["smooth"], row["reference"] = smooth, reference
        errors.append(reference / smooth - 1)
        cells = " | ".join(f"{q / smooth - 1:+.2%}" for q in (q1, q2, q3))
        print(
            f"| {row['index']} | {row['kind']} | {row['contact']:.2f} | {cells} | {reference / smooth - 1:+.2%} | "
            f"{sum(row['seconds'][:2]):.0f} | {row['seconds'][2]:.0f} |"
        )
    errors = np.abs(errors)
    print(
        f"\nreference within 2 % on {int((errors <= 0.02).sum())} of {len(errors)}; median |error| "
        f"{np.median(errors):.2%}, max {errors.max():.2%}"
    )
    if args.json:
        setting = {"recipe": args.recipe, "shape": args.shape, "mean_aperture": args.mean_aperture, "seed": 0}
        setting["cells_per_voxel"] = args.cells_per_voxel
        args.json.write_text(json.dumps({"setting": setting, "fractures": rows}, indent=1))


if __name__ == "__main__":
    main()
