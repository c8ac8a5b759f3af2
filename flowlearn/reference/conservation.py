"""How far a reference pressure is from any local conductivity law: the variation of the column flux it implies.

In the steady Darcy solution of a local law T = f(Ap) on a fracture (fixed heads on the first and last column,
no-flow top and bottom rows, no sources), every column passes the same flow rate: the rates that
:func:`~flowlearn.darcy.flux.column_flow_rates` computes from that law's T and the pressure are equal to round-off.
Computed from a *reference* pressure (LBM) with some law's T, their variation over the columns measures how far
the reference is from that law's Darcy solution: ~1e-13 when it is that solution, more otherwise. ``flowlearn
check`` reports it for the local cubic law (LCL) T = Ap³/12 and for the power law T ∝ Ap^a whose variation is the
smallest (the factor of a law does not change the variation). When even that law leaves a large variation, no
power law of the local aperture reproduces the reference: a model must let W vary from pixel to pixel beyond what
the local aperture says, and a per-pixel W (``model=pixel``) is the only model that can fit each such fracture.

The variation is the coefficient of variation (standard deviation over mean) of the rates between interior
columns: :data:`MARGIN` columns at each end are left out, where an LBM reference holds the boundary layers of its
inlet and outlet reservoirs (on the shared real fracture, the rates out of its first two columns are 0.03 and 6.4
times the median).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from flowlearn.darcy.flux import column_flow_rates
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.data.files import read_fractures
from flowlearn.data.schema import Fracture
from flowlearn.errors import SettingError

MARGIN = 2  # columns left out at each end
TOLERANCE = 0.01  # the variation below which a law counts as reproducing a reference
LCL_EXPONENT = 3.0
EXPONENT_RANGE = (0.0, 8.0)  # where the best power law's exponent is searched
_EXPONENT_GRID = np.linspace(*EXPONENT_RANGE, 33)  # coarse search, then a bounded refinement around the best


@dataclass(frozen=True)
class ColumnFluxCheck:
    """The column-flux variation of one fracture's reference pressure (see the module docstring).

    Attributes:
        name: ``"<file stem>/<group>"``.
        shape: the map's (H, W).
        lcl_variation: variation under the LCL, T = Ap³/12 (a fraction: 0.15 is 15 %).
        power_law_exponent: a of the power law T ∝ Ap^a of the smallest variation.
        power_law_variation: its variation.
        skipped: why the fracture was not checked (empty when it was); the numbers are then NaN.
    """

    name: str
    shape: tuple[int, ...]
    lcl_variation: float = math.nan
    power_law_exponent: float = math.nan
    power_law_variation: float = math.nan
    skipped: str = ""


def flux_variation(
    log_t: torch.Tensor, pressure: torch.Tensor, problem: DarcyProblem, margin: int = MARGIN
) -> float:
    """Coefficient of variation of the column flow rates of ``pressure`` under ``log_t`` (both float64 (H, W)) on
    the edges of ``problem``, between the columns ``margin`` and ``W - 1 - margin``; inf when their mean is not
    positive (a pressure that does not fall from inlet to outlet)."""
    width = log_t.shape[-1]
    rates = column_flow_rates(log_t, pressure, problem)[margin : width - 1 - margin]
    mean = float(rates.mean())
    return float(rates.std(correction=0)) / mean if mean > 0 else math.inf


def best_power_law(
    log_aperture: torch.Tensor, pressure: torch.Tensor, problem: DarcyProblem, margin: int = MARGIN
) -> tuple[float, float]:
    """(a, variation) of the power law T ∝ Ap^a in :data:`EXPONENT_RANGE` whose column-flux variation is smallest,
    for the log-aperture ``log_aperture`` (float64 (H, W), any finite value where inactive).

    A grid search over the range finds the basin, a bounded scalar minimisation of the squared variation (smooth
    where the variation has a kink at zero) refines it to about 1e-8 in a (scipy's bounded method cannot resolve
    finer), which leaves a variation of that order where the reference is that law's solution.
    """

    def variation(exponent: float) -> float:
        return flux_variation(exponent * log_aperture, pressure, problem, margin)

    start = min(_EXPONENT_GRID, key=variation)
    step = _EXPONENT_GRID[1] - _EXPONENT_GRID[0]
    low, high = max(start - step, EXPONENT_RANGE[0]), min(start + step, EXPONENT_RANGE[1])
    fit = minimize_scalar(
        lambda a: variation(a) ** 2, bounds=(low, high), method="bounded", options={"xatol": 1e-8}
    )
    exponent = float(fit.x) if variation(fit.x) <= variation(start) else float(start)
    return exponent, variation(exponent)


def largest_margin(width: int) -> int:
    """The largest margin that leaves 2 column pairs to compare between the margins of a map ``width`` columns
    wide (-1 where no margin does)."""
    return (width - 3) // 2


def _uncheckable(fracture: Fracture) -> str:
    """Why :func:`check_fracture` cannot check ``fracture``, margins aside; empty where it can (a 2D map with flow
    along x and a reference pressure)."""
    if fracture.pressure is None:
        return "no reference pressure"
    if fracture.aperture.ndim != 2 or fracture.flow_axis != "x":
        return "only 2D maps with flow along x are checked"
    return ""


def check_fracture(fracture: Fracture, name: str, margin: int = MARGIN) -> ColumnFluxCheck:
    """The :class:`ColumnFluxCheck` of ``fracture``, reported under ``name``.

    The pixels are those that carry flow in the Darcy problem (active and connected to the inlet or outlet).
    Fractures without a reference pressure, not 2D with flow along x, or with fewer than two column pairs between
    the margins are skipped, saying why.
    """
    shape = fracture.shape
    reason = _uncheckable(fracture)
    if reason:
        return ColumnFluxCheck(name, shape, skipped=reason)
    if margin > largest_margin(shape[-1]):
        return ColumnFluxCheck(
            name, shape, skipped=f"fewer than 2 column pairs inside the margins of {margin}"
        )
    problem = DarcyProblem.fracture(shape, active=fracture.active, drop_unconnected=True)
    pressure = torch.from_numpy(fracture.pressure.astype(np.float64))
    log_aperture = torch.from_numpy(
        np.log(np.where(problem.active, fracture.aperture.astype(np.float64), 1.0))
    )
    exponent, variation = best_power_law(log_aperture, pressure, problem, margin)
    return ColumnFluxCheck(
        name,
        shape,
        lcl_variation=flux_variation(LCL_EXPONENT * log_aperture - math.log(12.0), pressure, problem, margin),
        power_law_exponent=exponent,
        power_law_variation=variation,
    )


def check_files(paths: Sequence[str | os.PathLike], margin: int = MARGIN) -> list[ColumnFluxCheck]:
    """:func:`check_fracture` of every fracture of ``paths`` (either layout), in file and then group order.

    Raises:
        SettingError: for ``margin``, when it is too wide for every map that could be checked (so that nothing
            would be), naming the largest margin that checks the widest of them.
    """
    checks, widths = [], []
    for path in paths:
        for fracture in read_fractures(path):  # one at a time: a large file's fractures are not all held
            if not _uncheckable(fracture):
                widths.append(fracture.shape[-1])
            checks.append(check_fracture(fracture, f"{Path(path).stem}/{fracture.name}", margin))
    # Where the margin leaves no map any column pair, every check above was skipped at once: nothing was computed.
    if widths and margin > largest_margin(max(widths)):
        raise SettingError(
            "margin",
            f"must be at most {largest_margin(max(widths))} on these maps (the widest has {max(widths)} columns, "
            f"and 2 column pairs must remain between the margins), got {margin}",
        )
    return checks


def _percent(fraction: float) -> str:
    """A fraction in %: one decimal, or two significant digits below 0.1 %."""
    if not math.isfinite(fraction):
        return str(fraction)
    return f"{100 * fraction:.1f} %" if fraction >= 1e-3 else f"{100 * fraction:.1e} %"


def table(checks: Sequence[ColumnFluxCheck]) -> str:
    """A plain-text table, one row per fracture: size, variation under the LCL, the best power law and its
    variation (or why the fracture was skipped)."""
    header = ("fracture", "size", "LCL T=Ap^3/12", "best power law", "its variation")
    rows = [
        (check.name, "x".join(map(str, check.shape)), check.skipped)
        if check.skipped
        else (
            check.name,
            "x".join(map(str, check.shape)),
            _percent(check.lcl_variation),
            f"T ~ Ap^{check.power_law_exponent:.2f}",
            _percent(check.power_law_variation),
        )
        for check in checks
    ]
    widths = [max(len(row[i]) for row in (header, *rows) if i < len(row)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in (header, *rows)
    )


def summary(checks: Sequence[ColumnFluxCheck], tolerance: float = TOLERANCE) -> str:
    """One line: how many fractures no power law of the local aperture reproduces (variation above ``tolerance``
    under the best one), and what that means for the choice of model."""
    checked = [check for check in checks if not check.skipped]
    if not checked:
        return "no fracture could be checked (see the table)"
    best = [check.power_law_variation for check in checked]
    lcl = [check.lcl_variation for check in checked]
    above = sum(variation > tolerance for variation in best)
    figures = (
        f"median {_percent(float(np.median(best)))} under the best power law, {_percent(float(np.median(lcl)))} "
        "under the LCL; a Darcy solution of a local law: round-off"
    )
    if above:
        return (
            f"{above} of {len(checked)} fractures: column-flux variation above {_percent(tolerance)} under every power "
            f"law T ~ Ap^a ({figures}). No power law of the local aperture reproduces their reference pressure: a "
            "per-pixel W (model=pixel, one fracture at a time) is the only model that can fit them, and models of the "
            "aperture field (model=cnn, unet) fit them only as far as a pixel's neighbourhood explains its flow."
        )
    return (
        f"all {len(checked)} fractures: column-flux variation at most {_percent(tolerance)} under their best power "
        f"law ({figures}). A power law of the local aperture reproduces their reference pressure."
    )
