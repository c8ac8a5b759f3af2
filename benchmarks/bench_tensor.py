"""What anisotropy costs a training step: scalar, per-axis and full-tensor conductivity, side by side in one run.

    python benchmarks/bench_tensor.py                     # 256x260 and 1024x1024, 30 steps each
    python benchmarks/bench_tensor.py --sizes 256 --steps 50

Each form solves the same rough fracture (``fields.rough_log_k``): the scalar log K; per axis, log K along x and a
different log K along y; the full tensor, those two and a correlation ρ between -0.4 and 0.4 that varies across the
map. A step perturbs every value by ~1e-3 relative, as an optimiser moves them, then takes the forward solve and
the gradient of a loss on the pressure, with the default CPU engine (its factor reused from step to step). The forms
run one after the other, each with an engine of its own, twice over; each form's faster round counts. Printed: the
median step, its ratio to the scalar step, and the engine's factorisations per step and CG iterations per solve.
"""

from __future__ import annotations

# isort: off
# flowlearn before torch: the OpenMP wait policy it sets (docs/solve.md, "Threads") applies only to a torch imported
# after it, so that the table measures what train.py runs.
import flowlearn  # noqa: F401
# isort: on

import argparse
import gc
import statistics
import time

import numpy as np
import torch
from fields import loss_of, rough_log_k

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.engines import make_engine

SIZES = {256: (256, 260), 1024: (1024, 1024)}
ROUNDS = 2


def fields(shape: tuple[int, int]) -> dict[str, torch.Tensor]:
    """The three forms' fields of one fracture, batched: (1, *shape), (1, 2, *shape), (1, 3, *shape)."""
    log_x = rough_log_k(shape, seed=0)
    log_y = log_x + 0.3 * rough_log_k(shape, seed=1)
    rho = 0.4 * torch.tanh(rough_log_k(shape, seed=2))
    return {
        "scalar": log_x[None],
        "per axis": torch.stack([log_x, log_y])[None],
        "full tensor": torch.stack([log_x, log_y, rho])[None],
    }


def step_seconds(field: torch.Tensor, problem: DarcyProblem, steps: int) -> tuple[float, str]:
    """(median seconds of a training-like step, the engine's factorisations per step / CG iterations per solve)
    over ``steps`` steps of one form, with an engine of its own (freed before the next form runs)."""
    engine = make_engine("auto")
    rng = np.random.default_rng(3)
    times = []
    for step in range(steps + 1):
        # Every value moves by ~1e-3 relative (the correlation channel scaled, so it stays within (-1, 1)).
        field = field * (1 + 1e-3 * torch.from_numpy(rng.normal(size=field.shape)))
        x = field.clone().requires_grad_()
        if step == 1:
            engine.reset_stats()  # the first step is a one-off: time and count the training-like ones
        start = time.perf_counter()
        loss_of(solve_pressure(x, problem, solver=engine)).backward()
        if step:
            times.append(time.perf_counter() - start)
    stats = engine.stats
    solves = max(stats.direct_solves + stats.pcg_solves, 1)
    return statistics.median(
        times
    ), f"{stats.factorizations / steps:.2f} / {stats.pcg_iterations / solves:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--steps", type=int, default=30, help="training-like steps timed per form")
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), engine {make_engine('auto').name}\n"
    )
    print(
        "| grid | form | step (ms): the faster round (both) | vs scalar | factorisations per step / CG iterations "
        "per solve |"
    )
    print("|---|---|---|---|---|")
    for size in args.sizes:
        shape = SIZES[size]
        problem = DarcyProblem.fracture(shape)
        forms = fields(shape)
        # The forms in turn, twice over, and each one's faster round: a machine's drift touches them alike.
        rounds: dict[str, list[tuple[float, str]]] = {name: [] for name in forms}
        for _ in range(ROUNDS):
            for name, field in forms.items():
                rounds[name].append(step_seconds(field, problem, args.steps))
                gc.collect()
        best = {name: min(results) for name, results in rounds.items()}
        for name, (seconds, counters) in best.items():
            both = " / ".join(f"{1e3 * s:.1f}" for s, _ in rounds[name])
            print(
                f"| {shape[0]}x{shape[1]} | {name} | {1e3 * seconds:.1f} ({both}) | "
                f"{seconds / best['scalar'][0]:.2f}x | {counters} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
