"""The metrics and the loss of a run, each defined once: what is computed, under which name it is logged, how it is
labelled.

Per fracture, over its solved pixels less the fixed inlet and outlet columns (:data:`METRICS`):

- ``mse``: the mean squared pressure error;
- ``rel_err_mean``, ``rel_err_max``: the mean and max pixel-wise relative error 100·|p̂ − p|/|p|, in %;
- ``departure_err``: 1 − R² of the pressure's departure from the straight line between the inlet and outlet heads,
  d = p − p_linear, with R² taken about zero departure: Σ(d̂ − d)²/Σd². 0 is a perfect departure, 1 is the straight
  line's (d̂ = 0), above 1 is worse than the straight line. It says how much of the shape of the pressure field a
  model gets, where the MSE is dominated by the linear drop that any model gets;
- ``flow_rate_err``: 100·|Q̂ − Q|/|Q| in %, Q̂ the outlet flow rate of the model's solve and Q the reference's;
  absent (NaN) where the fracture has no reference flow rate, or the model's K has no flow-rate units.

They are logged per stage as ``<stage>/<name>`` for the learned model and ``<stage>/<baseline>_<name>`` for each
baseline of :mod:`flowlearn.models.baselines`, reduced over the fractures that have them (mean, or max for the
max); a metric no fracture of the stage has is not logged. ``<stage>/improvement`` compares the mean error with
the LCL's. The training loss ``train/loss`` is the pressure MSE over every active pixel (the original work's), or
each fracture's departure error (``loss.pressure=departure``), plus, with a flow-rate weight, the mean squared
relative flow-rate error (:func:`training_loss`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

STAGES = ("train", "val", "test")
LOSS = "train/loss"
IMPROVEMENT = "improvement"
# What the departure and flow-rate errors are, in words for reports.
ERRORS_NOTE = (
    "the departure error is 1 − R² of p − p_linear about zero (1: the straight line); the flow-rate error is "
    "|Q̂ − Q|/Q"
)
IMPROVEMENT_NOTE = (
    "Errors are |p̂ − p|/p over the solved pixels of each fracture (less the inlet and outlet columns), averaged "
    f"over fractures; {ERRORS_NOTE}; improvement = 100·(1 − mean error / LCL mean error), the LCL being the local "
    "cubic law T = Ap³/12."
)


@dataclass(frozen=True)
class Metric:
    """A per-fracture metric: its logged name, its table header and how fractures are reduced (mean or max)."""

    name: str
    header: str
    reduce: str


METRICS = (
    Metric("mse", "MSE", "mean"),
    Metric("rel_err_mean", "mean error (%)", "mean"),
    Metric("rel_err_max", "max error (%)", "max"),
    Metric("departure_err", "departure error (1 − R²)", "mean"),
    Metric("flow_rate_err", "flow-rate error (%)", "mean"),
)
MSE, REL_ERR_MEAN, REL_ERR_MAX, DEPARTURE_ERR, FLOW_RATE_ERR = (m.name for m in METRICS)

ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, torch.Tensor)


def relative_error(predicted: ArrayOrTensor, reference: ArrayOrTensor) -> ArrayOrTensor:
    """Pixel-wise relative pressure error 100·|p̂ − p|/|p| in %, elementwise (numpy arrays or torch tensors)."""
    return 100 * abs(predicted - reference) / abs(reference)


def linear_profile(like: torch.Tensor, inlet: torch.Tensor, outlet: torch.Tensor) -> torch.Tensor:
    """The straight line between the heads along the flow (the last axis): ``inlet`` on the first column, ``outlet``
    on the last, float64 shaped like ``like`` (B, *shape); ``inlet``, ``outlet`` are (B,)."""
    columns = like.shape[-1]
    fraction = torch.arange(columns, dtype=torch.float64, device=like.device) / (columns - 1)
    expand = [-1, *[1] * (like.ndim - 1)]
    line = inlet.view(expand) + (outlet - inlet).view(expand) * fraction
    return line.to(torch.float64).expand(like.shape)


def fracture_metrics(
    predicted: torch.Tensor,
    reference: torch.Tensor,
    mask: torch.Tensor,
    inlet: torch.Tensor,
    outlet: torch.Tensor,
    predicted_flow_rate: torch.Tensor,
    reference_flow_rate: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """The :data:`METRICS` of each fracture of a batch, by name: float64 (B,) each, NaN where a metric is undefined
    (no reference flow rate, or a reference pressure that is exactly the straight line).

    Args:
        predicted, reference: pressures, float64 (B, *shape).
        mask: bool (B, *shape), the pixels compared (at least one per fracture).
        inlet, outlet: (B,) the heads of the first and last column.
        predicted_flow_rate, reference_flow_rate: (B,) outlet flow rates, NaN where absent.
    """
    counts = mask.flatten(1).sum(1)
    if bool((counts == 0).any()):
        raise ValueError("a fracture has no active pixel")
    error = torch.where(mask, predicted - reference, 0.0)
    # Masked-out pixels compare a reference of 1 with itself: no division by a meaningless (zero) reference.
    relative = relative_error(torch.where(mask, predicted, 1.0), torch.where(mask, reference, 1.0))
    line = linear_profile(reference, inlet, outlet)
    departure = torch.where(mask, reference - line, 0.0)
    departure_energy = (departure**2).flatten(1).sum(1)
    return {
        MSE: (error**2).flatten(1).sum(1) / counts,
        REL_ERR_MEAN: relative.flatten(1).sum(1) / counts,
        REL_ERR_MAX: relative.flatten(1).max(1).values,
        # d̂ - d = p̂ - p: the line cancels.
        DEPARTURE_ERR: torch.where(
            departure_energy > 0, (error**2).flatten(1).sum(1) / departure_energy, torch.nan
        ),
        FLOW_RATE_ERR: relative_error(predicted_flow_rate, reference_flow_rate),
    }


# How the pressure term of the training loss weighs each fracture (``loss.pressure``).
PRESSURE_LOSSES = ("mse", "departure")


def pressure_scale(
    kind: str, reference: torch.Tensor, active: torch.Tensor, inlet: torch.Tensor, outlet: torch.Tensor
) -> torch.Tensor | None:
    """The per-fracture divisor of the squared pressure errors in the training loss, float64 (B,), or None for 1.

    - ``mse``: None, the pressure MSE of every active pixel (the original work's loss);
    - ``departure``: the reference's mean squared departure from the straight line between the heads over the
      active pixels, so that each fracture's term is its departure error (1 − R² of :data:`METRICS`, over the
      active pixels): every fracture counts by how much of its own departure a model misses, where the MSE lets
      the few fractures of large departure decide.

    Args:
        reference: float64 (B, *shape).
        active: bool (B, *shape).
        inlet, outlet: (B,) the heads.
    """
    if kind == "mse":
        return None
    if kind != "departure":
        raise ValueError(f"pressure loss must be one of {list(PRESSURE_LOSSES)}, got {kind!r}")
    departure = torch.where(active, reference - linear_profile(reference, inlet, outlet), 0.0)
    energy = (departure**2).flatten(1).sum(1) / active.flatten(1).sum(1)
    # A reference that is the straight line leaves nothing to normalise by: its term is weighed as if it departed
    # by a millionth of the head drop (the MSE scaled up by 1e12, never a division by zero).
    floor = (1e-6 * (inlet - outlet).to(torch.float64)) ** 2
    return torch.maximum(energy, floor)


def training_residuals(
    predicted: torch.Tensor,
    reference: torch.Tensor,
    active: torch.Tensor,
    predicted_flow_rate: torch.Tensor,
    reference_flow_rate: torch.Tensor,
    flow_rate_weight: float,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The training loss as a sum of squares: residuals r, float64 (m,), ‖r‖² = :func:`training_loss`.

    First the pressure errors of every active pixel of each fracture b, divided by √(n_b·B·s_b) (n_b its active
    pixels, B the fractures, s_b its ``scale``, 1 when None); then, with a flow-rate weight, √(weight/K)·(Q̂ − Q)/Q
    of each of the K fractures that have a reference flow rate. Least-squares optimisers
    (:mod:`flowlearn.training.gauss_newton`) step on them directly.

    Args:
        predicted, reference: pressures, float64 (B, *shape).
        active: bool (B, *shape), at least one per fracture.
        predicted_flow_rate, reference_flow_rate: (B,) float64, the reference NaN where absent.
        flow_rate_weight: the weight of the flow-rate term, 0 or more.
        scale: (B,) float64 from :func:`pressure_scale`, or None.
    """
    batch = predicted.shape[0]
    divisor = active.flatten(1).sum(1).to(predicted.dtype) * batch
    if scale is not None:
        divisor = divisor * scale
    weights = divisor.rsqrt().view(-1, *[1] * (predicted.ndim - 1))
    parts = [((predicted - reference) * weights)[active]]
    if flow_rate_weight:
        known = torch.isfinite(reference_flow_rate)
        if bool(known.any()):
            relative = (predicted_flow_rate[known] - reference_flow_rate[known]) / reference_flow_rate[known]
            parts.append(relative * math.sqrt(flow_rate_weight / int(known.sum())))
    return torch.cat(parts)


def training_loss(
    predicted: torch.Tensor,
    reference: torch.Tensor,
    active: torch.Tensor,
    predicted_flow_rate: torch.Tensor,
    reference_flow_rate: torch.Tensor,
    flow_rate_weight: float,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The training loss, a 0-d float64 tensor: the mean over fractures of each one's squared pressure error over
    its active pixels (its MSE, divided by its ``scale`` where given: see :func:`pressure_scale`), plus
    ``flow_rate_weight`` times the mean of ((Q̂ − Q)/Q)² over the fractures that have a reference flow rate.

    The weight balances the pressure term against a squared relative error (the LCL's flow rate is typically
    10-40 % off in rough fractures). With a weight of 0 the flow rates are not looked at. Arguments as in
    :func:`training_residuals`.
    """
    return (
        training_residuals(
            predicted, reference, active, predicted_flow_rate, reference_flow_rate, flow_rate_weight, scale
        )
        .square()
        .sum()
    )


def improvement(
    model_error: torch.Tensor | float, baseline_error: torch.Tensor | float
) -> torch.Tensor | float:
    """100·(1 − model mean error / baseline mean error), in %: positive where the model is closer."""
    return 100 * (1 - model_error / baseline_error)


def monitorable_columns() -> list[str]:
    """The logged names a checkpoint can monitor while fitting: the training loss, and the learned model's metrics
    and improvement on the training and validation splits (the baselines' do not change)."""
    names = [*(m.name for m in METRICS), IMPROVEMENT]
    return [LOSS, *(column(stage, name) for stage in STAGES[:2] for name in names)]


def metric_name(name: str, baseline: str | None = None) -> str:
    """A metric's name without its stage: ``name`` for the learned model, ``<baseline>_<name>`` for a baseline."""
    return f"{baseline}_{name}" if baseline else name


def column(stage: str, name: str, baseline: str | None = None) -> str:
    """The logged name of a metric, e.g. ``column("val", "mse", baseline="lcl") == "val/lcl_mse"``; the learned
    model's without ``baseline``."""
    return f"{stage}/{metric_name(name, baseline)}"
