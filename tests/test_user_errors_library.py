"""Bad arguments to the library's solve API (engines, Grid, DarcyProblem, solve_pressure) get a flowlearn error that
names the argument, its value and what it must be, raised before anything is allocated or solved; and a valid
problem that an over-strict check refused (equal heads) is solved.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from test_user_errors import _one_line, _plates, _train_checks

from flowlearn import DarcyProblem, Grid, solve_pressure
from flowlearn.data.files import write_fractures
from flowlearn.engines import cholmod_available, make_engine
from flowlearn.errors import ConfigError, ProblemError, SolveInputError

RTOL = "rtol must lie in (0, 1), at least 1e-15 (float64's resolution: no solve reaches a tighter one)"

ENGINE_ROWS = [
    ("superlu", {"rtol": "1e-8"}, f"{RTOL}, got '1e-8'"),
    # Tighter than float64 resolves: AMG ran to its iteration limit after the first batch.
    ("amg", {"rtol": 1e-300}, f"{RTOL}, got 1e-300"),
    ("superlu", {"rtol": 1e-16}, f"{RTOL}, got 1e-16"),
    # A string is truthy: "no" switched the option on.
    ("superlu", {"reuse": "no"}, "reuse must be True or False, got 'no'"),
    ("cholmod", {"quick_one_offs": "no"}, "quick_one_offs must be True or False, got 'no'"),
    ("cholmod", {"simplicial_limit": -5}, "simplicial_limit must be an integer >= 0, got -5"),
    (
        "cholmod",
        {"tree_solve_unknowns": "many"},
        "tree_solve_unknowns must be None or an integer >= 0, got 'many'",
    ),
    ("cholmod", {"tree_solve_unknowns": -1}, "tree_solve_unknowns must be None or an integer >= 0, got -1"),
    ("gpu", {"method": "pcg", "device": "cpu", "reuse": "no"}, "reuse must be True or False, got 'no'"),
    ("gpu", {"method": "pcg", "device": "gpu"}, "device must be a CUDA device such as 'cuda' or 'cuda:1'"),
    # Checked before Julia starts (so without Julia too); int() truncated 2.5.
    ("julia", {"reltol": 0}, "reltol must lie in (0, 1), at least 1e-15"),
    ("julia", {"maxiter": 2.5}, "maxiter must be a positive integer, got 2.5"),
    (
        "superlu",
        {"foo": 1},
        "superlu takes no option 'foo' (options: rtol, reuse, max_change, max_iter, reuse_budget, "
        "multigrid_unknowns)",
    ),
    ("cholmod", {"bar": 1}, "cholmod takes no option 'bar' (options: simplicial_limit, tree_solve_unknowns,"),
    (None, {}, "unknown solver None; choose one of ['auto', 'cholmod', 'superlu', 'amg', 'gpu', 'julia']"),
    ("SuperLU", {}, "unknown solver 'SuperLU'; choose one of"),
]


@pytest.mark.parametrize("name, options, message", ENGINE_ROWS)
def test_engine_option_mistakes(name, options, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_engine(name, **options)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "good.h5"
    write_fractures(path, _plates(4))
    return path


TRAIN_ROWS = [
    # A traceback during the first validation; with -5 the run went on.
    (
        "solver=cholmod +solver.tree_solve_unknowns=many",
        "solver: tree_solve_unknowns must be None or an integer >= 0, got 'many'",
    ),
    (
        "solver=cholmod +solver.simplicial_limit=-5",
        "solver: simplicial_limit must be an integer >= 0, got -5",
    ),
    # Stopped only after the model was built and the first batch solved.
    ("solver=amg solver.rtol=1e-300", f"solver: {RTOL}, got 1e-300"),
    ("solver=cpu +solver.foo=1", "takes no option 'foo' (options: "),
]


@pytest.mark.parametrize("overrides, message", TRAIN_ROWS)
def test_solver_option_mistakes_stop_train_py_in_one_line(
    good, tmp_path, capsys, monkeypatch, overrides, message
):
    status, err = _train_checks(tmp_path, capsys, monkeypatch, [f"data.path={good}", *overrides.split()])
    _one_line(status, err, message)
    assert not (tmp_path / "run" / "checkpoints").exists()


MASK = np.eye(6, 8, dtype=bool)

PROBLEM_ROWS = [
    # int() truncated the node counts to (2, 3).
    (
        lambda: Grid((0, 0), (1, 1), (2.7, 3.9)),
        "grid node counts ns must be a tuple of integers (nx, ny[, nz]), got (2.7, 3.9)",
    ),
    (lambda: Grid((0, 0), (1, 1), ("a", 3)), "grid node counts ns must be a tuple of integers"),
    (
        lambda: Grid((0, 0), (1, 1), (3, 3), thickness="x"),
        "grid thickness must be a finite number > 0 (metres), got 'x'",
    ),
    (lambda: Grid(0, 1, 3), "grid corner mins must be a tuple of finite numbers (x, y[, z]), got 0"),
    (
        lambda: Grid(("a", 0), (1, 1), (3, 3)),
        "grid corner mins must be a tuple of finite numbers (x, y[, z]), got ('a', 0)",
    ),
    # numpy's MemoryError for 7.3 TiB, when the edges were first asked for.
    (
        lambda: Grid((0, 0), (1, 1), (10**6, 10**6)),
        "a grid of 1e+12 nodes (ns=(1000000, 1000000)) needs about 1.58e+05 GiB for its edges, more than the ",
    ),
    (
        lambda: Grid.from_image((2, 3)).to_nodes([[1, 2, 3], [4, 5, 6]]),
        "image must be a numpy array or torch tensor, got list",
    ),
    (
        lambda: DarcyProblem.fracture((6.5, 8)),
        "image shape must be a tuple of integers (H, W) or (D, H, W), got (6.5, 8)",
    ),
    (
        lambda: DarcyProblem.fracture((6, 8), pixel_size="x"),
        "pixel size must be a finite number > 0 (metres), got 'x'",
    ),
    # numpy converted the string: a solve with heads 2 and 1.
    (
        lambda: DarcyProblem.fracture((6, 8), inlet="2"),
        "inlet head must be a finite number (metres), got '2'",
    ),
    # A string is truthy: "no" dropped the regions instead of refusing them.
    (
        lambda: DarcyProblem.fracture((6, 8), drop_unconnected="no"),
        "drop_unconnected must be True or False, got 'no'",
    ),
    (
        lambda: DarcyProblem(Grid.from_image((6, 8)), MASK, "x"),
        "dirichlet_values must be real numbers, got 'x'",
    ),
    (
        lambda: DarcyProblem(Grid.from_image((6, 8)), MASK, 1.0, sources=np.full((6, 8), "a")),
        "sources must be real numbers, got dtype <U1",
    ),
    (
        lambda: DarcyProblem(None, MASK, 1.0),
        "grid must be a Grid, got NoneType (make one with Grid.from_image",
    ),
    (lambda: DarcyProblem((6, 8), MASK, 1.0), "grid must be a Grid, got tuple"),
]


@pytest.mark.parametrize("make, message", PROBLEM_ROWS)
def test_grid_and_problem_argument_mistakes(make, message):
    with pytest.raises(ProblemError, match=re.escape(message)):
        make()


SOLVE_ROWS = [
    (
        lambda p: solve_pressure(torch.zeros(0, 6, 8, dtype=torch.float64), p),
        "log_k has an empty batch (shape (0, 6, 8))",
    ),
    (
        lambda p: solve_pressure(torch.zeros(0, 2, 6, 8, dtype=torch.float64), p),
        "log_k has an empty batch (shape (0, 2, 6, 8))",
    ),
    (
        lambda p: solve_pressure(torch.zeros(6, 8, dtype=torch.float64), None),
        "problem must be a DarcyProblem, got NoneType (make one with DarcyProblem.fracture(shape))",
    ),
    (
        lambda p: solve_pressure(torch.zeros(6, 8, dtype=torch.float64), p.grid),
        "problem must be a DarcyProblem, got Grid",
    ),
]


@pytest.mark.parametrize("solve, message", SOLVE_ROWS)
def test_solve_argument_mistakes(solve, message):
    with pytest.raises(SolveInputError, match=re.escape(message)):
        solve(DarcyProblem.fracture((6, 8)))


SOLVERS = ["superlu", *(["cholmod"] if cholmod_available() else [])]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("head", [1.0, -3.0, 1e11])
def test_equal_heads_give_that_constant(solver, head):
    # A valid problem: nothing flows and the pressure is the head everywhere. The maximum-principle check had a
    # slack of the head range, 0 here, and refused the solution for a rounding of 1e-16.
    log_k = torch.randn(32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    problem = DarcyProblem.fracture((32, 32), inlet=head, outlet=head)
    pressure = solve_pressure(log_k, problem, solver=make_engine(solver))
    torch.testing.assert_close(pressure, torch.full_like(pressure, head), rtol=1e-12, atol=0)
    by_values = solve_pressure(
        log_k, DarcyProblem.fracture((32, 32)), dirichlet_values=head, solver=make_engine(solver)
    )
    torch.testing.assert_close(by_values, torch.full_like(by_values, head), rtol=1e-12, atol=0)


def test_equal_heads_gradient():
    problem = DarcyProblem.fracture((4, 5), inlet=1.0, outlet=1.0)
    generator = torch.Generator().manual_seed(1)
    log_k = torch.randn(4, 5, dtype=torch.float64, generator=generator, requires_grad=True)
    heads = torch.ones(4, 5, dtype=torch.float64, requires_grad=True)
    sources = torch.zeros(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda k, h, q: solve_pressure(k, problem, dirichlet_values=h, sources=q), (log_k, heads, sources)
    )
