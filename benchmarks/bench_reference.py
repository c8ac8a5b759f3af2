"""Converged references per hour: the generator's Stokes reference beside the halfway LBM, on the same fractures.

    python benchmarks/wall_reference.py --recipe rock --indices 5 6 --json study.json      # the smooth walls' flow
    python benchmarks/bench_reference.py study.json --lbm-factors 1 2

For each fracture of the study file (``benchmarks/wall_reference.py --json``: its recipe, map and seed-0 index, and
the smooth walls' flow, the wall-fitted solves at the two finest resolutions extrapolated), it times

- ``stokes``: what ``flowlearn generate --reference stokes`` runs, the wall-fitted solves at 1 and 2 cells per voxel
  extrapolated, in one process of one thread (so two run side by side on 2 cores);
- ``lbm N``: the halfway-bounce-back LBM (the generator's default settings) on the walls refined to each of
  ``--lbm-factors`` times the map's voxels (exactly, through the larger walls for a window), measured on the map's
  length, with all the cores (``--threads``, default the cores this process may use);

and prints each one's flow-rate error against the smooth walls, its seconds, and fractures per hour
on this machine: 2 × 3600 / seconds for the Stokes reference (two processes), 3600 / seconds for the LBM (one
process on every core).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from flowlearn.fractures.recipes import RECIPES
from flowlearn.fractures.roughness import refine
from flowlearn.reference.convergence import coarse_conductance
from flowlearn.reference.generate import drawn_fracture
from flowlearn.reference.lbm import LBMSettings, simulate
from flowlearn.reference.voxels import voxelize
from flowlearn.reference.wall_mesh import Window
from flowlearn.reference.wall_reference import wall_reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path, help="JSON of benchmarks/wall_reference.py --json")
    parser.add_argument("--lbm-factors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    study = json.loads(args.study.read_text())
    setting = study["setting"]
    recipe = RECIPES[setting["recipe"]]()
    shape, aperture = tuple(setting["shape"]), setting["mean_aperture"]
    lbm = LBMSettings(threads=args.threads)
    rows = {"stokes": []} | {f"lbm {f * aperture:g}": [] for f in args.lbm_factors}
    for row in study["fractures"]:
        walls = recipe.walls(shape, aperture, 0, row["index"])
        clock = time.perf_counter()
        window = None if walls.larger is None else Window(walls.larger, walls.origin)
        stokes = wall_reference(drawn_fracture(walls, 1.0, "f"), window=window)
        rows["stokes"].append((stokes.flow_rate / row["smooth"] - 1, time.perf_counter() - clock))
        for factor in args.lbm_factors:
            clock = time.perf_counter()
            fine = refine(walls, factor)
            result = simulate(voxelize(fine.bottom, fine.top), lbm, progress=False)
            error = coarse_conductance(result, factor) / row["smooth"] - 1
            rows[f"lbm {factor * aperture:g}"].append((error, time.perf_counter() - clock))
    print(
        f"{setting['recipe']} recipe, {shape[0]}x{shape[1]} maps at {aperture:g} voxels per mean aperture, "
        f"fractures {[row['index'] for row in study['fractures']]}; flow rates against the smooth walls'\n"
    )
    print("| reference | flow-rate error | seconds per fracture | fractures per hour, 2 cores |")
    print("|---|---|---|---|")
    for name, values in rows.items():
        errors, seconds = np.array(values).T
        per_hour = (2 if name == "stokes" else 1) * 3600 / seconds.mean()
        shown = ", ".join(f"{e:+.1%}" for e in errors)
        label = name if name == "stokes" else f"{name} voxels per mean aperture"
        print(f"| {label} | {shown} | {seconds.mean():.0f} | {per_hour:.0f} |")


if __name__ == "__main__":
    main()
