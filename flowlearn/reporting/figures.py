"""Figures of a trained correction: aperture, learned W, pressures, pixel-wise errors, training curves, gallery.

The learned model is shown beside the best closed form, the law it must beat, and the local cubic law (LCL,
T = Ap³/12). The maps of a split's fractures draw the closed form with the lowest median departure error over the
split (:func:`map_closed_forms`: the one ``flowlearn evaluate`` and the run's closing line name for the pressure);
the curves draw the closed form with the lowest logged value of each metric they show. Where the best closed form
is the LCL itself, the LCL's panel or line says so and no other is drawn.

Every ``plot_*`` function takes the fields of a run (:class:`~flowlearn.training.predictions.FractureFields`, as read from
``predictions.h5``, or the columns of ``metrics.csv``) and returns a :class:`matplotlib.figure.Figure`. Figures are
built without pyplot, so nothing depends on a GUI backend or on global figure state and they render in any thread,
in a training callback as well as in a notebook.

Conventions shared by all maps:

- the image is drawn with row 0 at the bottom (y grows upwards) and the inlet (column 0) on the left;
- axes are in millimetres when the voxel size is known, in pixels otherwise;
- pixels without a solved pressure (contact spots, regions cut off from the faces) are NaN and drawn grey;
- panels that are compared share one colour scale and one colourbar;
- a 3D field (D, H, W) is shown by its middle slice along the first axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure
from matplotlib.image import AxesImage, imsave
from matplotlib.ticker import MaxNLocator

from flowlearn.checks import check_dpi, check_setting, is_integer
from flowlearn.data.files import atomic_path
from flowlearn.metrics import (
    DEPARTURE_ERR,
    FLOW_RATE_ERR,
    LOSS,
    MSE,
    REL_ERR_MEAN,
    STAGES,
    column,
    relative_error,
)
from flowlearn.models.baselines import BASELINES, CLOSED_FORMS, COMPARED, best_closed_form
from flowlearn.reference.departure import Departure
from flowlearn.reporting.heldout import MODEL, HeldOut, split_metrics
from flowlearn.runs import metric_series
from flowlearn.training.predictions import FractureFields

# Grey for pixels that carry no flow: readable next to every colour map used here.
INACTIVE_COLOUR = "0.6"
# How each law uses its correction (for titles).
LAW_FORMULAS = {
    "lcl": "T = Ap³/12 · W",
    "ap2": "T = Ā·Ap²/12 · W",
    "exponent": "K = Ap^(2·relu(w))",
}
LCL = "LCL (T = Ap³/12)"
PANEL_INCHES = 3.6  # width of one map panel
MARGIN_INCHES = 0.1  # margin around a written figure's content, in its face colour (savefig's pad_inches)
# zlib level of the PNG files. Pillow's default, 6, took 213 ms to encode the five figures of experiment=paper; 3
# takes 100 ms, and the files come out 3% smaller to 12% larger (maps compress no better with more effort).
PNG_COMPRESSION = 3
HELD_OUT = ("val", "test")
# Splits in the order the single-fracture maps pick their fracture from.
SHOWCASE_SPLITS = ("test", "val", "train", "predict")


def error_map(
    predicted: np.ndarray, reference: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, float, float]:
    """The pixel-wise relative error in % (:func:`~flowlearn.metrics.relative_error`), NaN outside
    ``mask``, with its mean and max over ``mask``.

    Args:
        predicted, reference: float pressure arrays of one shape.
        mask: bool array of that shape, the pixels to compare (at least one).

    Returns:
        (error map float64, mean %, max %).
    """
    if not mask.any():
        raise ValueError("no pixel to compare: the mask is empty")
    error = np.full(mask.shape, np.nan)
    error[mask] = relative_error(predicted[mask], reference[mask])
    return error, float(error[mask].mean()), float(error[mask].max())


def error_title(label: str, mean: float, maximum: float) -> str:
    """Title of an error panel; the numbers carry three significant digits, trailing zeros kept (1.50, 0.708)."""
    return f"{label}\nmean {mean:#.3g} %, max {maximum:#.3g} %"


def map_closed_forms(results: Mapping[str, HeldOut]) -> dict[str, str | None]:
    """By split, the closed form that the maps of its fractures draw beside the model and the LCL: the best in the
    median departure error over the split's fractures (:meth:`~flowlearn.reporting.heldout.HeldOut.best`, the one
    the verdict names for the pressure); None where no closed form has one (references on the straight line)."""
    return {split: result.best(DEPARTURE_ERR) for split, result in results.items()}


def compared_laws(fields: FractureFields, best: str | None, lcl: str = LCL) -> list[tuple[str, np.ndarray]]:
    """(label, pressure) of the closed forms a map of ``fields`` draws beside the model: the LCL (labelled ``lcl``),
    then the best closed form ``best`` (:func:`map_closed_forms`) where it is another one that applies here."""
    tag = ", best closed form"
    if best == COMPARED:
        return [(lcl + tag, fields.pressure_compared)]
    laws = [(lcl, fields.pressure_compared)]
    if best in fields.baseline_pressures:
        laws.append((best + tag, fields.baseline_pressures[best]))
    return laws


# -- building blocks ------------------------------------------------------------------------------------------


def _plane(array: np.ndarray) -> np.ndarray:
    """The 2D image to draw: the array itself, or the middle slice of a 3D array along its first axis."""
    return array[array.shape[0] // 2] if array.ndim == 3 else array


def _slice_note(fields: FractureFields) -> str:
    depth = fields.aperture.shape[0] if fields.aperture.ndim == 3 else 0
    return f" (slice {depth // 2} of {depth})" if depth else ""


def _masked(fields: FractureFields, array: np.ndarray) -> np.ndarray:
    """``array`` with NaN wherever no pressure was solved, as the 2D plane to draw."""
    return _plane(np.where(fields.solved, array, np.nan))


def _cmap(name: str) -> Colormap:
    return colormaps[name].with_extremes(bad=INACTIVE_COLOUR)


def _has_voxel_size(fields: FractureFields) -> bool:
    return math.isfinite(fields.voxel_size) and fields.voxel_size > 0


def _show(ax: Axes, fields: FractureFields, image: np.ndarray, cmap: Colormap, norm: Normalize) -> AxesImage:
    """Draw one map with physical axes (mm when the voxel size is known, else pixels)."""
    height, width = image.shape
    if _has_voxel_size(fields):
        scale, unit = fields.voxel_size * 1e3, "mm"
    else:
        scale, unit = 1.0, "pixels"
    ax.set_xlabel(f"x ({unit})")
    ax.set_ylabel(f"y ({unit})")
    return ax.imshow(
        image,
        cmap=cmap,
        norm=norm,
        origin="lower",
        extent=(0, width * scale, 0, height * scale),
        interpolation="nearest",
    )


def _colorbar(ax: Axes, image: AxesImage, label: str, extend: str = "neither") -> None:
    """A colourbar right of ``ax``, exactly as tall as it (an inset, so the layout leaves no gap before it)."""
    ax.figure.colorbar(
        image, cax=ax.inset_axes((1.04, 0.0, 0.05, 1.0)), label=label, format="%.3g", extend=extend
    )


def _row(panels: int, fields: FractureFields) -> tuple[Figure, list[Axes]]:
    """A figure with ``panels`` map axes in a row, sized to the map's aspect ratio."""
    height, width = _plane(fields.aperture).shape
    # Room around each panel for tick labels and titles, and once for the colourbar.
    figsize = (panels * (PANEL_INCHES + 0.5) + 1.0, PANEL_INCHES * height / width + 1.3)
    fig = Figure(figsize=figsize, layout="compressed")
    return fig, list(np.atleast_1d(fig.subplots(1, panels)))


def _aperture_scale(fields: FractureFields) -> tuple[float, str]:
    """Factor and colourbar label for aperture values: micrometres when the voxel size is known."""
    if _has_voxel_size(fields):
        return 1e6, "aperture Ap (µm)"
    return 1.0, "aperture Ap (file units)"


def _correction_maps(fields: Sequence[FractureFields]) -> tuple[list[np.ndarray], Colormap, Normalize, str]:
    """The corrections of ``fields`` as drawn, with one colour map, scale and colourbar label for all of them.

    W is shown as log10 W on a diverging scale centred on 0 (W = 1, the law unchanged) and symmetric about it, so
    equal colours mean equal departures either way. The exponent law's w starts at 0.5 and moves as a whole, so a
    scale centred on a reference value (w = 1, T ∝ Ap²) would paint it one flat colour: it gets a sequential scale
    over its range instead.
    """
    if fields[0].correction_name == "w":
        images = [_masked(f, f.correction) for f in fields]
        low = min(float(np.nanmin(i)) for i in images)
        high = max(float(np.nanmax(i)) for i in images)
        # A correction that has not moved still gets a valid, narrow scale.
        norm = Normalize(low, max(high, low + 1e-3))
        return images, _cmap("plasma"), norm, "exponent w (K = Ap^(2w); 1: T ∝ Ap²)"
    with np.errstate(divide="ignore", invalid="ignore"):
        images = [_masked(f, np.log10(f.correction)) for f in fields]
    spread = max(float(np.nanmax(np.abs(i))) for i in images)
    spread = max(spread, 1e-3)
    return images, _cmap("RdBu_r"), Normalize(-spread, spread), "log₁₀ W (0: W = 1)"


def _fracture_columns(image: np.ndarray) -> np.ndarray:
    """``image`` without the uniform columns at its inlet and outlet ends (open reservoirs, not fracture).

    Some data sets pad the fracture with fully open columns before and after it (the original work's file has two
    of aperture 1 at each end, three times the fracture's widest gap). A rough fracture has no uniform column.
    """
    finite = np.isfinite(image)
    # Columns with no active pixel (lowest +inf, highest -inf) do not count as uniform.
    uniform = np.where(finite, image, np.inf).min(axis=0) == np.where(finite, image, -np.inf).max(axis=0)
    rough = np.flatnonzero(~uniform)
    return image[:, rough[0] : rough[-1] + 1] if rough.size else image


def _aperture_maps(fields: Sequence[FractureFields]) -> tuple[list[np.ndarray], Normalize, str, str]:
    """Aperture maps of ``fields`` (µm when the voxel size is known), their shared scale, colourbar label and
    colourbar ``extend``.

    The scale runs from 0 to the largest aperture of the fracture itself: reservoir columns (see
    :func:`_fracture_columns`) would squeeze it into the bottom of the colour range. They are drawn clipped, and
    the colourbar shows it.
    """
    factor, label = _aperture_scale(fields[0])
    images = [_plane(np.where(f.active, f.aperture * factor, np.nan)) for f in fields]
    top = max(float(np.nanmax(_fracture_columns(i))) for i in images)
    clipped = any(float(np.nanmax(i)) > top for i in images)
    return images, Normalize(0, top), label, "max" if clipped else "neither"


def _correction_title(fields: FractureFields) -> str:
    formula = LAW_FORMULAS.get(fields.law, fields.law)
    return f"learned {fields.correction_name} ({formula})"


# -- figures --------------------------------------------------------------------------------------------------


def plot_aperture(fields: FractureFields) -> Figure:
    """The aperture map of one fracture (one panel, one colourbar)."""
    fig, (ax,) = _row(1, fields)
    (image,), norm, label, extend = _aperture_maps([fields])
    im = _show(ax, fields, image, _cmap("YlGnBu"), norm)
    ax.set_title(f"aperture, {fields.name}{_slice_note(fields)}")
    _colorbar(ax, im, label, extend)
    return fig


def plot_correction(fields: FractureFields) -> Figure:
    """The learned correction W (as log10 W, diverging about W = 1) or exponent w (one panel, one colourbar)."""
    fig, (ax,) = _row(1, fields)
    (image,), cmap, norm, label = _correction_maps([fields])
    im = _show(ax, fields, image, cmap, norm)
    ax.set_title(f"{_correction_title(fields)}{_slice_note(fields)}")
    _colorbar(ax, im, label)
    return fig


def plot_pressure(fields: FractureFields, best: str | None = None) -> Figure:
    """Reference (LBM), LCL, best closed form (``best``, where another: see :func:`compared_laws`) and learned
    pressure on one shared scale (one panel each, one colourbar); without a reference (a prediction on an aperture
    map), the others."""
    panels = [
        ("reference (LBM)", fields.pressure_reference),
        *compared_laws(fields, best),
        (f"learned {fields.correction_name}", fields.pressure),
    ]
    titles, pressures = zip(*[(title, p) for title, p in panels if p is not None])
    fig, axes = _row(len(pressures), fields)
    images = [_masked(fields, p) for p in pressures]
    norm = Normalize(min(float(np.nanmin(i)) for i in images), max(float(np.nanmax(i)) for i in images))
    for ax, image, title in zip(axes, images, titles):
        im = _show(ax, fields, image, _cmap("viridis"), norm)
        ax.set_title(f"pressure: {title}")
    _colorbar(axes[-1], im, "pressure (inlet 2, outlet 1)")
    fig.suptitle(f"{fields.name}{_slice_note(fields)}")
    return fig


def plot_error(fields: FractureFields, best: str | None = None) -> Figure:
    """Pixel-wise relative error |p̂ − p|/p in % of the LCL, the best closed form (``best``, where another: see
    :func:`compared_laws`) and the learned model, on one shared scale.

    Titles carry the mean and max over the pixels the metrics compare (solved, less the fixed inlet and outlet
    columns; the whole volume for 3D fields, not only the slice).
    """
    mask = fields.compared
    laws = [*compared_laws(fields, best), (f"learned {fields.correction_name}", fields.pressure)]
    errors = [(label, *error_map(pressure, fields.pressure_reference, mask)) for label, pressure in laws]
    fig, axes = _row(len(errors), fields)
    norm = Normalize(0, max(max(maximum for *_, maximum in errors), 1e-12))
    for ax, (label, error, mean, maximum) in zip(axes, errors):
        im = _show(ax, fields, _plane(error), _cmap("magma_r"), norm)
        ax.set_title(error_title(label, mean, maximum))
    _colorbar(axes[-1], im, "relative error |p̂ − p|/p (%)")
    fig.suptitle(f"{fields.name}{_slice_note(fields)}")
    return fig


def _curve_columns() -> list[str]:
    """The columns of ``metrics.csv`` that :func:`plot_curves` draws."""
    return [LOSS] + [
        column(stage, metric, baseline)
        for stages, metric in ((HELD_OUT, MSE), (STAGES, REL_ERR_MEAN))
        for stage in stages
        for baseline in (None, COMPARED)
    ]


def _best_logged(columns: Mapping[str, np.ndarray], stage: str, metric: str) -> str | None:
    """The closed form whose last logged ``metric`` of ``stage`` is lowest (:func:`~flowlearn.models.baselines.
    best_closed_form`, by which the verdict names the best closed form per metric, on the values the curves
    draw); None where no closed form logged it."""
    logged = {
        name: metric_series(columns, key)[1][-1]
        for name in CLOSED_FORMS
        if (key := column(stage, metric, name)) in columns and np.isfinite(columns[key]).any()
    }
    found = best_closed_form(logged)
    return None if found is None else found[0]


def plot_curves(columns: Mapping[str, np.ndarray]) -> Figure:
    """Training curves from the columns of ``metrics.csv`` (see :func:`flowlearn.runs.read_metrics`).

    Left: the loss of training and the MSE of validation and test, with the LCL's dashed and the best closed
    form's dotted (:func:`_best_logged`, per stage). Right: the mean relative pressure error (%) of each logged
    stage, with the LCL's dashed and the best closed form's dotted in the same colour. Test metrics, logged once,
    are single markers (open for the laws: a circle the LCL, a square the best closed form). A baseline's training
    and validation metrics are logged when they change, and hold until the next value: a step line to the
    stage's last epoch.

    Raises:
        ValueError: ``columns`` holds none of the metrics drawn (the figure would be empty).
    """
    drawn = _curve_columns()
    if not any(name in columns for name in drawn):
        names = sorted(columns)
        got = f"columns {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}" if names else "no column"
        raise ValueError(
            f"plot_curves needs at least one metric column of metrics.csv ({', '.join(drawn[:3])}, ...), "
            f"got {got}"
        )
    fig = Figure(figsize=(10.5, 3.8), layout="compressed")
    loss_ax, error_ax = fig.subplots(1, 2)
    colours = dict(zip(STAGES, ("C0", "C1", "C2")))

    def draw(ax: Axes, name: str, label: str, until: str | None = None, point: str = "o", **style) -> None:
        if name in columns and np.isfinite(columns[name]).any():
            epochs, values = metric_series(columns, name)
            stage_epochs = metric_series(columns, until)[0] if until in columns else epochs
            last = stage_epochs.max() if stage_epochs.size else epochs[-1]
            if last > epochs[-1]:
                epochs, values = np.append(epochs, last), np.append(values, values[-1])
                style = {**style, "drawstyle": "steps-post"}
            if len(values) == 1:
                # A metric logged once (test, after training) is a point: filled for the model, open for a law.
                law = "linestyle" in style
                style = {**style, "marker": point, "markerfacecolor": "none" if law else style["color"]}
            ax.plot(epochs, values, label=label, **style)

    def draw_with_laws(ax: Axes, stage: str, metric: str, label: str, laws: str) -> None:
        """The learned model's ``metric`` of ``stage`` (``label``), then the LCL's dashed and the best closed form's
        dotted in the same colour up to the model's last epoch (labelled ``laws``, then the law)."""
        model = column(stage, metric)
        colour = colours[stage]
        draw(ax, model, label, color=colour)
        best = _best_logged(columns, stage, metric)
        tag = " (best closed form)"
        lcl = f"{laws}, LCL{tag if best == COMPARED else ''}"
        draw(ax, column(stage, metric, COMPARED), lcl, until=model, color=colour, linestyle="--")
        if best is not None and best != COMPARED:
            best_label = f"{laws}, {best}{tag}"
            draw(ax, column(stage, metric, best), best_label, model, "s", color=colour, linestyle=":")

    draw(loss_ax, LOSS, "train loss", color=colours["train"])
    for stage in HELD_OUT:
        draw_with_laws(loss_ax, stage, MSE, f"{stage} MSE", f"{stage} MSE")
    for stage in STAGES:
        draw_with_laws(error_ax, stage, REL_ERR_MEAN, f"{stage}, learned", stage)
    loss_ax.set(title="loss", xlabel="epoch", ylabel="MSE (pressure²)", yscale="log")
    error_ax.set(title="mean relative pressure error", xlabel="epoch", ylabel="|p̂ − p|/p (%)")
    for ax in (loss_ax, error_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.lines:
            ax.legend(fontsize="x-small")
        ax.grid(alpha=0.3)
    return fig


def plot_gallery(
    fields: Sequence[FractureFields], max_rows: int = 6, best: Mapping[str, str | None] | None = None
) -> Figure:
    """Held-out fractures side by side: aperture, learned correction, LCL error, best closed form error, learned-
    model error.

    One row per fracture (the first ``max_rows``, a positive integer); each column shares one colour scale and
    one colourbar, and the error columns share theirs, so that rows and the models compare directly. ``best``
    names by split the closed form of the best-closed-form column (:func:`map_closed_forms`); a row whose best
    closed form is the LCL, or none, leaves that panel empty, and a gallery with no such column has four.
    """
    # A negative count would slice rows off the end: a gallery silently short of its last fractures.
    check_setting(is_integer(max_rows) and max_rows >= 1, "max_rows", "must be a positive integer", max_rows)
    rows = list(fields)[:max_rows]
    if not rows:
        raise ValueError("the gallery needs at least one fracture")
    best = best or {}
    # Per row, the error panels (label, map, mean, max): the LCL's, the best closed form's (None where it is the LCL
    # or none), the model's; the middle column only where a row has one.
    errors = []
    for f in rows:
        laws = [*compared_laws(f, best.get(f.split), "LCL"), (f"learned {f.correction_name}", f.pressure)]
        maps = [(label, *error_map(pressure, f.pressure_reference, f.compared)) for label, pressure in laws]
        errors.append(maps if len(maps) == 3 else [maps[0], None, maps[1]])
    if all(row[1] is None for row in errors):
        errors = [[row[0], row[2]] for row in errors]
    columns = 2 + len(errors[0])
    height, width = _plane(rows[0].aperture).shape
    fig = Figure(
        figsize=(columns * PANEL_INCHES * 0.8, len(rows) * PANEL_INCHES * 0.8 * height / width + 2.2),
        layout="compressed",
    )
    axes = np.atleast_2d(fig.subplots(len(rows), columns))
    apertures, aperture_norm, aperture_label, aperture_extend = _aperture_maps(rows)
    corrections, correction_cmap, correction_norm, correction_label = _correction_maps(rows)
    error_norm = Normalize(0, max(panel[3] for row in errors for panel in row if panel is not None))
    drawn: dict[int, AxesImage] = {}
    for r, f in enumerate(rows):
        drawn[0] = _show(axes[r, 0], f, apertures[r], _cmap("YlGnBu"), aperture_norm)
        drawn[1] = _show(axes[r, 1], f, corrections[r], correction_cmap, correction_norm)
        axes[r, 0].set_title(f"{f.name} ({f.split})", fontsize="small")
        axes[r, 1].set_title(f"learned {f.correction_name}", fontsize="small")
        for c, panel in enumerate(errors[r], start=2):
            if panel is None:
                axes[r, c].set_axis_off()
                continue
            label, error, mean, maximum = panel
            drawn[2] = _show(axes[r, c], f, _plane(error), _cmap("magma_r"), error_norm)
            axes[r, c].set_title(error_title(label, mean, maximum), fontsize="small")
    # One colourbar under each shared-scale column group.
    for group, image, label, extend in (
        (axes[:, 0], drawn[0], aperture_label, aperture_extend),
        (axes[:, 1], drawn[1], correction_label, "neither"),
        (axes[:, 2:], drawn[2], "relative error |p̂ − p|/p (%)", "neither"),
    ):
        # Plain numbers: an offset label ("1e-5") would collide with the axis label.
        fig.colorbar(
            image, ax=group.ravel().tolist(), location="bottom", label=label, format="%.3g", extend=extend
        )
    # Axis labels once per row and column: the panels all share the same units.
    for ax in axes[:, 1:].flat:
        ax.set_ylabel("")
    for ax in axes[:-1].flat:
        ax.set_xlabel("")
    fig.suptitle("held-out fractures")
    return fig


# -- the figure set -------------------------------------------------------------------------------------------


def showcase(fields: Sequence[FractureFields]) -> FractureFields:
    """The fracture the single-fracture maps show: the first test fracture, else validation, else training."""
    for split in SHOWCASE_SPLITS:
        for f in fields:
            if f.split == split:
                return f
    raise ValueError("no fracture to show")


def figure_set(
    fields: Sequence[FractureFields],
    columns: Mapping[str, np.ndarray] | None = None,
    best: Mapping[str, str | None] | None = None,
) -> dict[str, Figure]:
    """Every figure of a run, keyed by file stem: ``aperture``, ``correction``, ``pressure``, ``error`` (of the
    :func:`showcase` fracture, when it has a reference pressure), ``curves`` (when ``columns`` hold a metric it
    draws) and ``gallery`` (when the run holds more than one held-out fracture). ``best``: by split, the closed form
    the maps draw beside the model (:func:`map_closed_forms`); by default chosen over the splits' fractures among
    ``fields``, which is the verdict's choice where they are all of them (a run's ``predictions.h5``)."""
    if best is None:
        results = {split: split_metrics(fields, split) for split in dict.fromkeys(f.split for f in fields)}
        best = map_closed_forms({split: result for split, result in results.items() if result is not None})
    shown = showcase(fields)
    figures = {
        "aperture": plot_aperture(shown),
        "correction": plot_correction(shown),
        "pressure": plot_pressure(shown, best.get(shown.split)),
    }
    if shown.pressure_reference is not None:
        figures["error"] = plot_error(shown, best.get(shown.split))
    # A metrics.csv that logged no metric drawn (only epoch and step) has no curves to show.
    if columns is not None and any(name in columns for name in _curve_columns()):
        figures["curves"] = plot_curves(columns)
    held_out = [f for f in fields if f.split in HELD_OUT]
    if len(held_out) > 1:
        figures["gallery"] = plot_gallery(held_out, best=best)
    return figures


def plot_departure(rows: Sequence[Departure]) -> Figure:
    """Q_ref/Q_LCL of each fracture against its σ/⟨a⟩ and its rms wall slope, coloured by contact fraction."""
    fig = Figure(figsize=(9.0, 3.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    ratio = [row.ratio for row in rows]
    contact = [row.contact_fraction for row in rows]
    for ax, attr, label in (
        (axes[0], "relative_std", "σ/⟨a⟩ (aperture std over mean)"),
        (axes[1], "wall_slope", "rms wall slope"),
    ):
        points = ax.scatter([getattr(row, attr) for row in rows], ratio, c=contact, cmap="viridis", s=18)
        ax.axhline(1.0, color="0.4", lw=1, ls="--", label="local cubic law")
        ax.set_xlabel(label)
    axes[0].set_ylabel("Q_LBM / Q_LCL")
    axes[0].legend(loc="lower left")
    fig.colorbar(points, ax=axes[1], label="contact fraction")
    fig.suptitle(f"Flow rate against the local cubic law, {len(rows)} fractures")
    return fig


def plot_departure_maps(maps: Mapping[str, np.ndarray]) -> Figure:
    """Pressure departures from the straight line (float (H, W), NaN where no flow), one panel each, on one
    diverging colour scale."""
    fig = Figure(figsize=(3.2 * len(maps), 3.4), layout="constrained")
    axes = fig.subplots(1, len(maps))
    limit = max(float(np.nanmax(np.abs(m))) for m in maps.values())
    norm = Normalize(-limit, limit)
    for ax, (title, image) in zip(axes, maps.items(), strict=True):
        shown = ax.imshow(np.ma.masked_invalid(image), cmap=_cmap("RdBu_r"), norm=norm, origin="lower")
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(shown, ax=axes, shrink=0.8, label="p − straight line (inlet − outlet = 1)")
    return fig


def plot_baselines(splits: Mapping[str, HeldOut]) -> Figure | None:
    """Bars of the median departure error and the median flow-rate error over the fractures of each split, the
    learned model beside every baseline; the best closed form's median (the bar to beat) is a dotted line, the
    LCL's a dashed one. Flow-rate errors are drawn where the fractures have reference flow rates, departure errors
    where the references depart from the straight line; None where neither is defined."""
    labels = {MODEL: "learned", **{b.name: b.label for b in BASELINES}}
    panels = [
        (DEPARTURE_ERR, "departure error (1 − R²)"),
        (FLOW_RATE_ERR, "flow-rate error (%)"),
    ]
    first = next(iter(splits.values()))
    panels = [(m, label) for m, label in panels if math.isfinite(first.median(MODEL, m))]
    if not panels:
        return None
    fig = Figure(figsize=(4.6 * len(panels), 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    rows = list(first.metrics)
    width = 0.8 / len(rows)
    colours = colormaps["tab10"]
    for ax, (metric, title) in zip(axes, panels, strict=True):
        for s, result in enumerate(splits.values()):
            for r, row in enumerate(rows):
                value = result.median(row, metric) if row in result.metrics else math.nan
                ax.bar(
                    s - 0.4 + (r + 0.5) * width,
                    value,
                    width,
                    color=colours(r),
                    edgecolor="black" if row == MODEL else "none",
                    label=labels[row] if s == 0 else None,
                )
            if COMPARED in result.metrics:
                lcl = result.median(COMPARED, metric)
                ax.hlines(lcl, s - 0.45, s + 0.45, colors="0.2", linestyles="--", lw=1)
            best = result.best(metric)
            if best is not None and best != COMPARED:
                ax.hlines(
                    result.median(best, metric), s - 0.45, s + 0.45, colors="0.2", linestyles=":", lw=1.5
                )
        ax.set_xticks(range(len(splits)), [f"{split} ({len(r.names)})" for split, r in splits.items()])
        ax.set_xlabel("split (fractures)")
        ax.set_ylabel(f"median {title}")
        ax.set_yscale("log")
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(
        "Learned model against the baselines (dotted: the best closed form's median; dashed: the LCL's)"
    )
    return fig


def save_figures(figures: Mapping[str, Figure], directory: str | Path, dpi: int = 110) -> dict[str, Path]:
    """Write each figure to ``<directory>/<name>.png`` (:func:`write_png`), atomically; returns the paths by name.

    Raises:
        SettingError: ``dpi`` is not an integer in :data:`~flowlearn.checks.FIGURE_DPI` (before any folder is
            made).
        OutputError: a figure that cannot be written (a read-only place, a full disk); the earlier file is intact.
    """
    check_dpi(dpi)
    paths = {}
    for name, fig in figures.items():
        paths[name] = Path(directory) / f"{name}.png"
        with atomic_path(paths[name]) as tmp:
            write_png(fig, tmp, dpi)
    return paths


def write_png(fig: Figure, path: str | Path, dpi: int) -> None:
    """Render ``fig`` at ``dpi`` and write it as an RGBA PNG of its drawn content with a margin of
    :data:`MARGIN_INCHES` in the figure's face colour: the fixed-aspect maps rarely fill the figure's height exactly.

    savefig's ``bbox_inches="tight"`` gives the same picture by drawing the figure twice, once to find the content
    and again at the trimmed size; one render, cropped and padded, takes 0.7 s against 1.15 s for the five
    figures of ``experiment=paper``. ``dpi`` is an integer in :data:`~flowlearn.checks.FIGURE_DPI`
    (:class:`~flowlearn.errors.SettingError` otherwise)."""
    check_dpi(dpi)
    original_dpi = fig.dpi
    fig.dpi = dpi
    try:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        content = fig.get_tightbbox(canvas.get_renderer()).padded(MARGIN_INCHES)  # inches from bottom left
        pixels = np.asarray(canvas.buffer_rgba())
    finally:
        fig.dpi = original_dpi
    height, width = pixels.shape[:2]
    # The padded content's edges in pixel rows and columns of the render; the margin may reach beyond it.
    left, right = math.floor(content.x0 * dpi), math.ceil(content.x1 * dpi)
    top, bottom = math.floor(height - content.y1 * dpi), math.ceil(height - content.y0 * dpi)
    inside = pixels[max(top, 0) : min(bottom, height), max(left, 0) : min(right, width)]
    beyond = ((max(-top, 0), max(bottom - height, 0)), (max(-left, 0), max(right - width, 0)))
    face = np.round(np.multiply(fig.get_facecolor(), 255)).astype(np.uint8)
    image = np.stack([np.pad(inside[..., c], beyond, constant_values=face[c]) for c in range(4)], axis=-1)
    imsave(path, image, format="png", dpi=dpi, pil_kwargs={"compress_level": PNG_COMPRESSION})
