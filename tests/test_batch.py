"""Batched solves: B fields of one problem in one call equal B separate calls, forward and derivatives, in 2D and
3D, and torch.func's vmap folds its dimension into that batch."""

import numpy as np
import pytest
import torch
from torch.func import grad, jacrev, vmap

from flowlearn import DarcyProblem, Grid, solve_pressure
from flowlearn.engines import make_engine
from flowlearn.engines.gpu import GPUEngine


def _fracture_with_spots(shape=(12, 15), seed=0) -> DarcyProblem:
    rng = np.random.default_rng(seed)
    active = rng.random(shape) > 0.12
    active[:, [0, -1]] = True
    problem = DarcyProblem.fracture(shape, active=active, drop_unconnected=True)
    sources = np.where(problem.free, rng.normal(scale=1e-2, size=shape), 0.0)
    return DarcyProblem(problem.grid, problem.dirichlet, problem.dirichlet_values, sources, problem.active)


def _fields(batch, shape, seed=1) -> torch.Tensor:
    return torch.randn(batch, *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


# The torch engine runs the same batched code on CPU tensors; an exact-enough PCG without warm starts keeps every
# solve independent of the previous one, as finite differences and loop-vs-batch comparisons need.
SOLVERS = {
    "superlu": lambda: make_engine("superlu"),
    "torch-pcg": lambda: GPUEngine(method="pcg", device="cpu", rtol=1e-13, reuse=False),
}


@pytest.mark.parametrize("make_solver", SOLVERS.values(), ids=SOLVERS.keys())
def test_a_batch_equals_separate_solves(make_solver):
    problem = _fracture_with_spots()
    log_k = _fields(5, problem.grid.shape)
    batched = solve_pressure(log_k, problem, solver=make_solver())
    separate = torch.stack([solve_pressure(x, problem, solver=make_solver()) for x in log_k])
    torch.testing.assert_close(batched, separate, rtol=1e-10, atol=0, equal_nan=True)
    # Different fields give different pressures: the items are not one solve repeated.
    active = torch.from_numpy(problem.active)
    assert (batched[0] - batched[1])[active].abs().max() > 1e-3


@pytest.mark.parametrize("make_solver", SOLVERS.values(), ids=SOLVERS.keys())
def test_batch_gradients_equal_separate_gradients(make_solver):
    problem = _fracture_with_spots()
    active = torch.from_numpy(problem.active)
    shape = problem.grid.shape
    log_k = _fields(4, shape, seed=2)
    heads = torch.from_numpy(problem.dirichlet_values).expand(4, *shape).clone()
    heads += torch.linspace(0, 0.3, 4, dtype=torch.float64)[:, None, None]  # per-item boundary heads
    sources = torch.from_numpy(problem.sources).expand(4, *shape) * torch.arange(1.0, 5.0)[:, None, None]
    target = torch.linspace(1, 2, shape[1], dtype=torch.float64)

    def loss(log_k, heads, sources):
        pressure = solve_pressure(log_k, problem, heads, sources, solver=make_solver())
        return ((pressure - target) ** 2)[..., active].sum()

    batched = torch.autograd.grad(
        loss(*(x.requires_grad_() for x in (log_k, heads, sources))), (log_k, heads, sources)
    )
    for i in range(4):
        item = [x[i : i + 1].detach().requires_grad_() for x in (log_k, heads, sources)]
        separate = torch.autograd.grad(loss(*item), item)
        for b, s in zip(batched, separate):
            torch.testing.assert_close(b[i : i + 1], s, rtol=1e-8, atol=1e-12 * s.abs().max().item())
    assert all(g.abs().max() > 0 for g in batched)


def test_vmap_folds_its_dimension_into_one_batched_call():
    problem = _fracture_with_spots()
    solver = GPUEngine(method="pcg", device="cpu", rtol=1e-13, reuse=False)
    log_k = _fields(6, problem.grid.shape, seed=3).reshape(3, 2, *problem.grid.shape)
    batched = vmap(lambda x: solve_pressure(x, problem, solver=solver))(log_k)
    # The vmap rule hands the engine one batch of 3*2 items: one batched solve, not three.
    assert solver.stats.pcg_solves == 1
    reference = solve_pressure(log_k.reshape(6, *problem.grid.shape), problem, solver=make_engine("superlu"))
    torch.testing.assert_close(batched, reference.reshape(batched.shape), rtol=1e-10, atol=0, equal_nan=True)


def test_vmap_of_grad_on_the_torch_engine_equals_a_loop():
    problem = _fracture_with_spots()
    active = torch.from_numpy(problem.active)
    solver = GPUEngine(method="pcg", device="cpu", rtol=1e-13, reuse=False)
    log_k = _fields(4, problem.grid.shape, seed=4)

    def loss(log_k):
        return (solve_pressure(log_k, problem, solver=solver)[active] ** 2).sum()

    solver.reset_stats()
    batched = vmap(grad(loss))(log_k)
    # Forward and adjoint, each one batched solve of all four items.
    assert solver.stats.pcg_solves == 2
    looped = torch.stack([grad(loss)(x) for x in log_k])
    torch.testing.assert_close(batched, looped, rtol=1e-9, atol=1e-12 * looped.abs().max().item())


def test_jacobian_of_a_batch_is_block_diagonal():
    # Item i's pressure does not depend on item j's field: batching couples nothing.
    problem = DarcyProblem.fracture((4, 5))
    log_k = _fields(3, (4, 5), seed=5)
    jacobian = jacrev(lambda x: solve_pressure(x, problem))(log_k)  # (3, 4, 5, 3, 4, 5)
    for i in range(3):
        for j in range(3):
            block = jacobian[i, :, :, j]
            assert (block.abs().max() > 0) == (i == j)


def _layered_3d(profiles: np.ndarray) -> tuple[DarcyProblem, torch.Tensor, np.ndarray]:
    """B 3D fields varying along x only, each its own profile; and each one's analytic head (series resistances)."""
    grid = Grid((0, 0, 0), (1.0, 0.5, 0.3), (profiles.shape[1], 3, 4))
    fixed = np.zeros(grid.shape, dtype=bool)
    fixed[..., 0] = fixed[..., -1] = True
    values = np.zeros(grid.shape)
    values[..., 0] = 3.0
    problem = DarcyProblem(grid, fixed, values)
    log_k = np.broadcast_to(profiles[:, None, None, :], (profiles.shape[0], *grid.shape)).copy()
    # The same flux crosses every x-link, so each link's head drop is proportional to 1/K_e.
    resistance = 1 / np.exp((profiles[:, :-1] + profiles[:, 1:]) / 2)
    drop = np.concatenate([np.zeros((profiles.shape[0], 1)), np.cumsum(resistance, axis=1)], axis=1)
    expected = 3.0 - 3.0 * drop / resistance.sum(axis=1, keepdims=True)
    return problem, torch.from_numpy(log_k), expected


@pytest.mark.parametrize("make_solver", SOLVERS.values(), ids=SOLVERS.keys())
def test_batched_3d_fields_follow_their_analytic_profiles(make_solver):
    x = np.linspace(-1, 1, 9)
    profiles = np.stack([x**2 - 1, np.sin(3 * x), -2 * x, np.zeros_like(x)])
    problem, log_k, expected = _layered_3d(profiles)
    pressure = solve_pressure(log_k, problem, solver=make_solver()).numpy()
    for i in range(len(profiles)):
        np.testing.assert_allclose(pressure[i], np.broadcast_to(expected[i], problem.grid.shape), atol=1e-10)


def test_batched_3d_gradients_equal_separate_ones():
    rng = np.random.default_rng(6)
    grid = Grid((0, 0, 0), (1.0, 0.6, 0.4), (5, 4, 3))
    fixed = np.zeros(grid.shape, dtype=bool)
    fixed[..., 0] = fixed[..., -1] = True
    problem = DarcyProblem(grid, fixed, np.where(fixed, rng.random(grid.shape), 0.0), sources=0.01)
    log_k = torch.from_numpy(rng.normal(size=(3, *grid.shape)))
    weights = torch.from_numpy(rng.normal(size=grid.shape))

    def loss(x):
        return (solve_pressure(x, problem) * weights).sum()

    batched = grad(loss)(log_k)
    separate = torch.cat([grad(loss)(x[None]) for x in log_k])
    torch.testing.assert_close(batched, separate, rtol=1e-10, atol=1e-14)
