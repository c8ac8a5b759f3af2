"""What anisotropy costs a training step: scalar, per-axis and full-tensor conductivity, side by side in one run.

    python benchmarks/bench_tensor.py                     # 256x260 and 1024x1024, 30 steps each
    python benchmarks/bench_tensor.py --sizes 256 --steps 50

Each form solves the same rough fracture (``fields.rough_log_k``): the scalar log K; per axis, log K along x and a
different log K along y; the full tensor, those two and a correlation ρ between -0.4 and 0.4 that varies across the
map. A step perturbs every value by ~1e-3 relative, as an optimiser moves them, then takes the forward solve and
the gradient of a loss on the pressure, with the default CPU engine (its factor reused from step to step). Printed:
the median step, its ratio to the scalar step, and the engine's factorisations and CG iterations per solve.
"""

from __future__ import annotations

# isort: off
# flowlearn before torch: the OpenMP wait policy it sets (README, "Threads") applies only to a torch imported after
# it, so that the table measures what train.py runs.
import flowlearn  # noqa: F401
# isort: on

import argparse
import statistics
import time

import numpy as np
import torch
from fields import loss_of, rough_log_k

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.engines import make_engine

SIZES = {256: (256, 260), 1024: (1024, 1024)}


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
    """(median seconds of a training-like step, the engine's counters per solve) over ``steps`` steps."""
    engine = make_engine("auto")
    rng = np.random.default_rng(3)
    times = []
    for step in range(steps + 1):
        noise = torch.from_numpy(rng.normal(size=field.shape))
        # The correlation channel is moved within (-1, 1): scaled, not shifted.
        field = field * (1 + 1e-3 * noise)
        x = field.clone().requires_grad_()
        if step == 1:
            engine.reset_stats()  # the first step is a one-off: time and count the training-like ones
        start = time.perf_counter()
        loss_of(solve_pressure(x, problem, solver=engine)).backward()
        if step:
            times.append(time.perf_counter() - start)
    stats = engine.stats
    solves = max(stats.direct_solves + stats.pcg_solves, 1)
    counters = f"{stats.factorizations / steps:.2f} / {stats.pcg_iterations / solves:.1f}"
    return statistics.median(times), counters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--steps", type=int, default=30, help="training-like steps timed per form")
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), engine {make_engine('auto').name}\n"
    )
    print("| grid | form | step (ms) | vs scalar | factorisations per step / CG iterations per solve |")
    print("|---|---|---|---|---|")
    for size in args.sizes:
        shape = SIZES[size]
        problem = DarcyProblem.fracture(shape)
        scalar = None
        for name, field in fields(shape).items():
            seconds, counters = step_seconds(field, problem, args.steps)
            scalar = scalar or seconds
            print(
                f"| {shape[0]}x{shape[1]} | {name} | {1e3 * seconds:.1f} | {seconds / scalar:.2f}x | {counters} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
