"""Numerics that speak: a solve that is no solution raises, a barrier across the fracture is named, a loose solver
tolerance is refused, a diverging run says which learning rate to lower, and fixed heads stay out of the metrics."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from conftest import ALL_BACKENDS, DIRECT_BACKENDS
from omegaconf import OmegaConf
from test_train import make_dataset, run_train

from flowlearn import DarcyProblem, ProblemError, solve_pressure
from flowlearn.darcy.solve import _check_maximum_principle
from flowlearn.engines import make_engine
from flowlearn.errors import ConfigError, SolutionError
from flowlearn.metrics import fracture_metrics
from flowlearn.training.config import validate_config


@pytest.mark.parametrize("solver", DIRECT_BACKENDS)
def test_a_log_k_jump_beyond_float64_raises_instead_of_returning_heads_outside_the_range(solver):
    # Without sources the heads lie in [1, 2] (maximum principle); a jump of 80 in log K (conductances e^40 apart
    # at one node) leaves float64. Depending on the BLAS's rounding the factorisation either returns noise below
    # 1 (caught by the maximum principle) or CHOLMOD meets a non-positive pivot -- never silently.
    problem = DarcyProblem.fracture((20, 24))
    log_k = torch.zeros(20, 24, dtype=torch.float64)
    log_k[10, 12] = 80.0
    with pytest.raises(
        SolutionError,
        match=r"outside the Dirichlet range \[1, 2\].*jumps by 80 between pixels|not positive definite.*more than "
        r"float64 resolves",
    ):
        solve_pressure(log_k, problem, solver=solver)
    # A jump of 30 is within float64's reach: a solution, inside the range.
    log_k[10, 12] = 30.0
    pressure = solve_pressure(log_k, problem, solver=solver)
    assert 1.0 <= float(pressure.min()) and float(pressure.max()) <= 2.0


@pytest.mark.parametrize("solver", ALL_BACKENDS)
def test_conductivities_beyond_float64_raise_before_any_engine_sees_them(solver):
    # 64x64: one-off solves go through multigrid, whose coarsest level such conductivities had crashed (IndexError).
    problem = DarcyProblem.fracture((64, 64))
    low, high = problem.layout.value_range
    # Conductances within e^+-354 / sqrt(3,968 unknowns) (areas over lengths of 0.01), the diagonal's sum of four.
    assert (round(low, 1), round(high, 1)) == (-345.5, 354.0)
    beyond = [
        torch.full((64, 64), 800.0, dtype=torch.float64),  # overflowing
        torch.full((64, 64), 3 * math.log(1e-300) - math.log(12), dtype=torch.float64),  # the LCL of 1e-300 m
        torch.from_numpy(np.random.default_rng(0).normal(scale=1e3, size=(64, 64))),  # a diverged model's
    ]
    for log_k in beyond:
        with pytest.raises(
            SolutionError,
            match=r"log K is -?\d+.* at pixel \(\d+, \d+\) of batch item 0, outside "
            r"\[-345.5, 354.0\]",
        ):
            solve_pressure(log_k, problem, solver=make_engine(solver))
    # Within the range, the solution, down to its ends; and beyond float32's range (multigrid's cycle), which a
    # factorisation then solves, without a warning.
    linear = solve_pressure(torch.zeros(64, 64, dtype=torch.float64), problem, solver=make_engine(solver))
    for value in (low + 0.1, high - 0.1, -100.0, 100.0):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pressure = solve_pressure(
                torch.full((64, 64), value, dtype=torch.float64), problem, solver=make_engine(solver)
            )
        torch.testing.assert_close(pressure, linear, rtol=1e-9, atol=0)


def test_heads_that_are_nan_are_no_solution():
    problem = DarcyProblem.fracture((6, 8))
    log_k = torch.zeros(1, 48, dtype=torch.float64)
    heads = torch.from_numpy(problem.dirichlet_values).reshape(1, -1)
    pressure = torch.where(torch.from_numpy(problem.free).reshape(1, -1), math.nan, heads)
    with pytest.raises(
        SolutionError, match=r"the head at pixel \(0, 1\) is nan, outside the Dirichlet range"
    ):
        _check_maximum_principle(pressure, log_k, heads, torch.zeros_like(heads), problem)


def test_a_barrier_across_the_fracture_names_its_pixels():
    active = np.ones((8, 12), dtype=bool)
    active[:, 6] = False
    with pytest.raises(
        ProblemError, match=r"no active path joins the inlet.*ends at column 5.*8 inactive pixel"
    ):
        DarcyProblem.fracture((8, 12), active=active, drop_unconnected=True)
    active[3, 6] = True  # one open pixel lets the flow through
    assert DarcyProblem.fracture((8, 12), active=active, drop_unconnected=True).active.sum() == 8 * 12 - 7


@pytest.mark.parametrize("key", ["solver.rtol", "solver.reltol"])
def test_a_solver_tolerance_looser_than_the_data_is_refused(tmp_path, key):
    path = tmp_path / "data.h5"
    path.touch()
    cfg = OmegaConf.create({"data": {"path": str(path)}})
    OmegaConf.update(cfg, key, 0.9, force_add=True)
    with pytest.raises(ConfigError, match=rf"{key}=0.9 is looser than the reference pressures"):
        validate_config(cfg)
    OmegaConf.update(cfg, key, 1e-8)
    validate_config(cfg)


def test_fixed_heads_stay_out_of_the_pixel_metrics():
    # A perfect model everywhere but the outlet column, whose fixed head differs from the reference (as LBM
    # pressures do at a rough outlet): the metrics over the free pixels see no error.
    problem = DarcyProblem.fracture((6, 8))
    reference = torch.from_numpy(np.tile(np.linspace(2, 1, 8), (6, 1)))[None]
    predicted = reference.clone()
    predicted[..., -1] = 1.01
    free = torch.from_numpy(problem.free)[None]
    active = torch.from_numpy(problem.active)[None]
    heads = (torch.tensor([2.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64))
    no_flow_rate = torch.tensor([math.nan], dtype=torch.float64)

    def max_error(mask: torch.Tensor) -> float:
        metrics = fracture_metrics(predicted, reference, mask, *heads, no_flow_rate, no_flow_rate)
        return float(metrics["rel_err_max"][0])

    assert max_error(free) == 0.0
    assert max_error(active) == pytest.approx(1.0)


def test_a_diverging_run_says_to_lower_the_learning_rate(tmp_path):
    dataset = make_dataset(tmp_path / "data.h5", count=4, shape=(16, 20))
    result = run_train(
        f"data.path={dataset}", "optimizer.lr=3", "trainer.max_epochs=20", "~callbacks.figures",
        run_dir=tmp_path / "run", check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "training diverged" in line and "lower optimizer.lr (now 3)" in line
