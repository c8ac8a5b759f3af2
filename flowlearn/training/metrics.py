"""The metrics of a run, each defined once: what is computed, under which name it is logged, how it is labelled.

Per fracture, over its solved pixels (active and connected to a face): the mean squared pressure error and the
mean and max pixel-wise relative error 100·|p̂ − p|/|p| in %. They are logged per stage as ``<stage>/<name>`` for
the learned model and ``<stage>/cubic_<name>`` for the baseline, the plain law with W = 1, reduced over fractures
(mean, or max for the max), and ``<stage>/improvement`` compares the two mean errors. The training loss,
``train/loss``, is the MSE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

STAGES = ("train", "val", "test")
LOSS = "train/loss"
BASELINE = "cubic_"  # prefix of the baseline's metrics
IMPROVEMENT = "improvement"
IMPROVEMENT_NOTE = (
    "Errors are |p̂ − p|/p over the active pixels of each fracture, averaged over fractures; "
    "improvement = 100·(1 − mean error / cubic-law mean error), the cubic law being W = 1."
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
)
MSE, REL_ERR_MEAN, REL_ERR_MAX = (m.name for m in METRICS)

ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, torch.Tensor)


def relative_error(predicted: ArrayOrTensor, reference: ArrayOrTensor) -> ArrayOrTensor:
    """Pixel-wise relative pressure error 100·|p̂ − p|/|p| in %, elementwise (numpy arrays or torch tensors)."""
    return 100 * abs(predicted - reference) / abs(reference)


def pixel_errors(
    predicted: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The :data:`METRICS` of each fracture of a batch, by name: float64 (B,) each.

    Args:
        predicted, reference: Pressures, float64 (B, *shape).
        mask: bool (B, *shape), the pixels compared (at least one per fracture).
    """
    counts = mask.flatten(1).sum(1)
    if bool((counts == 0).any()):
        raise ValueError("a fracture has no active pixel")
    error = torch.where(mask, predicted - reference, 0.0)
    # Masked-out pixels compare a reference of 1 with itself: no division by a meaningless (zero) reference.
    relative = relative_error(torch.where(mask, predicted, 1.0), torch.where(mask, reference, 1.0))
    return {
        MSE: (error**2).flatten(1).sum(1) / counts,
        REL_ERR_MEAN: relative.flatten(1).sum(1) / counts,
        REL_ERR_MAX: relative.flatten(1).max(1).values,
    }


def improvement(
    model_error: torch.Tensor | float, baseline_error: torch.Tensor | float
) -> torch.Tensor | float:
    """100·(1 − model mean error / baseline mean error), in %: positive where the model is closer."""
    return 100 * (1 - model_error / baseline_error)


def column(stage: str, name: str, baseline: bool = False) -> str:
    """The logged name of a metric, e.g. ``column("val", "mse", baseline=True) == "val/cubic_mse"``."""
    return f"{stage}/{BASELINE if baseline else ''}{name}"
