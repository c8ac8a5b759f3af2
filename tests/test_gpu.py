"""The GPU engine: torch assembly, the batched PCG, solver selection and device errors.

Everything the GPU path computes in plain torch (assembly from the layout's index maps, the row-padded matvec, the
batched PCG, the engine and the op's rules around it) runs here on CPU tensors, against the numpy/scipy assembly
and the CPU solvers. The tests marked ``gpu`` need a CUDA device (and, for cuDSS, nvmath-python) and are skipped
without one.
"""

import importlib.util
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.func import jacfwd, jacrev

from flowlearn import ConvergenceError, DarcyProblem, Grid, SolveInputError, solve_pressure
from flowlearn.engines import get_engine, make_engine
from flowlearn.engines.gpu import CUDSS_LOGGER, EllPattern, GPUEngine, _load_cudss, _threading_layer
from flowlearn.engines.pcg import batched_pcg
from flowlearn.errors import GPUUnavailableError

CUDA = torch.cuda.is_available()
NVMATH = importlib.util.find_spec("nvmath") is not None
cuda_only = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
cudss_only = pytest.mark.skipif(not (CUDA and NVMATH), reason="needs a CUDA GPU and nvmath-python (.[gpu])")
needs_cuda = [pytest.mark.gpu, cuda_only]
needs_cudss = [pytest.mark.gpu, cudss_only]


def _problem_2d(shape=(14, 17), seed=0) -> DarcyProblem:
    """A fracture with contact spots, an interior Dirichlet node and sources."""
    rng = np.random.default_rng(seed)
    active = rng.random(shape) > 0.12
    active[:, [0, -1]] = True
    base = DarcyProblem.fracture(shape, active=active, drop_unconnected=True)
    fixed = base.dirichlet.copy()
    fixed[shape[0] // 2, shape[1] // 2] = base.active[shape[0] // 2, shape[1] // 2]
    values = np.where(fixed, rng.uniform(1, 2, size=shape), 0.0)
    sources = np.where(base.active & ~fixed, rng.normal(scale=1e-2, size=shape), 0.0)
    return DarcyProblem(base.grid, fixed, values, sources=sources, active=base.active)


def _problem_3d(shape: tuple[int, int, int] = (5, 4, 3)) -> DarcyProblem:
    grid = Grid((0, 0, 0), (1, 2, 1), shape)
    fixed = np.zeros(grid.shape, dtype=bool)
    fixed[..., 0] = fixed[..., -1] = True
    active = np.ones(grid.shape, dtype=bool)
    active[1, 2, 2] = False
    values = np.where(fixed, 1.0 + np.arange(fixed.size).reshape(grid.shape) / fixed.size, 0.0)
    return DarcyProblem(grid, fixed, values, sources=np.full(grid.shape, 0.05), active=active)


def _fields(batch, shape, seed=1, device="cpu") -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *shape, dtype=torch.float64, generator=generator).to(device)


def _exact_pcg_solver(device="cpu") -> GPUEngine:
    # Tight tolerance, no warm starts: every solve independent of the last, as finite differences need.
    return GPUEngine(method="pcg", device=device, rtol=1e-13, reuse=False)


# --- torch assembly against the numpy/scipy assembly ------------------------------------------------------------


@pytest.mark.parametrize("make_problem", [_problem_2d, _problem_3d], ids=["2d", "3d"])
def test_torch_assembly_equals_the_scipy_assembly(make_problem):
    problem = make_problem()
    layout = problem.layout
    log_k = _fields(3, problem.grid.shape).reshape(3, -1)
    heads = torch.from_numpy(problem.dirichlet_values.reshape(-1)) + torch.rand(
        3, layout.num_nodes, dtype=torch.float64
    )
    sources = (
        torch.from_numpy(problem.sources.reshape(-1)) * torch.arange(1.0, 4.0, dtype=torch.float64)[:, None]
    )
    t = layout.torch_transmissibilities(log_k)
    values = layout.torch_matrix_values(t)
    rhs = layout.torch_rhs(t, heads, sources)
    for i in range(3):
        t_np = layout.transmissibilities(log_k[i : i + 1].numpy())[0]
        np.testing.assert_allclose(t[i].numpy(), t_np, rtol=1e-15)
        # The same numbers in the same storage: the CSC data of A, which is also its CSR data (A is symmetric).
        expected = layout.matrix(t_np)
        np.testing.assert_allclose(values[i].numpy(), expected.data, rtol=1e-14)
        csr = sp.csr_matrix((values[i].numpy(), layout.indices, layout.indptr), shape=expected.shape)
        assert abs(csr - expected).max() <= 1e-14 * abs(expected).max()
        np.testing.assert_allclose(
            rhs[i].numpy(), layout.rhs(t_np, heads[i].numpy(), sources[i].numpy()), rtol=1e-14, atol=1e-300
        )


def test_row_padded_matvec_and_diagonal_equal_scipy():
    problem = _problem_3d()
    layout = problem.layout
    ell = EllPattern(layout.indptr, layout.indices, torch.device("cpu"))
    t = layout.torch_transmissibilities(_fields(2, problem.grid.shape).reshape(2, -1))
    values = layout.torch_matrix_values(t)
    x = torch.randn(2, layout.num_free, dtype=torch.float64)
    product = ell.matvec(ell.padded(values), x)
    for i in range(2):
        n = layout.num_free
        matrix = sp.csr_matrix((values[i].numpy(), layout.indices, layout.indptr), shape=(n, n))
        np.testing.assert_allclose(product[i].numpy(), matrix @ x[i].numpy(), rtol=1e-13, atol=1e-15)
        np.testing.assert_array_equal(ell.diagonal(values)[i].numpy(), matrix.diagonal())


# --- the batched PCG --------------------------------------------------------------------------------------------


def _spd_batch(n=120, batch=3, seed=7):
    """B tridiagonal SPD systems with different diagonals, as dense (B, n, n) tensors and right-hand sides."""
    rng = np.random.default_rng(seed)
    matrices = []
    for i in range(batch):
        diag = 2.0 + 10.0**i * rng.random(n)  # condition numbers differing by orders of magnitude
        matrices.append(np.diag(diag) - np.diag(np.ones(n - 1), 1) - np.diag(np.ones(n - 1), -1))
    return torch.from_numpy(np.stack(matrices)), torch.from_numpy(rng.normal(size=(batch, n)))


def test_batched_pcg_reaches_the_energy_norm_tolerance_per_item():
    matrices, rhs = _spd_batch()
    rhs[1] = 0.0  # a zero rhs has the zero solution
    inverse_diagonal = 1 / torch.diagonal(matrices, dim1=1, dim2=2)
    result = batched_pcg(
        lambda x: torch.einsum("bij,bj->bi", matrices, x),
        lambda r: inverse_diagonal * r,
        rhs,
        torch.ones_like(rhs),  # a poor start, to be forgotten
        rtol=1e-12,
        max_iter=1000,
    )
    assert bool(result.converged.all())
    exact = torch.linalg.solve(matrices, rhs)
    assert torch.equal(result.solution[1], torch.zeros_like(rhs[1]))
    for i in (0, 2):
        error = result.solution[i] - exact[i]
        energy = torch.sqrt(error @ matrices[i] @ error) / torch.sqrt(exact[i] @ matrices[i] @ exact[i])
        assert energy <= 1e-11


def test_batched_pcg_reports_items_that_miss_the_tolerance():
    matrices, rhs = _spd_batch()
    result = batched_pcg(lambda x: torch.einsum("bij,bj->bi", matrices, x), lambda r: r, rhs, None, 1e-12, 3)
    assert result.iterations == 3 and not bool(result.converged.any())
    assert bool((result.error_estimate > 1e-12).all())
    # Started at the exact solution, it stops at once.
    exact = torch.linalg.solve(matrices, rhs)
    result = batched_pcg(lambda x: torch.einsum("bij,bj->bi", matrices, x), lambda r: r, rhs, exact, 1e-12, 3)
    assert result.iterations == 0 and bool(result.converged.all())


# --- the torch engine through the op, on CPU tensors ------------------------------------------------------------


@pytest.mark.parametrize("make_problem", [_problem_2d, _problem_3d], ids=["2d", "3d"])
def test_torch_engine_agrees_with_the_cpu_direct_solver(make_problem):
    problem = make_problem()
    log_k = _fields(3, problem.grid.shape, seed=2)
    reference = solve_pressure(log_k, problem, solver=make_engine("superlu"))
    pressure = solve_pressure(log_k, problem, solver=_exact_pcg_solver())
    active = torch.from_numpy(problem.active).expand_as(reference)
    assert torch.isnan(pressure[~active]).all()
    relative = ((pressure - reference).abs() / reference.abs())[active]
    assert relative.max() <= 1e-9


@pytest.mark.parametrize("make_problem", [_problem_2d, _problem_3d], ids=["2d", "3d"])
def test_torch_engine_gradcheck_and_gradgradcheck(make_problem):
    # Small problems: gradgradcheck's finite differences cost (inputs × outputs) solves.
    problem = _problem_2d(shape=(5, 6), seed=3) if make_problem is _problem_2d else make_problem((3, 3, 3))
    active = torch.from_numpy(problem.active)
    solver = _exact_pcg_solver()
    shape = (1, *problem.grid.shape)  # batches are covered in test_batch.py
    generator = torch.Generator().manual_seed(0)
    log_k = torch.randn(shape, generator=generator, dtype=torch.float64)
    heads = torch.from_numpy(problem.dirichlet_values).expand(shape) + 0.1 * torch.randn(
        shape, generator=generator, dtype=torch.float64
    )
    sources = torch.from_numpy(problem.sources).expand(shape).clone()
    inputs = tuple(x.clone().requires_grad_() for x in (log_k, heads, sources))

    def pressure_at_active_nodes(log_k, heads, sources):
        return solve_pressure(log_k, problem, heads, sources, solver=solver)[:, active]

    assert gradcheck(pressure_at_active_nodes, inputs)
    assert gradgradcheck(pressure_at_active_nodes, inputs)


def test_torch_engine_forward_mode_equals_reverse_mode():
    problem = _problem_2d(shape=(6, 7), seed=4)
    active = torch.from_numpy(problem.active)
    solver = _exact_pcg_solver()
    log_k = _fields(1, problem.grid.shape, seed=5)[0]

    def pressure(log_k):
        return solve_pressure(log_k, problem, solver=solver)[active]

    forward, reverse = jacfwd(pressure)(log_k), jacrev(pressure)(log_k)
    torch.testing.assert_close(forward, reverse, rtol=1e-9, atol=1e-12)
    assert forward.abs().max() > 0


def test_torch_engine_warm_starts_stay_exact_over_a_training_like_sequence():
    problem = _problem_2d(shape=(24, 30), seed=6)
    solver = GPUEngine(method="pcg", device="cpu", rtol=1e-11)
    reference = make_engine("superlu", reuse=False)
    log_k = _fields(2, problem.grid.shape, seed=7)
    rng = np.random.default_rng(8)
    iterations = []
    for _ in range(4):
        log_k = log_k * (1 + 1e-3 * torch.from_numpy(rng.normal(size=log_k.shape)))
        x, y = log_k.clone().requires_grad_(), log_k.clone().requires_grad_()
        solver.reset_stats()
        p = solve_pressure(x, problem, solver=solver)
        iterations.append(solver.stats.pcg_iterations)
        q = solve_pressure(y, problem, solver=reference)
        # rtol bounds the energy-norm error: compare against the largest head.
        torch.testing.assert_close(
            p, q, rtol=0, atol=1e-9 * q.nan_to_num().abs().max().item(), equal_nan=True
        )
        torch.nan_to_num(p).pow(2).sum().backward()
        torch.nan_to_num(q).pow(2).sum().backward()
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-8, atol=1e-10 * y.grad.abs().max().item())
    # The previous pressure is a good start: later solves need fewer iterations than the first.
    assert max(iterations[1:]) < iterations[0]


def test_pcg_that_does_not_converge_raises():
    problem = _problem_2d(shape=(30, 30), seed=9)
    solver = GPUEngine(method="pcg", device="cpu", max_iter=3)
    with pytest.raises(
        ConvergenceError,
        match=r"Jacobi-preconditioned CG on cpu did not reach rtol=1e-11 within 3 iterations",
    ):
        solve_pressure(_fields(2, problem.grid.shape), problem, solver=solver)


# --- selection, construction and device errors ------------------------------------------------------------------


def test_cudss_progress_messages_stay_out_of_a_runs_log(caplog):
    caplog.set_level(logging.INFO)  # a run's root logger, as Hydra sets it
    CUDSS_LOGGER.info("Starting solver phase FACTORIZATION...")  # what nvmath says of every call
    CUDSS_LOGGER.warning("cuDSS warns")
    assert [(r.name, r.levelname) for r in caplog.records] == [("flowlearn.cudss", "WARNING")]


@pytest.mark.skipif(CUDA, reason="checks the message on a machine without a CUDA GPU")
def test_gpu_solver_without_a_gpu_fails_at_construction():
    message = r"solver=gpu needs a CUDA GPU, but torch .* sees none \(torch.cuda.is_available\(\) is False\)"
    with pytest.raises(GPUUnavailableError, match=message):
        GPUEngine()
    with pytest.raises(GPUUnavailableError, match=message):
        get_engine("gpu")
    with pytest.raises(GPUUnavailableError, match=message):
        solve_pressure(torch.zeros(4, 5), DarcyProblem.fracture((4, 5)), solver="gpu")


@pytest.mark.skipif(NVMATH, reason="checks the message where nvmath-python is not installed")
def test_missing_cudss_library_names_the_install_command():
    with pytest.raises(
        GPUUnavailableError, match=r"cuDSS through nvmath-python.*pip install 'flowlearn\[gpu\]'"
    ):
        _load_cudss()


def test_cudss_threading_layer_is_the_users_or_the_one_beside_the_loaded_libcudss(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDSS_THREADING_LIB", "/opt/cudss/libcudss_mtlayer_gomp.so.0")
    assert _threading_layer() == "/opt/cudss/libcudss_mtlayer_gomp.so.0"
    monkeypatch.delenv("CUDSS_THREADING_LIB")
    # A shared object named as cuDSS's, loaded by a fresh process, with the layer beside it as the wheel installs it.
    library = tmp_path / "lib" / "libcudss.so.0"
    library.parent.mkdir()
    source = tmp_path / "empty.c"
    source.write_text("int flowlearn_test_symbol(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    code = (
        "import ctypes, sys\n"
        "from flowlearn.engines.gpu import _threading_layer\n"
        "before = _threading_layer()\n"
        "ctypes.CDLL(sys.argv[1])\n"
        "print(before, _threading_layer())\n"
    )

    def lookup() -> list[str]:
        return subprocess.run(
            [sys.executable, "-c", code, str(library)], capture_output=True, text=True, check=True
        ).stdout.split()

    assert lookup() == ["None", "None"]  # no layer beside it: cuDSS plans on one thread
    layer = library.parent / "libcudss_mtlayer_gomp.so.0"
    layer.write_bytes(b"")
    assert lookup() == ["None", str(layer)]


def test_bad_gpu_solver_arguments():
    with pytest.raises(ValueError, match=r"unknown GPU solve method 'lu'"):
        GPUEngine(method="lu")
    with pytest.raises(
        ValueError, match=r"cuDSS, which runs on CUDA devices only; device='cpu' is for method='pcg'"
    ):
        GPUEngine(method="direct", device="cpu")
    with pytest.raises(ValueError, match=r"rtol must lie in \(0, 1\)"):
        GPUEngine(method="pcg", device="cpu", rtol=0)
    with pytest.raises(ValueError, match=r"max_iter must be a positive integer, got 0"):
        GPUEngine(method="pcg", device="cpu", max_iter=0)
    with pytest.raises(ValueError, match=r"refactor_iterations must be a positive integer, got -1"):
        GPUEngine(method="pcg", device="cpu", refactor_iterations=-1)
    with pytest.raises(ValueError, match=r"memory_fraction must lie in \(0, 1\], got 1.5"):
        GPUEngine(method="pcg", device="cpu", memory_fraction=1.5)
    with pytest.raises(
        ValueError, match=r"unknown PCG preconditioner 'ilu'; choose one of \['jacobi', 'factor'\]"
    ):
        GPUEngine(method="pcg", device="cpu", preconditioner="ilu")
    with pytest.raises(
        ValueError, match=r"preconditioner='factor' is PCG's; method='direct' does not iterate"
    ):
        GPUEngine(method="direct", device="cpu", preconditioner="factor")
    with pytest.raises(ValueError, match=r"preconditioner='factor'\) factorises with cuDSS"):
        GPUEngine(method="pcg", device="cpu", preconditioner="factor")
    with pytest.raises(
        ValueError, match=r"unknown solver 'cuda'; choose one of \['auto', 'cholmod', 'superlu'"
    ):
        get_engine("cuda")
    with pytest.raises(SolveInputError, match=r"solver must be a name .* got int"):
        get_engine(3)


def test_device_mismatch_errors_say_what_to_do():
    problem = DarcyProblem.fracture((4, 5))
    meta = torch.zeros(4, 5, device="meta")
    with pytest.raises(
        SolveInputError, match=r"log_k is on device meta, but solver 'superlu' runs on cpu; .*\.to\('cpu'\)"
    ):
        solve_pressure(meta, problem, solver=make_engine("superlu"))
    with pytest.raises(
        SolveInputError, match=r"log_k is on device meta, but solver 'gpu' runs on cpu; .*\.to\('cpu'\)"
    ):
        solve_pressure(meta, problem, solver=_exact_pcg_solver())


def test_the_cpu_path_imports_no_gpu_library():
    code = (
        "import sys, torch\n"
        "from flowlearn import DarcyProblem, solve_pressure\n"
        "solve_pressure(torch.zeros(6, 7), DarcyProblem.fracture((6, 7)))\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('nvmath', 'cupy')], 'GPU library imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(CUDA, reason="checks the benchmark's output without a GPU")
def test_gpu_benchmark_without_a_gpu_says_so_and_runs_the_cpu_columns():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"
    out = subprocess.run(
        [sys.executable, str(script), "--sizes", "256", "--tables", "single", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "No GPU columns: solver=gpu needs a CUDA GPU" in out
    row = next(line for line in out.splitlines() if line.startswith("| 256x256 |")).split("|")
    gpu_first, gpu_step, cpu_first, cpu_step = (cell.strip() for cell in row[3:7])
    assert gpu_first == gpu_step == "—" and float(cpu_first) > 0 and float(cpu_step) > 0


# --- on a CUDA device -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method", [pytest.param("direct", marks=needs_cudss), pytest.param("pcg", marks=needs_cuda)]
)
@pytest.mark.parametrize("make_problem", [_problem_2d, _problem_3d], ids=["2d", "3d"])
def test_gpu_agrees_with_the_cpu_backend(method, make_problem):
    problem = make_problem()
    log_k = _fields(3, problem.grid.shape, seed=10)
    reference = solve_pressure(log_k, problem, solver=make_engine("superlu"))
    pressure = solve_pressure(log_k.cuda(), problem, solver=GPUEngine(method=method, rtol=1e-13))
    assert pressure.device.type == "cuda" and pressure.dtype == torch.float64
    active = torch.from_numpy(problem.active).expand_as(reference)
    relative = ((pressure.cpu() - reference).abs() / reference.abs())[active]
    assert relative.max() <= 1e-9


@pytest.mark.parametrize(
    "method", [pytest.param("direct", marks=needs_cudss), pytest.param("pcg", marks=needs_cuda)]
)
@pytest.mark.parametrize("form", ["axes", "tensor"])
def test_gpu_solves_per_axis_and_tensor_conductivities_as_the_cpu_does(method, form):
    problem = _problem_2d()
    shape = problem.grid.shape
    log_k = _fields(2, (2, *shape), seed=20)
    rho = (
        0.8 * torch.rand(2, 1, *shape, generator=torch.Generator().manual_seed(21), dtype=torch.float64) - 0.4
    )
    field = log_k if form == "axes" else torch.cat([log_k, rho], dim=1)
    reference = solve_pressure(field, problem, solver=make_engine("superlu"))
    x = field.cuda().requires_grad_()
    pressure = solve_pressure(x, problem, solver=GPUEngine(method=method, rtol=1e-13))
    torch.testing.assert_close(pressure.detach().cpu(), reference, rtol=1e-9, atol=0, equal_nan=True)
    torch.nan_to_num(pressure).pow(2).sum().backward()
    y = field.clone().requires_grad_()
    torch.nan_to_num(solve_pressure(y, problem, solver=make_engine("superlu"))).pow(2).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), y.grad, rtol=1e-8, atol=1e-11 * y.grad.abs().max().item())


@pytest.mark.parametrize(
    "method", [pytest.param("direct", marks=needs_cudss), pytest.param("pcg", marks=needs_cuda)]
)
@pytest.mark.parametrize("make_problem", [_problem_2d, _problem_3d], ids=["2d", "3d"])
def test_gpu_gradcheck_and_gradgradcheck(method, make_problem):
    problem = _problem_2d(shape=(5, 6), seed=3) if make_problem is _problem_2d else make_problem()
    active = torch.from_numpy(problem.active).cuda()
    solver = GPUEngine(method=method, rtol=1e-13, reuse=False)
    shape = (2, *problem.grid.shape)
    log_k = _fields(2, problem.grid.shape, seed=11, device="cuda")
    heads = torch.from_numpy(problem.dirichlet_values).cuda().expand(shape) + 0.1 * _fields(
        2, problem.grid.shape, seed=12, device="cuda"
    )
    sources = torch.from_numpy(problem.sources).cuda().expand(shape).clone()
    inputs = tuple(x.clone().requires_grad_() for x in (log_k, heads, sources))

    def pressure_at_active_nodes(log_k, heads, sources):
        return solve_pressure(log_k, problem, heads, sources, solver=solver)[:, active]

    # The backward scatters edge terms onto nodes with CUDA's atomic adds, whose order varies from run to run:
    # repeated backward passes agree to round-off, not bit for bit.
    assert gradcheck(pressure_at_active_nodes, inputs, nondet_tol=1e-12)
    assert gradgradcheck(pressure_at_active_nodes, inputs, nondet_tol=1e-12)


@pytest.mark.gpu
@cudss_only
def test_gpu_batch_is_factorised_once_and_the_adjoint_reuses_the_factor():
    problem = _problem_2d(shape=(32, 40), seed=13)
    solver = GPUEngine(method="direct")
    log_k = _fields(8, problem.grid.shape, seed=14, device="cuda").requires_grad_()
    pressure = solve_pressure(log_k, problem, solver=solver)
    torch.nan_to_num(pressure).pow(2).sum().backward()
    # Eight fractures, one batched factorisation; forward and adjoint both solve with it.
    assert solver.stats.factorizations == 1 and solver.stats.direct_solves == 2
    assert solver.factor_bytes() > 0
    reference = log_k.detach().cpu().requires_grad_()
    reference_pressure = solve_pressure(reference, problem, solver=make_engine("superlu"))
    torch.nan_to_num(reference_pressure).pow(2).sum().backward()
    torch.testing.assert_close(
        pressure.detach().cpu(), reference_pressure.detach(), rtol=1e-9, atol=0, equal_nan=True
    )
    torch.testing.assert_close(
        log_k.grad.cpu(), reference.grad, rtol=1e-8, atol=1e-12 * reference.grad.abs().max()
    )
    # Freed factors are rebuilt on demand.
    solver.free()
    assert solver.factor_bytes() == 0
    again = solve_pressure(log_k.detach(), problem, solver=solver)
    assert solver.stats.factorizations == 2
    # The same matrices factorised again: the same pressures to round-off (cuDSS's sums need not run in one order).
    torch.testing.assert_close(again, pressure.detach(), rtol=1e-10, atol=0, equal_nan=True)


@pytest.mark.gpu
@cudss_only
def test_cudss_solves_in_a_thread_other_than_the_one_that_loaded_it():
    # Autograd runs the adjoint solve, which may factorise, in a thread of its own; nvmath-python 1.0 readies only
    # its importing thread for reading cuDSS's attributes (the analysis's memory estimates, the factor's status).
    problem = _problem_2d(shape=(16, 20), seed=17)
    solver = GPUEngine(method="direct")  # loads nvmath in this thread
    log_k = _fields(2, problem.grid.shape, seed=18)
    outcome: dict[str, object] = {}

    def solve() -> None:
        try:
            outcome["pressure"] = solve_pressure(log_k.cuda(), problem, solver=solver).cpu()
        except Exception as error:  # handed to the test's thread, which reports it
            outcome["error"] = error

    thread = threading.Thread(target=solve)
    thread.start()
    thread.join()
    assert "error" not in outcome, repr(outcome.get("error"))
    assert solver.stats.factorizations == 1
    reference = solve_pressure(log_k, problem, solver=make_engine("superlu"))
    torch.testing.assert_close(outcome["pressure"], reference, rtol=1e-9, atol=0, equal_nan=True)


@pytest.mark.gpu
@cudss_only
def test_a_factor_analysed_under_inference_mode_serves_training_after():
    # Lightning validates under torch.inference_mode before it trains; the factor analysed there keeps the buffers
    # that training's matrices are later copied into.
    problem = _problem_2d(shape=(16, 20), seed=19)
    solver = GPUEngine(method="direct")
    log_k = _fields(2, problem.grid.shape, seed=20, device="cuda")
    with torch.inference_mode():
        solve_pressure(log_k, problem, solver=solver)
    trained = (log_k * 1.01).requires_grad_()
    pressure = solve_pressure(trained, problem, solver=solver)
    torch.nan_to_num(pressure).pow(2).sum().backward()
    assert solver.stats.factorizations == 2 and torch.isfinite(trained.grad).all()
    reference = solve_pressure(trained.detach().cpu(), problem, solver=make_engine("superlu"))
    torch.testing.assert_close(pressure.detach().cpu(), reference, rtol=1e-9, atol=0, equal_nan=True)


@pytest.mark.gpu
@cudss_only
def test_auto_iterates_when_the_factor_would_not_fit():
    problem = _problem_2d(shape=(20, 24), seed=15)
    # No factor fits in 1e-12 of the memory. rtol bounds the energy-norm error: 1e-13 for 1e-9 at every node.
    solver = GPUEngine(method="auto", memory_fraction=1e-12, rtol=1e-13)
    log_k = _fields(2, problem.grid.shape, seed=16)
    pressure = solve_pressure(log_k.cuda(), problem, solver=solver).cpu()
    assert solver.stats.pcg_solves == 1 and solver.stats.factorizations == 0
    reference = solve_pressure(log_k, problem, solver=make_engine("superlu"))
    torch.testing.assert_close(pressure, reference, rtol=1e-9, atol=0, equal_nan=True)


@pytest.mark.gpu
@cuda_only
def test_cpu_and_cuda_tensors_with_the_wrong_solver():
    problem = DarcyProblem.fracture((4, 5))
    with pytest.raises(
        SolveInputError, match=r"log_k is on device cuda:0, but solver .* runs on cpu.*solver='gpu'"
    ):
        solve_pressure(torch.zeros(4, 5, device="cuda"), problem, solver="auto")
    with pytest.raises(
        SolveInputError, match=r"log_k is on device cpu, but solver 'gpu' runs on cuda:0.*solver='auto'"
    ):
        solve_pressure(torch.zeros(4, 5), problem, solver=GPUEngine(method="pcg"))


@pytest.mark.gpu
@cudss_only
def test_pcg_preconditioned_by_an_earlier_factor_stays_exact_in_few_iterations():
    problem = _problem_2d(shape=(48, 60), seed=17)
    solver = GPUEngine(method="pcg", preconditioner="factor", rtol=1e-12, refactor_iterations=12)
    reference = make_engine("superlu", reuse=False)
    log_k = _fields(4, problem.grid.shape, seed=18)
    rng = np.random.default_rng(19)
    for step in range(4):
        # A training-like step: every conductivity moves by ~1e-3 relative.
        log_k = log_k * (1 + 1e-3 * torch.from_numpy(rng.normal(size=log_k.shape)))
        x = log_k.cuda().requires_grad_()
        y = log_k.clone().requires_grad_()
        solver.reset_stats()
        p = solve_pressure(x, problem, solver=solver)
        torch.nan_to_num(p).pow(2).sum().backward()
        q = solve_pressure(y, problem, solver=reference)
        torch.nan_to_num(q).pow(2).sum().backward()
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-9, atol=0, equal_nan=True)
        torch.testing.assert_close(x.grad.cpu(), y.grad, rtol=1e-8, atol=1e-11 * y.grad.abs().max().item())
        if step == 0:  # the first matrix is factorised, and both solves are direct
            assert (solver.stats.factorizations, solver.stats.direct_solves, solver.stats.pcg_solves) == (
                1,
                2,
                0,
            )
        else:  # later ones iterate with that factor: a few iterations each, whatever the grid
            assert solver.stats.factorizations == 0 and solver.stats.pcg_solves == 2
            assert 0 < solver.stats.pcg_iterations <= 2 * 12
    # A large change costs more iterations than refactor_iterations: the next new matrix is factorised afresh.
    far = log_k + 1.0 * torch.from_numpy(rng.normal(size=log_k.shape))
    solver.reset_stats()
    solve_pressure(far.cuda(), problem, solver=solver)
    assert solver.stats.pcg_iterations > 12 and solver.stats.factorizations == 0
    pressure = solve_pressure((far * 1.001).cuda(), problem, solver=solver)
    assert solver.stats.factorizations == 1
    reference_pressure = solve_pressure(far * 1.001, problem, solver=reference)
    torch.testing.assert_close(pressure.cpu(), reference_pressure, rtol=1e-9, atol=0, equal_nan=True)


def _per_epoch(run_dir: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    from flowlearn.runs import metric_series, read_metrics

    metrics = read_metrics(run_dir)
    return {name: metric_series(metrics, name)[1] for name in names}


@pytest.mark.gpu
@cudss_only
@pytest.mark.parametrize("experiment", ["embedded", "paper", "paper_gauss_newton"])
def test_training_on_the_gpu_matches_the_cpu_run_step_by_step(experiment, tmp_path):
    from conftest import EXAMPLE_FRACTURE
    from step_losses import read_step_losses
    from test_train import run_train

    if experiment.startswith("paper"):
        if not EXAMPLE_FRACTURE.exists():
            pytest.skip(f"{EXAMPLE_FRACTURE} is not present")
        epochs = 5 if experiment == "paper_gauss_newton" else 20
        overrides = ["experiment=paper", f"data.path={EXAMPLE_FRACTURE}", f"trainer.max_epochs={epochs}"]
        names = ("train/loss",)
    else:
        epochs = 3
        overrides = [f"trainer.max_epochs={epochs}"]
        names = ("train/loss", "val/mse", "val/flow_rate_err")
    # Adam's steps carry the solves' round-off (1e-11) as it is; Gauss-Newton's truncated CG on a per-pixel W (66,560
    # parameters, damping 1e-3) amplifies it: two CPU runs with direct solvers that differ only in their summation
    # order (SuperLU, CHOLMOD; or 2 against 16 cores) part by 1e-4 relative after one step and 0.5-1.3 % after four.
    # Its first loss still matches to 1e-8, and its later ones to 3 %.
    rtol = 1e-8
    if experiment == "paper_gauss_newton":
        overrides.append("optimizer=gauss_newton")
        rtol = 3e-2
    tests = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tests), os.environ.get("PYTHONPATH")])),
    }

    def train(run: str, *more: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
        losses = tmp_path / f"{run}.steps"
        run_train(
            *overrides,
            *more,
            "+callbacks.step_losses._target_=step_losses.StepLosses",
            f"+callbacks.step_losses.path={losses}",
            run_dir=tmp_path / run,
            env=env,
        )
        assert (tmp_path / run / "predictions.h5").is_file()
        return _per_epoch(tmp_path / run, names), read_step_losses(losses)

    # The reference factorises every matrix. The default CPU engine solves a one-off matrix of 3,000 unknowns or more
    # (the embedded 64x64 maps) by multigrid-preconditioned CG to rtol=1e-11, which moved the steps' losses by up to
    # 7e-8 relative against these direct solves; cuDSS's direct solve matched the direct CPU run to 2e-11.
    cpu, cpu_steps = train("cpu", "solver=superlu", "solver.reuse=false", "+solver.multigrid_unknowns=null")
    assert cpu_steps.size >= epochs and np.isfinite(cpu_steps).all()
    # The model on the GPU with the solver; and the model on the CPU, whose solves the module hands to the GPU.
    for run, accelerator in (("gpu", "gpu"), ("gpu_solver", "cpu")):
        gpu, gpu_steps = train(run, "solver=gpu", f"trainer.accelerator={accelerator}")
        np.testing.assert_allclose(gpu_steps[0], cpu_steps[0], rtol=1e-8, err_msg=f"{run}: the first loss")
        np.testing.assert_allclose(gpu_steps, cpu_steps, rtol=rtol, err_msg=f"{run}: the steps' losses")
        for name in names:
            assert gpu[name].size == cpu[name].size > 0 and np.isfinite(gpu[name]).all()
            np.testing.assert_allclose(gpu[name], cpu[name], rtol=rtol, err_msg=f"{run}: {name}")
