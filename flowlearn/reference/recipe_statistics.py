"""How far a recipe's fractures are from rock joints, geometry only: the statistics of
:data:`~flowlearn.fractures.statistics.JOINT_RANGES` over the fractures a dataset of the recipe would hold, before
any LBM run.

Each rough fracture (the exact cases, which are no rock, are left out) is voxelised as ``flowlearn generate``
voxelises it, and measured on the map that a generated file
stores (fluid voxels per column), with the walls the generator drew::

    python -m flowlearn.reference.recipe_statistics --recipe rock --count 192 --shape 64 64 --mean-aperture 6

prints :func:`~flowlearn.fractures.statistics.joint_table`'s table (about 0.3 s a fracture on one core).
"""

from __future__ import annotations

import argparse

import numpy as np

from flowlearn.errors import SettingError
from flowlearn.fractures.recipes import RECIPES
from flowlearn.fractures.statistics import joint_statistics, joint_table
from flowlearn.reference.generate import DatasetConfig
from flowlearn.reference.voxels import voxelize


def recipe_statistics(config: DatasetConfig) -> list[dict[str, float]]:
    """:func:`~flowlearn.fractures.statistics.joint_statistics` of each rough fracture of ``config`` (lengths in
    voxels; the exact cases, plates and flat mid-surfaces, are left out), on its voxelised map as a generated file
    stores it (fluid voxels per column)."""
    rows = []
    for index in range(config.count):
        if config.recipe.kind(index) != "rough":
            continue
        walls = config.walls(index)
        aperture = voxelize(walls.bottom, walls.top).sum(axis=2).astype(np.float64)
        rows.append(joint_statistics(walls.bottom, walls.top, aperture, 1.0))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flowlearn.reference.recipe_statistics",
        description="The statistics of rock joints (σ/⟨b⟩, contact area, b_h/⟨b⟩ of the LCL, smoothed mid-surface "
        "slope, wall slope at lag ⟨b⟩/2) over the voxelised maps of a recipe's fractures, beside the ranges rock "
        "joints show; geometry only, no LBM.",
    )
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="rock", help="what the fractures draw")
    parser.add_argument("--count", type=int, default=192, help="fractures, from index 0")
    parser.add_argument("--shape", type=int, nargs=2, default=[64, 64], metavar=("H", "W"), help="map size")
    parser.add_argument("--mean-aperture", type=float, default=6.0, help="voxels across the mean aperture")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first fracture")
    args = parser.parse_args(argv)
    try:
        config = DatasetConfig(
            count=args.count,
            shape=tuple(args.shape),
            mean_aperture=args.mean_aperture,
            recipe=RECIPES[args.recipe](),
            seed=args.seed,
        )
    except SettingError as err:
        parser.error(str(err))
    rows = recipe_statistics(config)
    print(
        f"{len(rows)} rough fractures of {config.count} of the {args.recipe} recipe (the {config.count - len(rows)} "
        f"exact cases left out), {args.shape[0]}x{args.shape[1]} maps at {args.mean_aperture:g} voxels per mean "
        f"aperture, seed {args.seed}; voxelised maps:"
    )
    print("\n".join(joint_table(rows)))
    crossed = sum(row["hydraulic_ratio"] > 0 for row in rows)
    print(f"{crossed} of {len(rows)} maps have an open path from the inlet to the outlet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
