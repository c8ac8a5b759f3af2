"""Fractures per hour of `flowlearn generate`, side by side in one run; prints a markdown table.

    python benchmarks/bench_generate.py                 # 2 fractures of the default recipe per configuration
    python benchmarks/bench_generate.py --count 4

Each fracture is generated twice in a row by the same process: first with no lbmpy time step built (the step is
derived symbolically and compiled to C for the fracture's box), then again with the step reused, as it is for every
later fracture of the same box depth in a long generation (depths are rounded to 8 voxels, so a dataset needs a
handful of steps per process). The difference of the two is the build; the second is the simulation itself.

Configurations, on the default dataset's first rough fractures (not its exact cases, plates in thin boxes):
1. one process using every core (``--processes 1``): COUNT fractures one after the other;
2. one process per core, one thread each (``--processes N``): the processes run at once, COUNT fractures each.

Fractures per hour are given for a long generation (the steps reused) and for one that built the step for every
fracture (how generation ran before steps were kept).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from fields import rough_indices

from flowlearn.reference import lbm
from flowlearn.reference.generate import DatasetConfig, generate_fracture


def _cold_and_warm(config: DatasetConfig, indices: list[int], threads: int) -> list[tuple[float, float]]:
    """(seconds with the step built, seconds with it reused) for each fracture of ``indices``, in this process."""
    settings = replace(config.lbm, threads=threads)
    times = []
    for i in indices:
        walls = config.walls(i)
        seconds = []
        for cold in (True, False):
            if cold:
                lbm._STEPS.clear()
            start = time.perf_counter()
            generate_fracture(walls, settings, config.voxel_size, f"f{i}", progress=False)
            seconds.append(time.perf_counter() - start)
        times.append((seconds[0], seconds[1]))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2, help="fractures per process")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    config = DatasetConfig()
    indices = rough_indices(config, args.count * cores)
    runs = {}
    # 1 process x every core.
    start = time.perf_counter()
    times = _cold_and_warm(config, indices[: args.count], cores)
    runs[f"1 process x {cores} threads"] = (1, times, time.perf_counter() - start)
    # N processes x 1 thread, at once, on distinct fractures.
    start = time.perf_counter()
    # Fresh interpreters, as `flowlearn generate --processes` would use, not forks of one that ran OpenMP threads.
    with ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("spawn")) as pool:
        shares = [indices[p * args.count : (p + 1) * args.count] for p in range(cores)]
        results = list(pool.map(_cold_and_warm, [config] * cores, shares, [1] * cores))
    runs[f"{cores} processes x 1 thread"] = (
        cores,
        [t for r in results for t in r],
        time.perf_counter() - start,
    )

    rows = []
    for name, (processes, times, _) in runs.items():
        cold = sum(c for c, _ in times) / len(times)
        warm = sum(w for _, w in times) / len(times)
        rows.append((name, cold - warm, warm, processes * 3600 / warm, processes * 3600 / cold))
    best = max(row[3] for row in rows)
    print(
        f"{args.count} fracture(s) per process of {config.shape[0]}x{config.shape[1]}, mean aperture "
        f"{config.mean_aperture} voxels; {cores} cores; seconds are means per fracture"
    )
    print(
        "| configuration | build (s) | simulate (s) | fractures/hour, step reused | fractures/hour, step rebuilt "
        "per fracture | reused vs best |"
    )
    print("|---|---|---|---|---|---|")
    for name, build, warm, reused, rebuilt in rows:
        print(f"| {name} | {build:.1f} | {warm:.1f} | {reused:.0f} | {rebuilt:.0f} | {reused / best:.2f} |")
    print("wall time: " + ", ".join(f"{name} {seconds:.0f} s" for name, (_, _, seconds) in runs.items()))


if __name__ == "__main__":
    main()
