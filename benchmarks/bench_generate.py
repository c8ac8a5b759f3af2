"""Fractures per hour of `flowlearn generate`, side by side in one run; prints a markdown table.

    python benchmarks/bench_generate.py                 # 4 fractures of the default recipe per configuration
    python benchmarks/bench_generate.py --count 8

Configurations, each on the same fractures (the default dataset's first COUNT):
1. one process using every core, the lbmpy time step built once and reused (the default with --processes 1);
2. one process per core, one thread each (--processes N);
3. one process using every core, the time step rebuilt for every fracture (how generation ran before the step
   was reused): what reusing it saves.
The first fracture of each configuration pays for building the step (symbolic derivation and C compilation).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from flowlearn.data import lbm
from flowlearn.data.generate import DatasetConfig, generate_dataset, generate_fracture


def _rate(config: DatasetConfig, processes: int, rebuild: bool) -> float:
    """Fractures per hour of one generation from scratch."""
    lbm._STEPS.clear()
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        if rebuild:
            for i in range(config.count):
                lbm._STEPS.clear()
                generate_fracture(config.roughness(i), config.lbm, config.voxel_size, f"f{i}", progress=False)
        else:
            generate_dataset(config, Path(folder) / "all.h5", processes=processes, progress=False)
        return config.count / (time.perf_counter() - start) * 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=4, help="fractures per configuration")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    config = DatasetConfig(count=args.count)
    rows = [
        (f"1 process x {cores} threads, step reused", _rate(config, 1, rebuild=False)),
        (f"{cores} processes x 1 thread, step reused", _rate(config, cores, rebuild=False)),
        (f"1 process x {cores} threads, step rebuilt per fracture", _rate(config, 1, rebuild=True)),
    ]
    best = max(rate for _, rate in rows)
    print(
        f"{args.count} fractures of {config.shape[0]}x{config.shape[1]}, mean aperture {config.mean_aperture} voxels"
    )
    print("| configuration | fractures per hour | vs best |")
    print("|---|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:.0f} | {rate / best:.2f} |")


if __name__ == "__main__":
    main()
