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

The verdict itself (:func:`verdict`, :data:`RULE`) is one answer, ``yes``, ``within the error`` or ``no`` (or
``lower, no error recorded`` where the provenance records none): whether the model beats the best closed form in
both medians by more than the reference's error. The run's closing line (:func:`closing_line`), ``flowlearn
evaluate`` (:func:`verdict_table`) and ``report.md`` state it in the same words (:func:`verdict_sentence`), and
their tables of medians have the same rows (:func:`median_rows`).

    flowlearn evaluate outputs/<date>/<time>/predictions.h5            # the test split
    flowlearn evaluate predicted.h5 --split predict                    # fractures given to flowlearn predict
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from flowlearn.fractures.statistics import aperture_statistics, out_of_range
from flowlearn.metrics import DEPARTURE_ERR, FLOW_RATE_ERR, METRICS, MSE, fracture_metrics
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


def split_metrics(fields: Iterable[FractureFields], split: str) -> HeldOut | None:
    """The per-fracture metrics of the ``split`` fractures among ``fields`` that have a reference pressure; None
    when there are none. ``fields`` is read once, one fracture at a time: a generator keeps one in memory."""
    names: list[str] = []
    rows: dict[str, list[dict[str, float]]] = {MODEL: []}
    recorded: list[tuple[float, ...]] = []
    power_exponent = math.nan
    for f in fields:
        if f.split != split or f.pressure_reference is None:
            continue
        if not names:
            power_exponent = f.power_exponent
        names.append(f.name)
        recorded.append(f.reference_error)
        rows[MODEL].append(_metrics(f, f.pressure, f.flow_rate))
        for name in BASELINE_NAMES:
            if name in f.baseline_pressures:
                flow = f.baseline_flow_rates.get(name, math.nan)
                rows.setdefault(name, []).append(_metrics(f, f.baseline_pressures[name], flow))
    if not names:
        return None
    metrics = {
        row: {m: np.array([entry[m] for entry in entries]) for m in VERDICT_METRICS}
        for row, entries in rows.items()
        if len(entries) == len(names)
    }
    flow_rate_error, departure_error, mse = np.abs(recorded).T  # (ERRORS, fractures)
    reference_error = {FLOW_RATE_ERR: 100 * flow_rate_error, DEPARTURE_ERR: departure_error, MSE: mse}
    return HeldOut(names, metrics, power_exponent, reference_error)


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


# How sentences name the metrics, and their units there.
_LABELS = {MSE: "MSE", DEPARTURE_ERR: "departure", FLOW_RATE_ERR: "flow rate"}
_UNITS = {FLOW_RATE_ERR: " %"}
_HEADERS = {m.name: m.header for m in METRICS}
# The row of the reference's own error in the tables of medians.
REFERENCE_ROW = "the reference's own error (vs its smooth walls)"
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


# -- the verdict ----------------------------------------------------------------------------------------------
# Defined once, for the run's closing line, flowlearn evaluate and report.md: does the model beat the best closed
# form in the pressure's departure and in the flow rate, each by more than the reference's own error?
JUDGED = (DEPARTURE_ERR, FLOW_RATE_ERR)
YES, WITHIN, NO, UNRECORDED = "yes", "within the error", "no", "lower, no error recorded"
RULE = (
    "The model beats the best closed form beyond the reference's error (yes) where its median departure error and "
    "its median flow-rate error are both lower than the best closed form's in each, and each gain is larger than "
    "the reference's own median error in that metric (the departure error compared through its square root); "
    "within the error where both are lower but a gain is not larger; no where one is not lower; lower, no error "
    "recorded where both are lower but the fractures record no error of their reference. The flow rate is judged "
    "where the fractures have reference flow rates."
)
# The longest closing line, in characters.
DONE_WIDTH = 160


def judged(result: HeldOut) -> dict[str, str]:
    """By metric of :data:`JUDGED` that the model and a closed form have on these fractures (the flow rate only
    where they have reference flow rates), the best closed form in it (:meth:`HeldOut.best`)."""
    chosen = {}
    for metric in JUDGED:
        best = result.best(metric)
        if best is not None and math.isfinite(result.median(MODEL, metric)):
            chosen[metric] = best
    return chosen


def verdict(result: HeldOut) -> str | None:
    """Whether the model beats the best closed form beyond the reference's own error, in medians over fractures
    and in each metric of :func:`judged` (:data:`RULE`): :data:`NO` where its median is not lower than the best
    closed form's in each; else :data:`WITHIN` where a gain (:meth:`HeldOut.margin`, in the metric's norm) is no
    larger than the reference's median error in that metric; else :data:`UNRECORDED` where the fractures'
    provenance records no error in one; else :data:`YES`. None where no metric can be judged."""
    margins = [result.margin(best, metric) for metric, best in judged(result).items()]
    if not margins:
        return None
    if not all(gain > 0 for gain, _ in margins):
        return NO
    if any(gain <= error for gain, error in margins):  # False for an error not recorded (NaN)
        return WITHIN
    if any(math.isnan(error) for _, error in margins):
        return UNRECORDED
    return YES


def _short(metric: str, value: float) -> str:
    return f"{value:.2g}{_UNITS.get(metric, '')}"


def verdict_sentence(result: HeldOut, medians: bool = True) -> str:
    """The :func:`verdict` in words, with (``medians``) the model's median and the best closed form's in each judged
    metric: ``beats mlcl beyond the reference's error? no (departure 0.0094 vs 0.0081, flow rate 2.1 % vs 6.5 %)``.
    Where the best closed form differs between the metrics both are named, in the order of the medians
    (``beats mlcl/inclined ...``)."""
    chosen = judged(result)
    if not chosen:
        return "nothing to judge (no departure or flow-rate error)"
    names = "/".join(dict.fromkeys(chosen.values()))
    sentence = f"beats {names} beyond the reference's error? {verdict(result)}"
    if not medians:
        return sentence
    numbers = ", ".join(
        f"{_LABELS[metric]} {_short(metric, result.median(MODEL, metric))} vs "
        f"{_short(metric, result.median(best, metric))}"
        for metric, best in chosen.items()
    )
    return f"{sentence} ({numbers})"


def split_label(split: str) -> str:
    """A split as the verdicts name it: the training split's fractures are not held out, and it says so."""
    return "train (not held out)" if split == "train" else split


def summary(result: HeldOut, split: str) -> str:
    """The line a run ends with, at most :data:`DONE_WIDTH` characters: the split, how many fractures, and the
    :func:`verdict_sentence` on them, e.g. ``done: test, 16 fractures: beats mlcl beyond the reference's error? no
    (departure 0.0094 vs 0.0081, flow rate 2.1 % vs 6.5 %)``. It holds no path, which may be of any length. The
    medians are left off where they would take it past the width (a count of millions, two closed forms named,
    medians in e-notation): the verdict is the line's point, and ``flowlearn evaluate`` prints them."""
    count = f"{len(result.names)} fracture{'s' if len(result.names) != 1 else ''}"
    head = f"done: {split_label(split)}, {count}: "
    line = head + verdict_sentence(result)
    return line if len(line) <= DONE_WIDTH else head + verdict_sentence(result, medians=False)


def closing_line(predictions: str | Path) -> str:
    """The line a training run ends with: the :func:`summary` of the test fractures of its ``predictions.h5``, or
    of the validation ones where there are none, or of the training ones where it has neither."""
    # One split's fields are read at a time: the training split may be large.
    for split in ("test", "val", "train"):
        result = split_metrics(read_predictions(predictions, split), split)
        if result is not None:
            return summary(result, split)
    return "done: no fracture has a reference pressure, so there is no verdict"


# -- tables ---------------------------------------------------------------------------------------------------


def _row_label(result: HeldOut, row: str, best: Mapping[str, str | None]) -> str:
    """A row's label: its name (the ``power`` law's with its exponent), and where it is the best closed form, in
    which metrics (all: none named)."""
    label = f"power (a = {result.power_exponent:.2f})" if row == "power" else row
    best_in = [_LABELS[metric] for metric, name in best.items() if name == row]
    if not best_in:
        return label
    everywhere = len(best_in) == sum(name is not None for name in best.values())
    return f"{label} (best closed form{'' if everywhere else ' in ' + ', '.join(best_in)})"


def median_rows(result: HeldOut) -> list[tuple[str, list[str]]]:
    """(label, cells) of the tables of medians (``flowlearn evaluate``'s and ``report.md``'s): per row the median
    over fractures of each of :data:`VERDICT_METRICS`, for the model, then the best closed form (per metric,
    :meth:`HeldOut.best`; its label says so), every other baseline, the LCL, and the reference's own error where
    the provenance records it."""
    best = {metric: result.best(metric) for metric in (*JUDGED, MSE)}
    bests = [name for name in dict.fromkeys(best.values()) if name is not None]
    rest = [row for row in result.metrics if row not in (MODEL, COMPARED, *bests)]
    lcl = [COMPARED] if COMPARED in result.metrics and COMPARED not in bests else []
    rows = [
        (_row_label(result, row, best), [_cell(result.median(row, m)) for m in VERDICT_METRICS])
        for row in (MODEL, *bests, *rest, *lcl)
    ]
    reference = [_cell(result.reference_median(m)) for m in VERDICT_METRICS]
    if any(cell != "n/a" for cell in reference):
        rows.append((REFERENCE_ROW, reference))
    return rows


def table_header(*first: str) -> list[str]:
    """The header lines of a table of :func:`median_rows`, after the columns ``first`` (and the rows' labels)."""
    columns = [*first, "", *(_HEADERS[m] for m in VERDICT_METRICS)]
    return ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]


def fracture_counts(result: HeldOut) -> list[str]:
    """On how many fractures the model beats the best closed form, and the LCL, in both departure and flow rate
    (fractures without a reference flow rate counted apart), and on how many by more than their reference's own
    error."""
    best = {metric: result.best(metric) for metric in JUDGED}
    lines = []
    for name, (departure_row, flow_row) in (
        ("the best closed form", (best[DEPARTURE_ERR], best[FLOW_RATE_ERR])),
        ("the LCL", (COMPARED, COMPARED)),
    ):
        if departure_row is None or flow_row is None:
            continue
        judged_fractures, beaten = result.beats(departure_row, flow_row)
        which = f" ({departure_row})" if departure_row == flow_row else f" ({departure_row}; {flow_row})"
        line = (
            f"the model beats {name}{which if name != 'the LCL' else ''} (departure and flow rate) on "
            f"{int(beaten.sum())} of {int(judged_fractures.sum())} fractures"
        )
        unjudged = int((~judged_fractures).sum())
        if unjudged:
            departure_better = (
                result.metrics[MODEL][DEPARTURE_ERR] < result.metrics[departure_row][DEPARTURE_ERR]
            )
            line += (
                f"; {unjudged} with no flow rate are not counted (its departure error lower on "
                f"{int((departure_better & ~judged_fractures).sum())} of them)"
            )
        lines.append(line)
        counts = [
            f"{_LABELS[metric]} on {clear} of {len(result.names)}"
            for metric, row in ((DEPARTURE_ERR, departure_row), (FLOW_RATE_ERR, flow_row))
            if (clear := result.clear_fractures(row, metric)) is not None
        ]
        if counts:
            lines.append(f"  by more than the reference's own error: {', '.join(counts)}")
    return lines


def verdict_table(result: HeldOut) -> str:
    """Markdown: the table of :func:`median_rows`, the model's reduction of the best closed form's and of the LCL's
    median errors, the :func:`verdict_sentence`, and the :func:`fracture_counts`."""
    lines = [f"{len(result.names)} fractures; medians over fractures", "", *table_header()]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in median_rows(result)]
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
    return "\n".join([*lines, "", f"the model {verdict_sentence(result)}", *fracture_counts(result)])
