"""GPU benchmark of the differentiable pressure solve, side by side with the CPU backend; prints markdown tables.

    python benchmarks/bench_gpu.py                      # everything; CPU columns up to 2048x2048
    python benchmarks/bench_gpu.py --cpu-max 1024       # CPU columns only up to 1024x1024
    python benchmarks/bench_gpu.py --sizes 256 1024     # a subset of the grid sizes
    python benchmarks/bench_gpu.py --threads 1          # one torch CPU thread (steadier on a shared machine)
    python benchmarks/bench_gpu.py --tables pcg lbm     # some of the tables below

Tables:
1. forward+gradient of one fracture (the original setup, a rough lognormal field) per grid size: on the GPU the
   first call (cuDSS analysis, factorisation, forward and adjoint solves) and a training-like step (the field
   perturbed by ~1e-3 relative: a numeric refactorisation with the analysis reused), and the same two on the
   CPU backend; the GPU's speed-up on the step; the method ``auto`` chose; GPU memory: torch's peak allocation,
   cuDSS's own estimate of the memory its factor keeps, and the device memory in use after the step (the driver's
   count, everything in the process included);
2. batch throughput at 256x256: B fractures of one shape per call, forward+gradient training-like steps, fractures
   per second on the GPU (one batched factorisation) and on the CPU (one factor per item);
3. the GPU's iterative solves against its direct one, per grid size: the training-like step's time and CG
   iterations per solve with the Jacobi preconditioner and with the cuDSS factor of the run's first matrix
   (``preconditioner="factor"``), beside the direct method's step;
4. the LBM generator (lbmpy) on the GPU and on the CPU: converged rough fractures of ``flowlearn generate``'s
   default recipe (not its exact cases, plates in thin boxes), the time step's build, seconds and steps per
   fracture, million lattice-cell updates per second (MLUPS), fractures per hour of a long generation (the step
   reused), and how far apart the two devices' pressures end.

Without a CUDA device (or without cuDSS) the GPU columns say why and the CPU columns still run; the LBM's GPU row
needs cupy alone. The Jacobi column stops at ``--jacobi-max`` and ``--jacobi-max-iter``: its iterations grow with
the grid's side. Times are medians of a few repeats.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections import Counter
from dataclasses import replace

import numpy as np
import torch
from fields import loss_of, rough_indices, rough_log_k

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.engines import make_engine
from flowlearn.engines.gpu import GPUEngine
from flowlearn.errors import ConvergenceError, GPUUnavailableError
from flowlearn.reference import lbm
from flowlearn.reference.generate import DatasetConfig, generate_fracture
from flowlearn.reference.lbm import DEPTH_QUANTUM
from flowlearn.reference.voxels import voxelize

SIZES = (256, 512, 1024, 2048, 4096)
DEFAULT_SIZES = (256, 1024, 2048, 4096)
PCG_SIZES = (256, 512, 1024, 2048, 4096)
BATCHES = (1, 8, 64)
TABLES = ("single", "batch", "pcg", "lbm")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_seconds(log_k: torch.Tensor, problem: DarcyProblem, solver, repeats: int) -> tuple[float, float]:
    """(first call, median training-like step) seconds of forward+gradient with one solver object."""
    device = log_k.device
    rng = np.random.default_rng(1)

    def timed(field: torch.Tensor) -> float:
        x = field.clone().requires_grad_()
        _sync(device)
        start = time.perf_counter()
        loss_of(solve_pressure(x, problem, solver=solver)).backward()
        _sync(device)
        return time.perf_counter() - start

    first = timed(log_k)
    solver.reset_stats()  # the counters cover the training-like steps alone
    steps = []
    for _ in range(repeats):
        noise = torch.from_numpy(rng.normal(size=log_k.shape)).to(device)
        log_k = log_k * (1 + 1e-3 * noise)
        steps.append(timed(log_k))
    return first, statistics.median(steps)


def gpu_solver() -> GPUEngine | None:
    try:
        return GPUEngine()
    except GPUUnavailableError as error:
        print(f"No GPU columns: {error}\n")
        return None


def single_fracture_table(sizes: list[int], cpu_max: int, repeats: int, use_gpu: bool) -> None:
    print(
        "| grid | unknowns | GPU first call (s) | GPU step (s) | CPU first call (s) | CPU step (s) | speed-up (step) "
        "| GPU method | torch peak (GiB) | cuDSS factor (GiB) | device in use (GiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        shape = (size, size)
        problem = DarcyProblem.fracture(shape)
        log_k = rough_log_k(shape)
        _ = problem.layout
        row = {"gpu_first": None, "gpu_step": None, "cpu_first": None, "cpu_step": None}
        method = peak = factor = in_use = "—"
        if use_gpu:
            solver = GPUEngine()
            device = solver.device
            torch.cuda.reset_peak_memory_stats(device)
            row["gpu_first"], row["gpu_step"] = step_seconds(log_k.to(device), problem, solver, repeats)
            method = "direct (cuDSS)" if solver.stats.direct_solves else "pcg (Jacobi)"
            peak = f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f}"
            factor = f"{solver.factor_bytes() / 2**30:.2f}"
            free, total = torch.cuda.mem_get_info(device)
            in_use = f"{(total - free) / 2**30:.2f}"
            solver.free()
            del solver
            gc.collect()
            torch.cuda.empty_cache()
        if size <= cpu_max:
            row["cpu_first"], row["cpu_step"] = step_seconds(
                log_k, problem, make_engine(), repeats if size <= 1024 else 1
            )

        def cell(value: float | None) -> str:
            return "—" if value is None else f"{value:.3f}"

        speedup = f"{row['cpu_step'] / row['gpu_step']:.1f}x" if row["gpu_step"] and row["cpu_step"] else "—"
        print(
            f"| {size}x{size} | {problem.layout.num_free:,} | {cell(row['gpu_first'])} | {cell(row['gpu_step'])} "
            f"| {cell(row['cpu_first'])} | {cell(row['cpu_step'])} | {speedup} | {method} | {peak} | {factor} "
            f"| {in_use} |",
            flush=True,
        )


def batch_table(repeats: int, use_gpu: bool) -> None:
    shape = (256, 256)
    problem = DarcyProblem.fracture(shape)
    print("\n| batch B (256x256) | GPU fractures/s | CPU fractures/s | speed-up |")
    print("|---|---|---|---|")
    for batch in BATCHES:
        log_k = torch.stack([rough_log_k(shape, seed=i) for i in range(batch)])
        gpu = cpu = None
        if use_gpu:
            solver = GPUEngine()
            gpu = batch / step_seconds(log_k.to(solver.device), problem, solver, repeats)[1]
            solver.free()
        cpu = batch / step_seconds(log_k, problem, make_engine(), max(1, repeats // 2))[1]
        gpu_cell = "—" if gpu is None else f"{gpu:,.0f}"
        speedup = "—" if gpu is None else f"{gpu / cpu:.1f}x"
        print(f"| {batch} | {gpu_cell} | {cpu:,.1f} | {speedup} |", flush=True)


def pcg_table(sizes: list[int], repeats: int, jacobi_max: int, jacobi_max_iter: int) -> None:
    print(
        "\n| grid | direct step (s) | Jacobi PCG step (s) | Jacobi iterations/solve | factor PCG step (s) "
        "| factor PCG iterations/solve | refactorisations in the steps |"
    )
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        shape = (size, size)
        problem = DarcyProblem.fracture(shape)
        log_k = rough_log_k(shape)
        cells = []
        for method, preconditioner in (("direct", "jacobi"), ("pcg", "jacobi"), ("pcg", "factor")):
            if method == "pcg" and preconditioner == "jacobi" and size > jacobi_max:
                cells += ["—", "—"]
                continue
            limit = {"max_iter": jacobi_max_iter} if preconditioner == "jacobi" else {}
            solver = GPUEngine(method=method, preconditioner=preconditioner, **limit)
            try:
                step = step_seconds(log_k.to(solver.device), problem, solver, repeats)[1]
            except ConvergenceError:
                cells += ["no convergence", f"> {solver.max_iter}"]
                continue
            finally:
                solver.free()
            cells.append(f"{step:.3f}")
            if method == "pcg":
                cells.append(f"{solver.stats.pcg_iterations / max(solver.stats.pcg_solves, 1):.0f}")
            if preconditioner == "factor":
                cells.append(str(solver.stats.factorizations))
        print(f"| {size}x{size} | " + " | ".join(cells) + " |", flush=True)


def _same_box(config: DatasetConfig, count: int) -> list[int]:
    """The first ``count`` of ``config``'s rough fractures whose LBM box is the most common among the first
    ``max(32, 4 * count)`` of them (about a quarter share it): one time step serves them all."""

    def depth(index: int) -> int:
        walls = config.walls(index)
        cells = voxelize(walls.bottom, walls.top).shape[2]
        return cells + -cells % DEPTH_QUANTUM

    depths = {i: depth(i) for i in rough_indices(config, max(32, 4 * count))}
    common = Counter(depths.values()).most_common(1)[0][0]
    return [i for i, d in depths.items() if d == common][:count]


def lbm_table(count: int, targets: list[str], threads: int | None) -> None:
    """Converged LBM runs of the default recipe (``flowlearn generate``'s defaults), per device.

    The first fracture builds the lbmpy time step (symbolic derivation and compilation, once per box and process);
    the next ``count`` fractures share its box and reuse it, as the fractures of a long generation do.
    """
    config = DatasetConfig()
    indices = _same_box(config, count + 1)
    print(
        f"\n| LBM (lbmpy D3Q19 TRT), default recipe {config.shape[0]}x{config.shape[1]} | fluid box (voxels) "
        "| step build (s) | seconds per fracture | steps per fracture | MLUPS | fractures per hour |"
    )
    print("|---|---|---|---|---|---|---|")
    pressures: dict[str, list[np.ndarray]] = {}
    for target in targets:
        settings = replace(config.lbm, target=target, threads=threads if target == "cpu" else None)
        lbm._STEPS.clear()
        runs = []
        for index in indices:
            start = time.perf_counter()
            fracture = generate_fracture(config.walls(index), settings, config.voxel_size, "bench", False)
            runs.append((time.perf_counter() - start, fracture))
        # The build is what the first fracture spent outside its time loop beyond what the others did: fractures
        # converge in different numbers of steps, so their whole times do not tell it.
        outside = [seconds - fracture.provenance["lbm"]["seconds"] for seconds, fracture in runs]
        build = outside[0] - statistics.median(outside[1:])
        warm = [seconds for seconds, _ in runs[1:]]
        records = [fracture.provenance["lbm"] for _, fracture in runs[1:]]
        steps = statistics.median(record["convergence"]["steps"] for record in records)
        mlups = statistics.median(record["mlups"] for record in records)
        box = "x".join(str(n) for n in runs[0][1].provenance["voxel_box"])
        name = target if target == "gpu" else f"cpu, {threads or os.cpu_count()} threads"
        print(
            f"| {name} | {box} | {build:.1f} | {statistics.mean(warm):.2f} | {steps:,.0f} | {mlups:,.0f} "
            f"| {3600 / statistics.mean(warm):,.0f} |",
            flush=True,
        )
        pressures[target] = [fracture.pressure[fracture.mask] for _, fracture in runs]
    if len(pressures) == 2:
        gap = max(float(np.max(np.abs(a - b))) for a, b in zip(*pressures.values(), strict=True))
        print(f"\nLargest difference of the two devices' converged pressure fields (heads 2 -> 1): {gap:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="*", type=int, default=list(DEFAULT_SIZES), choices=SIZES)
    parser.add_argument(
        "--pcg-sizes",
        nargs="*",
        type=int,
        default=list(PCG_SIZES),
        choices=SIZES,
        help="grid sides of the PCG table (default all)",
    )
    parser.add_argument(
        "--cpu-max", type=int, default=2048, help="largest grid side run on the CPU (default 2048)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="training-like steps timed per entry")
    parser.add_argument(
        "--tables",
        nargs="*",
        default=list(TABLES),
        choices=TABLES,
        help="which tables to print (default all)",
    )
    parser.add_argument(
        "--lbm-count", type=int, default=3, help="LBM fractures timed per device after the first (default 3)"
    )
    parser.add_argument(
        "--lbm-targets",
        nargs="*",
        default=["gpu", "cpu"],
        choices=("gpu", "cpu"),
        help="devices of the LBM table (default both; gpu only where a GPU is present)",
    )
    parser.add_argument("--lbm-threads", type=int, help="OpenMP threads of the CPU LBM (default every core)")
    parser.add_argument(
        "--jacobi-max",
        type=int,
        default=1024,
        help="largest grid side of the Jacobi PCG column (default 1024)",
    )
    parser.add_argument(
        "--jacobi-max-iter",
        type=int,
        default=20_000,
        help="Jacobi PCG's iteration limit; a solve that misses it reads 'no convergence' (default 20000)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default torch's choice); 1 keeps CPU timings steady on a machine shared with "
        "other jobs, where a thread pool that waits for a busy core stalls every small operation",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    use_gpu = gpu_solver() is not None  # the solve tables time cuDSS's direct method; says why not
    cuda = torch.cuda.is_available()
    lbm_gpu = lbm.pick_target("auto") == "gpu"  # the LBM needs cupy, not cuDSS
    device = torch.cuda.get_device_name() if cuda else "no GPU"
    print(
        f"torch {torch.__version__}, GPU: {device}, CPU solver {make_engine().name}, "
        f"{torch.get_num_threads()} torch thread(s); CPU columns up to {args.cpu_max}x{args.cpu_max}\n"
    )
    if "single" in args.tables:
        single_fracture_table(args.sizes, args.cpu_max, args.repeats, use_gpu)
    if "batch" in args.tables:
        batch_table(args.repeats, use_gpu)
    if "pcg" in args.tables and use_gpu:
        pcg_table(args.pcg_sizes, args.repeats, args.jacobi_max, args.jacobi_max_iter)
    if "lbm" in args.tables:
        targets = [t for t in args.lbm_targets if t == "cpu" or lbm_gpu]
        lbm_table(args.lbm_count, targets, args.lbm_threads)


if __name__ == "__main__":
    main()
