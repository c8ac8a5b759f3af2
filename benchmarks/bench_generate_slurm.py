"""Fractures per hour of `flowlearn generate`, locally and as a SLURM job array, side by side in one run.

    python benchmarks/bench_generate_slurm.py                       # 8 fractures of the winding recipe
    python benchmarks/bench_generate_slurm.py --count 16 --recipe published

The same fractures (64x64, mean aperture 8 voxels: bench_generate.py's maps) are made four times, one after the
other, into fresh files:

1. locally, one process per core (``--processes N``, each with one OpenMP thread);
2. as a job array of one task per fracture (``--slurm``'s default), each task one CPU;
3. as a job array of one task per core (``--slurm --tasks N``), each task one CPU;
4. locally again, as the first: the machine's speed drifts, and the arrays compare with the mean of the two.

On a one-node cluster of N CPUs both arrays run N tasks at once, so every run uses the node's N cores. Each row
gives fractures per hour of the whole node and per process (running at once), its ratio to the local generation,
the seconds the fractures' LBM runs took (summed; each fracture records its own), and the rest of the processes'
time per fracture: what a task costs beyond its fractures (sbatch and the scheduler, a fresh interpreter, the lbmpy
time step that every process builds once) and the wait for the last fracture. The last line gives that build and
one fracture's simulation on one thread, as bench_generate.py measures them.

The default recipe here is ``winding``, whose fractures each take about the same time (about 20 s of one core), so
that the rows differ by what a task costs, not by which task drew the slow fractures: those of ``published`` (the
dataset's default) take from a few seconds to over four minutes of one core (contacts slow the LBM's convergence),
and a set of a few of them measures mostly its slowest one.

The arrays go to the cluster ``SLURM_CONF`` names; without it, the script starts the tests' one-node cluster
(tests/slurm_cluster.py: root and Debian's slurm-wlm and munge) with N CPUs. Before the timed runs the set is made
once, untimed, so that every run finds lbmpy's compiled kernels in its disk cache.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

# Its first line imports flowlearn, before anything imports torch.
from bench_generate import _cold_and_warm

from flowlearn.data.files import read_fractures
from flowlearn.fractures.recipes import RECIPES
from flowlearn.reference.cluster import SlurmSettings, generate_on_slurm
from flowlearn.reference.generate import DatasetConfig, generate_dataset

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _cluster(cores: int):
    """The cluster of SLURM_CONF, or the tests' one-node cluster of ``cores`` CPUs started for the run."""
    if os.environ.get("SLURM_CONF"):
        yield f"SLURM_CONF={os.environ['SLURM_CONF']}"
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from slurm_cluster import slurm_cluster

    with slurm_cluster(cpus=cores, memory_mb=2048 * cores) as cluster:
        saved = dict(os.environ)
        # The tasks import flowlearn from this checkout (sbatch exports the environment).
        os.environ.update(
            cluster.env(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        )
        try:
            yield f"the tests' one-node cluster, {cores} CPUs"
        finally:
            os.environ.clear()
            os.environ.update(saved)


def _lbm_seconds(path: Path) -> float:
    """Seconds the LBM runs of a file's fractures took, summed (each fracture records its own)."""
    return sum(fracture.provenance["lbm"]["seconds"] for fracture in read_fractures(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=8, help="fractures per configuration")
    parser.add_argument(
        "--recipe", choices=sorted(RECIPES), default="winding", help="what the fractures draw"
    )
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    config = DatasetConfig(count=args.count, recipe=RECIPES[args.recipe]())
    folder = Path(tempfile.mkdtemp(prefix="bench-generate-slurm-"))
    # Worker processes compile the kernels; this process builds no step before the timed runs fork theirs.
    generate_dataset(config, folder / "warm.h5", processes=cores, progress=False)

    rows = []  # (configuration, processes at once, seconds, seconds the LBM simulated, summed over the fractures)

    def local(run: str) -> None:
        path = folder / f"local-{run}.h5"
        summary = generate_dataset(config, path, processes=cores, progress=False)
        rows.append((f"local, --processes {cores} ({run})", cores, summary["seconds"], _lbm_seconds(path)))

    local("first")
    with _cluster(cores) as where:
        for name, tasks in ((f"--slurm ({args.count} tasks)", None), (f"--slurm --tasks {cores}", cores)):
            settings = SlurmSettings(tasks=tasks, cpus_per_task=1, mem_gb=1.5, timeout_min=60)
            path = folder / f"slurm-{tasks}.h5"
            start = time.perf_counter()
            generate_on_slurm(config, path, settings, progress=False)
            seconds = time.perf_counter() - start
            rows.append((name, min(cores, settings.task_count(args.count)), seconds, _lbm_seconds(path)))
    local("last")  # the machine's speed drifts: the local rate before and after the arrays

    print(
        f"{args.count} fractures of {config.shape[0]}x{config.shape[1]}, mean aperture {config.mean_aperture} "
        f"voxels, recipe {args.recipe}; {cores} cores; SLURM: {where}"
    )
    print(
        "| configuration | processes at once | seconds | fractures/hour, node | fractures/hour, process | vs local "
        "| LBM seconds, summed | other seconds per fracture |"
    )
    print("|---|---|---|---|---|---|---|---|")
    local_rate = args.count * 3600 / ((rows[0][2] + rows[-1][2]) / 2)
    for name, processes, seconds, lbm in rows:
        rate = args.count * 3600 / seconds
        other = (seconds * processes - lbm) / args.count
        print(
            f"| {name} | {processes} | {seconds:.0f} | {rate:.0f} | {rate / processes:.0f} | "
            f"{rate / local_rate:.2f} | {lbm:.0f} | {other:.1f} |"
        )
    print(
        "vs local: against the mean of the two local runs; other seconds: each process's time not spent in the LBM "
        "(start-up, lbmpy's step built, waiting on the scheduler or for the last fracture), per fracture"
    )
    ((cold, warm),) = _cold_and_warm(config, [0], 1)
    print(
        f"one process, one thread: building the lbmpy step {cold - warm:.1f} s, simulating a fracture {warm:.1f} s"
    )


if __name__ == "__main__":
    main()
