"""The LightningModule: aperture -> correction model -> transmissivity law -> pressure solve -> loss.

Batches come from :class:`flowlearn.data.datamodule.FractureDataModule`: dicts with ``aperture``, ``pressure``,
``active`` (B, *shape), the correction model's ``inputs`` (B, C, *shape), ``inlet_pressure``/``outlet_pressure``,
``flow_rate``, ``voxel_size`` (B,) and ``name`` (B strings).

Every fracture gets its own :class:`~flowlearn.darcy.DarcyProblem`, kept between visits
(:class:`~flowlearn.training.batches.FractureProblems`). Beside the learned model, every stage measures the
baselines (:class:`~flowlearn.training.baselines.BaselineScores`). The ``power`` baseline's exponent is fitted on the
training split when fitting starts and is stored with the weights (the ``power_exponent`` buffer), so that a resumed
run, the test and ``flowlearn predict`` reuse it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable

import torch
from torch import nn

from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.data.datamodule import FractureDataModule
from flowlearn.engines import Engine
from flowlearn.errors import CheckpointError, ConfigError, DivergenceError, SolutionError, SolveInputError
from flowlearn.metrics import (
    IMPROVEMENT,
    LOSS,
    METRICS,
    MSE,
    REL_ERR_MEAN,
    STAGES,
    column,
    fracture_metrics,
    improvement,
    metric_name,
    pressure_scale,
    training_loss,
    training_residuals,
)
from flowlearn.models.baselines import BASELINE_NAMES, COMPARED
from flowlearn.models.laws import Geometry, PermeabilityLaw
from flowlearn.training.baselines import BaselineScores
from flowlearn.training.batches import CACHED_PIXELS, FractureProblems, log_aperture, solve_fracture
from flowlearn.training.gauss_newton import GaussNewton, Residuals

# isort: off
# After flowlearn.data.datamodule's import, which imports Lightning (and torchmetrics) with the collector paused.
import lightning as L
from flowlearn.training.epoch_metrics import EpochMetrics

# isort: on

log = logging.getLogger(__name__)

# An epoch's mean training loss this many times the lowest so far: the optimiser has been thrown out of the basin
# it was descending (a pressure MSE is bounded, so a diverging run shows as a jump rather than as infinity).
EXPLODING_LOSS = 1e3
# The last epoch's mean training loss this many times the first epoch's, which is about the loss of the closed form
# the model starts from: a healthy run never ends far worse than where it began, however low it got in between
# (against its lowest, a spike of a well-fitted model is not divergence). Judged at the end, not epoch by epoch: a
# run with a flow-rate loss rose 105 times above its first epoch at epoch 4 and then fitted its flow rates (tests/
# test_baselines.py); the pixel model at optimizer.lr=30 rose 440-470 times above it and stayed there, below
# EXPLODING_LOSS, to the end of training.
RISEN_LOSS = 1e2
# A loss too small to judge divergence by: pressure errors of 1e-4 of the head drop, a hundredth of the LBM
# references' own discretisation error (percents). Below it a rise is noise: on parallel plates, which the LCL fits
# exactly, Adam's steps took the loss from 4e-30 to 1e-8 in four epochs, "a million times its lowest".
NEGLIGIBLE_LOSS = 1e-8
# Checkpoint key of what a trained model needs to know of its data: the names of its input channels (``inputs``),
# the [min, max] of each aperture statistic over the training split (``statistics``), and what the weights fit: the
# law and the model with the options that shape its weights (``law``, ``model``; absent before 2026-11-26).
TRAINING_DATA = "training_data"
# The names (without stage) of the baselines' metrics.
_BASELINE_METRICS = frozenset(metric_name(m.name, b) for b in BASELINE_NAMES for m in METRICS)
# Every metric a stage logs, the model's then each baseline's: its reduction over the fractures, by name.
_COLUMNS = {metric_name(m.name, b): m.reduce for b in (None, *BASELINE_NAMES) for m in METRICS}


def _some(names: set[str], shown: int = 3) -> str:
    """The first ``shown`` of ``names`` in order, and "..." where there are more."""
    ordered = sorted(names)
    return ", ".join(ordered[:shown]) + (", ..." if len(ordered) > shown else "")


def _check_flow_direction(flow_rate: torch.Tensor, batch: dict) -> None:
    """Raise :class:`SolutionError` where a fracture's outlet flow rate (B,) is zero or runs against its head drop.

    A solve that passed the maximum-principle check can still carry no flow worth the name: conductivities that
    close a band across the map by tens of decades leave the outlet flux at round-off, -5e-25 against a reference
    of 3e-14. predictions.h5 refused such a rate when read back, which named the file instead of the model."""
    drops = (batch["inlet_pressure"] - batch["outlet_pressure"]).tolist()
    for name, rate, drop in zip(batch["name"], flow_rate.tolist(), drops, strict=True):
        if math.isfinite(rate) and (rate == 0 or (rate > 0) != (drop > 0)):
            raise SolutionError(
                f"fracture {name}: the outlet flow rate is {rate:.3g}, against a head drop of {drop:g}: the "
                "conductivities span more than float64 resolves along the flow"
            )


class FractureFlowModule(L.LightningModule):
    """Trains a correction model through the Darcy pressure solve against reference (LBM) pressures and flow rates.

    Args:
        correction: Module mapping the batch's ``inputs`` (B, C, *shape) to the raw correction (B, *shape); its
            ``inputs`` attribute names the channels it reads.
        law: Transmissivity law turning log-aperture and raw correction into log-conductivity.
        solver: What ``solve_pressure`` takes as ``solver`` (an engine name or an engine).
        optimizer: Factory ``optimizer(parameters) -> torch.optim.Optimizer`` (a Hydra ``_partial_``). One that makes
            a :class:`~flowlearn.training.gauss_newton.GaussNewton` switches to manual optimisation: each training
            batch is one Levenberg–Marquardt step on the residuals of its loss (:meth:`residuals_of`).
        cache_pixels: Pixels of the fracture problems (and so engine factors) kept between visits, in all
            (:data:`~flowlearn.training.batches.CACHED_PIXELS` by default).
        training_statistics: [min, max] of each aperture statistic over the training split
            (:mod:`flowlearn.fractures.statistics`), kept in checkpoints with the correction's inputs.
        flow_rate_weight: Weight of the flow-rate term of the loss (:func:`~flowlearn.metrics.training_loss`);
            0 trains on pressures alone.
        pressure_loss: How the loss's pressure term weighs each fracture, one of
            :data:`~flowlearn.metrics.PRESSURE_LOSSES` (see :func:`~flowlearn.metrics.pressure_scale`).

    Logged per stage: the metrics of :mod:`flowlearn.metrics`, for the model and for every baseline.
    """

    def __init__(
        self,
        correction: nn.Module,
        law: PermeabilityLaw,
        solver: str | Engine | None = None,
        optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
        cache_pixels: int = CACHED_PIXELS,
        training_statistics: dict[str, list[float]] | None = None,
        flow_rate_weight: float = 0.0,
        pressure_loss: str = "mse",
    ) -> None:
        super().__init__()
        self.correction = correction
        self.law = law
        self.solver = solver
        self.optimizer_factory = optimizer or (lambda params: torch.optim.Adam(params, lr=1e-3))
        self.training_statistics = training_statistics or {}
        self.flow_rate_weight = float(flow_rate_weight)
        # Checked where it is used, by metrics.pressure_scale (and for users by the config checks).
        self.pressure_loss = pressure_loss
        # The ``power`` baseline's exponent, NaN until fitted; a buffer, so that checkpoints carry it.
        self.register_buffer("power_exponent", torch.tensor(math.nan, dtype=torch.float64))
        self.problems = FractureProblems(cache_pixels)
        self.baselines = BaselineScores(solver, self.problems)
        # The value of each baseline metric of training and validation when last logged, by column: the baselines
        # do not learn, so their metrics repeat epoch after epoch, and are logged again only when they change.
        self._logged_baselines: dict[str, float] = {}
        # Training loss of the current epoch (summed over fractures); the first epoch's mean, the lowest so far and
        # the last.
        self._epoch_losses: list[float] = []
        self._epoch_fractures = 0
        self._first_loss = math.inf
        self._lowest_loss = math.inf
        self._last_loss, self._last_epoch = math.nan, 0
        # ModuleDict keys may not shadow Module attributes such as ``train``: hence "<stage>_metrics".
        self.metrics = nn.ModuleDict({f"{stage}_metrics": EpochMetrics(_COLUMNS) for stage in STAGES})

    def build_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer of this module's parameters; :class:`ConfigError` for a hyperparameter that its class
        refuses (torch checks its own: betas, eps, ...) or does not know."""
        try:
            return self.optimizer_factory(self.parameters())
        except (TypeError, ValueError) as error:
            raise ConfigError(f"optimizer: {error}") from error

    def configure_optimizers(self) -> torch.optim.Optimizer:
        optimizer = self.build_optimizer()
        # Gauss–Newton steps need the residuals, not a scalar loss to backpropagate: the module steps it itself.
        self.automatic_optimization = not isinstance(optimizer, GaussNewton)
        if not self.automatic_optimization and self.trainer.world_size > 1:
            raise ConfigError(
                "optimizer=gauss_newton runs in one process: its steps need the residuals of the whole batch, "
                f"which {self.trainer.world_size} processes would split; use trainer=default"
            )
        return optimizer

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[TRAINING_DATA] = {
            "inputs": list(self.correction.inputs),
            "statistics": self.training_statistics,
            **self.fitted(),
        }

    def fitted(self) -> dict[str, str]:
        """What the weights fit: ``law`` and ``model`` as configs say them (e.g. ``law=mlcl``)."""
        return {"law": f"law={self.law.name}", "model": self.correction.description}

    def check_checkpoint(self, checkpoint: dict, where: str) -> None:
        """Raise :class:`CheckpointError` naming both where ``checkpoint`` (a Lightning checkpoint, as loaded) was
        trained with another law or model than this module's; a checkpoint that does not say (written before
        2026-11-26) passes."""
        record = checkpoint.get(TRAINING_DATA, {})
        differ = {key: mine for key, mine in self.fitted().items() if record.get(key) not in (None, mine)}
        if differ:
            keys = " and ".join(differ)
            raise CheckpointError(
                f"{where} was trained with {' and '.join(record[key] for key in differ)}, and this run has "
                f"{' and '.join(differ.values())}: use a checkpoint of a run with the same {keys}, or choose the "
                f"{keys} that run had"
            )

    def check_optimizer_state(self, checkpoint: dict, where: str) -> None:
        """Raise :class:`CheckpointError` naming ``where`` when ``checkpoint`` (as loaded) holds the state of
        another optimizer than this module's: torch loads one optimizer's settings into another without a word,
        and the first step then failed on a setting it lacks (``KeyError: 'damping'``, resuming Adam's checkpoint
        with Gauss–Newton). Settings that only one of two versions of an optimizer has (torch adds some) pass."""
        optimizer = self.build_optimizer()
        mine = set(optimizer.param_groups[0]) - {"params"}
        for state in checkpoint.get("optimizer_states") or []:
            theirs = {key for group in state.get("param_groups", []) for key in group} - {"params"}
            if theirs - mine and mine - theirs:
                raise CheckpointError(
                    f"{where} holds the state of another optimizer (with {_some(theirs - mine)}) than this run's "
                    f"{type(optimizer).__name__} (with {_some(mine - theirs)}): resume with the optimizer that run "
                    "had (optimizer= in its .hydra/config.yaml)"
                )

    # -- the forward model -------------------------------------------------------------------------------------

    def forward(self, batch: dict) -> dict[str, torch.Tensor]:
        """Predicted fields for a batch: ``raw``, ``correction`` (W, or w for the exponent law) and ``pressure`` (NaN
        where a fracture is inactive), all float64 (B, *shape), ``log_k``, the law's conductivity in the solve's
        form (B, *shape), or (B, 3, H, W) for a tensor law, and ``flow_rate`` (B,) float64, the outlet flow rate (NaN
        for a law without flow-rate units)."""
        raw = self.correction(batch["inputs"])
        log_k = self.law.log_k(log_aperture(batch), raw, Geometry.of(batch))
        problems = self.problems.of(batch)
        # One fracture at a time (each has its own problem), each a batch of one: the conductivity's form is read
        # from its shape, and a per-axis or tensor field has no unbatched shape.
        names = batch["name"]
        pressure = torch.cat(
            [
                solve_fracture(log_k[i : i + 1], problem, names[i], self.solver)
                for i, problem in enumerate(problems)
            ]
        )
        if self.law.has_flow_units:
            flow_rate = torch.cat(
                [
                    outlet_flow_rate(log_k[i : i + 1], pressure[i : i + 1], problem)
                    for i, problem in enumerate(problems)
                ]
            )
            _check_flow_direction(flow_rate, batch)
        else:
            flow_rate = torch.full((len(problems),), math.nan, dtype=torch.float64, device=pressure.device)
        return {
            "raw": raw,
            "correction": self.law.correction(raw),
            "log_k": log_k,
            "pressure": pressure,
            "flow_rate": flow_rate,
        }

    # -- the power-law baseline ----------------------------------------------------------------------------------

    def set_power_exponent(self, exponent: float) -> None:
        """Set the ``power`` baseline's exponent (its metrics are computed afresh)."""
        self.power_exponent.fill_(exponent)
        self.baselines.forget()

    def on_fit_start(self) -> None:
        """Fit the ``power`` baseline's exponent on the training split, unless the weights (a resumed checkpoint)
        already carry it. The global-zero process fits and the others receive its value."""
        datamodule = getattr(self.trainer, "datamodule", None)
        if torch.isfinite(self.power_exponent) or not isinstance(datamodule, FractureDataModule):
            return
        train = datamodule.splits["train"]
        exponent = math.nan
        if self.trainer.is_global_zero and len(train):
            begin = time.perf_counter()
            exponent = self.baselines.fit_power_exponent(train, self.device)
            log.info(
                f"power-law baseline: T ∝ Ap^{exponent:.3g}, fitted on the {len(train)} training fracture(s) in "
                f"{time.perf_counter() - begin:.2g} s"
            )
        self.set_power_exponent(self.trainer.strategy.broadcast(exponent, src=0))

    # -- steps -------------------------------------------------------------------------------------------------

    @staticmethod
    def _masks(problems: list[DarcyProblem], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``active`` and ``free`` masks of the problems, bool (B, *shape): the loss's pixels and the metrics'."""
        return tuple(
            torch.stack([torch.from_numpy(getattr(p, mask)) for p in problems]).to(device)
            for mask in ("active", "free")
        )

    def residuals_of(self, batch: dict, params: list[nn.Parameter]) -> Residuals:
        """The residuals r of the training loss on ``batch`` (``‖r‖²`` is the loss :meth:`_step` logs; see
        :func:`~flowlearn.metrics.training_residuals`) as a function of the values of ``params``, which
        are this module's parameters in any order: r(values) float64 (m,), differentiable by ``torch.func``."""
        names = {id(p): name for name, p in self.named_parameters()}
        keys = [names[id(p)] for p in params]
        reference = batch["pressure"].to(torch.float64)
        reference_flow_rate = batch["flow_rate"].to(torch.float64)
        active, _ = self._masks(self.problems.of(batch), reference.device)
        scale = self._pressure_scale(batch, reference, active)

        def residuals(values: tuple[torch.Tensor, ...]) -> torch.Tensor:
            fields = torch.func.functional_call(self, dict(zip(keys, values)), (batch,))
            return training_residuals(
                fields["pressure"],
                reference,
                active,
                fields["flow_rate"],
                reference_flow_rate,
                self.flow_rate_weight,
                scale,
            )

        return residuals

    def _pressure_scale(
        self, batch: dict, reference: torch.Tensor, active: torch.Tensor
    ) -> torch.Tensor | None:
        heads = (batch["inlet_pressure"], batch["outlet_pressure"])
        return pressure_scale(self.pressure_loss, reference, active, *heads)

    def _step(self, batch: dict, stage: str) -> torch.Tensor:
        problems = self.problems.of(batch)
        try:
            fields = self(batch)
        except (SolveInputError, SolutionError) as error:
            # Non-finite or float64-breaking conductivities: from the data before any step or where the untrained
            # law's break the solve too (a test fracture that training never met), else from training.
            if not self.global_step or self._untrained_breaks_solve(batch):
                raise
            raise self.diverged(f"the model's conductivities broke the solve: {error}") from error
        predicted = fields["pressure"]
        reference = batch["pressure"].to(torch.float64)
        reference_flow_rate = batch["flow_rate"].to(torch.float64)
        active, free = self._masks(problems, reference.device)
        # The pressure term is the original work's, over every active pixel; the metrics leave out the fixed heads
        # of the inlet and outlet columns, which no model changes.
        loss = training_loss(
            predicted,
            reference,
            active,
            fields["flow_rate"],
            reference_flow_rate,
            self.flow_rate_weight,
            self._pressure_scale(batch, reference, active),
        )
        if not torch.isfinite(loss):
            if self.global_step:
                raise self.diverged(f"the {stage} loss is {float(loss)}")
            raise FloatingPointError(
                f"non-finite {stage} loss before training, fractures {list(batch['name'])}: check the aperture "
                "and pressure fields of these fractures"
            )
        heads = (batch["inlet_pressure"], batch["outlet_pressure"])
        with torch.no_grad():
            errors = fracture_metrics(
                predicted, reference, free, *heads, fields["flow_rate"].detach(), reference_flow_rate
            )
            # A row per fracture of every column: the model's values, then each baseline's (cached floats); NaN
            # where a fracture has no value (a baseline that does not apply).
            model = {metric_name(name): values.tolist() for name, values in errors.items()}
            rows = []
            for index in range(len(problems)):
                row = {name: values[index] for name, values in model.items()}
                for baseline, values in self.baselines.metrics(
                    batch, index, free[index], float(self.power_exponent)
                ).items():
                    row.update({metric_name(name, baseline): value for name, value in values.items()})
                rows.append([row.get(name, math.nan) for name in _COLUMNS])
            self.metrics[f"{stage}_metrics"].update(
                torch.tensor(rows, dtype=torch.float64, device=reference.device)
            )
        if stage == "train":
            batch_size = len(batch["name"])
            self._epoch_losses.append(float(loss.detach()) * batch_size)
            self._epoch_fractures += batch_size
            self.log(LOSS, loss, prog_bar=True, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

    @torch.no_grad()
    def _untrained_breaks_solve(self, batch: dict) -> bool:
        """Whether the law's own conductivities, with the correction a model starts from, break the solve of a
        fracture of ``batch`` too."""
        log_ap = log_aperture(batch)
        raw = torch.full_like(log_ap, self.law.initial_raw)
        log_k = self.law.log_k(log_ap, raw, Geometry.of(batch))
        try:
            for i, problem in enumerate(self.problems.of(batch)):
                solve_fracture(log_k[i : i + 1], problem, batch["name"][i], self.solver, one_off=True)
        except (SolveInputError, SolutionError):
            return True
        return False

    def diverged(self, what: str, epoch: int | None = None) -> DivergenceError:
        """The error of a run that diverged in ``epoch`` (the current one where None), naming the learning rate to
        lower (the damping to raise, for Gauss–Newton)."""
        optimizers = self.trainer.optimizers if self._trainer is not None else []
        key, advice = ("damping", "raise") if not self.automatic_optimization else ("lr", "lower")
        now = f" (now {optimizers[0].param_groups[0][key]:g})" if optimizers else ""
        return DivergenceError(
            f"training diverged at epoch {self.current_epoch if epoch is None else epoch}, step {self.global_step}: "
            f"{what}; {advice} "
            f"optimizer.{key}{now}"
        )

    def _check_divergence(self) -> None:
        """Raise when this epoch's mean training loss exceeds :data:`EXPLODING_LOSS` times the lowest so far."""
        if not self._epoch_fractures:
            return
        loss = sum(self._epoch_losses) / self._epoch_fractures
        self._epoch_losses, self._epoch_fractures = [], 0
        if loss > EXPLODING_LOSS * max(self._lowest_loss, NEGLIGIBLE_LOSS):
            raise self.diverged(
                f"the training loss rose to {loss:.3g}, {loss / self._lowest_loss:.3g} times its lowest "
                f"({self._lowest_loss:.3g})"
            )
        if math.isinf(self._first_loss):
            self._first_loss = loss
        self._lowest_loss = min(self._lowest_loss, loss)
        self._last_loss, self._last_epoch = loss, self.current_epoch

    def _check_risen(self) -> None:
        """Raise when training ends with its mean loss above :data:`RISEN_LOSS` times the first epoch's."""
        if self._last_loss > RISEN_LOSS * max(self._first_loss, NEGLIGIBLE_LOSS):
            raise self.diverged(
                f"the training loss ended at {self._last_loss:.3g}, {self._last_loss / self._first_loss:.3g} times "
                f"the first epoch's ({self._first_loss:.3g})",
                self._last_epoch,
            )

    def _log_epoch(self, stage: str) -> None:
        metrics = self.metrics[f"{stage}_metrics"]
        if metrics.update_count == 0:
            return
        # Every process computes every metric (the computation is collective under DDP); a metric that no fracture
        # of the stage has (a flow rate, a baseline that does not apply) comes out NaN or -inf and is not logged.
        values = dict(metrics.compute())  # a copy: torchmetrics keeps the computed dict until the reset
        values[IMPROVEMENT] = improvement(values[REL_ERR_MEAN], values[metric_name(REL_ERR_MEAN, COMPARED)])
        for name, value in values.items():
            if torch.isfinite(value) and not self._repeated_baseline(stage, name, float(value)):
                self.log(f"{stage}/{name}", value, prog_bar=column(stage, name) == column("val", MSE))
        metrics.reset()

    def _repeated_baseline(self, stage: str, name: str, value: float) -> bool:
        """Whether ``name`` is a baseline's metric of the fit (train or val) already logged with ``value``. Each
        ``self.log`` call costs Lightning about a millisecond, and the baselines' are two thirds of them: half the
        per-epoch time of a one-step epoch (experiment=paper). The sanity check's values are not logged."""
        if stage == "test" or name not in _BASELINE_METRICS:
            return False
        key = column(stage, name)
        if self._logged_baselines.get(key) == value:
            return True
        if not self.trainer.sanity_checking:
            self._logged_baselines[key] = value
        return False

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if self.automatic_optimization:
            return self._step(batch, "train")
        # Gauss–Newton: the loss logged is that of the parameters before the step, as for a gradient step.
        with torch.no_grad():
            loss = self._step(batch, "train")
        optimizer = self.optimizers()
        # Lightning acts on a SIGTERM (a scheduler cancelling the job) between batches; a long step stops at once.
        optimizer.step(
            residuals=self.residuals_of(batch, optimizer.optimizer.params),
            stop_requested=lambda: self.trainer.received_sigterm,
        )
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._step(batch, "test")

    def on_train_epoch_end(self) -> None:
        self._check_divergence()
        self._log_epoch("train")

    def on_train_end(self) -> None:
        self._check_risen()

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")
