"""GPU benchmark of the differentiable pressure solve, side by side with the CPU backend; prints markdown tables.

    python benchmarks/bench_gpu.py                      # everything; CPU columns up to 2048x2048
    python benchmarks/bench_gpu.py --cpu-max 1024       # CPU columns only up to 1024x1024 (2048^2 takes minutes)
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
4. the LBM generator (lbmpy) on the GPU and on the CPU: million lattice-cell updates per second (MLUPS) for a
   fracture of the default recipe at 256x256 (``--lbm-size``), both runs stopped after the same steps, and how far apart their
   pressure fields end.

Without a CUDA device the GPU columns say so and the CPU columns still run. Times are medians of a few repeats.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np
import torch
from fields import loss_of, rough_log_k

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.data.generate import DatasetConfig, generate_fracture
from flowlearn.data.lbm import LBMSettings
from flowlearn.engines import make_engine
from flowlearn.engines.gpu import GPUEngine
from flowlearn.errors import ConvergenceError, GPUUnavailableError

SIZES = (256, 1024, 2048, 4096)
BATCHES = (1, 8, 64)
TABLES = ("single", "batch", "pcg", "lbm")
# The LBM table's runs stop at the second flow-rate check (1 + 2 * LBM_INTERVAL steps): a throughput measurement,
# the same steps on both devices.
LBM_INTERVAL = 200


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


def pcg_table(sizes: list[int], repeats: int, jacobi_max: int) -> None:
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
            solver = GPUEngine(method=method, preconditioner=preconditioner)
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


def lbm_table(size: int, use_gpu: bool) -> None:
    config = DatasetConfig(shape=(size, size))
    params = config.roughness(0)
    print("\n| LBM (lbmpy D3Q19 TRT) | fracture (voxels) | steps | seconds | MLUPS |")
    print("|---|---|---|---|---|")
    pressures = {}
    for target in ("gpu", "cpu") if use_gpu else ("cpu",):
        settings = LBMSettings(target=target, tolerance=1.0, check_interval=LBM_INTERVAL)
        fracture = generate_fracture(params, settings, config.voxel_size, "bench", progress=False)
        record = fracture.provenance["lbm"]
        box = "x".join(str(n) for n in fracture.provenance["voxel_box"])
        print(
            f"| {target} | {box} | {record['convergence']['steps']} | {record['seconds']:.2f} "
            f"| {record['mlups']:,.0f} |",
            flush=True,
        )
        pressures[target] = fracture.pressure[fracture.mask]
    if use_gpu:
        gap = float(np.max(np.abs(pressures["gpu"] - pressures["cpu"])))
        print(f"\nLargest difference of the two pressure fields (heads 2 -> 1): {gap:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="*", type=int, default=list(SIZES), choices=SIZES)
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
    parser.add_argument("--lbm-size", type=int, default=256, help="the LBM fracture's side (default 256)")
    parser.add_argument(
        "--jacobi-max",
        type=int,
        default=2048,
        help="largest grid side of the Jacobi PCG column (default 2048)",
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

    use_gpu = gpu_solver() is not None
    device = torch.cuda.get_device_name() if use_gpu else "no GPU"
    print(
        f"torch {torch.__version__}, GPU: {device}, CPU solver {make_engine().name}, "
        f"{torch.get_num_threads()} torch thread(s); CPU columns up to {args.cpu_max}x{args.cpu_max}\n"
    )
    if "single" in args.tables:
        single_fracture_table(args.sizes, args.cpu_max, args.repeats, use_gpu)
    if "batch" in args.tables:
        batch_table(args.repeats, use_gpu)
    if "pcg" in args.tables and use_gpu:
        pcg_table(args.sizes, args.repeats, args.jacobi_max)
    if "lbm" in args.tables:
        lbm_table(args.lbm_size, use_gpu)


if __name__ == "__main__":
    main()
