"""optimizer=gauss_newton: its Jacobian products against finite differences, Levenberg–Marquardt on problems with a
known answer, training under Lightning against Adam, and a checkpointed run that resumes with its damping.

The training runs fit the pixel model under the local cubic law to a synthetic fracture whose reference pressure
comes from T ∝ Ap^2.5 (:func:`test_train.make_dataset`): the LCL times W ∝ Ap^-0.5, so an exact answer exists and
the loss can go to zero.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from test_train import make_dataset

from flowlearn.data.datamodule import FractureDataModule
from flowlearn.errors import ConfigError
from flowlearn.metrics import (
    DEPARTURE_ERR,
    fracture_metrics,
    pressure_scale,
    training_loss,
)
from flowlearn.models import LocalCubicLaw, PixelCorrection
from flowlearn.training.gauss_newton import GaussNewton, linearize
from flowlearn.training.module import FractureFlowModule

SHAPE = (8, 9)


def small_batch() -> dict:
    """Two rough 8×9 fractures (one with a contact spot) with made-up reference pressures and flow rates."""
    rng = np.random.default_rng(0)
    aperture = np.exp(0.4 * rng.normal(size=(2, *SHAPE))) * 1e-4
    aperture[1, 4, 4] = 0.0
    active = aperture > 0
    columns = np.linspace(2.0, 1.0, SHAPE[1])
    pressure = np.broadcast_to(columns, aperture.shape) + 0.02 * rng.normal(size=aperture.shape)
    return {
        "aperture": torch.from_numpy(aperture),
        "pressure": torch.from_numpy(pressure),
        "active": torch.from_numpy(active),
        "inputs": torch.zeros(2, 2, *SHAPE, dtype=torch.float64),
        "inlet_pressure": torch.full((2,), 2.0, dtype=torch.float64),
        "outlet_pressure": torch.full((2,), 1.0, dtype=torch.float64),
        "flow_rate": torch.tensor([3e-12, 2e-12], dtype=torch.float64),
        "voxel_size": torch.full((2,), math.nan, dtype=torch.float64),
        "inclination": torch.full((2, 3, *SHAPE), math.nan, dtype=torch.float64),
        "aperture_slope": torch.full((2, 2, *SHAPE), math.nan, dtype=torch.float64),
        "name": ["small/a", "small/b"],
    }


@pytest.fixture(scope="module")
def small_problem() -> tuple[FractureFlowModule, dict]:
    # W away from 1 and a flow-rate weight: both terms of the loss, and a Jacobian that is not the one at the LCL.
    correction = PixelCorrection(SHAPE)
    with torch.no_grad():
        correction.raw.copy_(0.3 * torch.randn(SHAPE, generator=torch.Generator().manual_seed(1)))
    return FractureFlowModule(correction, LocalCubicLaw(), flow_rate_weight=0.01), small_batch()


def test_residuals_sum_to_the_training_loss_and_their_vjp_is_its_gradient(small_problem):
    module, batch = small_problem
    (param,) = module.parameters()
    residuals = module.residuals_of(batch, [param])
    r, _, transpose = linearize(residuals, (param.detach(),))
    fields = module(batch)
    active = torch.stack([torch.from_numpy(p.active) for p in module.problems.of(batch)])
    loss = training_loss(
        fields["pressure"], batch["pressure"], active, fields["flow_rate"], batch["flow_rate"], 0.01
    )
    # 2 · 72 pixel errors less the contact spot, and 2 flow-rate errors.
    assert r.shape == (2 * 72 - 1 + 2,)
    assert float(r.square().sum()) == pytest.approx(float(loss.detach()), rel=1e-12)
    (gradient,) = torch.autograd.grad(loss, param)
    torch.testing.assert_close(2 * transpose(r), gradient.reshape(-1), rtol=1e-10, atol=0)


def test_jacobian_products_agree_with_central_differences(small_problem):
    module, batch = small_problem
    (param,) = module.parameters()
    residuals = module.residuals_of(batch, [param])
    theta = param.detach().clone()
    r, jacobian, transpose = linearize(residuals, (theta,))
    n = theta.numel()
    # J column by column from JVPs, row by row from VJPs, and by central differences of r.
    by_jvp = torch.stack([jacobian(column) for column in torch.eye(n, dtype=torch.float64)], dim=1)
    by_vjp = torch.stack([transpose(row) for row in torch.eye(r.numel(), dtype=torch.float64)])
    step = 1e-6
    with torch.no_grad():
        central = torch.stack(
            [
                (residuals((theta + step * e.view(SHAPE),)) - residuals((theta - step * e.view(SHAPE),)))
                / (2 * step)
                for e in torch.eye(n, dtype=torch.float64)
            ],
            dim=1,
        )
    torch.testing.assert_close(by_jvp, by_vjp, rtol=1e-10, atol=1e-16)
    # Central differences carry the solves' round-off over 2·1e-6: about 1e-8 of the largest entry.
    torch.testing.assert_close(by_jvp, central, rtol=1e-5, atol=1e-7 * float(central.abs().max()))


def test_converges_to_the_least_squares_solution_of_a_linear_problem():
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(30, 5, generator=generator, dtype=torch.float64)
    target = torch.randn(30, generator=generator, dtype=torch.float64)
    solution = torch.linalg.lstsq(matrix, target.unsqueeze(1)).solution.squeeze(1)
    x = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    optimizer = GaussNewton([x], cg_iterations=5, cg_tolerance=1e-12)

    def residuals(values: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return matrix @ values[0] - target

    losses = [float(optimizer.step(residuals)) for _ in range(8)]
    torch.testing.assert_close(x.detach(), solution, rtol=1e-9, atol=1e-12)
    assert all(later <= earlier for earlier, later in itertools.pairwise(losses))
    assert losses[-1] == pytest.approx(float((matrix @ solution - target).square().sum()), rel=1e-12)


def test_converges_on_rosenbrock_and_never_accepts_a_step_that_raises_the_loss():
    # The Rosenbrock valley as residuals (10(y − x²), 1 − x): curved, so steps get rejected and λ must adapt.
    point = torch.tensor([-1.2, 1.0], dtype=torch.float64, requires_grad=True)
    optimizer = GaussNewton([point], damping=1.0, cg_iterations=2, cg_tolerance=1e-12)

    def residuals(values: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y = values[0]
        return torch.stack([10 * (y - x**2), 1 - x])

    losses = [float(residuals((point.detach(),)).square().sum())]
    for _ in range(40):
        losses.append(float(optimizer.step(residuals)))
    assert all(later <= earlier for earlier, later in itertools.pairwise(losses))
    torch.testing.assert_close(point.detach(), torch.ones(2, dtype=torch.float64), rtol=0, atol=1e-8)


class LossHistory(L.Callback):
    """train/loss of every epoch, and the optimiser's state when training starts."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.state_at_start: dict = {}

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        optimizer = trainer.optimizers[0]
        self.state_at_start = dict(optimizer.state[next(iter(module.parameters()))])

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.losses.append(float(trainer.callback_metrics["train/loss"]))


@pytest.fixture(scope="module")
def fracture(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "one.h5", count=1, shape=(12, 16))


def fit(
    fracture: Path,
    optimizer: Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer],
    epochs: int,
    checkpoints: Path | None = None,
    ckpt_path: Path | None = None,
    more_callbacks: Iterable[L.Callback] = (),
) -> tuple[FractureFlowModule, LossHistory]:
    """Train the pixel model under the LCL on ``fracture`` for ``epochs`` epochs (one step each)."""
    datamodule = FractureDataModule(path=[str(fracture)], batch_size=1, fractions=[1.0, 0.0, 0.0], seed=0)
    datamodule.setup("fit")
    module = FractureFlowModule(PixelCorrection((12, 16)), LocalCubicLaw(), optimizer=optimizer)
    history = LossHistory()
    callbacks: list[L.Callback] = [history, *more_callbacks]
    if checkpoints is not None:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(dirpath=checkpoints, save_last=True))
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        precision="64-true",
        logger=False,
        enable_checkpointing=checkpoints is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    return module, history


def gauss_newton(params: Iterable[torch.Tensor]) -> GaussNewton:
    return GaussNewton(params, cg_iterations=10)


def test_lightning_run_lowers_the_loss_every_epoch_and_beats_adam(fracture):
    epochs = 6
    _, newton = fit(fracture, gauss_newton, epochs)
    _, adam = fit(fracture, lambda params: torch.optim.Adam(params, lr=3e-3), epochs)
    assert len(newton.losses) == len(adam.losses) == epochs
    assert all(later < earlier for earlier, later in itertools.pairwise(newton.losses))
    # The loss the last epoch logged is that of the parameters before its step: Adam's is still near the LCL's.
    assert newton.losses[-1] < 1e-4 * newton.losses[0]
    assert newton.losses[-1] < 1e-3 * adam.losses[-1]


def test_resumed_run_keeps_the_damping_and_step_count(fracture, tmp_path):
    _, whole = fit(fracture, gauss_newton, 4)
    fit(fracture, gauss_newton, 2, checkpoints=tmp_path)
    state = torch.load(tmp_path / "last.ckpt", weights_only=True)["optimizer_states"][0]["state"][0]
    assert state["steps"] == 2 and state["damping"] > 0
    resumed, history = fit(fracture, gauss_newton, 4, ckpt_path=tmp_path / "last.ckpt")
    assert history.state_at_start == state
    # The resumed epochs log what the uninterrupted run logged: the restored weights' loss to the solves' 1e-11
    # tolerance; after a step, to 1e-2, as a resumed run factors afresh where the uninterrupted one reuses old
    # factors, and this over-parametrised fit (192 weights, fewer pressures) amplifies round-off along its path.
    np.testing.assert_allclose(history.losses[0], whole.losses[2], rtol=1e-6)
    np.testing.assert_allclose(history.losses[1:], whole.losses[3:], rtol=1e-2)
    (param,) = resumed.parameters()
    assert resumed.trainer.optimizers[0].state[param]["steps"] == 4


class TerminatedAtEpoch(L.Callback):
    """Sends this process SIGTERM as the step of epoch ``epoch`` starts (a scheduler cancelling the job), after
    keeping the weights and the optimiser's state."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.weights: list[torch.Tensor] = []
        self.module: L.LightningModule | None = None

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, *args: object) -> None:
        if trainer.current_epoch == self.epoch:
            self.module, self.weights = module, [p.detach().clone() for p in module.parameters()]
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_sigterm_abandons_the_step_under_way(fracture):
    # A step allowed 1,000 CG iterations to a tolerance CG reaches only after many: without the check between
    # iterations it runs them all and moves the weights before Lightning stops the run at the next batch.
    stop = TerminatedAtEpoch(2)
    history = LossHistory()
    with pytest.raises(SystemExit):  # Lightning's SIGTERMException
        fit(
            fracture,
            lambda params: GaussNewton(params, cg_iterations=1000, cg_tolerance=1e-15),
            4,
            more_callbacks=[stop, history],
        )
    assert len(history.losses) == 3  # the abandoned step's epoch logs the loss before it, as every epoch does
    for before, after in zip(stop.weights, stop.module.parameters(), strict=True):
        assert torch.equal(before, after.detach())
    (param,) = stop.module.parameters()
    assert stop.module.trainer.optimizers[0].state[param]["steps"] == 2


def test_refuses_several_processes():
    # The trainer of a two-process run, not started: its optimiser is configured before any process would be.
    module = FractureFlowModule(PixelCorrection(SHAPE), LocalCubicLaw(), optimizer=gauss_newton)
    module.trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    with pytest.raises(ConfigError, match="optimizer=gauss_newton runs in one process"):
        module.configure_optimizers()


def test_training_loss_is_the_mean_per_fracture_mse_or_departure_error():
    generator = torch.Generator().manual_seed(3)
    predicted = torch.rand(3, 4, 5, dtype=torch.float64, generator=generator)
    reference = torch.rand(3, 4, 5, dtype=torch.float64, generator=generator)
    active = torch.rand(3, 4, 5, generator=generator) > 0.3
    active[:, :, [0, -1]] = True
    nan = torch.full((3,), math.nan, dtype=torch.float64)
    inlet, outlet = torch.full((3,), 2.0, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    # Each fracture's MSE and departure error from the arrays, one fracture at a time.
    line = 2.0 - np.arange(5) / 4
    mse, departure = [], []
    for p, q, a in zip(predicted.numpy(), reference.numpy(), active.numpy()):
        squared = ((p - q)[a] ** 2).sum()
        mse.append(squared / a.sum())
        departure.append(squared / ((q - line)[a] ** 2).sum())
    for kind, expected in (("mse", np.mean(mse)), ("departure", np.mean(departure))):
        scale = pressure_scale(kind, reference, active, inlet, outlet)
        loss = training_loss(predicted, reference, active, nan, nan, 0.0, scale)
        assert float(loss) == pytest.approx(expected, rel=1e-12), kind
    # The departure error of the loss is fracture_metrics' over the same pixels.
    scale = pressure_scale("departure", reference, active, inlet, outlet)
    errors = fracture_metrics(predicted, reference, active, inlet, outlet, nan, nan)[DEPARTURE_ERR]
    np.testing.assert_allclose(errors.numpy(), departure, rtol=1e-12)
    assert float(training_loss(predicted, reference, active, nan, nan, 0.0, scale)) == pytest.approx(
        float(errors.mean()), rel=1e-12
    )
