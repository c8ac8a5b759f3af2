"""Memory over a long training run: the resident set size of ``train.py`` every 100 steps.

    python benchmarks/soak.py ../shared/data/example_fracture.mat [--steps 5000]

Runs ``python train.py experiment=paper`` (one Adam step per epoch on the real fracture, so every step also passes
the epoch's logging and checkpoint hooks) for ``--steps`` steps with a callback that records the process's RSS, and
prints the RSS and the peak RSS so far at step 500 (after start-up: imports, compiled kernels, the first
factorisations) and at the end, the growth between them and the growth per 1,000 steps over the second half. The
peak is the figure to judge: flowlearn hands freed heap pages back every few hundred solves
(``flowlearn.runtime.solve_done``), so the RSS of the moment depends on when it is sampled. Target: at most 5 %
growth after step 500. Not a test: it takes about a quarter of an hour on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import process_env

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
SETTLED = 500
MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", help="the real fracture (HDF5, original layout)")
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()
    if args.steps < 2 * SETTLED:
        parser.error(f"--steps must be at least {2 * SETTLED}, got {args.steps}")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "rss.csv"
        command = [
            sys.executable,
            str(REPO / "train.py"),
            "experiment=paper",
            f"data.path={Path(args.path).resolve()}",
            f"trainer.max_epochs={args.steps}",
            f"hydra.run.dir={tmp}/run",
            "+callbacks.rss._target_=bench_rss.RSSLog",
            f"+callbacks.rss.path={log}",
            "+callbacks.progress_bar.refresh_rate=0",
        ]
        out = subprocess.run(command, capture_output=True, text=True, env=process_env())
        if out.returncode:
            sys.exit(out.stderr[-3000:])
        with log.open() as f:
            rows = list(csv.DictReader(f))
    rss = {int(row["step"]): int(row["rss_bytes"]) for row in rows}
    peak = {int(row["step"]): int(row["peak_rss_bytes"]) for row in rows}
    steps = sorted(rss)
    settled = min(s for s in steps if s >= SETTLED)
    last, middle = steps[-1], steps[len(steps) // 2]
    print("| step | RSS (MiB) | peak RSS so far (MiB) |\n|---|---|---|")
    shown = steps[:: max(1, len(steps) // 10)]
    for step in shown + ([last] if shown[-1] != last else []):
        print(f"| {step} | {rss[step] / MIB:.1f} | {peak[step] / MIB:.1f} |")
    print()
    for name, series in (("RSS", rss), ("peak RSS", peak)):
        growth = series[last] / series[settled] - 1
        per_thousand = (series[last] - series[middle]) / (last - middle) * 1000 / MIB
        print(
            f"{name} {series[settled] / MIB:.1f} MiB at step {settled}, {series[last] / MIB:.1f} MiB at step "
            f"{last}: {100 * growth:+.2f} % (target at most +5 %); second half {per_thousand:+.2f} MiB per "
            "1,000 steps"
        )


if __name__ == "__main__":
    main()
