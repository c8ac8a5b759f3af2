"""Anisotropic conductivity: one value per node and axis, and the full 2D tensor's 9-point scheme.

Exact where exact answers exist (equal channels are the scalar form, ρ ≡ 0 is the per-axis form, a constant rotated
tensor converges at second order to a manufactured solution), conservative (every column passes the outlet's flow),
monotone, and differentiable to any order on every engine.
"""

import math

import numpy as np
import pytest
import torch
from conftest import DIRECT_BACKENDS
from torch.autograd import gradcheck, gradgradcheck
from torch.func import jacfwd, jacrev, vmap

from flowlearn import DarcyProblem, Grid, SolveInputError, solve_pressure
from flowlearn.darcy.flux import column_flow_rates, outlet_flow_rate
from flowlearn.darcy.tensor import tensor_form
from flowlearn.engines import make_engine
from flowlearn.engines.gpu import GPUEngine
from flowlearn.errors import SolutionError


def _fracture(shape=(7, 9), seed=0) -> DarcyProblem:
    """A fracture with contact spots, flow along x."""
    rng = np.random.default_rng(seed)
    active = rng.random(shape) > 0.1
    active[:, [0, -1]] = True
    return DarcyProblem.fracture(shape, active=active, drop_unconnected=True)


def _with_sources(problem: DarcyProblem) -> DarcyProblem:
    """The same problem with an interior Dirichlet node and sources, so that every input of the op matters."""
    shape = problem.grid.shape
    fixed = problem.dirichlet.copy()
    fixed[shape[0] // 2, shape[1] // 2] = problem.active[shape[0] // 2, shape[1] // 2]
    values = np.where(fixed, np.linspace(1, 2, fixed.size).reshape(shape), 0.0)
    sources = np.where(problem.active & ~fixed, 0.05, 0.0)
    return DarcyProblem(problem.grid, fixed, values, sources=sources, active=problem.active)


def _tensor(batch: int, shape: tuple[int, int], seed: int = 1, spread: float = 0.4) -> torch.Tensor:
    """(B, 3, H, W): log T_xx, log T_yy rough and correlated, ρ of both signs within (-0.5, 0.5)."""
    generator = torch.Generator().manual_seed(seed)
    log_xx = spread * torch.randn(batch, *shape, generator=generator, dtype=torch.float64)
    log_yy = log_xx + 0.5 * spread * torch.randn(batch, *shape, generator=generator, dtype=torch.float64)
    rho = torch.rand(batch, *shape, generator=generator, dtype=torch.float64) - 0.5
    return torch.stack([log_xx, log_yy, rho], dim=1)


ENGINES = [*DIRECT_BACKENDS, "amg", "gpu-pcg"]


def _engine(name: str, exact: bool = False):
    """A fresh engine; ``exact``: solves repeatable to round-off, as finite differences need."""
    if name == "gpu-pcg":  # the GPU engine's torch code, on CPU tensors
        return GPUEngine(method="pcg", device="cpu", rtol=1e-13, reuse=not exact)
    if name == "amg":
        return make_engine("amg", rtol=1e-13, reuse=not exact)
    return make_engine(name, reuse=not exact) if exact else make_engine(name)


# --- the forms agree where they must ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_equal_axes_are_the_scalar_form_and_zero_correlation_the_axes_form(engine):
    problem = _fracture()
    log_k = _tensor(2, problem.grid.shape)[:, 0]
    scalar = solve_pressure(log_k, problem, solver=_engine(engine))
    axes = solve_pressure(torch.stack([log_k, log_k], dim=1), problem, solver=_engine(engine))
    torch.testing.assert_close(axes, scalar, rtol=1e-10, atol=0, equal_nan=True)
    # A tensor without cross term is the per-axis form: the diagonals of the 9-point stencil carry nothing.
    diagonal = _tensor(2, problem.grid.shape)[:, :2]
    by_axis = solve_pressure(diagonal, problem, solver=_engine(engine))
    tensor = torch.cat([diagonal, torch.zeros_like(diagonal[:, :1])], dim=1)
    torch.testing.assert_close(
        solve_pressure(tensor, problem, solver=_engine(engine)), by_axis, rtol=1e-10, atol=0, equal_nan=True
    )


def test_per_axis_conductivity_on_a_3d_grid_follows_the_layers_in_series():
    # Layers across z would not matter to flow along x with a scalar K; with one K per axis, T_xx alone decides.
    grid = Grid((0, 0, 0), (3, 1, 1), (4, 3, 3))
    fixed = np.zeros(grid.shape, dtype=bool)
    fixed[..., 0] = fixed[..., -1] = True
    problem = DarcyProblem(grid, fixed, np.where(fixed, np.linspace(2, 1, 4)[None, None, :], 0.0))
    log_x = torch.log(torch.tensor([1.0, 4.0, 1.0, 0.25], dtype=torch.float64)).expand(1, *grid.shape)
    axes = torch.stack([log_x, torch.full_like(log_x, 9.0), torch.full_like(log_x, -9.0)], dim=1)
    pressure = solve_pressure(axes, problem, solver="superlu")[0]
    # Columns in series along x with edge conductances the geometric means: heads drop in inverse proportion.
    k = torch.exp(0.5 * (log_x[0, 0, 0, 1:] + log_x[0, 0, 0, :-1]))
    drops = (1 / k) / (1 / k).sum()
    expected = 2 - torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(drops, 0)])
    torch.testing.assert_close(pressure, expected.expand(grid.shape), rtol=1e-12, atol=1e-12)


# --- exact solutions ----------------------------------------------------------------------------------------------

ANGLE = math.radians(30)
ROTATION = np.array([[math.cos(ANGLE), -math.sin(ANGLE)], [math.sin(ANGLE), math.cos(ANGLE)]])
# Principal conductivities 1 and 4 at 30°: T_xx 1.75, T_yy 3.25, T_xy 1.30; |T_xy| < min(T_xx, T_yy).
CONSTANT = ROTATION @ np.diag([1.0, 4.0]) @ ROTATION.T


def _manufactured(n: int, cross: bool) -> float:
    """Largest nodal error of p = sin(πx) sin(πy) + x + y/2 on the unit square, n nodes a side, every boundary node
    at its exact head and the sources of -∇·(T∇p) inside; the tensor with or without its cross term."""
    kxx, kyy, kxy = CONSTANT[0, 0], CONSTANT[1, 1], CONSTANT[0, 1]
    grid = Grid((0, 0), (1, 1), (n, n))
    x, y = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n))  # image layout: rows are y
    exact = np.sin(np.pi * x) * np.sin(np.pi * y) + x + 0.5 * y
    divergence = -(np.pi**2) * (kxx + kyy) * np.sin(np.pi * x) * np.sin(
        np.pi * y
    ) + 2 * kxy * np.pi**2 * np.cos(np.pi * x) * np.cos(np.pi * y)
    boundary = np.ones((n, n), dtype=bool)
    boundary[1:-1, 1:-1] = False
    spacing = 1 / (n - 1)
    problem = DarcyProblem(grid, boundary, exact, sources=-divergence * spacing**2 * grid.thickness)
    channels = [math.log(kxx), math.log(kyy)] + ([kxy / math.sqrt(kxx * kyy)] if cross else [])
    field = torch.tensor(channels, dtype=torch.float64)[None, :, None, None].expand(1, len(channels), n, n)
    pressure = solve_pressure(field, problem, solver=make_engine("superlu", multigrid_unknowns=None))[0]
    return float(np.abs(pressure.numpy() - exact).max())


def test_a_rotated_anisotropic_problem_converges_at_second_order():
    errors = np.array([_manufactured(n, cross=True) for n in (9, 17, 33, 65)])
    orders = np.log2(errors[:-1] / errors[1:])
    assert np.all(orders > 1.95) and errors[-1] < 1e-3, errors
    # Without the cross term the same refinement converges to the wrong answer.
    dropped = np.array([_manufactured(n, cross=False) for n in (17, 65)])
    assert dropped.min() > 0.05 and abs(dropped[1] - dropped[0]) < 0.01, dropped


def test_a_linear_head_is_exact_for_any_constant_tensor():
    # Every interior stencil is exact for linear heads: the tensor scheme is consistent, whatever the cross term.
    n = 8
    grid = Grid((0, 0), (1, 1), (n, n))
    x, y = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n))
    exact = 1 + 0.3 * x - 0.7 * y
    boundary = np.ones((n, n), dtype=bool)
    boundary[1:-1, 1:-1] = False
    problem = DarcyProblem(grid, boundary, exact)
    for rho in (-0.9, -0.3, 0.0, 0.5, 0.9):
        field = torch.tensor([0.2, 0.2, rho], dtype=torch.float64)[None, :, None, None].expand(1, 3, n, n)
        torch.testing.assert_close(
            solve_pressure(field, problem, solver="superlu")[0], torch.from_numpy(exact), rtol=0, atol=1e-13
        )


def test_every_column_passes_the_outlet_flow_rate():
    # The diagonals cross columns too: summed with the axis edges, the flow is conserved column by column.
    problem = _fracture((12, 15), seed=2)
    field = _tensor(2, problem.grid.shape, seed=3, spread=1.0)
    pressure = solve_pressure(field, problem, solver="superlu")
    columns = column_flow_rates(field, pressure, problem)
    outlet = outlet_flow_rate(field, pressure, problem)
    torch.testing.assert_close(columns, outlet[:, None].expand_as(columns), rtol=1e-10, atol=0)


def test_strongly_anisotropic_tensors_keep_the_maximum_principle():
    # |ρ| near 1 and T_yy 100 T_xx: far beyond where the cross term fits under the axis terms. The cap keeps every
    # weight >= 0, so the solution stays within the heads (the solve would raise otherwise).
    problem = _fracture((10, 12), seed=4)
    shape = problem.grid.shape
    field = torch.stack(
        [torch.zeros(shape), torch.full(shape, math.log(100.0)), torch.full(shape, 0.99)], dim=0
    ).to(torch.float64)[None]
    field[0, 2, ::2] = -0.99
    pressure = solve_pressure(field, problem, solver="superlu")[0]
    active = torch.from_numpy(problem.active)
    assert pressure[active].min() >= 1 - 1e-12 and pressure[active].max() <= 2 + 1e-12


# --- derivatives --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("form", ["axes", "tensor"])
def test_gradcheck_and_gradgradcheck(form, engine):
    problem = _with_sources(_fracture((5, 6), seed=5))
    shape = problem.grid.shape
    field = _tensor(1, shape, seed=6)
    field = field[:, :2] if form == "axes" else field
    generator = torch.Generator().manual_seed(7)
    heads = torch.from_numpy(problem.dirichlet_values).expand(1, *shape) + 0.1 * torch.randn(
        1, *shape, generator=generator, dtype=torch.float64
    )
    sources = torch.from_numpy(problem.sources).expand(1, *shape).clone()
    inputs = tuple(x.clone().requires_grad_() for x in (field, heads, sources))
    solver = _engine(engine, exact=True)
    active = torch.from_numpy(problem.active)

    def pressure_at_active_nodes(field, heads, sources):
        return solve_pressure(field, problem, heads, sources, solver=solver)[:, active]

    assert gradcheck(pressure_at_active_nodes, inputs)
    assert gradgradcheck(pressure_at_active_nodes, inputs)


@pytest.mark.parametrize("form", ["axes", "tensor"])
def test_forward_mode_reverse_mode_and_vmap_agree(form):
    problem = _fracture((6, 7), seed=8)
    field = _tensor(1, problem.grid.shape, seed=9)
    field = field[:, :2] if form == "axes" else field
    active = torch.from_numpy(problem.active)
    solver = make_engine("superlu", reuse=False)

    def pressure(field):
        return solve_pressure(field, problem, solver=solver)[:, active]

    forward, reverse = jacfwd(pressure)(field), jacrev(pressure)(field)
    torch.testing.assert_close(forward, reverse, rtol=1e-9, atol=1e-12)
    assert forward.abs().max() > 0
    # vmap over a stack of fields: one batched call, the same as solving each.
    stack = torch.stack([field, 1.1 * field])
    torch.testing.assert_close(
        vmap(pressure)(stack), torch.stack([pressure(f) for f in stack]), rtol=1e-12, atol=0
    )


def test_flow_rate_gradient_of_the_tensor_is_exact():
    # The outlet flow rate through both the solve and the edges' transmissibilities.
    problem = _fracture((5, 7), seed=10)
    field = _tensor(1, problem.grid.shape, seed=11).requires_grad_()
    solver = make_engine("superlu", reuse=False)

    def flow_rate(field):
        return outlet_flow_rate(field, solve_pressure(field, problem, solver=solver), problem)

    assert gradcheck(flow_rate, (field,))


# --- bad input ----------------------------------------------------------------------------------------------------


def test_a_tensor_that_is_not_positive_definite_names_the_node_and_its_values():
    problem = _fracture()
    field = _tensor(2, problem.grid.shape)
    field[1, 2, 3, 4] = 1.2
    with pytest.raises(
        SolveInputError,
        match=r"not positive definite and finite at 1 active node\(s\); the first is batch item 1, pixel \(3, 4\)"
        r".*rho = T_xy/sqrt\(T_xx T_yy\) = 1\.2 \(T_xx = .*, T_xy = .*\); rho must lie in \(-1, 1\)",
    ):
        solve_pressure(field, problem)
    field[1, 2, 3, 4], field[0, 0, 1, 1] = 0.0, math.nan
    with pytest.raises(SolveInputError, match=r"batch item 0, pixel \(1, 1\): log T_xx = nan"):
        solve_pressure(field, problem)
    components = torch.ones(1, 3, 4, 5, dtype=torch.float64)  # T_xy² = T_xx·T_yy: singular
    with pytest.raises(SolveInputError, match=r"pixel \(0, 0\): T_xx = 1, T_yy = 1, T_xy = 1 \(needs"):
        tensor_form(components)
    components[:, 2] = 0.5
    torch.testing.assert_close(tensor_form(components)[:, 2], torch.full((1, 4, 5), 0.5, dtype=torch.float64))


def test_shapes_that_are_no_form_are_refused_with_the_forms_listed():
    problem = _fracture((4, 5))
    with pytest.raises(
        SolveInputError, match=r"\(batch, 2, 4, 5\) for one per node and axis .* \(batch, 3, 4, 5\)"
    ):
        solve_pressure(torch.zeros(1, 4, 4, 5, dtype=torch.float64), problem)
    volume = DarcyProblem.fracture((3, 4, 5))
    with pytest.raises(
        SolveInputError, match=r"\(batch, 3, 3, 4, 5\) for one per node and axis \(x, y, z\)$"
    ):
        solve_pressure(torch.zeros(1, 2, 3, 4, 5, dtype=torch.float64), volume)


def test_multigrid_one_offs_take_the_nine_point_stencil():
    # A one-off matrix of 5,000 unknowns or more is solved by multigrid-preconditioned CG, whose finest level then
    # holds the diagonals and smooths in four colours.
    problem = _fracture((70, 80), seed=12)
    field = _tensor(1, problem.grid.shape, seed=13, spread=1.0)
    engine = make_engine("superlu")
    pressure = solve_pressure(field, problem, solver=engine)
    assert engine.stats.pcg_solves == 1 and engine.stats.pcg_iterations < 60
    direct = solve_pressure(field, problem, solver=make_engine("superlu", multigrid_unknowns=None))
    torch.testing.assert_close(pressure, direct, rtol=1e-9, atol=0, equal_nan=True)


def test_conductivities_beyond_float64_name_the_axis_or_the_edge():
    problem = _fracture((8, 10), seed=14)
    high = problem.variant("axes").layout.value_range[1]
    axes = torch.zeros(1, 2, 8, 10, dtype=torch.float64)
    axes[0, 1, 3, 4] = high + 10
    with pytest.raises(
        SolutionError, match=r"log K along y is \S+ at pixel \(3, 4\) of batch item 0, outside"
    ):
        solve_pressure(axes, problem)
    tensor = torch.zeros(1, 3, 8, 10, dtype=torch.float64)
    tensor[0, 1, 3, 4] = -2074.0  # T_yy of an aperture of 1e-300 m: its edges would vanish
    with pytest.raises(
        SolutionError, match=r"log K along y is -2074 at pixel \(3, 4\) of batch item 0, outside"
    ):
        solve_pressure(tensor, problem)
