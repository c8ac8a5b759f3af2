"""The LightningModule: aperture -> correction model -> permeability law -> pressure solve -> loss.

Batches come from :class:`flowlearn.data.datamodule.FractureDataModule`: dicts with ``aperture``, ``pressure``, ``active``
(B, *shape), the correction model's ``inputs`` (B, C, *shape), ``inlet_pressure``/``outlet_pressure`` (B,) and
``name`` (B strings).

Every fracture gets its own :class:`~flowlearn.darcy.DarcyProblem` (its contact spots differ), kept in a small
LRU cache so that the solver's symbolic analysis and factors are reused when the fracture comes back.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable

import lightning as L
import torch
from torch import nn
from torchmetrics import MaxMetric, MeanMetric

from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.engines import Engine
from flowlearn.errors import DivergenceError, SolutionError, SolveInputError
from flowlearn.models.laws import PermeabilityLaw, cubic_law_log_k
from flowlearn.training.metrics import (
    BASELINE,
    IMPROVEMENT,
    LOSS,
    METRICS,
    MSE,
    REL_ERR_MEAN,
    STAGES,
    column,
    improvement,
    pixel_errors,
)

_REDUCTIONS = {"mean": MeanMetric, "max": MaxMetric}
# An epoch's mean training loss this many times the lowest so far: the optimiser has been thrown out of the basin
# it was descending (a pressure MSE is bounded, so a diverging run shows as a jump rather than as infinity).
EXPLODING_LOSS = 1e3
# Checkpoint key of what a trained model needs to know of its data: the names of its input channels (``inputs``)
# and the [min, max] of each aperture statistic over the training split (``statistics``).
TRAINING_DATA = "training_data"


class FractureFlowModule(L.LightningModule):
    """Trains a correction model through the Darcy pressure solve against reference (LBM) pressure fields.

    Args:
        correction: Module mapping the batch's ``inputs`` (B, C, *shape) to the raw correction (B, *shape); its
            ``inputs`` attribute names the channels it reads.
        law: Permeability law turning log-aperture and raw correction into log-conductivity.
        solver: What ``solve_pressure`` takes as ``solver`` (an engine name or an engine).
        optimizer: Factory ``optimizer(parameters) -> torch.optim.Optimizer`` (a Hydra ``_partial_``).
        cache_size: Fractures whose problems (and so engine factors) are kept between visits.
        training_statistics: [min, max] of each aperture statistic over the training split
            (:mod:`flowlearn.data.statistics`), kept in checkpoints with the correction's inputs.

    Logged per stage: the metrics of :mod:`flowlearn.training.metrics`, for the model and for the plain law.
    """

    def __init__(
        self,
        correction: nn.Module,
        law: PermeabilityLaw,
        solver: str | Engine | None = None,
        optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
        cache_size: int = 64,
        training_statistics: dict[str, list[float]] | None = None,
    ) -> None:
        super().__init__()
        self.correction = correction
        self.law = law
        self.solver = solver
        self.optimizer_factory = optimizer or (lambda params: torch.optim.Adam(params, lr=1e-3))
        self.cache_size = cache_size
        self.training_statistics = training_statistics or {}
        self._problems: OrderedDict[str, DarcyProblem] = OrderedDict()
        self._cubic: OrderedDict[str, torch.Tensor] = OrderedDict()
        # Training loss of the current epoch (summed over fractures) and the lowest epoch mean so far.
        self._epoch_losses: list[float] = []
        self._epoch_fractures = 0
        self._lowest_loss = math.inf
        # ModuleDict keys may not shadow Module attributes such as ``train``: hence "<stage>_metrics".
        self.metrics = nn.ModuleDict(
            {
                f"{stage}_metrics": nn.ModuleDict(
                    {
                        f"{prefix}{metric.name}": _REDUCTIONS[metric.reduce]().set_dtype(torch.float64)
                        for prefix in ("", BASELINE)
                        for metric in METRICS
                    }
                )
                for stage in STAGES
            }
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory(self.parameters())

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[TRAINING_DATA] = {
            "inputs": list(self.correction.inputs),
            "statistics": self.training_statistics,
        }

    # -- the forward model -------------------------------------------------------------------------------------

    def problem(self, name: str, active: torch.Tensor, inlet: float, outlet: float) -> DarcyProblem:
        """The fracture setup of one fracture: inlet head on the first column, outlet head on the last."""
        key = f"{name}|{inlet:.17g}|{outlet:.17g}"
        if key not in self._problems:
            mask = active.detach().cpu().numpy()
            self._problems[key] = DarcyProblem.fracture(
                tuple(mask.shape), inlet=inlet, outlet=outlet, active=mask, drop_unconnected=True
            )
            while len(self._problems) > self.cache_size:
                self._problems.popitem(last=False)
        self._problems.move_to_end(key)
        return self._problems[key]

    def _problems_of(self, batch: dict) -> list[DarcyProblem]:
        return [
            self.problem(
                name,
                batch["active"][i],
                float(batch["inlet_pressure"][i]),
                float(batch["outlet_pressure"][i]),
            )
            for i, name in enumerate(batch["name"])
        ]

    @staticmethod
    def log_aperture(batch: dict) -> torch.Tensor:
        """log of the aperture, with 0 at inactive pixels so that no -inf reaches a gradient."""
        aperture = batch["aperture"].to(torch.float64)
        tiny = torch.finfo(torch.float64).tiny
        return torch.where(batch["active"], torch.log(aperture.clamp_min(tiny)), 0.0)

    def forward(self, batch: dict) -> dict[str, torch.Tensor]:
        """Predicted fields for a batch: ``raw``, ``correction`` (W, or w for the exponent law), ``log_k`` and
        ``pressure`` (NaN where a fracture is inactive), all float64 (B, *shape)."""
        log_aperture = self.log_aperture(batch)
        raw = self.correction(batch["inputs"])
        log_k = self.law.log_k(log_aperture, raw)
        problems = self._problems_of(batch)
        pressure = torch.stack(
            [solve_pressure(log_k[i], problem, solver=self.solver) for i, problem in enumerate(problems)]
        )
        return {"raw": raw, "correction": self.law.correction(raw), "log_k": log_k, "pressure": pressure}

    def cubic_pressure(self, batch: dict) -> torch.Tensor:
        """Pressure of the plain cubic law (W = 1) for each fracture of the batch (cached per fracture)."""
        out = []
        log_k = cubic_law_log_k(self.log_aperture(batch))
        for i, problem in enumerate(self._problems_of(batch)):
            name = batch["name"][i]
            if name not in self._cubic:
                with torch.no_grad():
                    self._cubic[name] = solve_pressure(log_k[i], problem, solver=self.solver)
                while len(self._cubic) > self.cache_size:
                    self._cubic.popitem(last=False)
            out.append(self._cubic[name])
        return torch.stack(out)

    # -- steps -------------------------------------------------------------------------------------------------

    def _step(self, batch: dict, stage: str) -> torch.Tensor:
        problems = self._problems_of(batch)
        try:
            predicted = self(batch)["pressure"]
        except (SolveInputError, SolutionError) as error:
            # Non-finite or float64-breaking conductivities: from the data before any step, else from training.
            if not self.global_step:
                raise
            raise self._diverged(f"the model's conductivities broke the solve: {error}") from error
        reference = batch["pressure"].to(torch.float64)
        active, free = (
            torch.stack([torch.from_numpy(getattr(p, mask)) for p in problems]).to(reference.device)
            for mask in ("active", "free")
        )
        # The loss is the original work's, over every active pixel; the metrics leave out the fixed heads of the
        # inlet and outlet columns, which no model changes.
        loss = pixel_errors(predicted, reference, active)[MSE].mean()
        if not torch.isfinite(loss):
            if self.global_step:
                raise self._diverged(f"the {stage} loss is {float(loss)}")
            raise FloatingPointError(
                f"non-finite {stage} loss before training, fractures {list(batch['name'])}: check the aperture "
                "and pressure fields of these fractures"
            )
        with torch.no_grad():
            errors = pixel_errors(predicted, reference, free)
            baseline = pixel_errors(self.cubic_pressure(batch), reference, free)
        metrics = self.metrics[f"{stage}_metrics"]
        for name in errors:
            metrics[name].update(errors[name])
            metrics[f"{BASELINE}{name}"].update(baseline[name])
        if stage == "train":
            batch_size = len(batch["name"])
            self._epoch_losses.append(float(loss.detach()) * batch_size)
            self._epoch_fractures += batch_size
            self.log(LOSS, loss, prog_bar=True, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

    def _diverged(self, what: str) -> DivergenceError:
        """The error of a run that diverged, naming the learning rate to lower."""
        optimizers = self.trainer.optimizers if self._trainer is not None else []
        lr = f" (now {optimizers[0].param_groups[0]['lr']:g})" if optimizers else ""
        return DivergenceError(
            f"training diverged at epoch {self.current_epoch}, step {self.global_step}: {what}; lower "
            f"optimizer.lr{lr}"
        )

    def _check_divergence(self) -> None:
        """Raise when this epoch's mean training loss exceeds :data:`EXPLODING_LOSS` times the lowest so far."""
        if not self._epoch_fractures:
            return
        loss = sum(self._epoch_losses) / self._epoch_fractures
        self._epoch_losses, self._epoch_fractures = [], 0
        if loss > EXPLODING_LOSS * self._lowest_loss:
            raise self._diverged(
                f"the training loss rose to {loss:.3g}, {loss / self._lowest_loss:.3g} times its lowest "
                f"({self._lowest_loss:.3g})"
            )
        self._lowest_loss = min(self._lowest_loss, loss)

    def _log_epoch(self, stage: str) -> None:
        metrics = self.metrics[f"{stage}_metrics"]
        if metrics[MSE].update_count == 0:
            return
        values = {name: metric.compute() for name, metric in metrics.items()}
        values[IMPROVEMENT] = improvement(values[REL_ERR_MEAN], values[f"{BASELINE}{REL_ERR_MEAN}"])
        for name, value in values.items():
            self.log(f"{stage}/{name}", value, prog_bar=column(stage, name) == column("val", MSE))
        for metric in metrics.values():
            metric.reset()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._step(batch, "test")

    def on_train_epoch_end(self) -> None:
        self._check_divergence()
        self._log_epoch("train")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")
