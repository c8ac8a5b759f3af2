"""``flowlearn ensemble``: K runs' predictions combined, with a calibrated interval for each flow rate
(:mod:`flowlearn.reporting.ensemble`), and the checks of its inputs."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

from flowlearn.cli.arguments import check_predictions_files, checked, path_text
from flowlearn.cli.outputs import check_new_output
from flowlearn.errors import (
    USER_ERRORS,
    SettingError,
)

# The arguments of flowlearn.reporting.ensemble's functions as the options of ``flowlearn ensemble``.
_ENSEMBLE_OPTIONS = {
    "paths": "PREDICTIONS",
    "output": "--output",
    "level": "--level",
    "calibrate": "--calibrate",
}


def run_ensemble(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable
    from flowlearn.reporting.ensemble import check_ensemble, write_ensemble

    # The default calibration split (val) gives way to the members' spread where it holds no reference flow rate, as
    # the ensemble's docstring says; a split asked for by name is refused there.
    calibrate = {"none": None, None: "val"}.get(args.calibrate, args.calibrate)
    try:
        check_ensemble(args.predictions, args.level, calibrate, args.output)
    except SettingError as err:
        raise SettingError(_ENSEMBLE_OPTIONS[err.field], err.problem) from err
    check_new_output(args.output, "predictions")
    check_predictions_files("PREDICTIONS", args.predictions)
    check_writable(args.output)
    _check_runs_once(args.predictions)
    if calibrate is not None:
        _check_calibration(args.predictions, calibrate, args.level, explicit=args.calibrate is not None)
    count = write_ensemble(args.predictions, args.output, args.level, calibrate)
    print(
        f"wrote the ensemble of {len(args.predictions)} members' predictions of {count} fracture(s) to {args.output}"
    )
    return 0


def _level(value: float) -> float:
    """An ensemble's ``--level``, checked where the ensemble checks it (imported once the option is given)."""
    from flowlearn.reporting.ensemble import check_level

    return check_level(value)


def ensemble_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.metrics import STAGES

    p.add_argument(
        "predictions",
        type=path_text,
        nargs="+",
        help="the members' predictions files (two or more, all different)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=path_text,
        required=True,
        help="predictions file to write: new, or one to replace (not one of PREDICTIONS, nor a run's predictions.h5)",
    )
    p.add_argument(
        "--level",
        type=checked(float, _level, "float"),
        default=0.9,
        help="level of each flow rate's interval, in (0, 1); split conformal needs at least level / (1 - level) "
        "calibration fractures (9 at 0.9)",
    )
    p.add_argument(
        "--calibrate",
        choices=(*STAGES, "none"),
        default=None,
        help="the split whose reference flow rates calibrate the intervals (split conformal; default val, or the "
        "members' spread where no val fracture has one; a split named here must have them); none: the members' own "
        "spread (Student-t)",
    )


def _recorded_members(path: Path) -> list[Path]:
    """The member files that the ensemble's predictions file ``path`` records, resolved; [] for a single model's
    file, or one that cannot be read (the ensemble then says why). A member is recorded as its command line named
    it: a relative name is taken from here, or, where nothing is here, from beside ``path``."""
    import numpy as np

    from flowlearn.data.files import open_file
    from flowlearn.reporting.ensemble import MEMBERS

    try:
        with open_file(path) as f:
            recorded = f.attrs.get(MEMBERS)
    except (*USER_ERRORS, OSError):
        return []
    members = []
    for name in np.atleast_1d(recorded if recorded is not None else []):
        member = Path(name.decode(errors="replace") if isinstance(name, bytes) else str(name))
        if not member.is_absolute() and not member.exists() and (path.parent / member).exists():
            member = path.parent / member
        members.append(member.resolve())
    return members


def _runs_of(path: Path, within: tuple[Path, ...] = ()) -> list[Path]:
    """The single models' predictions files that the predictions file ``path`` stands for: itself, or for an
    ensemble its members', down to the single models."""
    members = [] if path in within else _recorded_members(path)
    return [run for member in members for run in _runs_of(member, (*within, path))] if members else [path]


def _check_runs_once(paths: Sequence[str]) -> None:
    """Raise :class:`SettingError` where a member is an ensemble whose own members the other members count again
    (by the members its file records)."""
    runs = [_runs_of(Path(path).resolve()) for path in paths]
    for i, path in enumerate(paths):
        if runs[i] == [Path(path).resolve()]:
            continue  # a single model's file
        others = {run for j, theirs in enumerate(runs) if j != i for run in theirs}
        again = [str(run) for run in runs[i] if run in others]
        if again:
            counted = "which" if len(again) == len(runs[i]) else f"of which {', '.join(again)}"
            raise SettingError(
                "PREDICTIONS",
                f"{path} is itself an ensemble of {', '.join(map(str, runs[i]))}, {counted} the other members "
                "count again: give each run once",
            )


def _prediction_records(path: str) -> dict[str, tuple[str, float, float]] | None:
    """Per group of the predictions file ``path``: its split, flow rate and reference flow rate, from the
    attributes alone; None for a file that cannot be read so (the ensemble then says why)."""
    from flowlearn.data.files import open_file

    try:
        with open_file(path) as f:
            return {
                name: (
                    str(group.attrs["split"]),
                    float(group.attrs.get("flow_rate", math.nan)),
                    float(group.attrs.get("flow_rate_reference", math.nan)),
                )
                for name, group in f.items()
            }
    except (*USER_ERRORS, OSError, KeyError, TypeError, AttributeError):
        return None


def _conformal_rank(count: int, level: float) -> int:
    """The rank of the calibration score that split conformal prediction takes from ``count`` scores at ``level``,
    as :func:`~flowlearn.reporting.ensemble.combine` computes it: beyond ``count``, the interval is infinite."""
    return math.ceil((count + 1) * level)


def _check_calibration(paths: Sequence[str], split: str, level: float, explicit: bool) -> None:
    """Raise :class:`SettingError` where the split-conformal interval cannot be made as asked: ``--calibrate
    split`` named (``explicit``) where no fracture of the split has a reference flow rate (the interval would be the
    members' Student-t one), or a ``--level`` whose rank lies beyond the calibration fractures (it would be
    infinite, and left out)."""
    records = [_prediction_records(path) for path in paths]
    if any(record is None for record in records):
        return
    first = records[0]

    def positive(value: float) -> bool:
        return math.isfinite(value) and value > 0

    in_split = [name for name, (group_split, _, _) in first.items() if group_split == split]
    usable = [
        name
        for name in in_split
        if positive(first[name][2]) and all(positive(record.get(name, first[name])[1]) for record in records)
    ]
    if explicit and not usable:
        if not in_split:
            held = ", ".join(sorted({group_split for group_split, _, _ in first.values()}))
            problem = f"no member fracture is in split {split} (the members hold split {held})"
        else:
            problem = f"none of the members' {len(in_split)} {split} fractures has a reference flow rate"
        raise SettingError("--calibrate", f"{split}: {problem}; use --calibrate none")
    count = len(usable)
    if count and _conformal_rank(count, level) > count:
        # The fewest scores whose rank at ``level`` lies within them, n >= level / (1 - level), and the highest level
        # of three decimals that the scores at hand allow, n / (n + 1) rounded down; each checked against round-off.
        needed = max(1, math.ceil(level / (1 - level)))
        for _ in range(3):
            if needed > 1 and _conformal_rank(needed - 1, level) <= needed - 1:
                needed -= 1
            elif _conformal_rank(needed, level) > needed:
                needed += 1
        best = math.floor(count / (count + 1) * 1000) / 1000
        if _conformal_rank(count, best) > count:
            best -= 0.001
        raise SettingError(
            "--level",
            f"{level} needs at least {needed} {split} fractures with a reference flow rate for a finite "
            f"split-conformal interval, and the members have {count}: use --level at most {best:.3f}, or "
            "--calibrate none",
        )
