"""Each fracture's convergence estimate in its provenance: how far its reference flow rate moves under 2× refinement.

A fracture made by ``flowlearn generate --refine-every N``, or measured later by ``flowlearn refine``, records

    "convergence": {"flow_rate_change": Q(2×)/Q(1×) - 1, "how": "measured: the LBM on the 2x grid"}

where Q(2×) is the LBM's flow rate between the same walls Fourier-interpolated onto a grid twice as fine
(:func:`~flowlearn.reference.convergence.refinement_change`, about 16× the cost of the fracture). The other fractures of
a file can then carry an estimate inferred from their geometry by a stated rule (:func:`infer_rule`): a straight
line in the rms slope of the walls (the voxel staircase steepens with it), fitted to the measured
ones; the record names the rule, its coefficients, how many fractures it was fitted on and its rms residual.

Only files in flowlearn's layout hold provenance; only fractures that store their walls, their voxel size and their
reference flow rate can be refined (their refined geometry and the 1× value must be known).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from flowlearn.data.files import detect_layout, open_file, read_fractures, write_fractures
from flowlearn.data.provenance import fracture_where, provenance_entry, provenance_number, provenance_record
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError, SettingError
from flowlearn.fractures.roughness import geometry_stats
from flowlearn.reference.lbm import LBMSettings, pick_target

MEASURED = "measured: the LBM on the 2x grid"
INFERRED = "inferred: a straight line in the rms wall slope, fitted to this file's measured fractures"
# Fewest measured fractures a rule is fitted on: two fix a line, a third gives its residual.
MIN_MEASURED_FOR_RULE = 3


def measured_convergence(change: float) -> dict[str, Any]:
    """The provenance record of a measured convergence estimate (Q(2×)/Q(1×) - 1)."""
    return {"flow_rate_change": float(change), "how": MEASURED}


def _how(fracture: Fracture) -> Any:
    """How ``fracture``'s convergence estimate was made (its record's "how"), None where it records none (or a
    record that is no JSON object, which :func:`measured_change` names)."""
    record = fracture.provenance.get("convergence")
    return record.get("how") if isinstance(record, dict) else None


def is_measured(fracture: Fracture) -> bool:
    """Whether ``fracture``'s provenance holds a measured convergence estimate."""
    return _how(fracture) == MEASURED


def is_inferred(fracture: Fracture) -> bool:
    """Whether ``fracture``'s provenance holds a convergence estimate inferred by a :class:`Rule`."""
    return _how(fracture) == INFERRED


def measured_change(fracture: Fracture, path: str | os.PathLike | None = None) -> float:
    """The measured change Q(2×)/Q(1×) - 1 that ``fracture``'s provenance records.

    Raises:
        DataValidationError: naming file, group and ``provenance convergence.flow_rate_change``, where it is
            missing, not a number, or not finite (a rule fitted through NaN would record NaN in every fracture).
    """
    return provenance_number(fracture, "convergence.flow_rate_change", path, default=None, finite=True)


def wall_slope(fracture: Fracture) -> float:
    """The rms slope of the fracture's two walls (dimensionless), measured on the stored walls
    (:func:`~flowlearn.fractures.roughness.geometry_stats`)."""
    size = fracture.voxel_size
    return geometry_stats(fracture.bottom / size, fracture.top / size).wall_slope


@dataclass(frozen=True)
class Rule:
    """Q(2×)/Q(1×) - 1 ≈ intercept + slope_coefficient × rms wall slope, fitted by least squares.

    Attributes:
        intercept: the change at zero wall slope.
        slope_coefficient: its rise per unit of rms wall slope.
        fitted_on: how many measured fractures it was fitted on.
        residual: rms difference of the measured changes from the line.
    """

    intercept: float
    slope_coefficient: float
    fitted_on: int
    residual: float

    def __call__(self, slope: float) -> float:
        return self.intercept + self.slope_coefficient * slope

    def record(self, slope: float) -> dict[str, Any]:
        """The provenance record of the estimate it gives a fracture of rms wall slope ``slope``."""
        return {
            "flow_rate_change": float(self(slope)),
            "how": INFERRED,
            "rule": asdict(self),
            "wall_slope": float(slope),
        }


def infer_rule(slopes: Sequence[float], changes: Sequence[float]) -> Rule:
    """The least-squares :class:`Rule` through measured (rms wall slope, change) pairs, which must be finite
    numbers (:func:`measured_change` reads the changes from a file and names the fracture of one that is not).

    Raises:
        DataValidationError: fewer than :data:`MIN_MEASURED_FOR_RULE` pairs, slopes that do not vary, or a pair
            that is not finite.
    """
    x, y = np.asarray(slopes, np.float64), np.asarray(changes, np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise DataValidationError(
            f"a rule needs finite measured slopes and changes, got slopes {x.tolist()} and changes {y.tolist()}"
        )
    if x.size < MIN_MEASURED_FOR_RULE:
        raise DataValidationError(
            f"a rule needs at least {MIN_MEASURED_FOR_RULE} measured fractures, this file has {x.size}: measure "
            "more first (flowlearn refine DATA --fracture NAME ...)"
        )
    if np.ptp(x) == 0:
        raise DataValidationError(
            "the measured fractures all have the same wall slope: a line cannot be fitted"
        )
    coefficient, intercept = np.polyfit(x, y, 1)
    residual = float(np.sqrt(np.mean((intercept + coefficient * x - y) ** 2)))
    return Rule(float(intercept), float(coefficient), int(x.size), residual)


def refinable(fracture: Fracture, path: str | os.PathLike) -> None:
    """Raise :class:`DataValidationError` naming file and fracture unless it stores what a 2× run needs."""
    where = f"{path}, {fracture.name}"
    if fracture.bottom is None or fracture.top is None:
        raise DataValidationError(f"{where}: stores no walls, so its geometry on a finer grid is unknown")
    if fracture.flow_rate is None:
        raise DataValidationError(f"{where}: stores no reference flow_rate to compare the refined run with")
    if not (math.isfinite(fracture.voxel_size) and fracture.voxel_size > 0):
        raise DataValidationError(f"{where}: its voxel size is unknown, so its walls cannot be voxelised")
    if fracture.aperture.ndim != 2 or fracture.flow_axis != "x":
        raise DataValidationError(f"{where}: refinement runs on 2D maps with flow along x")


def lbm_settings_of(
    fracture: Fracture, threads: int | None, path: str | os.PathLike | None = None
) -> LBMSettings:
    """The LBM settings its reference ran with (from its provenance; the defaults where it records none), on
    ``threads`` threads: the refined run must differ from it in resolution only.

    Raises:
        DataValidationError: naming file, group and the provenance entry (``provenance lbm.settings.omega``),
            where a recorded setting is out of its range or not a record of settings.
    """
    recorded = provenance_record(fracture, "lbm.settings", path)
    known = {
        name: value
        for name, value in recorded.items()
        # The threads are this run's, not the reference's: a recorded count is replaced, not checked.
        if name in LBMSettings.__dataclass_fields__ and name != "threads"
    }
    try:
        settings = LBMSettings(**known)
    except SettingError as error:
        entry = f"lbm.settings.{error.field}"
        problem = error.problem.rsplit(", got ", 1)[0]  # the value is shown as the provenance holds it
        raise DataValidationError(
            f"{fracture_where(fracture, path)}: provenance {entry} is {provenance_entry(fracture, entry)!r}; it {problem}"
        ) from None
    return replace(settings, threads=threads)


def flowlearn_fractures(path: str | os.PathLike) -> tuple[list[Fracture], dict[str, Any]]:
    """Every fracture of ``path`` and its root attributes, which must be in flowlearn's layout.

    Raises:
        DataValidationError: a file in the original layout (it keeps no provenance).
    """
    with open_file(path) as f:
        if detect_layout(f, path) != "flowlearn":
            raise DataValidationError(
                f"{path}: is in the original layout, which keeps no provenance to record an estimate in; convert it "
                "first (flowlearn convert SRC DST)"
            )
        attrs = {key: value for key, value in f.attrs.items() if key not in ("schema", "schema_version")}
    return read_fractures(path), attrs


def refine_file(
    path: str | os.PathLike,
    names: Sequence[str],
    threads: int | None = None,
    report: Callable[[str, float, float], None] | None = None,
) -> int:
    """Measure the convergence estimate of the fractures ``names`` of ``path`` (skipping those measured already)
    and record each in the file as soon as it is measured, so that a killed run loses only the fracture it was
    on; the file is rewritten atomically each time. ``report(name, change, seconds)`` follows each. Returns how
    many were measured.

    Raises:
        DataValidationError: a fracture that cannot be refined (:func:`refinable`), checked for all before the
            first run.
    """
    from flowlearn.reference.convergence import refinement_change

    fractures, attrs = flowlearn_fractures(path)
    chosen = [fracture for fracture in fractures if fracture.name in names and not is_measured(fracture)]
    for fracture in chosen:
        refinable(fracture, path)
    settings = {fracture.name: lbm_settings_of(fracture, threads, path) for fracture in chosen}
    for target in {each.target for each in settings.values()}:
        pick_target(target)  # a missing compiler or GPU: one line before the first run
    measured = 0
    for fracture in chosen:
        start = time.perf_counter()
        size = fracture.voxel_size
        change = refinement_change(
            fracture.bottom / size, fracture.top / size, fracture.flow_rate / size**3, settings[fracture.name]
        )
        fracture.provenance["convergence"] = measured_convergence(change)
        write_fractures(path, fractures, attrs=attrs)
        measured += 1
        if report is not None:
            report(fracture.name, change, time.perf_counter() - start)
    return measured


def infer_file(path: str | os.PathLike) -> Rule:
    """Fit :func:`infer_rule` to the measured fractures of ``path`` and record its estimate in every other fracture
    that stores its walls (replacing earlier inferred ones); the file is rewritten atomically. Returns the rule.

    Raises:
        DataValidationError: naming file and group, a measured change that is not a finite number
            (:func:`measured_change`), a convergence record that is no JSON object; before anything is written.
    """
    fractures, attrs = flowlearn_fractures(path)
    measured, changes = _measured_changes(fractures, path)
    rule = infer_rule([wall_slope(fracture) for fracture in measured], changes)
    for fracture in fractures:
        if not is_measured(fracture) and fracture.bottom is not None and fracture.voxel_size > 0:
            fracture.provenance["convergence"] = rule.record(wall_slope(fracture))
    write_fractures(path, fractures, attrs=attrs)
    return rule


def check_convergence_records(path: str | os.PathLike) -> None:
    """Raise what :func:`infer_file` would for the convergence records of ``path`` as they stand: for a command
    that measures fractures and infers the rest afterwards, before its first LBM run."""
    _measured_changes(flowlearn_fractures(path)[0], path)


def _measured_changes(
    fractures: Sequence[Fracture], path: str | os.PathLike
) -> tuple[list[Fracture], list[float]]:
    """The measured fractures among ``fractures`` and their changes, every convergence record checked (a JSON
    object, a finite measured change) with file and group named."""
    for fracture in fractures:
        provenance_record(fracture, "convergence", path)
    measured = [fracture for fracture in fractures if is_measured(fracture)]
    return measured, [measured_change(fracture, path) for fracture in measured]
