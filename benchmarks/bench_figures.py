"""What the figure callback costs a training run; prints a markdown table.

    python benchmarks/bench_figures.py                       # the default run (embedded dataset, 40 epochs)
    python benchmarks/bench_figures.py trainer.max_epochs=10 # any train.py overrides, applied to every case

Three runs of ``python train.py`` side by side, on the same machine: without the figure callback, with it at its
defaults (every 5 epochs, at most 5% of the training time), and with the budget lifted (a render every 5 epochs
whatever it costs), which shows what one periodic render costs. A timing callback, added through Hydra, measures
every training step (batch start to batch end), the time between the first and the last step, and reads the
figure callback's own bookkeeping.

The overhead is the figure callback's time during training divided by the training time. Periodic renders run
between epochs, not inside a step, so this is the amortised slow-down of a training step. The render before the
first step and the final figure set run outside training and are listed apart.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
from processes import process_env

ROOT = Path(__file__).resolve().parents[1]


class StepTimer(L.Callback):
    """Times every training step and the training phase; writes ``<run dir>/timing.json`` at the end of fit."""

    def __init__(self) -> None:
        self.steps: list[float] = []
        self._step = self._train = 0.0
        self.train_s = 0.0

    def on_train_start(self, trainer, pl_module) -> None:
        self._train = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps.append(time.perf_counter() - self._step)

    def on_train_end(self, trainer, pl_module) -> None:
        self.train_s = time.perf_counter() - self._train

    def on_fit_end(self, trainer, pl_module) -> None:
        from flowlearn.reporting.callback import FigureCallback

        figures = next((c for c in trainer.callbacks if isinstance(c, FigureCallback)), None)
        timing = {
            "steps": self.steps,
            "train_s": self.train_s,
            "periodic_s": figures.spent_s if figures else 0.0,
            "renders": figures.render_seconds if figures else {},
        }
        (Path(trainer.default_root_dir) / "timing.json").write_text(json.dumps(timing))


CASES = {
    "no figures": ["~callbacks.figures"],
    "figures, defaults": [],
    "figures, no budget": ["callbacks.figures.max_overhead=1000"],
}


def run_case(overrides: list[str], run_dir: Path) -> dict:
    # The timing callback comes from this file, so train.py imports it by module name.
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        f"hydra.run.dir={run_dir}",
        "+callbacks.timer._target_=bench_figures.StepTimer",
        *overrides,
    ]
    result = subprocess.run(
        command, cwd=ROOT, env=process_env(), capture_output=True, text=True, timeout=3600
    )
    if result.returncode != 0:
        raise RuntimeError(f"train.py failed ({' '.join(overrides)}):\n{result.stderr[-3000:]}")
    return json.loads((run_dir / "timing.json").read_text())


def main(extra: list[str]) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in CASES.items():
            timing = run_case([*overrides, *extra], Path(tmp) / name.replace(" ", "_").replace(",", ""))
            steps = timing["steps"]
            periodic = {
                k: v for k, v in timing["renders"].items() if k.startswith("epoch_") and k != "epoch_000"
            }
            training = timing["train_s"] - timing["periodic_s"]
            rows.append(
                (
                    name,
                    len(steps),
                    1e3 * statistics.median(steps),
                    timing["train_s"],
                    len(periodic),
                    timing["periodic_s"],
                    100 * timing["periodic_s"] / training,
                    timing["renders"].get("epoch_000", 0.0),
                    timing["renders"].get("final", 0.0),
                )
            )
    print(f"overrides: {' '.join(extra) or '(defaults)'}\n")
    print(
        "| case | steps | median step (ms) | training (s) | periodic renders | their time (s) | overhead (%) "
        "| render before training (s) | final set (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, step, train, count, periodic, overhead, first, final in rows:
        print(
            f"| {name} | {n} | {step:.1f} | {train:.2f} | {count} | {periodic:.2f} | {overhead:.2f} | {first:.2f} "
            f"| {final:.2f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
