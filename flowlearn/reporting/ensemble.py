"""Ensembles: K trained models of one configuration (the seeds of a sweep) combined into one prediction, with an
interval for each flow rate.

The members' predictions files (``predictions.h5`` of each run, or files ``flowlearn predict`` wrote) must hold the
same fractures in the same splits. Per fracture, the ensemble predicts

* the flow rate q̄ = exp(mean_k log q_k), the geometric mean of the members' (flow rates are positive and their
  errors multiplicative), and the interval exp(log q̄ ± c · s), s the standard deviation of the K values of log q.
  By default c is calibrated on the fractures of another split with reference flow rates (``calibrate``, the
  validation split): split conformal prediction (Vovk et al. 2005; Lei et al. 2018) on the scores
  |log q̄ - log q_ref| / s, c the ⌈(n + 1) · level⌉-th smallest of the n scores, so that the interval of a new
  fracture drawn like those holds its reference with probability at least ``level``. Without a calibration split
  (``calibrate=None``, or none of its fractures has a reference), c = t_{(1+level)/2, K-1} · √(1 + 1/K): the
  Student-t prediction interval of one more member drawn like these, which says how much the model's answer
  depends on its random start, not how far it lies from the reference. ``flowlearn evaluate`` says how often the
  interval holds the reference;
* the pressure, log-conductivity and log W as the members' means (W as their geometric mean).

The baselines do not depend on the model; the first member's are kept.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import stats

from flowlearn.checks import check_distinct_files, check_not_input, check_setting, is_number, shown
from flowlearn.data.files import open_file
from flowlearn.errors import DataValidationError, SettingError
from flowlearn.metrics import STAGES
from flowlearn.training.predictions import (
    FractureFields,
    read_predictions,
    training_statistics,
    write_fields,
)

# Fewest members: an interval needs a spread.
MIN_MEMBERS = 2
# The splits whose reference flow rates may calibrate the intervals (``calibrate``; None: the members' spread).
CALIBRATION_SPLITS = STAGES
# File attributes of an ensemble: the interval's level, how it was made, and its members' files.
LEVEL = "interval_level"
INTERVAL = "interval"
MEMBERS = "members"


def _check_members(paths: Sequence[Path], members: Sequence[list[FractureFields]]) -> None:
    """Raise :class:`DataValidationError` naming the file and fracture where a member holds other fractures, splits
    or law than the first."""
    first = members[0]
    for path, member in zip(paths[1:], members[1:]):
        if [f.name for f in member] != [f.name for f in first]:
            missing = sorted({f.name for f in first} ^ {f.name for f in member})
            raise DataValidationError(
                f"{path}: holds other fractures than {paths[0]} (first difference: group '{missing[0]}'): an "
                "ensemble needs the same fractures from every member (sweep seed=... with data.seed fixed)"
            )
        for mine, theirs in zip(member, first):
            if (mine.split, mine.law) != (theirs.split, theirs.law):
                raise DataValidationError(
                    f"{path}: group '{mine.name}' is split {mine.split} with law={mine.law}, and in {paths[0]} split "
                    f"{theirs.split} with law={theirs.law}: an ensemble needs one data split and one law (sweep "
                    "seed=... with data.seed fixed)"
                )


def check_level(level: object) -> float:
    """``level`` if it is a number in (0, 1) (the share of fractures an interval is to hold), else
    :class:`SettingError` for ``level``."""
    check_setting(is_number(level) and 0 < level < 1, "level", "must be a number in (0, 1)", level)
    return level


def check_ensemble(
    paths: object, level: object, calibrate: object, output: str | os.PathLike | None = None
) -> list[Path]:
    """The members' files ``paths`` as paths, after the checks of the arguments of :func:`combine` and
    :func:`write_ensemble` that read no file; :class:`SettingError` for the argument at fault (its ``field``:
    ``paths``, ``output``, ``level`` or ``calibrate``), which a command line names by its own option.

    Refused: ``paths`` that is one path (a str would be read character by character) or holds a non-path, fewer
    than :data:`MIN_MEMBERS` files, an ``output`` that is one of them (writing it would replace a member), one file
    twice, however named (a spread of zero: an interval of zero width), ``level`` that is no number in (0, 1), and
    ``calibrate`` neither one of :data:`CALIBRATION_SPLITS` nor None.
    """
    if isinstance(paths, str | bytes | os.PathLike):
        raise SettingError("paths", f"must be a list of predictions files, got one: {os.fsdecode(paths)}")
    if not isinstance(paths, Iterable):
        raise SettingError(
            "paths", f"must be a list of predictions files, got {shown(paths)} ({type(paths).__name__})"
        )
    given = list(paths)
    for path in given:
        check_setting(isinstance(path, str | os.PathLike), "paths", "must hold file paths", path)
    check_setting(
        len(given) >= MIN_MEMBERS, "paths", f"must be at least {MIN_MEMBERS} files (the members)", len(given)
    )
    if output is not None:
        check_not_input(output, given, "one of the members", "output")
    # As given, so that the message shows both names of one file.
    check_distinct_files("paths", given, "the members must be different runs")
    check_level(level)
    check_setting(
        calibrate is None or calibrate in CALIBRATION_SPLITS,
        "calibrate",
        f"must be one of {', '.join(CALIBRATION_SPLITS)} or None",
        calibrate,
    )
    return [Path(path) for path in given]


def combine(
    paths: Sequence[str | Path], level: float = 0.9, calibrate: str | None = "val"
) -> tuple[list[FractureFields], str]:
    """The ensemble of the predictions files ``paths`` (module docstring), one :class:`FractureFields` per fracture,
    and how its intervals were made (a line for the file and for ``flowlearn evaluate``).

    Raises:
        SettingError: an argument :func:`check_ensemble` refuses (fewer than :data:`MIN_MEMBERS` files, one file
            twice, ``level`` outside (0, 1), an unknown ``calibrate``), naming it.
        DataValidationError: a file that is not a predictions file, or whose fractures differ from the first's.
    """
    return _combine(check_ensemble(paths, level, calibrate), level, calibrate)


def _combine(paths: list[Path], level: float, calibrate: str | None) -> tuple[list[FractureFields], str]:
    """:func:`combine` of checked arguments."""
    members = [read_predictions(path) for path in paths]
    _check_members(paths, members)
    k = len(members)
    log_q = np.log([[f.flow_rate for f in member] for member in members])  # (K, fractures)
    centres = log_q.mean(0)
    half_widths = stats.t.ppf((1 + level) / 2, k - 1) * log_q.std(0, ddof=1) * math.sqrt(1 + 1 / k)
    how = f"Student-t prediction interval of {k} members"
    if calibrate is not None:
        reference = np.log([f.flow_rate_reference for f in members[0]])
        held = (
            np.array([f.split == calibrate for f in members[0]])
            & np.isfinite(reference)
            & np.isfinite(centres)
        )
        residuals = np.sort(np.abs(centres - reference)[held])
        rank = math.ceil((residuals.size + 1) * level)  # 1-based
        if residuals.size:
            half_widths = np.full_like(centres, residuals[rank - 1] if rank <= residuals.size else math.inf)
            how = f"split conformal on {residuals.size} {calibrate} fractures"
    combined = []
    for index, fractures in enumerate(zip(*members)):
        first = fractures[0]
        centre, half = float(centres[index]), float(half_widths[index])
        geometric = first.correction_name == "W"  # W > 0 multiplies; the exponent law's w adds
        corrections = np.stack([f.correction for f in fractures])
        combined.append(
            replace(
                first,
                correction=np.exp(np.log(corrections).mean(0)) if geometric else corrections.mean(0),
                log_k=np.mean([f.log_k for f in fractures], axis=0),
                pressure=np.mean([f.pressure for f in fractures], axis=0),
                flow_rate=math.exp(centre),
                flow_rate_interval=(math.exp(centre - half), math.exp(centre + half)),
            )
        )
    return combined, how


def write_ensemble(
    paths: Sequence[str | Path], output: str | Path, level: float = 0.9, calibrate: str | None = "val"
) -> int:
    """Combine the predictions files ``paths`` (:func:`combine`) and write the ensemble to ``output``, a predictions
    file that ``flowlearn evaluate`` and the figures read like any other; returns the number of fractures.

    Raises:
        SettingError: as :func:`combine`, and an ``output`` that is one of the members (``output``).
    """
    paths = check_ensemble(paths, level, calibrate, output)
    fields, how = _combine(paths, level, calibrate)
    members = [str(p) for p in paths]
    attributes = {LEVEL: level, MEMBERS: members, INTERVAL: how}
    return write_fields(output, fields, training_statistics(paths[0]), **attributes)


def coverage(fields: Sequence[FractureFields]) -> tuple[int, int]:
    """(covered, compared): of the fractures with a reference flow rate and an interval, how many intervals hold
    the reference."""
    compared = [
        f
        for f in fields
        if math.isfinite(f.flow_rate_reference) and all(math.isfinite(end) for end in f.flow_rate_interval)
    ]
    covered = sum(
        f.flow_rate_interval[0] <= f.flow_rate_reference <= f.flow_rate_interval[1] for f in compared
    )
    return covered, len(compared)


def ensemble_coverage(path: str | Path, fields: Sequence[FractureFields], split: str) -> str | None:
    """The line ``flowlearn evaluate`` prints for an ensemble's file ``path``: on how many of its ``split``
    fractures ``fields`` the flow rate's interval holds the reference; None for a single model's file."""
    with open_file(path) as f:
        level, how = f.attrs.get(LEVEL), f.attrs.get(INTERVAL, "")
    if level is None:
        return None
    covered, compared = coverage(fields)
    if not compared:
        return f"the ensemble's {float(level):.0%} intervals: no {split} fracture has a reference flow rate"
    return (
        f"the ensemble's {float(level):.0%} interval of the flow rate ({how}) holds the reference on {covered} of "
        f"{compared} {split} fractures ({covered / compared:.0%})"
    )
