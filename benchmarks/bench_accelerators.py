"""What the optional CHOLMOD accelerator adds: flowlearn's solves on its CHOLMOD engine against its SuperLU engine,
the fallback a pip-only install uses.

    python benchmarks/bench_accelerators.py [--steps 30]

Side by side in one run, on the benchmarks' rough fracture (fields.py): a training-like loop (each step perturbs
log K by ~1e-3 relative, then forward and gradient; median and mean per step, the mean with the steps that
refactor) and a one-off forward solve with a fresh engine and problem, in this process after the loops (warm:
``bench_solve.py`` times a fresh process's first one-off too), at 256x260 and 1024x1024. Prints a markdown
table with the SuperLU/CHOLMOD ratio of each (above 1: CHOLMOD is faster). Needs scikit-sparse.
"""

from __future__ import annotations

# isort: off
# flowlearn before torch: the OpenMP wait policy it sets (docs/solve.md, "Threads") applies only to a torch imported
# after it, so that the tables measure what train.py and the command line run.
import flowlearn  # noqa: F401
# isort: on

import argparse
import functools
import time

import torch
from bench_solve import forward_and_gradient, header, row, training_loop
from fields import rough_log_k

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.engines import cholmod_available, make_engine

ENGINES = ("cholmod", "superlu")
SHAPES = ((256, 260), (1024, 1024))


def one_off(shape: tuple[int, int], engine: str, repeats: int = 3) -> float:
    """Fastest of ``repeats`` seconds of a forward solve of a new field with a fresh engine and problem."""
    log_k = rough_log_k(shape, seed=2)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        solve_pressure(log_k, DarcyProblem.fracture(shape), solver=make_engine(engine))
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30, help="training-loop steps per grid and engine")
    args = parser.parse_args()
    if not cholmod_available():
        parser.error("needs scikit-sparse (pip install -e '.[cholmod]', with libsuitesparse-dev installed)")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    header(
        "grid",
        *(f"{e} step, median (ms)" for e in ENGINES),
        *(f"{e} step, mean (ms)" for e in ENGINES),
        "step ratio (median)",
        *(f"{e} one-off, warm (ms)" for e in ENGINES),
        "one-off ratio",
    )
    for shape in SHAPES:
        steps = {
            e: training_loop(
                shape, functools.partial(forward_and_gradient, solver=make_engine(e)), args.steps
            )
            for e in ENGINES
        }
        once = {e: one_off(shape, e) for e in ENGINES}
        row(
            f"{shape[0]}x{shape[1]}",
            *(f"{1e3 * steps[e][0]:.1f}" for e in ENGINES),
            *(f"{1e3 * steps[e][1]:.1f}" for e in ENGINES),
            f"{steps['superlu'][0] / steps['cholmod'][0]:.2f}",
            *(f"{1e3 * once[e]:.0f}" for e in ENGINES),
            f"{once['superlu'] / once['cholmod']:.2f}",
        )


if __name__ == "__main__":
    main()
