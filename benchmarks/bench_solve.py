"""Benchmark of the differentiable pressure solve; prints markdown tables.

    python benchmarks/bench_solve.py                 # everything (about 10 minutes on 2 cores)
    python benchmarks/bench_solve.py --sizes 64 256  # a subset of the grid-size table
    python benchmarks/bench_solve.py --sizes 4096 --skip-fd --skip-solves --skip-training --skip-one-off

Every grid size runs in a subprocess of its own, so that its peak memory (max RSS) is its own. Ratios are measured
side by side in one run on the same machine; absolute times depend on the machine.

Tables:
1. one-off forward and forward+gradient time, their ratio, and peak memory, per grid;
2. adjoint gradient against central finite differences (time ratio, max relative difference);
3. one preconditioner application (a pair of triangular solves) with a simplicial CHOLMOD factor: CHOLMOD's own
   one-core solve against flowlearn's solve shared among the cores along the elimination tree, with L in float64
   (how a factor solves its own matrix) and rounded to float32 (how it preconditions the matrices after it);
4. a training-like loop: 50 steps, each perturbing logK by ~1e-3 relative, then forward+gradient; flowlearn's
   default solver (factor reuse) against two baselines written out below with numpy/scipy alone, which double as
   independent checks of the gradient: a wrapper of CHOLMOD (its symbolic analysis once, a numeric factorisation
   per step, the adjoint through the same factor) and a re-solve every step with scipy's SuperLU (``spsolve`` for
   the forward and again for the adjoint, as a plain adjoint implementation would). A step's cost is also given in
   SpMV-equivalents: its median time over that of one product of its matrix with a vector, the product flowlearn's
   CG uses (torch's CSR kernel, int32 indices, all threads), timed between the steps;
5. one-off solves: the forward solve of a new field with a fresh engine and problem (the problem's set-up and the
   ordering, factorisation or multigrid hierarchy included), against bare CHOLMOD (its default analysis,
   factorisation, solve), scipy's ``spsolve`` and pyamg's Ruge-Stuben AMG as CG preconditioner (to a relative
   residual of 1e-10), from the assembled matrix. Twice: in a fresh process (its imports excluded; flowlearn's
   first solve also loads its compiled kernels), as ``flowlearn predict`` on one map, the fastest of three
   processes, flowlearn and CHOLMOD only; and warm, in this process after the other tables, as in a loop.
"""

from __future__ import annotations

# isort: off
# flowlearn before torch: the OpenMP wait policy it sets (docs/solve.md, "Threads") applies only to a torch imported
# after it, so that the tables measure what train.py and the command line run.
import flowlearn  # noqa: F401
# isort: on

import argparse
import functools
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import pyamg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
from fields import loss_of, rough_log_k
from processes import process_env
from sksparse import cholmod

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.engines import Engine, make_engine
from flowlearn.engines.cholmod import CholmodEngine
from flowlearn.engines.pcg import symmetric_product
from flowlearn.threads import usable_cores

GRIDS = {
    "64": (64, 64),
    "256": (256, 260),
    "512": (512, 512),
    "1024": (1024, 1024),
    "2048": (2048, 2048),
    "4096": (4096, 4096),
}


def forward_and_gradient(log_k: torch.Tensor, problem: DarcyProblem, solver: Engine) -> torch.Tensor:
    x = log_k.clone().requires_grad_()
    loss_of(solve_pressure(x, problem, solver=solver)).backward()
    return x.grad


def one_grid(name: str, repeats: int) -> dict:
    shape = GRIDS[name]
    problem = DarcyProblem.fracture(shape)
    log_k = rough_log_k(shape)
    _ = problem.layout
    forward, both = [], []
    for _ in range(repeats):
        solver = make_engine()  # fresh: no factor to reuse, symbolic analysis included
        start = time.perf_counter()
        solve_pressure(log_k, problem, solver=solver)
        forward.append(time.perf_counter() - start)
        solver = make_engine()
        start = time.perf_counter()
        forward_and_gradient(log_k, problem, solver)
        both.append(time.perf_counter() - start)
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {
        "grid": f"{shape[0]}x{shape[1]}",
        "unknowns": problem.layout.num_free,
        "forward": min(forward),
        "forward+gradient": min(both),
        "peak_gib": peak_gib,
    }


def superlu_forward_and_gradient(log_k: torch.Tensor, problem: DarcyProblem) -> torch.Tensor:
    """The plain baseline: assemble, ``spsolve`` the forward, ``spsolve`` the adjoint, dL/dlogK with numpy."""
    t, matrix, rhs = assembled(log_k, problem)
    return adjoint_gradient(log_k, problem, functools.partial(spla.spsolve, matrix), t, rhs)


def assembled(log_k: torch.Tensor, problem: DarcyProblem) -> tuple[np.ndarray, sp.csc_matrix, np.ndarray]:
    """(transmissibilities, free-node matrix, right-hand side) of ``log_k`` (image layout) on ``problem``."""
    layout = problem.layout
    heads, sources = problem.dirichlet_values.reshape(-1), problem.sources.reshape(-1)
    t = layout.transmissibilities(log_k.numpy().reshape(1, -1))[0]
    return t, layout.matrix(t), layout.rhs(t, heads, sources)


def adjoint_gradient(
    log_k: torch.Tensor, problem: DarcyProblem, solve: Callable[[np.ndarray], np.ndarray], t: np.ndarray, rhs
) -> torch.Tensor:
    """d loss_of / d logK from the forward and adjoint solves ``solve`` of one matrix (numpy, independent of the
    differentiable op): the adjoint has the loss gradient as sources and zero heads."""
    layout = problem.layout
    h = problem.dirichlet_values.reshape(-1).copy()
    h[layout.free_nodes] = solve(rhs)
    g = 2 * (h[layout.free_nodes] - 1.5) / h.size  # d loss_of / dp at the free nodes
    lam = np.zeros_like(h)
    lam[layout.free_nodes] = solve(g)
    a, b = layout.edges.T
    dloss_dt = -(lam[a] - lam[b]) * (h[a] - h[b]) * t / 2
    grad = np.bincount(a, dloss_dt, h.size) + np.bincount(b, dloss_dt, h.size)
    return torch.from_numpy(grad.reshape(log_k.shape))


class CholmodWrapper:
    """The savvy alternative to flowlearn's solver: CHOLMOD's analysis once, a numeric factorisation per step, the
    forward and the adjoint solve through it."""

    def __init__(self) -> None:
        self.factor = None

    def __call__(self, log_k: torch.Tensor, problem: DarcyProblem) -> torch.Tensor:
        t, matrix, rhs = assembled(log_k, problem)
        if self.factor is None:
            self.factor = cholmod.analyze(matrix)
        self.factor.cholesky_inplace(matrix)
        return adjoint_gradient(log_k, problem, self.factor, t, rhs)


class ProductClock:
    """Times products of one matrix with a vector, the product flowlearn's CG pays
    (:func:`~flowlearn.engines.pcg.symmetric_product`: torch's CSR kernel with int32 indices on all threads), when
    called between the steps of a training loop: a step's cost in products is then a ratio of medians measured
    side by side, under the same load. (Timed once after the loop, the product's median varied from 2.6 to 4.7
    ms at 1024x1024 between runs on the 2-core machine, and the step's cost in products from 128 to 214.)"""

    def __init__(self, log_k: torch.Tensor, problem: DarcyProblem) -> None:
        _, matrix, self._rhs = assembled(log_k, problem)
        self._product = symmetric_product(matrix)
        self.seconds: list[float] = []

    def __call__(self, repeats: int = 3) -> None:
        for _ in range(repeats):
            start = time.perf_counter()
            self._product(self._rhs)
            self.seconds.append(time.perf_counter() - start)


ONE_OFF_METHODS = ("flowlearn", "cholmod", "spsolve", "pyamg")


def one_off_methods(shape: tuple[int, int], names: tuple[str, ...]) -> dict[str, Callable[[], object]]:
    """The forward solve of a new field by each of ``names`` (:data:`ONE_OFF_METHODS`): flowlearn from the field
    (a new problem and engine), the others from the assembled matrix, which is built here, untimed, only where one
    of them is asked for (building it runs flowlearn's code, which would warm a fresh process for flowlearn)."""
    log_k = rough_log_k(shape)
    methods = {"flowlearn": lambda: solve_pressure(log_k, DarcyProblem.fracture(shape), solver=make_engine())}
    if set(names) - {"flowlearn"}:
        _, matrix, rhs = assembled(log_k, DarcyProblem.fracture(shape))
        methods["cholmod"] = lambda: cholmod.cholesky(matrix)(rhs)
        methods["spsolve"] = lambda: spla.spsolve(matrix, rhs)
        methods["pyamg"] = lambda: pyamg.ruge_stuben_solver(matrix.tocsr()).solve(rhs, tol=1e-10, accel="cg")
    return {name: methods[name] for name in names}


def seconds_of(method: Callable[[], object]) -> float:
    start = time.perf_counter()
    method()
    return time.perf_counter() - start


def one_off(shape: tuple[int, int], repeats: int) -> dict:
    """Fastest of ``repeats`` seconds of a forward solve of a new field by each method, in this (warm) process."""
    result = {"grid": f"{shape[0]}x{shape[1]}"}
    for name, method in one_off_methods(shape, ONE_OFF_METHODS).items():
        result[name] = min(seconds_of(method) for _ in range(repeats))
    return result


def fresh_one_off(name: str, method: str, repeats: int) -> float:
    """Fastest of ``repeats`` seconds of the first one-off solve by ``method`` on grid ``name``, each in a fresh
    process, its imports excluded: what ``flowlearn predict`` pays for one map."""
    env = process_env()
    runs = [
        subprocess.run(
            [sys.executable, __file__, "--fresh", name, method],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        for _ in range(repeats)
    ]
    return min(float(run.stdout) for run in runs)


def triangular_solves(shape: tuple[int, int], repeats: int = 15) -> dict:
    """Median seconds of one application of the same LDL^T factor, by CHOLMOD and by the tree solver (L in float64,
    then rounded to float32), and the relative differences of the tree solves' answers from CHOLMOD's."""
    layout = DarcyProblem.fracture(shape).layout
    _, matrix = layout.system(0, rough_log_k(shape).numpy().reshape(-1))
    rhs = np.random.default_rng(0).normal(size=matrix.shape[0])
    result = {"grid": f"{shape[0]}x{shape[1]}"}
    solutions = {}
    for name, unknowns in [("cholmod", None), ("tree", 0), ("tree32", 0)]:
        engine = CholmodEngine(tree_solve_unknowns=unknowns, quick_one_offs=False)
        factor = engine.factorize(matrix, engine.analyze(matrix, layout))
        if name == "tree32":
            factor.preconditions_others()  # rounds L to float32
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            solutions[name] = factor.apply(rhs)
            times.append(time.perf_counter() - start)
        result[name] = statistics.median(times)
    exact = solutions["cholmod"]
    for name in ("tree", "tree32"):
        result[f"{name} difference"] = np.abs(solutions[name] - exact).max() / np.abs(exact).max()
    return result


def training_loop(
    shape: tuple[int, int], step_fn, steps: int = 50, between: Callable[[], None] | None = None
) -> tuple[float, float]:
    """(median, mean) seconds per step of perturb-then-forward+gradient, the way an optimiser moves logK. The mean
    includes the steps that refactor. ``between`` runs after each step, untimed."""
    problem = DarcyProblem.fracture(shape)
    log_k = rough_log_k(shape)
    rng = np.random.default_rng(1)
    step_fn(log_k, problem)  # warm-up: analysis and first factor, as in epoch 0
    times = []
    for _ in range(steps):
        log_k = log_k * (1 + 1e-3 * torch.from_numpy(rng.normal(size=shape)))
        start = time.perf_counter()
        step_fn(log_k, problem)
        times.append(time.perf_counter() - start)
        if between is not None:
            between()
    return statistics.median(times), statistics.mean(times)


def finite_differences(shape: tuple[int, int], eps: float = 1e-4) -> dict:
    """Adjoint gradient against central differences, both on a solver whose symbolic analysis is warm (as in
    training) and with a new numeric factorisation for every field; eps=1e-4 balances truncation and round-off."""
    problem = DarcyProblem.fracture(shape)
    log_k = rough_log_k(shape)
    solver = make_engine(reuse=False)  # every finite-difference solve exact to round-off
    forward_and_gradient(log_k + 0.5, problem, solver)  # warm-up: symbolic analysis of the pattern
    timings = []
    for shift in (0.1, 0.2, 0.3, 0.0):  # a different field each time, so that each call factorises afresh
        start = time.perf_counter()
        adjoint = forward_and_gradient(log_k + shift, problem, solver).reshape(-1)
        timings.append(time.perf_counter() - start)
    flat = log_k.reshape(-1)
    fd = torch.empty_like(flat)
    start = time.perf_counter()
    for i in range(flat.numel()):
        step = torch.zeros_like(flat)
        step[i] = eps
        up = loss_of(solve_pressure((flat + step).reshape(shape), problem, solver=solver))
        down = loss_of(solve_pressure((flat - step).reshape(shape), problem, solver=solver))
        fd[i] = (up - down) / (2 * eps)
    fd_seconds = time.perf_counter() - start
    difference = ((adjoint - fd).abs().max() / adjoint.abs().max()).item()
    return {
        "grid": f"{shape[0]}x{shape[1]}",
        "adjoint": statistics.median(timings),
        "fd": fd_seconds,
        "difference": difference,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        nargs="*",
        default=[name for name in GRIDS if name != "4096"],
        choices=list(GRIDS),
        help="grids of the first table (4096: 17M unknowns, 9 GiB and 2 minutes, only on request)",
    )
    parser.add_argument("--one", choices=list(GRIDS), help=argparse.SUPPRESS)
    parser.add_argument("--skip-fd", action="store_true", help="skip the finite-difference table")
    parser.add_argument("--skip-solves", action="store_true", help="skip the triangular-solve table")
    parser.add_argument("--skip-training", action="store_true", help="skip the training-loop table")
    parser.add_argument("--skip-one-off", action="store_true", help="skip the one-off solve table")
    parser.add_argument("--fresh", nargs=2, metavar=("GRID", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_grid(args.one, repeats=3 if args.one in ("64", "256", "512") else 1)))
        return
    if args.fresh:  # a fresh process of fresh_one_off: one timed solve after the imports
        grid, method = args.fresh
        print(seconds_of(one_off_methods(GRIDS[grid], (method,))[method]))
        return

    print(f"torch {torch.__version__}, solver {make_engine().name}, {torch.get_num_threads()} threads")
    header("grid", "unknowns", "forward (s)", "forward+gradient (s)", "gradient/forward", "peak memory (GiB)")
    for name in args.sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--one", name], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout)
        ratio = r["forward+gradient"] / r["forward"]
        row(
            r["grid"],
            f"{r['unknowns']:,}",
            f"{r['forward']:.3f}",
            f"{r['forward+gradient']:.3f}",
            f"{ratio:.2f}",
            f"{r['peak_gib']:.2f}",
        )

    if not args.skip_fd:
        header(
            "grid", "adjoint gradient (s)", "central differences (s)", "speed-up", "max relative difference"
        )
        for shape in [(32, 32), (64, 64)]:
            r = finite_differences(shape)
            row(
                r["grid"],
                f"{r['adjoint']:.4f}",
                f"{r['fd']:.1f}",
                f"{r['fd'] / r['adjoint']:,.0f}x",
                f"{r['difference']:.1e}",
            )

    if not args.skip_solves:
        header(
            "grid",
            "CHOLMOD solve (ms)",
            f"tree solve on {usable_cores()} cores (ms)",
            "speed-up",
            "tree solve, L in float32 (ms)",
            "speed-up",
            "max relative difference (float64, float32)",
        )
        for shape, repeats in [((256, 260), 60), ((512, 512), 15), ((1024, 1024), 15)]:
            r = triangular_solves(shape, repeats)
            row(
                r["grid"],
                f"{1e3 * r['cholmod']:.1f}",
                f"{1e3 * r['tree']:.1f}",
                f"{r['cholmod'] / r['tree']:.2f}x",
                f"{1e3 * r['tree32']:.1f}",
                f"{r['cholmod'] / r['tree32']:.2f}x",
                f"{r['tree difference']:.1e}, {r['tree32 difference']:.1e}",
            )

    if not args.skip_training:
        header(
            "grid",
            "flowlearn step, median (ms)",
            "flowlearn step, mean (ms)",
            "CHOLMOD wrapper step, median (ms)",
            "SuperLU re-solve step, median (ms)",
            "speed-up over the wrapper",
            "speed-up over SuperLU",
            "flowlearn step in SpMV",
            "gradient difference",
        )
        for shape, baseline_steps in [((256, 260), 50), ((1024, 1024), 3)]:
            solver = make_engine()
            problem = DarcyProblem.fracture(shape)
            log_k = rough_log_k(shape)
            products = ProductClock(log_k, problem)
            ours, ours_mean = training_loop(
                shape, functools.partial(forward_and_gradient, solver=solver), between=products
            )
            wrapper, _ = training_loop(shape, CholmodWrapper(), steps=max(baseline_steps, 8))
            superlu, _ = training_loop(shape, superlu_forward_and_gradient, steps=baseline_steps)
            ours_grad = forward_and_gradient(log_k, problem, solver)
            difference = max(
                ((ours_grad - check).abs().max() / check.abs().max()).item()
                for check in (superlu_forward_and_gradient(log_k, problem), CholmodWrapper()(log_k, problem))
            )
            row(
                f"{shape[0]}x{shape[1]}",
                f"{1e3 * ours:.1f}",
                f"{1e3 * ours_mean:.1f}",
                f"{1e3 * wrapper:.1f}",
                f"{1e3 * superlu:.1f}",
                f"{wrapper / ours:.2f}x",
                f"{superlu / ours:.1f}x",
                f"{ours / statistics.median(products.seconds):.0f}",
                f"{difference:.1e}",
            )

    if not args.skip_one_off:
        header(
            "grid",
            "process",
            "flowlearn (s)",
            "CHOLMOD (s)",
            "spsolve (s)",
            "pyamg RS-PCG (s)",
            "flowlearn vs CHOLMOD",
            "flowlearn vs the best other",
        )
        for name, repeats in [("256", 3), ("1024", 3)]:
            warm = one_off(GRIDS[name], repeats)
            fresh = {method: fresh_one_off(name, method, 3) for method in ("flowlearn", "cholmod")}
            for process, r in (("fresh", fresh), ("warm", warm)):
                best = min(r.get(method, math.inf) for method in ONE_OFF_METHODS[1:])
                row(
                    warm["grid"],
                    process,
                    *(f"{r[method]:.3f}" if method in r else "" for method in ONE_OFF_METHODS),
                    f"{r['cholmod'] / r['flowlearn']:.2f}x",
                    f"{best / r['flowlearn']:.2f}x",
                )


def header(*columns: str) -> None:
    """Start a markdown table, after a blank line."""
    print("\n| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def row(*cells: str) -> None:
    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
