"""The baselines on the fractures of a run: their pressures and flow rates, their metrics, the power law's fit.

The laws are those of :mod:`flowlearn.models.baselines`; their pressure and flow rate come from the same Darcy solve
as a learned model's. The baselines do not learn, so each fracture's metrics are computed once and kept, and so are
its solutions while the model keeps the fracture's problem: the predictions and figures written after training
solve no baseline again (seven solves per fracture). They solve on the model's own problems, so that a fracture's
grid layout serves both, and as one-offs (:func:`~flowlearn.darcy.solve.solve_pressure`'s ``one_off``): an engine
keeps nothing of them, so the factor that the model's training steps reuse stays the model's, even when the
baselines are solved between a step's forward solve and its adjoint.

The ``power`` baseline's exponent is fitted on the training split when fitting starts (:meth:`BaselineScores.
fit_power_exponent`); the module stores it with its weights, so that a resumed run, the test and ``flowlearn
predict`` reuse it.
"""

from __future__ import annotations

import math
import weakref

import torch
from scipy.optimize import minimize_scalar

from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.data.datamodule import FractureDataset
from flowlearn.engines import Engine
from flowlearn.metrics import MSE, fracture_metrics
from flowlearn.models.baselines import BASELINE_NAMES, baseline_log_t
from flowlearn.models.laws import power_law_log_t
from flowlearn.training.batches import FractureProblems, as_batch, heads, log_aperture, solve_fracture

# The range searched for the ``power`` baseline's exponent a (T ∝ Ap^a; 3 is the LCL), and the search's tolerance.
POWER_EXPONENT_BOUNDS = (0.0, 6.0)
POWER_EXPONENT_TOLERANCE = 0.01


class BaselineScores:
    """Every baseline on the fractures it is shown, each fracture's metrics computed once.

    Args:
        solver: The learned model's solver (an engine name or an engine), on whose device the baselines solve too.
        problems: The learned model's problems: a fracture's grid, and the engine's analysis of it, serve both.
    """

    def __init__(self, solver: str | Engine | None, problems: FractureProblems) -> None:
        self.solver = solver
        self.problems = problems
        # Per fracture (problem key), per baseline, per metric: the value (a few floats each).
        self._metrics: dict[str, dict[str, dict[str, float]]] = {}
        # Per problem, as long as ``problems`` keeps it: the power exponent and the solutions at it, by baseline
        # (56 bytes a pixel against the problem's own 800).
        self._solutions: weakref.WeakKeyDictionary[DarcyProblem, tuple[float, dict]] = (
            weakref.WeakKeyDictionary()
        )

    def forget(self) -> None:
        """Drop the metrics and solutions computed so far (the ``power`` exponent changed)."""
        self._metrics.clear()
        self._solutions.clear()

    @torch.no_grad()
    def solutions(
        self, batch: dict, index: int, power_exponent: float
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Pressure (*shape, float64, NaN where inactive) and outlet flow rate (0-d float64) of every baseline that
        applies to fracture ``index`` of the batch, by baseline name (``power`` is absent while ``power_exponent``
        is NaN, ``wedge`` where the voxel size is unknown, ``inclined`` where the walls are, ``mlcl`` where either
        is). The tensors are kept for the next call on the fracture: read them, do not modify them."""
        name = batch["name"][index]
        problem = self.problems.get(name, batch["active"][index], *heads(batch, index))
        kept_exponent, solutions = self._solutions.get(problem, (math.nan, None))
        if solutions is not None and _same(kept_exponent, power_exponent):
            return solutions
        log_ap = log_aperture(batch)[index : index + 1]
        active = batch["active"][index : index + 1]
        inclination, slope = (
            batch[k][index : index + 1].to(torch.float64) for k in ("inclination", "aperture_slope")
        )
        solutions = {}
        for baseline in BASELINE_NAMES:
            log_t = baseline_log_t(baseline, log_ap, active, power_exponent, inclination, slope)
            if log_t is not None:
                pressure = solve_fracture(log_t, problem, name, self.solver, one_off=True)
                solutions[baseline] = (pressure[0], outlet_flow_rate(log_t, pressure, problem)[0])
        self._solutions[problem] = (power_exponent, solutions)
        return solutions

    def metrics(
        self, batch: dict, index: int, free: torch.Tensor, power_exponent: float
    ) -> dict[str, dict[str, float]]:
        """The metrics of each baseline on fracture ``index`` of the batch (``free``: bool (*shape), its compared
        pixels), by baseline and metric name."""
        key = FractureProblems.key(batch["name"][index], *heads(batch, index))
        if key not in self._metrics:
            reference = batch["pressure"][index : index + 1].to(torch.float64)
            fixed = (batch["inlet_pressure"][index : index + 1], batch["outlet_pressure"][index : index + 1])
            reference_flow_rate = batch["flow_rate"][index : index + 1].to(torch.float64)
            self._metrics[key] = {
                baseline: {
                    metric: float(value[0])
                    for metric, value in fracture_metrics(
                        pressure.unsqueeze(0),
                        reference,
                        free.unsqueeze(0),
                        *fixed,
                        flow_rate.view(1),
                        reference_flow_rate,
                    ).items()
                }
                for baseline, (pressure, flow_rate) in self.solutions(batch, index, power_exponent).items()
            }
        return self._metrics[key]

    @torch.no_grad()
    def fit_power_exponent(self, dataset: FractureDataset, device: torch.device | str = "cpu") -> float:
        """The exponent a of T ∝ Ap^a that minimises the mean pressure MSE (the metric's, over the compared pixels)
        over the fractures of ``dataset``: a bounded Brent search in :data:`POWER_EXPONENT_BOUNDS` to
        :data:`POWER_EXPONENT_TOLERANCE`. The fractures are read again at every trial exponent, so that memory
        stays that of one fracture."""

        def mean_mse(exponent: float) -> float:
            total = 0.0
            for index in range(len(dataset)):
                batch = as_batch(dataset[index], device)
                (problem,) = self.problems.of(batch)
                log_t = power_law_log_t(log_aperture(batch), batch["active"], exponent)
                pressure = solve_fracture(log_t, problem, batch["name"][0], self.solver, one_off=True)
                free = torch.from_numpy(problem.free).unsqueeze(0).to(pressure.device)
                nan = torch.full((1,), math.nan, dtype=torch.float64, device=pressure.device)
                fixed = (batch["inlet_pressure"], batch["outlet_pressure"])
                reference = batch["pressure"].to(torch.float64)
                total += float(fracture_metrics(pressure, reference, free, *fixed, nan, nan)[MSE][0])
            return total / len(dataset)

        result = minimize_scalar(
            mean_mse,
            bounds=POWER_EXPONENT_BOUNDS,
            method="bounded",
            options={"xatol": POWER_EXPONENT_TOLERANCE},
        )
        return float(result.x)


def _same(a: float, b: float) -> bool:
    """Whether two power exponents are the same, NaN (not fitted) being the same as NaN."""
    return a == b or (math.isnan(a) and math.isnan(b))
