"""Benchmark of the differentiable pressure solve; prints markdown tables.

    python benchmarks/bench_solve.py                 # everything (about 10 minutes on 2 cores)
    python benchmarks/bench_solve.py --sizes 64 256  # a subset of the grid-size table

Every grid size runs in a subprocess of its own, so that its peak memory (max RSS) is its own. Ratios are measured
side by side in one run on the same machine; absolute times depend on the machine.

Tables:
1. one-off forward and forward+gradient time, their ratio, and peak memory, per grid;
2. adjoint gradient against central finite differences (time ratio, max relative difference);
3. one preconditioner application (a pair of triangular solves) with a simplicial CHOLMOD factor: CHOLMOD's own
   one-core solve against flowlearn's solve shared among the cores along the elimination tree;
4. a training-like loop: 50 steps, each perturbing logK by ~1e-3 relative, then forward+gradient; flowlearn's
   default solver (factor reuse) against a baseline that re-solves every step with scipy's SuperLU
   (``spsolve`` for the forward and again for the adjoint, as a plain adjoint implementation would). The baseline
   is written out below with numpy/scipy alone and doubles as an independent check of the gradient.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import scipy.sparse.linalg as spla
import torch

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.engines import Engine, make_engine
from flowlearn.engines.cholmod import CholmodEngine
from flowlearn.engines.trisolve import usable_cores

GRIDS = {"64": (64, 64), "256": (256, 260), "512": (512, 512), "1024": (1024, 1024), "2048": (2048, 2048)}


def rough_log_k(shape: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """log K of a rough fracture: 2*log(aperture), aperture a smoothed lognormal field (float64, image layout)."""
    rng = np.random.default_rng(seed)
    noise = np.fft.rfft2(rng.normal(size=shape))
    ky = np.fft.fftfreq(shape[0])[:, None]
    kx = np.fft.rfftfreq(shape[1])[None, :]
    smooth = np.fft.irfft2(noise / (1 + (np.hypot(kx, ky) * 32) ** 2), s=shape)
    log_aperture = smooth / smooth.std() * 0.5
    return torch.from_numpy(2 * log_aperture)


def loss_of(pressure: torch.Tensor) -> torch.Tensor:
    return ((pressure - 1.5) ** 2).mean()


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
    """The baseline: assemble, spsolve the forward, spsolve the adjoint, and form dL/dlogK with numpy."""
    layout = problem.layout
    u = log_k.numpy().reshape(-1)
    heads, sources = problem.dirichlet_values.reshape(-1), problem.sources.reshape(-1)
    t = layout.transmissibilities(u[None])[0]
    matrix = layout.matrix(t)
    h = heads.copy()
    h[layout.free_nodes] = spla.spsolve(matrix, layout.rhs(t, heads, sources))
    g = np.zeros_like(h)
    g[layout.free_nodes] = 2 * (h[layout.free_nodes] - 1.5) / h.size  # d loss_of / dp
    lam = np.zeros_like(h)
    lam[layout.free_nodes] = spla.spsolve(matrix, g[layout.free_nodes])
    a, b = layout.edges.T
    dloss_dt = -(lam[a] - lam[b]) * (h[a] - h[b])
    grad = np.zeros_like(u)
    np.add.at(grad, a, 0.5 * dloss_dt * t)
    np.add.at(grad, b, 0.5 * dloss_dt * t)
    return torch.from_numpy(grad.reshape(log_k.shape))


def triangular_solves(shape: tuple[int, int], repeats: int = 15) -> dict:
    """Median seconds of one application of the same LDL^T factor, by CHOLMOD and by the tree solver."""
    layout = DarcyProblem.fracture(shape).layout
    _, matrix = layout.system(0, rough_log_k(shape).numpy().reshape(-1))
    rhs = np.random.default_rng(0).normal(size=matrix.shape[0])
    result = {"grid": f"{shape[0]}x{shape[1]}"}
    solutions = []
    for name, entries in [("cholmod", None), ("tree", 0)]:
        engine = CholmodEngine(tree_solve_entries=entries, quick_one_offs=False)
        factor = engine.factorize(matrix, engine.analyze(matrix))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            solutions.append(factor.apply(rhs))
            times.append(time.perf_counter() - start)
        result[name] = statistics.median(times)
    result["difference"] = np.abs(solutions[-1] - solutions[0]).max() / np.abs(solutions[0]).max()
    return result


def training_loop(shape: tuple[int, int], step_fn, steps: int = 50) -> tuple[float, float]:
    """(median, mean) seconds per step of perturb-then-forward+gradient, the way an optimiser moves logK. The mean
    includes the steps that refactor."""
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
    parser.add_argument("--sizes", nargs="*", default=list(GRIDS), choices=list(GRIDS))
    parser.add_argument("--one", choices=list(GRIDS), help=argparse.SUPPRESS)
    parser.add_argument("--skip-fd", action="store_true", help="skip the finite-difference table")
    parser.add_argument("--skip-solves", action="store_true", help="skip the triangular-solve table")
    parser.add_argument("--skip-training", action="store_true", help="skip the training-loop table")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_grid(args.one, repeats=3 if args.one in ("64", "256", "512") else 1)))
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
            "max relative difference",
        )
        for shape in [(512, 512), (1024, 1024)]:
            r = triangular_solves(shape)
            row(
                r["grid"],
                f"{1e3 * r['cholmod']:.1f}",
                f"{1e3 * r['tree']:.1f}",
                f"{r['cholmod'] / r['tree']:.2f}x",
                f"{r['difference']:.1e}",
            )

    if not args.skip_training:
        header(
            "grid",
            "flowlearn step, median (ms)",
            "flowlearn step, mean (ms)",
            "SuperLU re-solve step, median (ms)",
            "speed-up (medians)",
            "gradient difference",
        )
        for shape, baseline_steps in [((256, 260), 50), ((1024, 1024), 3)]:
            solver = make_engine()
            ours, ours_mean = training_loop(shape, functools.partial(forward_and_gradient, solver=solver))
            baseline, _ = training_loop(shape, superlu_forward_and_gradient, steps=baseline_steps)
            problem = DarcyProblem.fracture(shape)
            ours_grad = forward_and_gradient(rough_log_k(shape), problem, solver)
            check = superlu_forward_and_gradient(rough_log_k(shape), problem)
            difference = ((ours_grad - check).abs().max() / check.abs().max()).item()
            row(
                f"{shape[0]}x{shape[1]}",
                f"{1e3 * ours:.1f}",
                f"{1e3 * ours_mean:.1f}",
                f"{1e3 * baseline:.1f}",
                f"{baseline / ours:.1f}x",
                f"{difference:.1e}",
            )


def header(*columns: str) -> None:
    """Start a markdown table, after a blank line."""
    print("\n| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def row(*cells: str) -> None:
    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
