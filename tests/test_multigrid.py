"""The multigrid preconditioner of one-off solves: its hierarchy against the definition, the engine's use of it."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
from conftest import DIRECT_BACKENDS
from torch.autograd import gradcheck

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.engines import make_engine
from flowlearn.engines.multigrid import Multigrid


def _fracture_system(shape: tuple[int, int], seed: int = 0) -> tuple[DarcyProblem, sp.csc_matrix, np.ndarray]:
    """A fracture problem with contact spots (inactive pixels) and its free-node matrix for a rough log K."""
    rng = np.random.default_rng(seed)
    active = rng.random(shape) > 0.08
    active[:, [0, -1]] = True
    problem = DarcyProblem.fracture(shape, active=active, drop_unconnected=True)
    log_k = rng.normal(size=shape) * 1.5
    _, matrix = problem.layout.system(0, log_k.ravel())  # the layout numbers nodes in image order
    return problem, matrix, log_k


def _block_prolongation(
    matrix: sp.csc_matrix, pixels: np.ndarray, shape: tuple[int, int]
) -> tuple[sp.csr_matrix, np.ndarray]:
    """(P, blocks): P = (I - w D^{-1} A) P0 of the definition, assembled with scipy, where P0 puts each free node in
    its 3x3 block of pixels and w = 4 / (3 rho), rho the Gershgorin bound on D^{-1} A; blocks, the flat indices of
    the blocks that hold a free node (P's columns)."""
    rows, cols = np.divmod(pixels, shape[1])
    blocks_across = -(-shape[1] // 3)
    block = (rows // 3) * blocks_across + cols // 3
    used, column = np.unique(block, return_inverse=True)
    tentative = sp.csr_matrix((np.ones(pixels.size), (np.arange(pixels.size), column)))
    diagonal = matrix.diagonal()
    rho = (abs(matrix).sum(axis=1).A1 / diagonal).max()
    smoother = sp.identity(pixels.size) - (4 / (3 * rho)) * sp.diags(1 / diagonal) @ matrix
    return (smoother @ tentative).tocsr(), used


def test_the_first_coarse_level_is_the_galerkin_product_of_the_smoothed_aggregation():
    shape = (20, 23)  # neither side a multiple of 3: clipped blocks on two edges
    problem, matrix, _ = _fracture_system(shape)
    hierarchy = Multigrid(matrix, problem.layout.free_nodes, shape)
    prolongation, used_blocks = _block_prolongation(matrix, problem.layout.free_nodes, shape)
    galerkin = (prolongation.T @ matrix @ prolongation).toarray()
    # The hierarchy's coarse stencil as a dense matrix over the blocks that hold a free node.
    coarse = hierarchy.levels[1]
    height, width = coarse.shape
    stencil = np.zeros((height * width, height * width))
    index = np.arange(height * width).reshape(height, width)
    for i in range(height):
        for j in range(width):
            stencil[index[i, j], index[i, j]] = coarse.diagonal[i + 1, j + 1]
            for (di, dj), coupling in zip([(0, 1), (1, 0), (1, 1), (1, -1)], coarse.couplings):
                if 0 <= i + di < height and 0 <= j + dj < width:
                    stencil[index[i, j], index[i + di, j + dj]] = coupling[i + 1, j + 1]
                    stencil[index[i + di, j + dj], index[i, j]] = coupling[i + 1, j + 1]
    np.testing.assert_allclose(
        stencil[np.ix_(used_blocks, used_blocks)], galerkin, atol=1e-12 * abs(galerkin).max()
    )


def test_the_cycle_is_a_symmetric_positive_definite_preconditioner():
    shape = (40, 47)
    problem, matrix, _ = _fracture_system(shape, seed=1)
    hierarchy = Multigrid(matrix, problem.layout.free_nodes, shape)
    assert len(hierarchy.levels) >= 2
    rng = np.random.default_rng(3)
    u, v = rng.normal(size=(2, matrix.shape[0]))
    # Symmetric up to the float32 arithmetic of the cycle.
    assert hierarchy.apply(u) @ v == pytest.approx(u @ hierarchy.apply(v), rel=1e-5)
    assert u @ hierarchy.apply(u) > 0
    # And a good one: as a stationary iteration, each cycle cuts the energy-norm error by a third or more, whatever
    # the grid's size (0.58 here, with K spanning e^±4 and 8 % contacts; 0.4 on the benchmarks' fractures).
    exact = rng.normal(size=matrix.shape[0])
    x = np.zeros_like(exact)
    for _ in range(10):
        x += hierarchy.apply(matrix @ (exact - x))
    assert np.sqrt((exact - x) @ matrix @ (exact - x)) < 0.7**10 * np.sqrt(exact @ matrix @ exact)


@pytest.mark.parametrize("backend", DIRECT_BACKENDS)
@pytest.mark.parametrize(
    "shape", [(61, 80), (7, 250), (250, 5)], ids=["fracture", "wide strip", "tall strip"]
)
def test_one_off_solves_match_a_direct_solve_to_the_tolerance(backend, shape):
    problem, matrix, log_k = _fracture_system(shape, seed=2)
    solver = make_engine(backend, multigrid_unknowns=0)
    pressure = solve_pressure(torch.from_numpy(log_k), problem, solver=solver).numpy()
    # One hierarchy, one CG solve, no factorisation's direct solve.
    assert (solver.stats.factorizations, solver.stats.pcg_solves, solver.stats.direct_solves) == (1, 1, 0)
    transmissibility, _ = problem.layout.system(0, log_k.ravel())
    heads = problem.dirichlet_values.ravel()
    rhs = problem.layout.rhs(transmissibility, heads, np.zeros_like(heads))
    exact = spla.spsolve(matrix, rhs)
    solved = pressure.ravel()[problem.layout.free_nodes]
    error = solved - exact
    # rtol bounds the relative energy-norm error (up to the preconditioner's condition number).
    assert np.sqrt(abs(error @ matrix @ error)) <= 10 * solver.rtol * np.sqrt(exact @ matrix @ exact)


def test_uniform_conductivity_gives_the_linear_profile_to_the_tolerance():
    problem = DarcyProblem.fracture((256, 260))
    solver = make_engine(
        "superlu"
    )  # the default multigrid_unknowns: a one-off of 66k unknowns takes multigrid
    pressure = solve_pressure(torch.zeros(256, 260), problem, solver=solver).numpy()
    assert solver.stats.pcg_solves == 1 and solver.stats.direct_solves == 0
    exact = 2 - np.arange(260) / 259
    assert np.abs(pressure - exact).max() <= 1e-9


def test_gradients_through_the_multigrid_path_are_exact():
    shape = (9, 14)
    active = np.ones(shape, dtype=bool)
    active[4, 5:7] = False
    problem = DarcyProblem.fracture(shape, active=active)
    # Every solve a one-off on multigrid, to a tolerance that finite differences can resolve, bitwise repeatable.
    solver = make_engine("superlu", multigrid_unknowns=0, reuse=False, rtol=1e-13)
    mask = torch.from_numpy(problem.active)

    def pressure(log_k):
        return solve_pressure(log_k, problem, solver=solver)[mask]

    log_k = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    assert gradcheck(pressure, (log_k.requires_grad_(),))
    assert solver.stats.direct_solves == 0 and solver.stats.pcg_solves > 0


def test_the_adjoint_reuses_the_hierarchy_and_the_next_step_gets_a_reusable_factor():
    problem, _, log_k = _fracture_system((30, 33), seed=4)
    solver = make_engine("superlu", multigrid_unknowns=0)
    x = torch.from_numpy(log_k).requires_grad_()
    solve_pressure(x, problem, solver=solver).pow(2).sum().backward()
    assert (solver.stats.factorizations, solver.stats.pcg_solves) == (1, 2)
    # A nearby field (a training step): a factorisation worth reusing, solved directly.
    solve_pressure(x.detach() * 1.001, problem, solver=solver)
    assert solver.stats.factorizations == 2 and solver.stats.direct_solves == 1
    assert solver.prepared(problem).slots[0].factor.reusable


def test_a_matrix_with_a_third_new_right_hand_side_gets_a_factorisation():
    """A Gauss–Newton step solves one matrix twice per inner iteration: multigrid serves a one-off's forward and
    adjoint, a factorisation every new right-hand side after them. A repeated one (a validation pass of unchanged
    weights) starts at its old solution, takes no iteration and stays on multigrid."""
    problem, matrix, log_k = _fracture_system((30, 33), seed=6)
    solver = make_engine("superlu", multigrid_unknowns=0)
    rng = np.random.default_rng(7)
    free = problem.layout.free_nodes
    draws = [rng.normal(size=free.size) for _ in range(4)]
    # Per solve: its sources, then (factorisations, PCG solves, direct solves) after it.
    plan = [
        (draws[0], (1, 1, 0)),
        (draws[0], (1, 2, 0)),
        (draws[0], (1, 3, 0)),
        (draws[1], (1, 4, 0)),
        (draws[2], (2, 4, 1)),
        (draws[3], (2, 4, 2)),
    ]
    first = None
    for free_sources, counts in plan:
        sources = np.zeros(problem.grid.num_nodes)
        sources[free] = free_sources
        pressure = solve_pressure(
            torch.from_numpy(log_k),
            problem,
            torch.zeros(problem.grid.shape, dtype=torch.float64),
            torch.from_numpy(sources.reshape(problem.grid.shape)),
            solver=solver,
        )
        # Zero heads: A h_f = Q_f, solved here independently.
        expected = spla.spsolve(matrix, sources[free])
        np.testing.assert_allclose(
            pressure.numpy().ravel()[free], expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max()
        )
        stats = solver.stats
        assert (stats.factorizations, stats.pcg_solves, stats.direct_solves) == counts
        if first is None:
            first = pressure
        elif counts[1] <= 3:  # the start, recombined from copies of the answer, moves it by round-off only
            torch.testing.assert_close(pressure, first, rtol=1e-11, atol=0, equal_nan=True)
    assert solver.prepared(problem).slots[0].factor.exact


def test_a_stalled_multigrid_solve_gives_way_to_a_factorisation(monkeypatch):
    problem, _, log_k = _fracture_system((30, 33), seed=5)
    monkeypatch.setattr(Multigrid, "give_way_after", 2)  # far too few iterations to reach 1e-11
    solver = make_engine("superlu", multigrid_unknowns=0)
    pressure = solve_pressure(torch.from_numpy(log_k), problem, solver=solver)
    assert (solver.stats.factorizations, solver.stats.direct_solves) == (2, 1)
    reference = solve_pressure(
        torch.from_numpy(log_k), problem, solver=make_engine("superlu", multigrid_unknowns=None)
    )
    torch.testing.assert_close(pressure, reference, rtol=1e-12, atol=0, equal_nan=True)


def test_volumes_and_small_grids_are_factored():
    solver = make_engine("superlu")
    solve_pressure(torch.zeros(40, 40), DarcyProblem.fracture((40, 40)), solver=solver)  # 1,520 unknowns
    solve_pressure(torch.zeros(16, 16, 16), DarcyProblem.fracture((16, 16, 16)), solver=solver)  # 3,584
    assert solver.stats.pcg_solves == 0 and solver.stats.direct_solves == 2
