"""Triangular solves shared among cores along the elimination tree (flowlearn.engines.trisolve)."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla
from conftest import NO_CHOLMOD

from flowlearn import DarcyProblem
from flowlearn.engines import cholmod_available, trisolve
from flowlearn.engines.trisolve import (
    TreeSolver,
    _is_postordered,
    _parents,
    _subtree_sizes,
    in_postorder,
    ldl_from_cholesky,
    plan_tree,
)
from flowlearn.threads import usable_cores

pytestmark = pytest.mark.skipif(not cholmod_available(), reason=NO_CHOLMOD)


def _system(problem: DarcyProblem, seed: int):
    """A fracture matrix with a rough conductivity field, and its simplicial LDL^T (nested dissection)."""
    from sksparse import cholmod

    layout = problem.layout
    log_k = np.random.default_rng(seed).normal(scale=1.5, size=problem.grid.num_nodes)
    _, matrix = layout.system(0, log_k)
    factor = cholmod.analyze(matrix, mode="simplicial", ordering_method="nesdis").cholesky(matrix)
    return matrix, factor


def _unit_lower_and_pivots(factor_ld, dtype=np.float64):
    """CHOLMOD's simplicial L with D on its diagonal, split into what TreeSolver reads: unit L and D."""
    pivots = factor_ld.diagonal()
    factor_l = factor_ld.astype(dtype)
    factor_l.setdiag(1.0)
    return factor_l, pivots


def _split_by_a_wall(shape):
    """Two channels parted by an inactive row: the matrix is block diagonal and its tree a forest."""
    active = np.ones(shape, dtype=bool)
    active[shape[0] // 2, :] = False
    return DarcyProblem.fracture(shape, active=active)


PROBLEMS = {
    "2d": lambda: DarcyProblem.fracture((48, 52)),
    "3d": lambda: DarcyProblem.fracture((9, 10, 12)),
    "forest": lambda: _split_by_a_wall((40, 44)),
}


@pytest.mark.parametrize("split_permutation", [False, True])
@pytest.mark.parametrize("tasks", [1, 2, 3, 5])
@pytest.mark.parametrize("name", PROBLEMS)
def test_tree_solve_matches_a_direct_solve(name, tasks, split_permutation, monkeypatch):
    if split_permutation:  # as on a grid large enough that each task moves a slice of the permutation
        monkeypatch.setattr(trisolve, "PERMUTE_TASK_UNKNOWNS", 1)
    matrix, factor = _system(PROBLEMS[name](), seed=tasks)
    plan = plan_tree(factor.LD(), tasks)
    solver = TreeSolver(*_unit_lower_and_pivots(factor.LD()), factor.P(), plan)
    assert solver._slices.size - 1 == (max(plan.tasks, 1) if split_permutation else 1)
    rhs = np.random.default_rng(0).normal(size=matrix.shape[0])
    expected = spla.spsolve(matrix.tocsc(), rhs)
    solution = solver.apply(rhs)
    np.testing.assert_allclose(solution, expected, rtol=0, atol=1e-10 * np.abs(expected).max())
    # The residual, independently of SuperLU's own round-off.
    assert np.linalg.norm(matrix @ solution - rhs) <= 1e-11 * np.linalg.norm(rhs)
    # In halves: the forward substitution alone gives rhs . A^{-1} rhs, the rest the same solution.
    energy, rest = solver.split(rhs)
    assert energy == pytest.approx(rhs @ expected, rel=1e-10)
    np.testing.assert_allclose(rest(), solution, rtol=0, atol=1e-14 * np.abs(expected).max())


@pytest.mark.parametrize("name", PROBLEMS)
def test_tree_solve_with_a_float32_factor_inverts_the_rounded_factor(name):
    """With L rounded to float32 the solve is exactly that factor's inverse (arithmetic in float64), checked
    against scipy's triangular solves with the same rounded L: a preconditioner as symmetric as the exact one."""
    matrix, factor = _system(PROBLEMS[name](), seed=2)
    factor_l, pivots = _unit_lower_and_pivots(factor.LD(), np.float32)
    solver = TreeSolver(factor_l, pivots, factor.P(), plan_tree(factor_l, 2))
    rhs = np.random.default_rng(1).normal(size=matrix.shape[0])
    rounded = factor_l.astype(np.float64).tocsr()
    permutation = factor.P()
    y = spla.spsolve_triangular(rounded, rhs[permutation], lower=True, unit_diagonal=True)
    x = spla.spsolve_triangular(rounded.T.tocsr(), y / pivots, lower=False, unit_diagonal=True)
    expected = np.empty_like(x)
    expected[permutation] = x
    solution = solver.apply(rhs)
    np.testing.assert_allclose(solution, expected, rtol=0, atol=1e-10 * np.abs(expected).max())
    # Rounding L moved the solve off the exact one, by about float32's resolution times the growth of the solve.
    exact = spla.spsolve(matrix.tocsc(), rhs)
    assert 1e-9 < np.abs(solution - exact).max() / np.abs(exact).max() < 1e-4


@pytest.mark.parametrize("name", PROBLEMS)
def test_ldl_from_a_supernodal_factor_is_cholmods_simplicial_ldl(name):
    """The supernodal L L^T, unit-scaled and stripped of its padding zeros, is the factor CHOLMOD's simplicial
    LDL^T of the same ordering computes independently: same pattern, same entries to round-off."""
    from sksparse import cholmod

    matrix, simplicial = _system(PROBLEMS[name](), seed=1)
    supernodal = cholmod.analyze(matrix, mode="supernodal", ordering_method="nesdis").cholesky(matrix)
    padded = supernodal.L()
    expected = simplicial.LD()
    np.testing.assert_array_equal(supernodal.P(), simplicial.P())
    assert padded.nnz > expected.nnz  # the supernodes are padded with zeros
    expected_l, expected_pivots = _unit_lower_and_pivots(expected)
    converted, pivots = ldl_from_cholesky(padded)
    np.testing.assert_array_equal(converted.indptr, expected.indptr)
    np.testing.assert_array_equal(converted.indices, expected.indices)
    np.testing.assert_allclose(
        converted.data, expected_l.data, rtol=1e-12, atol=1e-12 * np.abs(expected_l.data).max()
    )
    np.testing.assert_allclose(pivots, expected_pivots, rtol=1e-12)


@pytest.mark.parametrize("name", PROBLEMS)
def test_plan_covers_every_column_once_and_balances_the_tasks(name):
    _, factor = _system(PROBLEMS[name](), seed=0)
    factor_ld = factor.LD()
    plan = plan_tree(factor_ld, tasks=2)
    assert plan.tasks == 2
    starts = plan.supernodes
    groups = [*plan.task_supernodes, plan.top_supernodes]
    columns = np.concatenate([np.arange(starts[q], starts[q + 1]) for group in groups for q in group])
    np.testing.assert_array_equal(np.sort(columns), np.arange(factor_ld.shape[0]))
    # A task's columns never reach another task's: their rows below are its own or the top's.
    owner = np.full(factor_ld.shape[0], -1)
    for task, supernodes in enumerate(plan.task_supernodes):
        for q in supernodes:
            owner[starts[q] : starts[q + 1]] = task
    rows_of = np.split(factor_ld.indices, factor_ld.indptr[1:-1])
    for column in np.flatnonzero(owner >= 0):
        reached = owner[rows_of[column]]
        assert np.all((reached == owner[column]) | (reached == -1))
    if name != "3d":  # a small 3D grid's separators are too large a share to split the rest evenly
        # Nested dissection halves a 2D grid, so each task gets close to half of the factor's entries.
        entries = np.diff(factor_ld.indptr)
        shares = [entries[owner == task].sum() / entries.sum() for task in range(2)]
        assert min(shares) > 0.4, shares


def _first_columns(parent):
    size = np.ones(len(parent), dtype=np.int64)
    for child, node in enumerate(parent):
        if node >= 0:
            size[node] += size[child]
    return np.arange(len(parent)) - size + 1


@pytest.mark.parametrize(
    ("parent", "postordered"),
    [
        ([1, 3, 3, -1], True),  # 0 -> 1 -> 3 <- 2
        ([2, 3, 3, -1], False),  # the same shape, but the subtree of 2 is {0, 2}: not a run of columns
        ([2, 2, 4, 4, -1], True),  # 0, 1 -> 2 -> 4 <- 3
        ([4, 3, 3, 4, -1], True),  # 0 -> 4 <- 3 <- 1, 2
        ([2, 4, 4, 4, -1], False),  # the subtree of 2 is {0, 2}, but its run would be 1..2
        ([-1, -1, 3, -1], True),  # a forest
    ],
)
def test_postorder_is_recognised(parent, postordered):
    parent = np.array(parent)
    assert _is_postordered(parent, _first_columns(parent)) is postordered


def test_a_factor_of_another_pattern_is_refused():
    _, factor = _system(DarcyProblem.fracture((20, 22)), seed=0)
    _, other = _system(DarcyProblem.fracture((22, 20)), seed=0)
    with pytest.raises(ValueError, match="pattern"):
        TreeSolver(*_unit_lower_and_pivots(other.LD()), other.P(), plan_tree(factor.LD(), 2))


def test_training_loop_through_tree_solves_matches_cholmod():
    """The reuse machinery (PCG on an old factor, direct solves) gives the same answers through tree solves."""
    from flowlearn.engines.cholmod import CholmodEngine

    problem = DarcyProblem.fracture((40, 44))
    tree = CholmodEngine(tree_solve_unknowns=0, reuse_budget=20)
    plain = CholmodEngine(tree_solve_unknowns=None, reuse_budget=20)
    layout = problem.layout
    log_k = np.random.default_rng(3).normal(size=problem.grid.num_nodes)
    rng = np.random.default_rng(4)
    for _ in range(4):
        log_k = log_k * (1 + 1e-3 * rng.normal(size=log_k.shape))
        t, matrix = layout.system(0, log_k)
        rhs = layout.rhs(t, problem.dirichlet_values.reshape(-1), problem.sources.reshape(-1))
        np.testing.assert_allclose(
            tree.solve_system(tree.prepared(problem), 0, "state", matrix, rhs),
            plain.solve_system(plain.prepared(problem), 0, "state", matrix, rhs),
            rtol=1e-10,
        )
    # The first field gets CHOLMOD's quick factor, the second the thorough one (split into a tree), which then
    # preconditions the last two, rounded to float32 from the first of them on.
    assert tree.stats.pcg_solves == 2 and tree.stats.factorizations == 2
    (slot,) = tree.prepared(problem).slots.values()
    assert (slot.factor._tree is not None) == (usable_cores() > 1)
    assert slot.factor.exact == (usable_cores() == 1)


@pytest.mark.skipif(usable_cores() < 2, reason="CHOLMOD solves its own factors on one core")
def test_a_factor_is_rounded_only_once_it_preconditions_another_matrix():
    """Gauss-Newton solves one matrix many times: its factor stays exact (direct solves) until a nearby matrix
    comes, and then is rounded to float32, each entry to the nearest float32."""
    from flowlearn.engines.cholmod import CholmodEngine

    problem = DarcyProblem.fracture((40, 44))
    engine = CholmodEngine(tree_solve_unknowns=0, quick_one_offs=False, multigrid_unknowns=None)
    log_k = np.random.default_rng(5).normal(scale=1.5, size=problem.grid.num_nodes)
    _, matrix = problem.layout.system(0, log_k)
    state = engine.prepared(problem)
    rng = np.random.default_rng(6)
    for _ in range(3):
        rhs = rng.normal(size=matrix.shape[0])
        expected = spla.spsolve(matrix.tocsc(), rhs)
        solution = engine.solve_system(state, 0, "state", matrix, rhs)
        np.testing.assert_allclose(solution, expected, rtol=0, atol=1e-12 * np.abs(expected).max())
    assert engine.stats.direct_solves == 3 and engine.stats.pcg_solves == 0
    (slot,) = state.slots.values()
    tree = slot.factor._tree
    exact_entries = tree._values.copy()
    _, nearby = problem.layout.system(0, log_k * 1.001)
    engine.solve_system(state, 0, "state", nearby, rhs)
    assert engine.stats.pcg_solves == 1 and not slot.factor.exact
    assert tree._values.dtype == np.float32
    np.testing.assert_array_equal(tree._values, exact_entries.astype(np.float32))


def test_a_factor_out_of_postorder_is_renumbered_and_still_shared_among_tasks():
    # A topological order that is no postorder: deepest columns first. Children still come before parents, so the
    # renumbered factor is lower triangular and factors A[p][:, p] for the renumbered p; but its subtrees are no
    # longer runs of columns, and no task could take one.
    matrix, factor = _system(PROBLEMS["2d"](), seed=4)
    factor_l, pivots = _unit_lower_and_pivots(factor.LD())
    parent = _parents(factor_l.indptr.astype(np.int64), factor_l.indices)
    depth = np.zeros(parent.size, dtype=np.int64)
    for column in range(parent.size - 1, -1, -1):  # parents come after their children
        if parent[column] >= 0:
            depth[column] = depth[parent[column]] + 1
    shuffled = np.argsort(-depth, kind="stable")
    scrambled = factor_l[shuffled][:, shuffled].tocsc()
    scrambled.sort_indices()
    scrambled_parent = _parents(scrambled.indptr.astype(np.int64), scrambled.indices)
    sizes = _subtree_sizes(scrambled_parent)
    assert not _is_postordered(scrambled_parent, np.arange(parent.size) - sizes + 1)
    renumbered, new_pivots, permutation = in_postorder(scrambled, pivots[shuffled], factor.P()[shuffled])
    assert renumbered.nnz == factor_l.nnz
    plan = plan_tree(renumbered, 2)
    assert len(plan.task_supernodes) == 2
    rhs = np.random.default_rng(5).normal(size=matrix.shape[0])
    solution = TreeSolver(renumbered, new_pivots, permutation, plan).apply(rhs)
    assert np.linalg.norm(matrix @ solution - rhs) <= 1e-11 * np.linalg.norm(rhs)
    # A factor already in postorder comes back as it is.
    assert in_postorder(factor_l, pivots, factor.P())[0] is factor_l
