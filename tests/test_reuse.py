"""Reuse across solves (factor as preconditioner, warm starts) stays exact, and failures are loud."""

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
from conftest import DIRECT_BACKENDS, NO_CHOLMOD

from flowlearn import ConvergenceError, DarcyProblem, solve_pressure, threads
from flowlearn.engines import cholmod_available, make_engine
from flowlearn.engines import pcg as pcg_module
from flowlearn.engines.factor import _start
from flowlearn.engines.pcg import pcg, symmetric_product, whole
from flowlearn.sparse import THREADED_ENTRIES


def _field(shape, seed):
    return torch.from_numpy(np.random.default_rng(seed).normal(scale=1.0, size=shape))


def _training_steps(problem, solver, log_k, steps, seed=0):
    """``steps`` training-like steps: log_k moved by ~1e-3 relative, a forward and backward solve. Returns the
    last log_k and the solver's (factorizations, pcg_solves) after each step."""
    rng = np.random.default_rng(seed)
    counts = []
    for _ in range(steps):
        log_k = log_k * (1 + 1e-3 * torch.from_numpy(rng.normal(size=log_k.shape)))
        solve_pressure(log_k.clone().requires_grad_(), problem, solver=solver).pow(2).sum().backward()
        counts.append((solver.stats.factorizations, solver.stats.pcg_solves))
    return log_k, counts


def _reuses(counts, steps):
    """Whether the last ``steps`` steps of ``counts`` (from :func:`_training_steps`) each solved by CG with an old
    factor, its forward and adjoint, with at most one replacement of the factor."""
    (factorizations, pcg_solves), (last_factorizations, last_pcg_solves) = counts[-steps - 1], counts[-1]
    return last_factorizations - factorizations <= 1 and last_pcg_solves - pcg_solves >= 2 * (steps - 1)


@pytest.mark.parametrize("backend", DIRECT_BACKENDS)
def test_adjoint_reuses_the_forward_factor(backend):
    problem = DarcyProblem.fracture((20, 24))
    solver = make_engine(backend)
    log_k = _field((3, 20, 24), 0).requires_grad_()
    solve_pressure(log_k, problem, solver=solver).pow(2).sum().backward()
    # One factorisation per batch item; forward and adjoint solves both direct.
    assert solver.stats.factorizations == 3
    assert solver.stats.direct_solves == 6 and solver.stats.pcg_solves == 0


@pytest.mark.parametrize("backend", [*DIRECT_BACKENDS, "amg"])
def test_training_like_sequence_matches_fresh_solves(backend):
    problem = DarcyProblem.fracture((32, 40))
    # A fixed CG budget: the adaptive one would refactor a grid this small, where that is cheaper.
    solver = make_engine(backend, reuse_budget=20)
    reference = make_engine("superlu", reuse=False)
    log_k = _field((32, 40), 1)
    rng = np.random.default_rng(2)
    for _ in range(8):
        log_k = log_k * (1 + 1e-3 * torch.from_numpy(rng.normal(size=log_k.shape)))
        x = log_k.clone().requires_grad_()
        y = log_k.clone().requires_grad_()
        p_reused = solve_pressure(x, problem, solver=solver)
        p_fresh = solve_pressure(y, problem, solver=reference)
        p_reused.pow(3).sum().backward()
        p_fresh.pow(3).sum().backward()
        torch.testing.assert_close(p_reused, p_fresh, rtol=1e-9, atol=0)
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-8, atol=1e-12 * y.grad.abs().max().item())
    if backend != "amg":
        # Slightly changed conductivities are solved with the old factor as a preconditioner (CHOLMOD's quick
        # first factor serves only the first field).
        assert solver.stats.pcg_solves > 0
        assert solver.stats.factorizations == (2 if backend == "cholmod" else 1)


@pytest.mark.skipif(not cholmod_available(), reason=NO_CHOLMOD)
def test_cholmod_factors_one_off_matrices_quickly_and_nearby_ones_for_reuse():
    problem = DarcyProblem.fracture((32, 40))
    solver = make_engine("cholmod", reuse_budget=20)
    reference = make_engine("superlu", reuse=False)
    # Two unrelated fields (one-off solves), then a training-like sequence near the second.
    near = _field((32, 40), 4)
    fields = [_field((32, 40), 3), near, near * 1.001, near * 1.002]
    reusable = []
    for log_k in fields:
        x, y = log_k.clone().requires_grad_(), log_k.clone().requires_grad_()
        solve_pressure(x, problem, solver=solver).pow(2).sum().backward()
        solve_pressure(y, problem, solver=reference).pow(2).sum().backward()
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-8, atol=1e-12 * y.grad.abs().max().item())
        reusable.append(solver.prepared(problem).slots[0].factor.reusable)
    # Quick factors for the unrelated fields; the first nearby field gets a reusable factor, which preconditions
    # the next one. Each adjoint reuses its forward's factor or old factor.
    assert reusable == [False, False, True, True]
    assert solver.stats.factorizations == 3
    assert solver.stats.direct_solves == 6 and solver.stats.pcg_solves == 2


@pytest.mark.skipif(not cholmod_available(), reason=NO_CHOLMOD)
@pytest.mark.parametrize(("shape", "kind"), [((40, 50), "simplicial"), ((12, 12, 12), "supernodal")])
def test_cholmods_quick_factor_is_simplicial_on_small_2d_grids_and_supernodal_on_3d_ones(shape, kind):
    """Which of CHOLMOD's factors each grid gets, told apart by their stored entries: a supernodal L stores the
    zeros that pad its dense blocks, a simplicial one does not."""
    from sksparse import cholmod

    from flowlearn.engines.cholmod import CholmodEngine

    layout = DarcyProblem.fracture(shape).layout
    _, matrix = layout.system(0, _field(shape, 5).numpy().reshape(-1))
    engine = CholmodEngine()
    analysis = engine.analyze(matrix, layout)
    factor = engine.factorize(matrix, analysis, expect_reuse=False)
    stored = {
        mode: cholmod.analyze(matrix, mode=mode, ordering_method="amd").cholesky(matrix).L().nnz
        for mode in ("simplicial", "supernodal")
    }
    assert stored["simplicial"] < stored["supernodal"]
    assert analysis.quick.cholesky(matrix).L().nnz == stored[kind]
    assert not factor.reusable
    rhs = np.ones(matrix.shape[0])
    np.testing.assert_allclose(matrix @ factor.apply(rhs), rhs, rtol=1e-10)


@pytest.mark.parametrize("backend", DIRECT_BACKENDS)
def test_one_off_solves_leave_the_training_factor_alone(backend):
    problem = DarcyProblem.fracture((32, 40))
    solver = make_engine(backend, reuse_budget=20)  # reuse, not the timings' choice, on a grid this small
    reference = make_engine("superlu", reuse=False)

    def search(start):
        # A parameter search closing in: trial fields ever nearer each other, each with its gradient.
        for step in (0.0, 1e-3, 2e-3):
            x, y = (start * (1 + step)).requires_grad_(), (start * (1 + step)).requires_grad_()
            solve_pressure(x, problem, solver=solver, one_off=True).pow(2).sum().backward()
            solve_pressure(y, problem, solver=reference).pow(2).sum().backward()
            torch.testing.assert_close(x.grad, y.grad, rtol=1e-8, atol=1e-12 * y.grad.abs().max().item())

    search(_field((32, 40), 6))
    assert solver.prepared(problem).slots == {}  # nothing kept, so nothing taken for a training loop
    # Two training steps give the slot a reusable factor; a search between the next step's solves leaves it there.
    near = _field((32, 40), 4)
    for log_k in (near, near * 1.001):
        solve_pressure(log_k.clone().requires_grad_(), problem, solver=solver).pow(2).sum().backward()
    factor = solver.prepared(problem).slots[0].factor
    assert factor.reusable
    search(near * 1.5)
    factorizations, pcg_solves = solver.stats.factorizations, solver.stats.pcg_solves
    solve_pressure((near * 1.002).requires_grad_(), problem, solver=solver).pow(2).sum().backward()
    assert solver.prepared(problem).slots[0].factor is factor
    assert solver.stats.factorizations == factorizations and solver.stats.pcg_solves == pcg_solves + 2


@pytest.mark.skipif(not cholmod_available(), reason=NO_CHOLMOD)
@pytest.mark.parametrize(("shape", "ordering"), [((32, 40), "amd"), ((150, 150), "nesdis")])
def test_the_reused_factor_is_ordered_by_nested_dissection_only_where_that_repays_its_analysis(
    shape, ordering
):
    from sksparse import cholmod

    from flowlearn.engines.cholmod import NESTED_DISSECTION_UNKNOWNS, CholmodEngine

    layout = DarcyProblem.fracture(shape).layout
    _, matrix = layout.system(0, _field(shape, 5).numpy().reshape(-1))
    assert (matrix.shape[0] >= NESTED_DISSECTION_UNKNOWNS) == (ordering == "nesdis")
    # One core: the simplicial factor that CHOLMOD solves, at both sizes.
    engine = CholmodEngine(tree_solve_unknowns=None)
    analysis = engine.analyze(matrix, layout)
    engine.factorize(matrix, analysis, expect_reuse=True)
    expected = cholmod.analyze(matrix, mode="simplicial", ordering_method=ordering)
    np.testing.assert_array_equal(analysis.thorough.P(), expected.P())


def test_an_aged_factor_is_replaced_once_cg_costs_more_than_its_average_solve():
    problem = DarcyProblem.fracture((48, 48))
    # Every factor a reusable one (CHOLMOD's quick factors of one-off matrices are tested below).
    solver = make_engine("cholmod", quick_one_offs=False) if cholmod_available() else make_engine("superlu")
    log_k = _field((48, 48), 7)
    solve_pressure(log_k, problem, solver=solver)
    state = solver.prepared(problem)
    slot = state.slots[0]
    # Timings fixed by hand, so that the decision does not depend on this machine's speed.
    state.factor_seconds, state.apply_seconds = 1.0, 1e-3
    slot.life_seconds, slot.life_solves = 1.0, 1
    solve_pressure(log_k * 1.0001, problem, solver=solver)
    assert solver.stats.factorizations == 1 and solver.stats.pcg_solves == 1
    # Solves so far averaged 0.5 s (a 1 s factorisation, then CG); CG at 0.6 s a solve no longer pays.
    slot.life_seconds, slot.life_solves, slot.cg_seconds = 1.0, 2, 0.6
    solve_pressure(log_k * 1.0002, problem, solver=solver)
    assert solver.stats.factorizations == 2 and solver.stats.pcg_solves == 1


def test_a_slow_measurement_of_cg_does_not_stop_reuse_for_good():
    # A reusing 96x96 solve's CG iteration costs 1/50 of a factorisation; one slow first measurement (a kernel
    # compiling, seconds per iteration) made every later solve refactor.
    problem = DarcyProblem.fracture((96, 96))
    solver = make_engine()
    log_k, _ = _training_steps(problem, solver, _field((96, 96), 9), 3)
    solver.prepared(problem).apply_seconds = 100.0
    _, counts = _training_steps(problem, solver, log_k, 8)
    assert _reuses(counts, 6), counts


# A training-like run in a fresh process, whose numba kernels compile as they are first called.
COLD_START = """
import gc
import json
from test_reuse import _field, _training_steps
from flowlearn import DarcyProblem
from flowlearn.engines import make_engine

solver = make_engine()
_, counts = _training_steps(DarcyProblem.fracture((256, 260)), solver, _field((256, 260), 0), 16)
print(json.dumps(counts))
"""


@pytest.mark.slow  # compiles every kernel of a reusing solve: 30-40 s on 2 cores
def test_reuse_survives_a_cold_numba_cache(tmp_path):
    # The first reuses of a fresh install, CI job or node compile the kernels: seconds per CG iteration, from
    # which the engine had concluded once and for all that refactoring was cheaper (2.2-3.4x slower steps).
    tests = str(Path(__file__).parent)
    path = os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, "-c", COLD_START], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)
    assert _reuses(counts, 8), counts


def test_a_different_field_is_refactored_not_iterated():
    problem = DarcyProblem.fracture((16, 16))
    solver = make_engine("superlu")
    solve_pressure(_field((16, 16), 3), problem, solver=solver)
    solve_pressure(_field((16, 16), 4), problem, solver=solver)
    assert solver.stats.factorizations == 2 and solver.stats.pcg_solves == 0


def test_iterative_solve_that_does_not_converge_raises():
    problem = DarcyProblem.fracture((48, 48))
    solver = make_engine("amg", max_iter=2)
    with pytest.raises(
        ConvergenceError, match=r"amg-preconditioned CG did not reach rtol=1e-11 within 2 iterations"
    ):
        solve_pressure(3 * _field((48, 48), 5), problem, solver=solver)


@pytest.mark.parametrize("threaded", [False, True])
def test_pcg_reaches_the_energy_norm_tolerance_and_reports_failure(threaded, monkeypatch):
    # The compiled vector updates of large systems, forced onto this small one, against one-thread BLAS.
    monkeypatch.setattr(pcg_module, "THREADED_SIZE", 0 if threaded else 10**12)
    rng = np.random.default_rng(6)
    n = 200
    laplacian = sp.diags([-np.ones(n - 1), 2.0 + rng.random(n), -np.ones(n - 1)], [-1, 0, 1], format="csr")
    rhs = rng.normal(size=n)
    exact = np.linalg.solve(laplacian.toarray(), rhs)
    jacobi = 1 / laplacian.diagonal()
    result = pcg(
        symmetric_product(laplacian), rhs, whole(lambda r: jacobi * r), None, rtol=1e-12, max_iter=1000
    )
    assert result.converged
    energy_error = np.sqrt((result.solution - exact) @ laplacian @ (result.solution - exact))
    assert energy_error <= 1e-11 * np.sqrt(exact @ laplacian @ exact)
    stalled = pcg(
        symmetric_product(laplacian), rhs, whole(lambda r: jacobi * r), None, rtol=1e-12, max_iter=3
    )
    assert not stalled.converged and stalled.iterations == 3


@pytest.mark.parametrize("threaded", [False, True])
def test_the_starting_guess_brings_its_image_and_cg_skips_that_product(threaded, monkeypatch):
    monkeypatch.setattr(
        threads, "PARALLEL_ITEMS", 0 if threaded else 10**12
    )  # the kernels' loops shared or not
    rng = np.random.default_rng(8)
    n = 200
    matrix = sp.diags([-np.ones(n - 1), 2.0 + rng.random(n), -np.ones(n - 1)], [-1, 0, 1], format="csc")
    rhs = rng.normal(size=n)
    earlier = [spla.spsolve(matrix, rhs + 0.01 * k * rng.normal(size=n)) for k in range(1, 4)]
    start, image = _start(matrix, rhs, earlier)
    np.testing.assert_allclose(image, matrix @ start, rtol=0, atol=1e-12 * np.abs(image).max())
    # The Galerkin condition: the residual of the best combination is orthogonal to every earlier solution.
    residual = rhs - matrix @ start
    for x in earlier:
        assert abs(x @ residual) <= 1e-9 * np.linalg.norm(x) * np.linalg.norm(rhs)
    assert np.sqrt(residual @ spla.spsolve(matrix, residual)) < np.sqrt(
        (rhs - matrix @ earlier[-1]) @ spla.spsolve(matrix, rhs - matrix @ earlier[-1])
    )  # nearer in the energy norm than the last solution alone
    calls = []

    def counted(x):
        calls.append(1)
        return matrix @ x

    jacobi = whole(lambda r: r / matrix.diagonal())
    given = pcg(counted, rhs, jacobi, start, rtol=1e-12, max_iter=1000, x0_image=image)
    calls_given = len(calls)
    computed = pcg(counted, rhs, jacobi, start, rtol=1e-12, max_iter=1000)
    assert given.converged and given.iterations == computed.iterations
    assert len(calls) - calls_given == calls_given + 1  # the first residual's product, saved
    np.testing.assert_allclose(given.solution, spla.spsolve(matrix, rhs), rtol=1e-9)


def test_pcg_tests_convergence_before_the_second_half_of_a_split_preconditioner():
    # M^{-1} = L^{-T} D^{-1} L^{-1} from the exact LDL^T of a nearby matrix: r.M^{-1}r = y.D^{-1}y with y = L^{-1}r.
    rng = np.random.default_rng(7)
    n = 120

    def tridiagonal(diagonal):
        return sp.diags([-np.ones(n - 1), diagonal, -np.ones(n - 1)], [-1, 0, 1], format="csr")

    old = tridiagonal(2.0 + rng.random(n)).toarray()
    new = tridiagonal(old.diagonal() * (1 + 0.01 * rng.random(n)))
    factor = np.linalg.cholesky(old)  # G G^T = L D L^T with L = G / diag(G), D = diag(G)^2
    lower, pivots = factor / factor.diagonal(), factor.diagonal() ** 2
    rests = []

    def split(r):
        y = np.linalg.solve(lower, r)
        rests.append(0)
        return float(y @ (y / pivots)), lambda: (rests.pop(), np.linalg.solve(lower.T, y / pivots))[1]

    rhs = rng.normal(size=n)
    halves = pcg(symmetric_product(new), rhs, split, None, rtol=1e-12, max_iter=50)
    wholes = pcg(symmetric_product(new), rhs, whole(lambda r: np.linalg.solve(old, r)), None, 1e-12, 50)
    assert halves.converged and halves.iterations == wholes.iterations > 1
    np.testing.assert_allclose(halves.solution, np.linalg.solve(new.toarray(), rhs), rtol=1e-10)
    # The solve's last first half found it converged; its second half never ran.
    assert rests == [0]


@pytest.mark.parametrize("n", [300, 20_000])  # scipy's product below THREADED_ENTRIES, torch's above
def test_the_threaded_product_is_the_matrix_product_of_a_symmetric_matrix_in_any_storage(n):
    rng = np.random.default_rng(7)
    random = sp.random(n, n, density=6 / n, random_state=rng, format="csr")
    symmetric = random + random.T + sp.eye(n)
    assert (symmetric.nnz < THREADED_ENTRIES) == (n == 300)
    x, block = rng.normal(size=n), rng.normal(size=(n, 3))
    storages = (symmetric.tocsc(), symmetric.tocsr(), symmetric.tocoo())
    for matrix in (*storages, symmetric.toarray()) if n == 300 else storages:
        product = symmetric_product(matrix)
        expected = symmetric.toarray() @ x  # dense BLAS: an independent product
        np.testing.assert_allclose(product(x), expected, rtol=1e-13, atol=1e-13 * np.abs(expected).max())
        np.testing.assert_allclose(
            product(block), symmetric @ block, rtol=1e-13, atol=1e-13 * np.abs(expected).max()
        )


def test_a_threaded_product_is_freed_with_its_last_reference():
    """A product through torch's CSR kernel holds the matrix's arrays; dropped, it must go at once, not wait for
    the garbage collector's rare full pass (a reference cycle would keep megabytes alive for thousands of steps)."""
    side = int(np.sqrt(THREADED_ENTRIES)) + 1
    laplacian = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(side * side,) * 2, format="csc")
    product = symmetric_product(laplacian)
    x = np.ones(laplacian.shape[0])
    assert np.allclose(product(np.stack([x, 2 * x], axis=1))[:, 1], 2 * (laplacian @ x))
    collected = weakref.ref(product)
    gc.disable()
    try:
        del product
        assert collected() is None
    finally:
        gc.enable()
