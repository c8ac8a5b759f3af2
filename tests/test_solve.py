"""The forward solve against analytic solutions, conservation, DPFEHM's published figures and across backends."""

import gc
import weakref

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import DIRECT_BACKENDS

from flowlearn import DarcyProblem, Grid, solve_pressure
from flowlearn.engines import make_engine


@pytest.mark.parametrize("shape", [(7, 9), (40, 33), (3, 4, 5)])
def test_assembled_matrix_is_the_graph_laplacian_of_the_free_nodes(shape):
    """A, as the layout's compiled loops store it, equals sum_e T_e (1_a - 1_b)(1_a - 1_b)^T over the edges, built
    with scipy and restricted to the free nodes: what the conventions of the module docstring say it is."""
    rng = np.random.default_rng(len(shape))
    grid = Grid(tuple(0.0 for _ in shape), tuple(1.0 for _ in shape), shape[::-1])  # counts x first
    shape = grid.shape
    active = rng.random(shape) > 0.15
    fixed = np.zeros(shape, dtype=bool)
    fixed[..., 0] = fixed[..., -1] = True
    problem = DarcyProblem(grid, fixed, np.where(fixed, 1.0, 0.0), active=active, drop_unconnected=True)
    layout = problem.layout
    transmissibility, matrix = layout.system(0, rng.normal(size=grid.num_nodes))
    a, b = layout.edges.T
    ends = np.concatenate([a, b])
    incidence = sp.csr_matrix(
        (np.concatenate([np.ones(a.size), -np.ones(a.size)]), (np.tile(np.arange(a.size), 2), ends)),
        shape=(a.size, grid.num_nodes),
    )
    laplacian = (incidence.T @ sp.diags(transmissibility) @ incidence).tocsc()
    free = layout.free_nodes
    expected = laplacian[free][:, free]
    assert (matrix != matrix.T).nnz == 0 and matrix.has_sorted_indices
    assert abs(matrix - expected).max() <= 1e-14 * abs(expected).max()
    assert matrix.nnz == expected.nnz


@pytest.mark.parametrize("backend", DIRECT_BACKENDS)
def test_uniform_conductivity_gives_the_linear_profile(backend):
    problem = DarcyProblem.fracture((256, 260))
    # A factorisation, exact to round-off (a one-off of this size otherwise takes multigrid CG, exact to rtol:
    # test_multigrid.py).
    solver = make_engine(backend, multigrid_unknowns=None)
    pressure = solve_pressure(torch.zeros(256, 260), problem, solver=solver).numpy()
    exact = 2 - np.arange(260) / 259
    assert pressure.dtype == np.float64
    assert np.abs(pressure - exact).max() <= 1e-12


def test_thiem_drawdown_matches_the_analytic_solution():
    # DPFEHM's test/thiem.jl: pumping well in a confined aquifer with a fixed head beyond radius R.
    grid = Grid((-50, -50), (50, 50), (101, 101), thickness=10.0)
    k, pumping, head, radius = 1e-5, 1e-3, 1000.0, 50.0
    x, y = (grid.to_image(c) for c in grid.coords)
    sources = np.zeros(grid.shape)
    sources[50, 50] = -pumping
    problem = DarcyProblem(grid, np.hypot(x, y) >= radius, head, sources=sources)
    pressure = solve_pressure(torch.full(grid.shape, np.log(k)), problem).numpy()
    on_axis = (y == 0) & (x >= 2) & (x <= 40)
    r = x[on_axis]
    thiem = pumping * np.log(radius / r) / (2 * np.pi * k * grid.thickness)
    drawdown = head - pressure[on_axis]
    np.testing.assert_allclose(drawdown, thiem, rtol=0.03)


def test_example_fracture_reproduces_the_published_mse(example_fracture):
    aperture, lbm_pressure = example_fracture
    problem = DarcyProblem.fracture(aperture.shape)
    # MSE against the LBM pressure with K = Ap^(2w), uniform w and an exact solve (DESIGN.md).
    for w, expected in [(0.0, 2.610701e-4), (0.5, 2.194683e-4), (1.0, 2.058538e-4)]:
        log_k = torch.from_numpy(2 * w * np.log(aperture))
        mse = ((solve_pressure(log_k, problem) - torch.from_numpy(lbm_pressure)) ** 2).mean().item()
        assert mse == pytest.approx(expected, rel=1e-6)


def _flux_balance(problem, log_k_image, pressure_image):
    """Net outflow of every active node, computed directly from the edge fluxes T_e (h_a - h_b)."""
    grid = problem.grid
    u, h = grid.to_nodes(log_k_image), grid.to_nodes(pressure_image)
    active = grid.to_nodes(problem.active)
    a, b = grid.edges.T
    keep = active[a] & active[b]
    a, b = a[keep], b[keep]
    flux = grid.areas_over_lengths[keep] * np.exp((u[a] + u[b]) / 2) * (h[a] - h[b])
    out = np.zeros(grid.num_nodes)
    np.add.at(out, a, flux)
    np.add.at(out, b, -flux)
    return grid.to_image(out)


def test_mass_is_conserved_with_contact_spots_and_sources(solver):
    rng = np.random.default_rng(1)
    shape = (24, 30)
    log_k = rng.normal(scale=1.5, size=shape)
    active = rng.random(shape) > 0.15
    active[:, [0, -1]] = True
    problem = DarcyProblem.fracture(shape, active=active, drop_unconnected=True)
    sources = np.where(problem.free, rng.normal(scale=1e-3, size=shape), 0.0)
    pressure = solve_pressure(
        torch.from_numpy(log_k), problem, sources=torch.from_numpy(sources), solver=solver
    )
    pressure = pressure.numpy()
    assert np.isnan(pressure[~problem.active]).all() and np.isfinite(pressure[problem.active]).all()
    outflow = _flux_balance(problem, log_k, np.nan_to_num(pressure))
    # Every free node's net outflow equals its source.
    scale = np.abs(outflow[problem.dirichlet]).max()
    assert np.abs(outflow - sources)[problem.free].max() <= 1e-9 * scale


def test_3d_layers_in_series_follow_the_harmonic_drop(solver):
    # Conductivity varying along x only: the same flux crosses every x-link, so the head drop across a link is
    # proportional to 1/K_e with the geometric-mean K_e of its two nodes.
    grid = Grid((0, 0, 0), (1.0, 0.5, 0.25), (9, 3, 4))
    nx = grid.ns[0]
    log_k_x = np.linspace(-2, 2, nx) ** 2 - 1
    log_k = np.broadcast_to(log_k_x, grid.shape).copy()
    fixed = np.zeros(grid.shape, dtype=bool)
    fixed[..., 0] = fixed[..., -1] = True
    values = np.zeros(grid.shape)
    values[..., 0] = 3.0
    problem = DarcyProblem(grid, fixed, values)
    pressure = solve_pressure(torch.from_numpy(log_k)[None], problem, solver=solver)[0].numpy()
    resistance = 1 / np.exp((log_k_x[:-1] + log_k_x[1:]) / 2)
    expected = 3.0 - 3.0 * np.concatenate([[0], np.cumsum(resistance)]) / resistance.sum()
    np.testing.assert_allclose(pressure, np.broadcast_to(expected, grid.shape), rtol=0, atol=1e-10)


def test_backends_agree_on_a_heterogeneous_field():
    rng = np.random.default_rng(2)
    shape = (64, 64)
    active = rng.random(shape) > 0.1
    active[:, [0, -1]] = True
    problem = DarcyProblem.fracture(shape, active=active, drop_unconnected=True)
    log_k = torch.from_numpy(rng.normal(scale=1.0, size=(2, *shape)))
    sources = torch.from_numpy(np.where(problem.free, rng.normal(scale=1e-2, size=shape), 0.0))
    results = {
        backend: solve_pressure(log_k, problem, sources=sources, solver=make_engine(backend)).numpy()
        for backend in ("cholmod", "superlu", "amg")
        if backend != "cholmod" or _has_cholmod()
    }
    reference = results.pop("superlu")
    active_nodes = np.broadcast_to(problem.active, reference.shape)
    for backend, pressure in results.items():
        relative = np.abs(pressure - reference)[active_nodes] / np.abs(reference[active_nodes])
        assert relative.max() <= 1e-9, backend


def _has_cholmod() -> bool:
    from flowlearn.engines import cholmod_available

    return cholmod_available()


# Channels of each conductivity form: log T (B, H, W), per axis (B, 2, H, W), the tensor (B, 3, H, W).
FORM_CHANNELS = {"scalar": (), "axes": (2,), "tensor": (3,)}


@pytest.mark.parametrize("form", FORM_CHANNELS)
def test_a_dropped_problem_frees_its_engine_state_without_the_cycle_collector(form):
    # A training run keeps a bounded cache of problems and drops the rest; an engine keeps its factors per problem
    # (weakly). Were a problem part of a reference cycle, only the cyclic collector could free it and its factors,
    # and large arrays hardly ever trigger that: memory grew epoch after epoch.
    engine = make_engine("superlu")
    problem = DarcyProblem.fracture((12, 14))
    log_k = torch.zeros((1, *FORM_CHANNELS[form], 12, 14), dtype=torch.float64, requires_grad=True)
    solve_pressure(log_k, problem, solver=engine).nan_to_num().sum().backward()
    assert len(engine._prepared) == 1
    dropped = weakref.ref(problem)
    gc.disable()
    try:
        del problem
        assert dropped() is None
        assert len(engine._prepared) == 0
    finally:
        gc.enable()
