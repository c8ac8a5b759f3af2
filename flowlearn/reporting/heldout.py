"""The held-out verdict: per fracture, the model against every baseline, reduced to medians.

Reads a ``predictions.h5`` (a run's own, or what ``flowlearn predict`` wrote for new fractures), takes the
fractures of one split, computes :data:`~flowlearn.metrics.METRICS` per fracture for the model and each
baseline, and reports the median over fractures, and the fractures on which the model beats the best closed form
(per metric, the baseline of :data:`~flowlearn.models.baselines.CLOSED_FORMS` with the lowest median) and the local
cubic law (LCL) in both the pressure's departure and the flow rate. Medians, because a few fractures must not
decide. A fracture without a reference flow rate cannot be judged on both: it is counted apart, as "no flow rate".

Where the fractures' provenance records the reference's own error against the Stokes flow of its smooth walls
(``flowlearn smooth-walls``, :mod:`flowlearn.reference.reference_error`), a reduction of a closed form's median error is
called a gain only where it is larger than the reference's median error in the same metric: a smaller one could be
the reference's grid error learned.

    flowlearn evaluate outputs/<date>/<time>/predictions.h5            # the test split
    flowlearn evaluate predicted.h5 --split predict                    # fractures given to flowlearn predict
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from flowlearn.fractures.statistics import aperture_statistics, out_of_range
from flowlearn.metrics import DEPARTURE_ERR, FLOW_RATE_ERR, MSE, fracture_metrics
from flowlearn.models.baselines import BASELINE_NAMES, CLOSED_FORMS, COMPARED, best_closed_form
from flowlearn.training.predictions import FractureFields, read_predictions, training_statistics

MODEL = "model"
VERDICT_METRICS = (MSE, DEPARTURE_ERR, FLOW_RATE_ERR)


@dataclass(frozen=True)
class HeldOut:
    """Per-fracture metrics of one split.

    Attributes:
        names: the fractures.
        metrics: ``metrics[row][metric]``, float64 (fractures,) per row (``model`` and each baseline present), NaN
            where undefined.
        power_exponent: the fitted ``power`` baseline's a.
        reference_error: ``reference_error[metric]``, float64 (fractures,): the magnitude of the reference's own
            error in the units of each of :data:`VERDICT_METRICS`, NaN where the provenance records none.
    """

    names: list[str]
    metrics: dict[str, dict[str, np.ndarray]]
    power_exponent: float
    reference_error: dict[str, np.ndarray] = field(default_factory=dict)

    def median(self, row: str, metric: str) -> float:
        return _finite_median(self.metrics[row][metric])

    def reference_median(self, metric: str) -> float:
        """The median over fractures of the reference's own error in ``metric``; NaN where none is recorded."""
        return _finite_median(self.reference_error.get(metric, np.array([])))

    def margin(self, row: str, metric: str) -> tuple[float, float]:
        """(the model's gain over ``row`` in ``metric``, the reference's own error in it), medians over fractures in
        the metric's norm (:func:`in_norm`): its median error minus the model's, negative where the model's is
        higher; the error NaN where none is recorded."""
        gain = in_norm(metric, self.median(row, metric)) - in_norm(metric, self.median(MODEL, metric))
        return gain, in_norm(metric, self.reference_median(metric))

    def clear_of_reference(self, row: str, metric: str) -> bool | None:
        """Whether the model's gain over ``row`` in ``metric`` is larger than the reference's own error in it
        (:meth:`margin`); None where no error is recorded or the model has no gain."""
        gain, error = self.margin(row, metric)
        if math.isnan(error) or not gain > 0:
            return None
        return bool(gain > error)

    def clear_fractures(self, row: str, metric: str) -> int | None:
        """On how many fractures the model's margin over ``row`` in ``metric`` (in its norm) exceeds that fracture's
        reference error; None where no error is recorded."""
        error = self.reference_error.get(metric)
        if error is None or not np.isfinite(error).any():
            return None
        margin = in_norm(metric, self.metrics[row][metric]) - in_norm(metric, self.metrics[MODEL][metric])
        return int((margin > in_norm(metric, error)).sum())

    def best(self, metric: str) -> str | None:
        """The closed form with the lowest median ``metric`` (:func:`~flowlearn.models.baselines.best_closed_form`),
        or None where none has one."""
        found = best_closed_form(
            {row: self.median(row, metric) for row in self.metrics if row in CLOSED_FORMS}
        )
        return None if found is None else found[0]

    def beats(self, departure_row: str, flow_row: str) -> tuple[np.ndarray, np.ndarray]:
        """(judged, beaten), bool (fractures,) each: ``judged`` where the fracture has a reference flow rate (only
        those can be judged on both), ``beaten`` where the model's departure error is below ``departure_row``'s and
        its flow-rate error below ``flow_row``'s (False where not judged)."""
        model = self.metrics[MODEL]
        judged = np.isfinite(model[FLOW_RATE_ERR]) & np.isfinite(self.metrics[flow_row][FLOW_RATE_ERR])
        departure = model[DEPARTURE_ERR] < self.metrics[departure_row][DEPARTURE_ERR]
        flow = model[FLOW_RATE_ERR] < self.metrics[flow_row][FLOW_RATE_ERR]
        return judged, judged & departure & flow


def _metrics(fields: FractureFields, pressure: np.ndarray, flow_rate: float) -> dict[str, float]:
    mask = fields.compared
    # The model's pressure holds the fixed heads on the first and last columns.
    inlet, outlet = (float(np.nanmean(fields.pressure[..., column])) for column in (0, -1))

    def t(x) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x, dtype=np.float64))[None]

    values = fracture_metrics(
        t(np.where(mask, pressure, 0.0)),
        t(np.where(mask, fields.pressure_reference, 0.0)),
        torch.as_tensor(mask)[None],
        t(inlet),
        t(outlet),
        t(flow_rate),
        t(fields.flow_rate_reference),
    )
    return {name: float(values[name][0]) for name in VERDICT_METRICS}


def split_metrics(fields: Sequence[FractureFields], split: str) -> HeldOut | None:
    """The per-fracture metrics of the ``split`` fractures among ``fields`` that have a reference pressure; None
    when there are none."""
    chosen = [f for f in fields if f.split == split and f.pressure_reference is not None]
    if not chosen:
        return None
    rows: dict[str, list[dict[str, float]]] = {MODEL: []}
    for f in chosen:
        rows[MODEL].append(_metrics(f, f.pressure, f.flow_rate))
        for name in BASELINE_NAMES:
            if name in f.baseline_pressures:
                flow = f.baseline_flow_rates.get(name, math.nan)
                rows.setdefault(name, []).append(_metrics(f, f.baseline_pressures[name], flow))
    metrics = {
        row: {m: np.array([entry[m] for entry in entries]) for m in VERDICT_METRICS}
        for row, entries in rows.items()
        if len(entries) == len(chosen)
    }
    recorded = np.abs([f.reference_error for f in chosen])  # (fractures, ERRORS)
    flow_rate_error, departure_error, mse = recorded.T
    reference_error = {FLOW_RATE_ERR: 100 * flow_rate_error, DEPARTURE_ERR: departure_error, MSE: mse}
    return HeldOut([f.name for f in chosen], metrics, chosen[0].power_exponent, reference_error)


def held_out(
    path: str | Path, split: str = "test", fields: Sequence[FractureFields] | None = None
) -> HeldOut:
    """The per-fracture metrics of the ``split`` fractures of the predictions file ``path`` (``fields``: its
    fractures, where they have been read already)."""
    result = split_metrics(read_predictions(path, split) if fields is None else fields, split)
    if result is None:
        raise ValueError(f"{path}: no fracture of split '{split}' with a reference pressure")
    return result


def outside_training(path: str | Path, fields: Sequence[FractureFields]) -> list[str]:
    """``"<path>: group '<name>': <line>"`` for each statistic of each of ``fields`` (fractures of the predictions
    file ``path``) outside the training split's range that the file records (:func:`~flowlearn.fractures.statistics.
    out_of_range`); none where it records no range."""
    ranges = training_statistics(path)
    if not ranges:
        return []
    return [
        f"{path}: group '{one.name}': {line}"
        for one in fields
        for line in out_of_range(aperture_statistics(one.aperture, one.voxel_size), ranges)
    ]


_LABELS = {DEPARTURE_ERR: "departure", FLOW_RATE_ERR: "flow rate"}
# Metrics that are squares of a norm of the pressure's error (a mean square; 1 − R², an energy ratio).
SQUARED = (MSE, DEPARTURE_ERR)


def in_norm(metric: str, value: np.ndarray | float) -> np.ndarray | float:
    """``value`` of ``metric`` as a norm of the error: the square root of a squared metric (:data:`SQUARED`), others
    as they are. By the triangle inequality a reference off the truth by d in a norm moves every error measured
    against it by at most d in that norm, so gains and the reference's error compare there."""
    return np.sqrt(value) if metric in SQUARED else value


def _finite_median(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else math.nan


def _cell(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3g}"


def verdict_table(result: HeldOut) -> str:
    """Markdown: one row per model and baseline, the median of each metric over fractures, the model's reduction of
    the best closed form's and of the LCL's median errors, and on how many fractures the model beats each in both
    departure and flow rate (fractures without a reference flow rate counted apart)."""
    lines = [
        f"{len(result.names)} fractures; medians over fractures",
        "",
        "| | MSE | departure error (1 − R²) | flow-rate error (%) |",
        "|---|---|---|---|",
    ]
    for row in result.metrics:
        label = f"power (a = {result.power_exponent:.2f})" if row == "power" else row
        cells = [_cell(result.median(row, m)) for m in VERDICT_METRICS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    best = {m: result.best(m) for m in VERDICT_METRICS}
    for label, against in (
        ("model vs best closed form", best),
        ("model vs LCL", dict.fromkeys(VERDICT_METRICS, COMPARED)),
    ):
        cells = []
        for metric in VERDICT_METRICS:
            row = against[metric]
            # No reduction of an error that is already zero (a baseline exact on these fractures).
            exact = row is None or result.median(row, metric) == 0
            reduction = math.nan if exact else 1 - result.median(MODEL, metric) / result.median(row, metric)
            change = (
                "n/a"
                if math.isnan(reduction)
                else f"{reduction:.0%} lower"
                if reduction >= 0
                else (f"{-reduction:.0%} higher")
            )
            notes = [] if row is None or label.endswith("LCL") else [row]
            clear = None if row is None else result.clear_of_reference(row, metric)
            if clear is not None:
                notes.append("clear of the reference's error" if clear else "within the reference's error")
            cells.append(f"{change} ({'; '.join(notes)})" if notes else change)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    reference = [_cell(result.reference_median(m)) for m in VERDICT_METRICS]
    if any(cell != "n/a" for cell in reference):
        lines.append("| the reference's own error (vs its smooth walls) | " + " | ".join(reference) + " |")
    lines.append("")
    for name, (departure_row, flow_row) in (
        ("the best closed form", (best[DEPARTURE_ERR], best[FLOW_RATE_ERR])),
        ("the LCL", (COMPARED, COMPARED)),
    ):
        if departure_row is None or flow_row is None:
            continue
        judged, beaten = result.beats(departure_row, flow_row)
        which = f" ({departure_row})" if departure_row == flow_row else f" ({departure_row}; {flow_row})"
        line = (
            f"the model beats {name}{which if name != 'the LCL' else ''} (departure and flow rate) on "
            f"{int(beaten.sum())} of {int(judged.sum())} fractures"
        )
        unjudged = int((~judged).sum())
        if unjudged:
            departure_better = (
                result.metrics[MODEL][DEPARTURE_ERR] < result.metrics[departure_row][DEPARTURE_ERR]
            )
            line += (
                f"; {unjudged} with no flow rate are not counted (its departure error lower on "
                f"{int((departure_better & ~judged).sum())} of them)"
            )
        lines.append(line)
        counts = [
            f"{_LABELS[metric]} on {clear} of {len(result.names)}"
            for metric, row in ((DEPARTURE_ERR, departure_row), (FLOW_RATE_ERR, flow_row))
            if (clear := result.clear_fractures(row, metric)) is not None
        ]
        if counts:
            lines.append(f"  by more than the reference's own error: {', '.join(counts)}")
    return "\n".join(lines)


# The metrics of the closing line, in its order, with their labels and units.
_SUMMARY_METRICS = (
    (DEPARTURE_ERR, "departure error", ""),
    (FLOW_RATE_ERR, "flow-rate error", " %"),
    (MSE, "MSE", ""),
)


def summary(result: HeldOut, split: str, run_dir: Path) -> str:
    """One line on what a run achieved beside the physics it must beat, in medians over the fractures of
    ``split``, as :func:`verdict_table` gives them: per metric (departure error, flow-rate error in %, MSE; those
    the fractures have), the model's median, then the best closed form's (named), the LCL's and the reference's own
    error where the data records it; e.g. ``done: test split, medians over 16 fractures: departure error 0.0094
    (best closed form mlcl 0.00813, LCL 0.071, the reference's own error 0.005), ...; outputs in <run_dir>``."""
    parts = []
    for metric, label, unit in _SUMMARY_METRICS:
        model = result.median(MODEL, metric)
        if math.isnan(model):
            continue
        beside = []
        best = result.best(metric)
        if best is not None and best != COMPARED:
            beside.append(f"best closed form {best} {result.median(best, metric):.3g}{unit}")
        if COMPARED in result.metrics and math.isfinite(lcl := result.median(COMPARED, metric)):
            beside.append(f"LCL {lcl:.3g}{unit}")
        if math.isfinite(reference := result.reference_median(metric)):
            beside.append(f"the reference's own error {reference:.3g}{unit}")
        parts.append(f"{label} {model:.3g}{unit}" + (f" ({', '.join(beside)})" if beside else ""))
    # Fractures the model was trained on show what it fits, not what it predicts: the line says so.
    which = f"{split} split" if split != "train" else "training split (no held-out fractures)"
    count = f"{len(result.names)} fracture{'s' if len(result.names) != 1 else ''}"
    return f"done: {which}, medians over {count}: {', '.join(parts)}; outputs in {run_dir}"


def closing_line(predictions: str | Path, run_dir: Path) -> str:
    """The line a training run ends with: the :func:`summary` of the test fractures of its ``predictions.h5``, or
    of the validation ones where there are none, or of the training ones where it has neither."""
    # One split's fields are read at a time: the training split may be large.
    for split in ("test", "val", "train"):
        result = split_metrics(read_predictions(predictions, split), split)
        if result is not None:
            return summary(result, split, run_dir)
    return f"done: outputs in {run_dir}"
