"""Bad input gets a ValueError that names the problem and where it is, never a crash inside scipy or CHOLMOD."""

import numpy as np
import pytest
import torch

from flowlearn import (
    DarcyProblem,
    DisconnectedRegionError,
    Grid,
    ProblemError,
    SolveInputError,
    solve_pressure,
)


@pytest.fixture
def problem() -> DarcyProblem:
    return DarcyProblem.fracture((6, 8))


@pytest.mark.parametrize("bad, kind", [(float("nan"), "1 NaN, 0 inf"), (float("inf"), "0 NaN, 1 inf")])
def test_non_finite_log_k_names_the_pixel(problem, solver, bad, kind):
    log_k = torch.zeros(2, 6, 8, dtype=torch.float64)
    log_k[1, 3, 5] = bad
    with pytest.raises(
        SolveInputError, match=rf"log_k has 1 non-finite.*\({kind}\).*batch item 1 at pixel \(3, 5\)"
    ):
        solve_pressure(log_k, problem, solver=solver)


def test_non_finite_log_k_at_inactive_nodes_is_fine():
    active = np.ones((6, 8), dtype=bool)
    active[2, 4] = False
    problem = DarcyProblem.fracture((6, 8), active=active)
    log_k = torch.zeros(6, 8, dtype=torch.float64)
    log_k[2, 4] = -torch.inf  # log of a zero aperture
    pressure = solve_pressure(log_k, problem)
    assert torch.isnan(pressure[2, 4]) and torch.isfinite(pressure[active]).all()


def test_non_finite_sources_and_heads(problem):
    sources = torch.zeros(6, 8, dtype=torch.float64)
    sources[4, 2] = float("nan")
    with pytest.raises(SolveInputError, match=r"sources has 1 non-finite.*pixel \(4, 2\)"):
        solve_pressure(torch.zeros(6, 8), problem, sources=sources)
    heads = torch.ones(6, 8, dtype=torch.float64)
    heads[0, 7] = float("inf")
    with pytest.raises(SolveInputError, match=r"dirichlet_values has 1 non-finite.*pixel \(0, 7\)"):
        solve_pressure(torch.zeros(6, 8), problem, dirichlet_values=heads)


@pytest.mark.parametrize("shape", [(6, 9), (2, 8, 6), (2, 4, 6, 8), (48,)])
def test_shape_mismatch(problem, shape):
    with pytest.raises(SolveInputError, match=rf"log_k has shape \({shape[0]}.*grid needs \(6, 8\)"):
        solve_pressure(torch.zeros(shape), problem)


def test_sources_that_do_not_broadcast(problem):
    with pytest.raises(SolveInputError, match=r"sources has shape \(3, 8\).*does not broadcast"):
        solve_pressure(torch.zeros(6, 8), problem, sources=torch.zeros(3, 8))


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex128])
def test_wrong_dtype(problem, dtype):
    with pytest.raises(
        SolveInputError, match=rf"log_k must be a real floating-point tensor, got dtype {dtype}"
    ):
        solve_pressure(torch.zeros(6, 8, dtype=dtype), problem)


def test_wrong_device(problem):
    with pytest.raises(SolveInputError, match=r"log_k is on device meta.*\.to\('cpu'\)"):
        solve_pressure(torch.zeros(6, 8, device="meta"), problem)
    with pytest.raises(SolveInputError, match=r"sources is on device meta but log_k is on cpu"):
        solve_pressure(torch.zeros(6, 8), problem, sources=torch.zeros(6, 8, device="meta"))


def test_no_dirichlet_node():
    grid = Grid.from_image((4, 4))
    with pytest.raises(ProblemError, match="no active Dirichlet node"):
        DarcyProblem(grid, np.zeros((4, 4), dtype=bool), 0.0)
    # Fixed nodes that are all inactive do not count either.
    fixed = np.zeros((4, 4), dtype=bool)
    fixed[:, 0] = True
    with pytest.raises(ProblemError, match="no active Dirichlet node"):
        DarcyProblem(grid, fixed, 1.0, active=~fixed)


@pytest.mark.parametrize("shape", [(1, 2), (5, 2)])
def test_no_free_node(shape):
    # Inlet and outlet columns side by side: every head is fixed, nothing is left to solve.
    with pytest.raises(ProblemError, match=rf"no free node: every active node of the {shape[0]}x2 grid"):
        DarcyProblem.fracture(shape)


def test_empty_grid():
    with pytest.raises(ProblemError, match=r"the grid is empty: node counts ns=\(0, 5\)"):
        DarcyProblem.fracture((5, 0))


def test_problem_fields_with_the_wrong_shape():
    grid = Grid.from_image((4, 5))
    with pytest.raises(
        ProblemError, match=r"dirichlet has shape \(5, 4\), but the grid's image shape is \(4, 5\)"
    ):
        DarcyProblem(grid, np.ones((5, 4), dtype=bool), 1.0)
    with pytest.raises(ProblemError, match="active must be a boolean mask"):
        DarcyProblem(grid, np.ones((4, 5), dtype=bool), 1.0, active=np.ones((4, 5)))


def _islands() -> np.ndarray:
    """A 10x12 fracture whose contact spots wall off two regions from both Dirichlet columns."""
    active = np.ones((10, 12), dtype=bool)
    active[1:5, 3] = active[1:5, 7] = active[1, 3:8] = active[5, 3:8] = False  # box around rows 2-4, cols 4-6
    active[8, 9] = False
    active[9, 8] = active[9, 10] = False  # (9, 9) cut off in the bottom row
    return active


def test_unconnected_regions_are_reported_with_their_location():
    with pytest.raises(
        DisconnectedRegionError, match=r"2 active region\(s\) \(10 node\(s\) in all\)"
    ) as error:
        DarcyProblem.fracture((10, 12), active=_islands())
    message = str(error.value)
    assert "9 node(s) at (row 2, col 4), within rows 2-4, cols 4-6" in message
    assert "1 node(s) at (row 9, col 9)" in message
    assert "drop_unconnected=True" in message


def test_a_voxel_touching_the_rest_only_along_edges_is_unconnected():
    # Flow passes through faces only: the grid's edges join the six face neighbours of a voxel.
    active = np.ones((3, 5, 6), dtype=bool)
    for dz, dy, dx in [(-1, 0, 0), (1, 0, 0), (0, -1, 0), (0, 1, 0), (0, 0, -1), (0, 0, 1)]:
        active[1 + dz, 2 + dy, 3 + dx] = False
    with pytest.raises(
        DisconnectedRegionError, match=r"1 active region\(s\) \(1 node\(s\) in all\)"
    ) as error:
        DarcyProblem.fracture((3, 5, 6), active=active)
    assert "(depth 1, row 2, col 3)" in str(error.value)


def test_unconnected_regions_can_be_dropped(solver):
    active = _islands()
    problem = DarcyProblem.fracture((10, 12), active=active, drop_unconnected=True)
    assert problem.dropped.sum() == 10 and not problem.active[2:5, 4:7].any() and not problem.active[9, 9]
    pressure = solve_pressure(torch.zeros(10, 12), problem, solver=solver)
    assert torch.isnan(pressure[~torch.from_numpy(problem.active)]).all()
    assert torch.isfinite(pressure[torch.from_numpy(problem.active)]).all()
