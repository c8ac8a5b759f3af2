"""Entries of a fracture's provenance read back as numbers, checked where they are read.

A fracture's ``provenance`` attribute (:mod:`flowlearn.data.schema`) is a JSON object whose records some commands
read back: ``convergence.flow_rate_change`` (``flowlearn refine``, ``flowlearn departure``), ``reference_error.*``
(``flowlearn smooth-walls``, the training data), ``geometry.wall_slope`` and ``lbm.settings.*`` (``flowlearn
refine``). A file edited by hand or written by another tool may hold text, null or a list there instead; reading
the entry through :func:`provenance_number` raises :class:`DataValidationError` naming the file, the group and the
entry's path (``provenance convergence.flow_rate_change``), instead of a traceback from ``float()`` or a silent NaN.
"""

from __future__ import annotations

import math
import os
from typing import Any

from flowlearn.checks import shown
from flowlearn.data.schema import Fracture, where
from flowlearn.errors import DataValidationError

# The record of a fracture's reference error (written by :mod:`flowlearn.reference.reference_error`, ``flowlearn
# smooth-walls``) and what it holds, in this order wherever they travel together (a dataset item, a predictions
# group): the relative flow-rate error Q_ref/Q_smooth - 1 (signed), and the pressure's departure error (1 - R²) and
# mean squared error against the smooth walls' (the metrics of :mod:`flowlearn.metrics`).
RECORD = "reference_error"
ERRORS = ("flow_rate_error", "departure_error", "pressure_mse")


def fracture_where(fracture: Fracture, path: str | os.PathLike | None = None) -> str:
    """``"<file>: group '<name>'"``, as :func:`flowlearn.data.schema.where` names a group (the group alone without a
    file)."""
    return f"group '{fracture.name}'" if path is None else where(path, fracture.name)


def _shown(value: Any) -> str:
    """A provenance value as a message shows it, cut short where it is long (a whole record)."""
    return shown(value, limit=60)


def provenance_entry(
    fracture: Fracture, entry: str, path: str | os.PathLike | None = None, default: Any = None
) -> Any:
    """The value at the dotted path ``entry`` ("lbm.settings.omega") of ``fracture``'s provenance, ``default``
    where any key along it is absent.

    Raises:
        DataValidationError: naming file, group and entry, where a record along the path is not a JSON object.
    """
    value: Any = fracture.provenance
    keys = entry.split(".")
    for depth, key in enumerate(keys):
        if not isinstance(value, dict):
            record = ".".join(keys[:depth])
            raise DataValidationError(
                f"{fracture_where(fracture, path)}: provenance {record} is {_shown(value)}; expected an object"
            )
        if key not in value:
            return default
        value = value[key]
    return value


def provenance_record(
    fracture: Fracture, entry: str, path: str | os.PathLike | None = None
) -> dict[str, Any]:
    """The record (JSON object) at the dotted path ``entry`` of ``fracture``'s provenance, {} where absent.

    Raises:
        DataValidationError: naming file, group and entry, where it (or a record on its path) is not an object.
    """
    record = provenance_entry(fracture, entry, path, default={})
    if not isinstance(record, dict):
        raise DataValidationError(
            f"{fracture_where(fracture, path)}: provenance {entry} is {_shown(record)}; expected an object"
        )
    return record


_ABSENT = object()


def provenance_number(
    fracture: Fracture,
    entry: str,
    path: str | os.PathLike | None = None,
    default: float | None = math.nan,
    finite: bool = False,
) -> float:
    """The number at the dotted path ``entry`` of ``fracture``'s provenance; ``default`` where it is absent (an
    error where ``default`` is None: the entry is required).

    A number is a JSON number (NaN included, which Python's ``json`` writes for a value that is not known), not
    text, a bool, null, a list or an object. With ``finite``, NaN and infinities are refused too.

    Raises:
        DataValidationError: naming file, group and entry: ``<file>: group '<name>': provenance <entry> is 'big';
            expected a number``.
    """
    value = provenance_entry(fracture, entry, path, default=_ABSENT)
    if value is _ABSENT:
        if default is None:
            raise DataValidationError(
                f"{fracture_where(fracture, path)}: provenance {entry} is missing; expected a number"
            )
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataValidationError(
            f"{fracture_where(fracture, path)}: provenance {entry} is {_shown(value)}; expected a number"
        )
    try:
        number = float(value)
    except OverflowError:  # a JSON integer beyond float64
        number = math.copysign(math.inf, value)
    if finite and not math.isfinite(number):
        raise DataValidationError(
            f"{fracture_where(fracture, path)}: provenance {entry} is {_shown(value)}; expected a finite number"
        )
    return number


def recorded_error(fracture: Fracture, path: str | os.PathLike | None = None) -> tuple[float, ...]:
    """The :data:`ERRORS` of ``fracture``'s reference as its provenance records them, NaN each where none is.

    Raises:
        DataValidationError: naming ``path`` (where given), the group and the entry (``provenance
            reference_error.departure_error``), where one is not a number or the record is no JSON object.
    """
    return tuple(provenance_number(fracture, f"{RECORD}.{key}", path) for key in ERRORS)
