"""``flowlearn report``: the figures and a markdown summary of one finished run, or a table of a sweep's runs.

A run directory is what ``python train.py`` writes (see :mod:`flowlearn.training.train`). A sweep directory is what
``python train.py -m`` writes: one run directory per subdirectory. For one run the report is
``<output>/report.md`` plus ``<output>/figures/*.png``; for a sweep, ``<output>/report.md`` holds one table row per
run, and each complete run gets its own report in its subdirectory (of ``<output>``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

import flowlearn.metrics as metrics
from flowlearn.checks import check_dpi
from flowlearn.data.files import atomic_path
from flowlearn.errors import DataValidationError, RunDirectoryError
from flowlearn.models.baselines import BASELINES, COMPARED
from flowlearn.reporting.figures import figure_set, map_closed_forms, plot_baselines, save_figures
from flowlearn.reporting.heldout import (
    RULE,
    HeldOut,
    fracture_counts,
    median_rows,
    split_label,
    split_metrics,
    table_header,
    verdict_sentence,
)
from flowlearn.runs import (
    metric_series,
    missing_outputs,
    read_metrics,
    read_run_yaml,
    run_config,
    sweep_runs,
)
from flowlearn.training.failures import run_error
from flowlearn.training.predictions import read_predictions

# (column, table header) of the sweep table.
SWEEP_COLUMNS = (
    (metrics.column("val", metrics.MSE), "val MSE"),
    (metrics.column("val", metrics.REL_ERR_MEAN), "val mean error (%)"),
    (metrics.column("val", metrics.IMPROVEMENT), "val improvement over LCL (%)"),
    (metrics.column("test", metrics.REL_ERR_MEAN), "test mean error (%)"),
    (metrics.column("test", metrics.REL_ERR_MEAN, COMPARED), "test LCL mean error (%)"),
    (metrics.column("test", metrics.IMPROVEMENT), "test improvement over LCL (%)"),
    (metrics.column("test", metrics.FLOW_RATE_ERR), "test flow-rate error (%)"),
    (metrics.column("test", metrics.FLOW_RATE_ERR, COMPARED), "test LCL flow-rate error (%)"),
    (metrics.column("test", metrics.DEPARTURE_ERR), "test departure error"),
    (metrics.column("test", metrics.DEPARTURE_ERR, "mlcl"), "test mlcl departure error"),
    (metrics.column("test", metrics.FLOW_RATE_ERR, "mlcl"), "test mlcl flow-rate error (%)"),
)


def final_metrics(columns: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The last logged value of every metric column (``epoch`` and ``step`` excluded)."""
    final = {}
    for name, values in columns.items():
        logged = values[np.isfinite(values)]
        if name not in ("epoch", "step") and logged.size:
            final[name] = float(logged[-1])
    return final


def verdict_section(results: Mapping[str, HeldOut]) -> str:
    """Markdown: one table of the medians over fractures of each split of ``results`` (a split column, then the
    rows of :func:`~flowlearn.reporting.heldout.median_rows`: the model, the best closed form, the other baselines,
    the LCL and the reference's own error, as ``flowlearn evaluate`` prints them), and under it each split's
    verdict (:func:`~flowlearn.reporting.heldout.verdict_sentence`) with its counts of fractures."""
    lines = table_header("split")
    for split, result in results.items():
        lines += [
            f"| {split_label(split)} | {label} | " + " | ".join(cells) + " |"
            for label, cells in median_rows(result)
        ]
    lines.append("")
    for split, result in results.items():
        lines.append(
            f"- {split_label(split)}, {len(result.names)} fractures: the model {verdict_sentence(result)}"
        )
        # A count's own detail (indented) one level further in.
        lines += [
            f"    - {line.strip()}" if line.startswith(" ") else f"  - {line}"
            for line in fracture_counts(result)
        ]
    return "\n".join(lines)


def judged_splits(results: Mapping[str, HeldOut]) -> dict[str, HeldOut]:
    """The splits of ``results`` that the report judges the model on: test and validation, or the training split
    where it has neither (as the run's closing line does)."""
    held_out = {split: results[split] for split in ("test", "val") if split in results}
    return held_out or {split: result for split, result in results.items() if split == "train"}


def baselines_note(final: Mapping[str, float]) -> str:
    """The baselines' formulas, and what the table lacks: flow-rate errors where the data has no flow rates."""
    lines = [f"- `{b.name}`, {b.label}: {b.formula}" for b in BASELINES]
    if not any(name.endswith(metrics.FLOW_RATE_ERR) for name in final):
        lines.append(
            "- no flow-rate errors: the run's fractures carry no reference flow rate (the `flow_rate` attribute)"
        )
    return "\n".join(lines)


def _epochs(columns: Mapping[str, np.ndarray]) -> int:
    """Epochs a run trained: the last epoch that logged the training loss, plus one (test rows log the epoch after
    the last)."""
    if metrics.LOSS not in columns:
        return 0
    epochs, _ = metric_series(columns, metrics.LOSS)
    return int(epochs.max()) + 1 if epochs.size else 0


def _number(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.4g}"


def _choices(run_dir: Path) -> dict[str, str]:
    """Hydra's config-group choices of a run (model, law, solver, ...), empty when not recorded."""
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    if not hydra_file.is_file():
        return {}
    record = read_run_yaml(hydra_file)
    choices = (
        OmegaConf.select(record, "hydra.runtime.choices", default={})
        if isinstance(record, DictConfig)
        else {}
    )
    return {
        str(k): str(v)
        for k, v in OmegaConf.to_container(choices).items()
        if v is not None and not str(k).startswith("hydra")
    }


def _overrides(run_dir: Path) -> list[str]:
    """The command-line overrides a run was started with (Hydra's record of them)."""
    path = run_dir / ".hydra" / "overrides.yaml"
    overrides = read_run_yaml(path) if path.is_file() else []
    return [str(o) for o in overrides] if isinstance(overrides, ListConfig | list) else []


def _code(overrides: list[str]) -> str:
    return f"`{' '.join(overrides)}`" if overrides else "(defaults)"


def report_run(run_dir: str | Path, output: str | Path | None = None, dpi: int = 120) -> Path:
    """Write the figure set and ``report.md`` of one finished run; returns the report's path.

    Raises:
        RunDirectoryError: the directory does not exist, holds a failed run (its ``error.txt`` says why), or
            lacks a checkpoint, metrics, config or predictions, or its config or metrics cannot be read.
        DataValidationError: its predictions.h5 is no predictions file (empty, truncated, of other contents), or
            a group of it breaks the schema (:func:`~flowlearn.training.predictions.read_predictions`).
        OutputError: ``output`` cannot be written (a read-only place, a full disk, a file in the way).
        SettingError: ``dpi`` is not an integer in :data:`~flowlearn.checks.FIGURE_DPI`.
    """
    check_dpi(dpi)  # before anything is read or written
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirectoryError(f"{run_dir}: no such directory")
    error = run_error(run_dir)
    if error:
        raise RunDirectoryError(f"{run_dir}: the run failed: {error.removeprefix('error: ')}")
    missing = missing_outputs(run_dir)
    if missing:
        raise RunDirectoryError(f"{run_dir}: not a finished run; missing {', '.join(missing)}")
    output = Path(output) if output is not None else run_dir
    columns = read_metrics(run_dir)
    fields = read_predictions(run_dir / "predictions.h5")
    # All read before anything is written: a damaged run gets no report.
    config, choices, overrides = run_config(run_dir), _choices(run_dir), _overrides(run_dir)
    per_split = {s: r for s in metrics.STAGES if (r := split_metrics(fields, s)) is not None}
    figures = figure_set(fields, columns, map_closed_forms(per_split))
    if per_split and (baselines := plot_baselines(per_split)) is not None:
        figures["baselines"] = baselines
    paths = save_figures(figures, output / "figures", dpi=dpi)
    final = final_metrics(columns)

    lines = [f"# Run report: {run_dir.name}", "", f"- run directory: `{run_dir.resolve()}`"]
    if choices:
        lines.append("- config groups: " + ", ".join(f"{k}={v}" for k, v in choices.items()))
    splits = {s: sum(f.split == s for f in fields) for s in metrics.STAGES}
    lines += [
        f"- overrides: {_code(overrides)}",
        f"- epochs trained: {_epochs(columns)}; fractures: "
        + ", ".join(f"{n} {s}" for s, n in splits.items() if n)
        + f"; law: {fields[0].law}",
        "",
        "## The verdict (medians over fractures)",
        "",
    ]
    judged = judged_splits(per_split)
    if judged:
        lines += [verdict_section(judged), ""]
    lines += [
        f"Per fracture: the pressure MSE, and the departure and flow-rate errors ({metrics.ERRORS_NOTE}, in %), over "
        "its solved pixels less the inlet and outlet columns; the median over the split's fractures. "
        f"{RULE}",
        "",
        "Baselines:",
        "",
        baselines_note(final),
        "",
    ]
    lines += [
        "## Figures",
        "",
    ]
    lines += [f"![{name}]({path.relative_to(output).as_posix()})" for name, path in paths.items()]
    lines += ["", "## Config", "", "```yaml", OmegaConf.to_yaml(config).rstrip(), "```", ""]
    report = output / "report.md"
    with atomic_path(report) as tmp:
        tmp.write_text("\n".join(lines))
    return report


def report_sweep(
    sweep_dir: str | Path, output: str | Path | None = None, dpi: int = 120
) -> tuple[Path, list[str]]:
    """Write ``report.md`` with one row per run of a sweep, and each complete run's own report.

    Returns the table's path and one line per incomplete run (what it lacks, or which of its outputs cannot be
    read); those runs are listed in the table too, with their status.

    Raises:
        SettingError: ``dpi`` is not an integer in :data:`~flowlearn.checks.FIGURE_DPI` (before anything is
            written).
    """
    check_dpi(dpi)
    sweep_dir = Path(sweep_dir)
    output = Path(output) if output is not None else sweep_dir
    runs = sweep_runs(sweep_dir)
    if not runs:
        raise RunDirectoryError(f"{sweep_dir}: holds no run directories")
    overrides = {run: _overrides(run) for run in runs}
    # The table shows what varies between runs; what all runs share is said once above it.
    shared = [o for o in overrides[runs[0]] if all(o in others for others in overrides.values())]
    lines = [
        f"# Sweep report: {sweep_dir.name}",
        "",
        f"{len(runs)} run(s) in `{sweep_dir.resolve()}`, all with {_code(shared)}. {metrics.IMPROVEMENT_NOTE}",
        "",
        "| run | overrides | status | epochs | " + " | ".join(h for _, h in SWEEP_COLUMNS) + " |",
        "|---" * (len(SWEEP_COLUMNS) + 4) + "|",
    ]
    incomplete = []
    for run in runs:
        missing = missing_outputs(run)
        final: dict[str, float] = {}
        epochs = "–"
        if (run / "metrics.csv").is_file():
            # A job killed before its first epoch leaves a metrics.csv without rows: one incomplete run, not a
            # failed table.
            try:
                columns = read_metrics(run)
            except RunDirectoryError as unread:
                # No rows yet (a job killed before its first epoch), or a file that is no metrics file at all.
                no_rows = "no logged epochs" in str(unread)
                missing.append("logged epochs (metrics.csv has none)" if no_rows else f"a readable {unread}")
            else:
                final, epochs = final_metrics(columns), str(_epochs(columns))
        error = run_error(run)
        if error:
            status = "failed: " + error.replace("|", "\\|")
            incomplete.append(f"{run} failed: {error}")
            name = run.name
        elif missing:
            status = "incomplete: missing " + ", ".join(missing)
            incomplete.append(f"{run} is missing " + ", ".join(missing))
            name = run.name
        else:
            try:
                report = report_run(run, output / run.name, dpi=dpi)
            # Its outputs are all there, but one cannot be read: its config or metrics.csv (RunDirectoryError), or its
            # predictions.h5 (DataValidationError: not HDF5, or a group that breaks the predictions schema).
            except (RunDirectoryError, DataValidationError) as damaged:
                status = "unreadable: " + str(damaged).replace("|", "\\|")
                incomplete.append(f"{run} is unreadable: {damaged}")
                name = run.name
            else:
                status = "complete"
                name = f"[{run.name}]({report.relative_to(output).as_posix()})"
        values = " | ".join(_number(final.get(column)) for column, _ in SWEEP_COLUMNS)
        varied = [o for o in overrides[run] if o not in shared]
        lines.append(f"| {name} | {_code(varied)} | {status} | {epochs} | {values} |")
    table = output / "report.md"
    with atomic_path(table) as tmp:
        tmp.write_text("\n".join([*lines, ""]))
    return table, incomplete
