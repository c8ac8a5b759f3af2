"""``flowlearn report``, ``predict`` and ``evaluate``: what a trained run says (:mod:`flowlearn.reporting.report`,
:mod:`flowlearn.training.predict`, :mod:`flowlearn.reporting.heldout`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from flowlearn.checks import (
    FIGURE_DPI,
    check_distinct_names,
)
from flowlearn.cli.arguments import check_predictions_files, dpi, path_text
from flowlearn.cli.outputs import check_new_output
from flowlearn.errors import (
    USER_ERRORS,
    ConfigError,
    DataValidationError,
    RunDirectoryError,
)


def run_report(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable
    from flowlearn.reporting.report import report_run, report_sweep
    from flowlearn.runs import looks_like_run, sweep_runs

    run_dir = Path(args.run_dir)
    check_writable(Path(args.output if args.output is not None else run_dir) / "report.md")
    # A directory with no run outputs of its own but run subdirectories is a sweep.
    if run_dir.is_dir() and not looks_like_run(run_dir) and sweep_runs(run_dir):
        table, incomplete = report_sweep(run_dir, args.output, dpi=args.dpi)
        print(f"wrote {table}")
        for line in incomplete:
            print(f"flowlearn report: incomplete run: {line}", file=sys.stderr)
        return 1 if incomplete else 0
    print(f"wrote {report_run(run_dir, args.output, dpi=args.dpi)}")
    return 0


def report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dir", type=path_text, help="run directory, or sweep directory holding run directories"
    )
    p.add_argument(
        "-o", "--output", type=path_text, help="where to write the report (default: RUN_DIR itself)"
    )
    p.add_argument(
        "--dpi",
        type=dpi,
        default=120,
        help=f"resolution of the figures, an integer in [{FIGURE_DPI[0]}, {FIGURE_DPI[1]}]",
    )


def run_predict(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable
    from flowlearn.training.predict import predict

    check_distinct_names("INPUTS", args.inputs)
    check_new_output(args.output, "predictions", args.inputs, "one of the inputs", run_dir=args.run_dir)
    check_writable(args.output)
    _check_run_directory(args.run_dir)
    _check_distinct_keys(args.inputs)
    count = predict(args.run_dir, args.inputs, args.output, checkpoint=args.checkpoint)
    print(
        f"wrote predicted W, log k, pressure and flow rate, and the baselines', of {count} fracture(s) to {args.output}"
    )
    return 0


def predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=path_text, help="run directory written by `python train.py`")
    p.add_argument(
        "inputs",
        type=path_text,
        nargs="+",
        help="HDF5 file(s) with the fractures to predict, of different file names (a fracture is named by its "
        "file's name and its group)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=path_text,
        required=True,
        help="HDF5 file to write: new, or a predictions file to replace (not one of INPUTS, nor a run's predictions.h5)",
    )
    p.add_argument(
        "--checkpoint", type=path_text, help="checkpoint to load (default: RUN_DIR/checkpoints/last.ckpt)"
    )


def _check_run_directory(run_dir: str) -> None:
    """Raise :class:`RunDirectoryError` where ``RUN_DIR`` names a file (a run's predictions.h5, say)."""
    path = Path(run_dir)
    if path.is_file():
        parent = path.absolute().parent
        hint = f" ({parent}?)" if (parent / ".hydra" / "config.yaml").is_file() else ""
        raise RunDirectoryError(
            f"RUN_DIR {run_dir} is a file, not a run directory: give the folder that python train.py wrote{hint}"
        )


def _check_distinct_keys(inputs: Sequence[str]) -> None:
    """Raise :class:`ConfigError` where two fractures of ``inputs`` would get one group in the output: a fracture's
    group is its file's stem and its group joined by '__' (``x.h5``'s ``y__z`` and ``x__y.h5``'s ``z`` are both
    ``x__y__z``). A file that cannot be listed is left to ``predict``, which says what is wrong with it."""
    from flowlearn.data.datamodule import find_fractures
    from flowlearn.training.predictions import group_name

    owners: dict[str, tuple[str, str]] = {}
    for path in inputs:
        try:
            refs = find_fractures(path)
        except (*USER_ERRORS, OSError):
            return
        for ref in refs:
            key = group_name(ref.key)
            if key in owners:
                other, group = owners[key]
                raise ConfigError(
                    f"INPUTS: {other} group '{group}' and {path} group '{ref.name}' both become '{key}' in the "
                    "output: rename one"
                )
            owners[key] = (path, ref.name)


def run_evaluate(args: argparse.Namespace) -> int:
    from flowlearn.reporting.ensemble import ensemble_coverage
    from flowlearn.reporting.heldout import held_out, outside_training, verdict_table
    from flowlearn.training.predictions import read_predictions

    check_predictions_files("PREDICTIONS", [args.predictions])
    fields = read_predictions(args.predictions)  # read once: the verdict, the intervals, the statistics
    try:
        result = held_out(args.predictions, args.split, fields)
    except ValueError as err:
        raise DataValidationError(str(err)) from err
    print(verdict_table(result))
    in_split = [f for f in fields if f.split == args.split]
    interval = ensemble_coverage(args.predictions, in_split, args.split)
    if interval:
        print(interval)
    for line in outside_training(args.predictions, in_split):
        print(f"flowlearn evaluate: warning: {line}", file=sys.stderr)
    return 0


def evaluate_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.metrics import STAGES

    p.add_argument(
        "predictions", type=path_text, help="predictions.h5 of a run, or a file written by flowlearn predict"
    )
    p.add_argument(
        "--split",
        choices=(*STAGES, "predict"),
        default="test",
        help="which fractures: those of a training run's split, or those flowlearn predict was given",
    )
