"""The whole ``python train.py experiment=paper`` run against a plain numpy/SuperLU script of the same fit.

    python benchmarks/bench_paper.py ../shared/data/example_fracture.mat [--repeats 2]

Runs back to back, each in a fresh process, ``--repeats`` times in turn (so that the machine's drifts hit all
alike), and prints a markdown table of the fastest wall times:

- ``paper_superlu.py``: the original algorithm with scipy's SuperLU, a solve for the pressure and another for the
  adjoint per step (as DPFEHM's pullback), and the same with one factorisation per step shared by both solves;
- ``train.py experiment=paper``: Hydra, Lightning, 100 Adam steps through the differentiable solve, checkpoints,
  the test stage, predictions.h5 and the final figures. Its time to the first training step is measured too.

The losses of the script and of the run are compared step by step (the script shares no code with flowlearn).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from processes import process_env

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
# A callback that records when the first training batch starts (epoch seconds), injected into train.py's config.
FIRST_STEP = "bench_first_step.FirstStep"


def script(path: str, factor_once: bool) -> tuple[float, list[float]]:
    """(wall seconds, losses) of paper_superlu.py."""
    command = [sys.executable, str(BENCHMARKS / "paper_superlu.py"), path]
    env = process_env()
    start = time.time()
    out = subprocess.run(
        command + (["--factor-once"] if factor_once else []), capture_output=True, text=True, env=env
    )
    seconds = time.time() - start
    if out.returncode:
        raise RuntimeError(out.stderr)
    return seconds, json.loads(out.stdout)["losses"]


def run(path: str, directory: Path) -> tuple[float, float, list[float]]:
    """(wall seconds, seconds to the first training step, train/loss per epoch) of train.py experiment=paper."""
    marker = directory / "first_step"
    command = [
        sys.executable,
        str(REPO / "train.py"),
        "experiment=paper",
        f"data.path={path}",
        f"hydra.run.dir={directory}",
        f"+callbacks.first_step._target_={FIRST_STEP}",
        f"+callbacks.first_step.path={marker}",
    ]
    env = process_env()
    start = time.time()
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.time() - start
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    with open(directory / "metrics.csv") as f:
        losses = [float(row["train/loss"]) for row in csv.DictReader(f) if row.get("train/loss")]
    return seconds, float(marker.read_text()) - start, losses


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", help="the real fracture (HDF5, original layout)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    path = str(Path(args.path).resolve())

    times: dict[str, list[float]] = {"spsolve": [], "splu": [], "run": [], "first": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            seconds, reference = script(path, factor_once=False)
            times["spsolve"].append(seconds)
            seconds, _ = script(path, factor_once=True)
            times["splu"].append(seconds)
            seconds, first, losses = run(path, Path(tmp) / f"run{repeat}")
            times["run"].append(seconds)
            times["first"].append(first)
            print(
                f"repeat {repeat}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), flush=True
            )

    best = {k: min(v) for k, v in times.items()}
    difference = max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True))
    print(
        f"\n{len(losses)} steps; largest relative difference of the run's losses from the script's: {difference:.1e}"
    )
    print("\n| | wall time (s) | the run is faster by |")
    print("|---|---|---|")
    print(
        f"| `paper_superlu.py` (spsolve twice a step) | {best['spsolve']:.1f} | {best['spsolve'] / best['run']:.2f}x |"
    )
    print(f"| `paper_superlu.py --factor-once` | {best['splu']:.1f} | {best['splu'] / best['run']:.2f}x |")
    print(f"| `train.py experiment=paper` | {best['run']:.1f} | |")
    print(f"| of which: to the first training step | {best['first']:.1f} | |")


if __name__ == "__main__":
    main()
