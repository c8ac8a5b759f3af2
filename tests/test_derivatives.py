"""Exact derivatives: finite-difference checks, forward mode, double backward and torch.func transforms."""

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.func import grad, hessian, jacfwd, jacrev, vmap

from flowlearn import DarcyProblem, Grid, solve_pressure
from flowlearn.engines import make_engine


def _problem_2d() -> DarcyProblem:
    """5x6 fracture-like problem with a contact spot, an interior Dirichlet node and sources."""
    shape = (5, 6)
    active = np.ones(shape, dtype=bool)
    active[2, 3] = False
    problem = DarcyProblem.fracture(shape, active=active)
    fixed = problem.dirichlet.copy()
    fixed[1, 2] = True
    values = np.where(fixed, np.linspace(1, 2, 30).reshape(shape), 0.0)
    sources = np.where(problem.free, 0.1, 0.0)
    return DarcyProblem(problem.grid, fixed, values, sources=sources, active=active)


def _problem_3d() -> DarcyProblem:
    grid = Grid((0, 0, 0), (1, 2, 1), (4, 3, 2))
    fixed = np.zeros(grid.shape, dtype=bool)
    fixed[..., 0] = fixed[..., -1] = True
    values = np.where(fixed, 1.0 + np.arange(24).reshape(grid.shape) / 24, 0.0)
    return DarcyProblem(grid, fixed, values, sources=np.full(grid.shape, 0.05))


def _inputs(problem: DarcyProblem, batch: int = 2, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, *problem.grid.shape)
    log_k = torch.randn(shape, generator=generator, dtype=torch.float64)
    heads = torch.from_numpy(problem.dirichlet_values).expand(shape).clone()
    heads += 0.1 * torch.randn(shape, generator=generator, dtype=torch.float64)
    sources = torch.from_numpy(problem.sources).expand(shape).clone()
    return tuple(x.requires_grad_() for x in (log_k, heads, sources))


def _active_pressure(problem: DarcyProblem, solver):
    """(log_k, heads, sources) -> the pressure at the problem's active nodes, (B, active nodes)."""
    active = torch.from_numpy(problem.active)

    def pressure_at_active_nodes(log_k, heads, sources):
        return solve_pressure(log_k, problem, heads, sources, solver=solver)[:, active]

    return pressure_at_active_nodes


@pytest.mark.parametrize("make_problem", [_problem_2d, _problem_3d], ids=["2d", "3d"])
def test_gradcheck_and_gradgradcheck(make_problem, solver):
    if solver.name == "amg":
        # Finite differences need more digits than the default, and bitwise-repeatable solves (no warm starts).
        solver = make_engine("amg", rtol=1e-13, reuse=False)
    problem = make_problem()
    pressure_at_active_nodes = _active_pressure(problem, solver)
    inputs = _inputs(problem)
    assert gradcheck(pressure_at_active_nodes, inputs)
    if solver.name != "amg":  # amg's double backward: test_amg_gradgradcheck, slow
        assert gradgradcheck(pressure_at_active_nodes, inputs)


# Slow (~40 s): every amg solve of gradgradcheck's finite differences builds a hierarchy anew (no reuse, so that
# solves repeat bitwise) to a 1e-13 tolerance; its gradcheck runs in CI above.
@pytest.mark.slow
@pytest.mark.parametrize("make_problem", [_problem_2d, _problem_3d], ids=["2d", "3d"])
def test_amg_gradgradcheck(make_problem):
    problem = make_problem()
    solver = make_engine("amg", rtol=1e-13, reuse=False)
    assert gradgradcheck(_active_pressure(problem, solver), _inputs(problem))


@pytest.mark.parametrize("which", [0, 1, 2], ids=["log_k", "heads", "sources"])
def test_gradcheck_of_each_input_alone(which):
    """The backward skips the work for inputs that need no gradient; each one alone must still be exact."""
    problem = _problem_2d()
    active = torch.from_numpy(problem.active)
    inputs = [x.detach() for x in _inputs(problem)]

    def pressure_of_one(x):
        log_k, heads, sources = (x if i == which else inputs[i] for i in range(3))
        return solve_pressure(log_k, problem, heads, sources)[:, active]

    assert gradcheck(pressure_of_one, (inputs[which].clone().requires_grad_(),))
    assert gradgradcheck(pressure_of_one, (inputs[which].clone().requires_grad_(),))


def test_compiled_gradient_equals_the_recorded_one():
    """A plain backward sums the edges in a compiled loop; with create_graph it records torch operations. Both are
    the same rule, on every input, in 2D and 3D, with inactive and interior Dirichlet nodes."""
    for problem in (_problem_2d(), _problem_3d()):
        pressure = _active_pressure(problem, make_engine("superlu", reuse=False))
        inputs = _inputs(problem)
        weights = torch.linspace(0.5, 1.5, problem.active.sum().item(), dtype=torch.float64)
        loss = (pressure(*inputs) ** 2 * weights).sum()
        compiled = torch.autograd.grad(loss, inputs, retain_graph=True)
        recorded = torch.autograd.grad(loss, inputs, create_graph=True)
        for fast, slow in zip(compiled, recorded):
            torch.testing.assert_close(fast, slow.detach(), rtol=1e-12, atol=1e-14)
            assert fast.abs().max() > 0


def test_forward_mode_equals_reverse_mode():
    problem = _problem_2d()
    active = torch.from_numpy(problem.active)
    log_k, heads, sources = (x.detach()[0] for x in _inputs(problem))

    def pressure(log_k, heads, sources):
        return solve_pressure(log_k, problem, heads, sources)[active]

    for argnum in range(3):
        forward = jacfwd(pressure, argnums=argnum)(log_k, heads, sources)
        reverse = jacrev(pressure, argnums=argnum)(log_k, heads, sources)
        torch.testing.assert_close(forward, reverse, rtol=1e-10, atol=1e-12)
        assert forward.abs().max() > 0


def test_hessian_is_symmetric():
    problem = _problem_3d()
    log_k = _inputs(problem, batch=1)[0].detach()[0]
    target = torch.linspace(1, 2, problem.grid.num_nodes, dtype=torch.float64).reshape(problem.grid.shape)
    # Direct solves only: differences of gradients 1e-5 apart need every digit.
    solver = make_engine("superlu", reuse=False)

    def loss(log_k):
        return ((solve_pressure(log_k, problem, solver=solver) - target) ** 2).sum()

    h = hessian(loss)(log_k).reshape(log_k.numel(), log_k.numel())
    torch.testing.assert_close(h, h.T, rtol=1e-10, atol=1e-12)
    # And it is the derivative of the gradient: compare with central differences of grad.
    direction = torch.randn_like(log_k)
    eps = 1e-5
    fd = (grad(loss)(log_k + eps * direction) - grad(loss)(log_k - eps * direction)) / (2 * eps)
    torch.testing.assert_close(h @ direction.reshape(-1), fd.reshape(-1), rtol=1e-6, atol=1e-9)


def test_vmap_of_grad_equals_a_loop():
    problem = _problem_2d()
    active = torch.from_numpy(problem.active)
    log_k = _inputs(problem, batch=4)[0].detach()

    def loss(log_k):
        return (solve_pressure(log_k, problem)[active] ** 2).sum()

    batched = vmap(grad(loss))(log_k)
    looped = torch.stack([grad(loss)(x) for x in log_k])
    torch.testing.assert_close(batched, looped, rtol=1e-12, atol=1e-14)


def test_vmap_over_a_batched_call_and_unbatched_defaults():
    problem = _problem_2d()
    log_k = _inputs(problem, batch=6)[0].detach().reshape(3, 2, *problem.grid.shape)
    batched = vmap(lambda x: solve_pressure(x, problem))(log_k)
    direct = solve_pressure(log_k.reshape(6, *problem.grid.shape), problem).reshape(batched.shape)
    torch.testing.assert_close(batched, direct, equal_nan=True)


def test_gradient_flows_to_a_float32_parameter():
    problem = _problem_2d()
    log_w = torch.zeros(problem.grid.shape, requires_grad=True)
    pressure = solve_pressure(log_w, problem)
    (pressure[torch.from_numpy(problem.active)] ** 2).sum().backward()
    assert log_w.grad.dtype == torch.float32 and log_w.grad.abs().sum() > 0
    assert pressure.dtype == torch.float64
