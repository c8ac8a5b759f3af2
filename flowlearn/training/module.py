"""The LightningModule: aperture -> correction model -> permeability law -> pressure solve -> loss.

Batches come from :class:`flowlearn.data.datamodule.FractureDataModule`: dicts with ``aperture``, ``pressure``, ``active``
(B, *shape), ``inlet_pressure``/``outlet_pressure`` (B,) and ``name`` (B strings).

Every fracture gets its own :class:`~flowlearn.darcy.DarcyProblem` (its contact spots differ), kept in a small
LRU cache so that the solver's symbolic analysis and factors are reused when the fracture comes back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

import lightning as L
import torch
from torch import nn
from torchmetrics import MaxMetric, MeanMetric

from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.engines import Engine
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


class FractureFlowModule(L.LightningModule):
    """Trains a correction model through the Darcy pressure solve against reference (LBM) pressure fields.

    Args:
        correction: Module mapping (log_aperture, active), both (B, *shape), to the raw correction (B, *shape).
        law: Permeability law turning log-aperture and raw correction into log-conductivity.
        solver: What ``solve_pressure`` takes as ``solver`` (an engine name or an engine).
        optimizer: Factory ``optimizer(parameters) -> torch.optim.Optimizer`` (a Hydra ``_partial_``).
        cache_size: Fractures whose problems (and so engine factors) are kept between visits.

    Logged per stage: the metrics of :mod:`flowlearn.training.metrics`, for the model and for the plain law.
    """

    def __init__(
        self,
        correction: nn.Module,
        law: PermeabilityLaw,
        solver: str | Engine | None = None,
        optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
        cache_size: int = 64,
    ) -> None:
        super().__init__()
        self.correction = correction
        self.law = law
        self.solver = solver
        self.optimizer_factory = optimizer or (lambda params: torch.optim.Adam(params, lr=1e-3))
        self.cache_size = cache_size
        self._problems: OrderedDict[str, DarcyProblem] = OrderedDict()
        self._cubic: OrderedDict[str, torch.Tensor] = OrderedDict()
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
        raw = self.correction(log_aperture, batch["active"])
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
        predicted = self(batch)["pressure"]
        reference = batch["pressure"].to(torch.float64)
        mask = torch.stack([torch.from_numpy(p.active) for p in self._problems_of(batch)]).to(
            reference.device
        )
        errors = pixel_errors(predicted, reference, mask)
        loss = errors[MSE].mean()
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite {stage} loss at epoch {self.current_epoch}, fractures {list(batch['name'])}: check "
                "the aperture and pressure fields of these fractures"
            )
        with torch.no_grad():
            baseline = pixel_errors(self.cubic_pressure(batch), reference, mask)
        metrics = self.metrics[f"{stage}_metrics"]
        for name in errors:
            metrics[name].update(errors[name].detach())
            metrics[f"{BASELINE}{name}"].update(baseline[name])
        if stage == "train":
            batch_size = len(batch["name"])
            self.log(LOSS, loss, prog_bar=True, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

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
        self._log_epoch("train")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")
