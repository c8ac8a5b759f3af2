"""A stage's metrics over an epoch, the model's and every baseline's, as one torchmetrics ``Metric``.

Each fracture a stage visits adds a row of values, one per column (a metric of the model or of a baseline); the
epoch's value of a column is the mean or the maximum over the fractures that have it. One metric object with
vector states takes a row per batch where a metric object per column took one update per fracture and column: 40
columns cost 2 ms per fracture that way, as much as the real fracture's whole step of the pressure solves, and
about 4 s of the default 30-epoch run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torchmetrics import Metric

REDUCTIONS = ("mean", "max")


class EpochMetrics(Metric):
    """Mean or maximum of each column over the rows (fractures) that have a finite value in it.

    Args:
        reductions: Each column's reduction, ``"mean"`` or ``"max"``, by its name, in the order of the rows' C
            values.

    Under DDP the states reduce as torchmetrics' ``MeanMetric`` and ``MaxMetric`` would: sums and counts by sum,
    maxima by max, so that every process computes the values of all fractures.
    """

    full_state_update = False

    def __init__(self, reductions: Mapping[str, str]) -> None:
        super().__init__()
        if not set(reductions.values()) <= set(REDUCTIONS):
            raise ValueError(f"each column's reduction must be one of {REDUCTIONS}, got {dict(reductions)}")
        self.columns = tuple(reductions)
        count = len(self.columns)
        self.register_buffer(
            "_is_max",
            torch.tensor([r == "max" for r in reductions.values()], dtype=torch.bool),
            persistent=False,
        )
        self.add_state("sums", torch.zeros(count, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(count, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("maxima", torch.full((count,), -math.inf, dtype=torch.float64), dist_reduce_fx="max")

    def update(self, rows: torch.Tensor) -> None:
        """Add ``rows``, float64 (B, C); NaN marks a value that a fracture does not have (a flow rate, a baseline
        that does not apply)."""
        finite = torch.isfinite(rows)
        self.sums += torch.where(finite, rows, 0.0).sum(dim=0)
        self.counts += finite.sum(dim=0)
        self.maxima = torch.maximum(self.maxima, torch.where(finite, rows, -math.inf).amax(dim=0))

    def compute(self) -> dict[str, torch.Tensor]:
        """Each column's value (a 0-d float64 tensor): NaN for a mean and -inf for a maximum that no row had."""
        means = self.sums / self.counts  # 0/0 -> NaN
        values = torch.where(self._is_max, self.maxima, means)
        return dict(zip(self.columns, values.unbind(), strict=True))
