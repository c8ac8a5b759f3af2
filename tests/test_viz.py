"""Figures of a finished run, rendered for real from a tiny training run: files, panels, colourbars, scales, titles."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from matplotlib.image import AxesImage, imread
from viz_support import SHAPE, VOXEL_SIZE, tiny_run, train

from flowlearn.models.baselines import BASELINE_NAMES
from flowlearn.reporting.figures import (
    INACTIVE_COLOUR,
    MARGIN_INCHES,
    figure_set,
    plot_baselines,
    plot_correction,
    plot_curves,
    plot_error,
    plot_gallery,
    plot_pressure,
    save_figures,
    showcase,
    write_png,
)
from flowlearn.reporting.heldout import VERDICT_METRICS, HeldOut, split_metrics
from flowlearn.runs import metric_series, read_metrics
from flowlearn.training.predictions import read_predictions


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_run(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def fields(run):
    return read_predictions(run / "predictions.h5")


def images(fig) -> list[AxesImage]:
    return [image for ax in fig.axes for image in ax.images]


def colourbar_labels(fig) -> list[str]:
    """Labels of the distinct colourbars attached to the figure's images."""
    bars = {id(i.colorbar): i.colorbar for i in images(fig) if i.colorbar is not None}
    return [bar.ax.get_ylabel() or bar.ax.get_xlabel() for bar in bars.values()]


def title_numbers(title: str) -> tuple[float, float]:
    mean, maximum = re.search(r"mean (\S+) %, max (\S+) %", title).groups()
    return float(mean), float(maximum)


def independent_errors(predicted: np.ndarray, reference: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """Mean and max of 100·|p̂ − p|/p over ``mask``, from the arrays alone."""
    relative = [100 * abs(p - r) / abs(r) for p, r in zip(predicted[mask], reference[mask])]
    return sum(relative) / len(relative), max(relative)


def test_predictions_carry_the_voxel_size_inactive_pixels_and_every_baseline(fields):
    assert len(fields) == 6
    for f in fields:
        assert f.voxel_size == VOXEL_SIZE
        assert f.aperture.shape == SHAPE
        assert (~f.active).any() and np.isnan(f.pressure[~f.active]).all()
        # The voxel size is known and the power law was fitted: every baseline applies, with its flow rate, but
        # the inclination tensor's two, which need walls that these fractures lack.
        assert (
            set(f.baseline_pressures)
            == set(f.baseline_flow_rates)
            == set(BASELINE_NAMES) - {"inclined", "mlcl"}
        )
        assert np.isfinite([f.flow_rate, *f.baseline_flow_rates.values()]).all() and f.flow_rate > 0
        assert math.isnan(f.flow_rate_reference)  # the test fractures store none
        assert f.power_exponent == fields[0].power_exponent and 0 < f.power_exponent < 6


def test_every_figure_renders_to_a_nontrivial_png(fields, run, tmp_path):
    paths = save_figures(figure_set(fields, read_metrics(run)), tmp_path, dpi=60)
    assert set(paths) == {"aperture", "correction", "pressure", "error", "curves", "gallery"}
    for path in paths.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = imread(path)
        assert pixels.shape[0] > 150 and pixels.shape[1] > 250, path.name
        # Not a blank canvas: a drawn map has many distinct colours.
        assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 50, path.name


def test_written_figures_match_savefig_tight_in_one_render(fields, run, tmp_path):
    """write_png crops one render to the content; matplotlib's own ``bbox_inches="tight"``, which draws twice, is
    the reference: the same size to a few pixels, and a margin of the face colour all round (nothing cut)."""
    margin = int(MARGIN_INCHES * 60)
    for name, fig in figure_set(fields, read_metrics(run)).items():
        fig.savefig(tmp_path / f"{name}_tight.png", dpi=60, bbox_inches="tight")
        write_png(fig, tmp_path / f"{name}.png", dpi=60)
        ours, reference = imread(tmp_path / f"{name}.png"), imread(tmp_path / f"{name}_tight.png")
        assert np.abs(np.subtract(ours.shape, reference.shape)).max() <= 3, name
        edges = (ours[: margin - 1], ours[1 - margin :], ours[:, : margin - 1], ours[:, 1 - margin :])
        ring = np.concatenate([edge.reshape(-1, 4) for edge in edges])
        assert (ring == 1.0).all(), name  # white, opaque


def distinct_best(fields, split: str) -> bool:
    """Whether the maps of ``split`` draw a best closed form of their own: one that is not the LCL."""
    return split_metrics(fields, split).best("departure_err") not in (None, "lcl")


def test_panels_colourbars_and_units(fields):
    figures = figure_set(fields)
    # A panel more for the best closed form where it is not the LCL (in the gallery, per row of its split).
    extra = int(distinct_best(fields, "test"))
    rows = [f for f in fields if f.split in ("val", "test")]
    gallery = 4 * len(rows) + sum(distinct_best(fields, f.split) for f in rows)
    expected = {  # figure: (map panels, colourbar labels, each with its unit)
        "aperture": (1, ["aperture Ap (µm)"]),
        "correction": (1, ["log₁₀ W (0: W = 1)"]),
        "pressure": (3 + extra, ["pressure (inlet 2, outlet 1)"]),
        "error": (2 + extra, ["relative error |p̂ − p|/p (%)"]),
        "gallery": (gallery, ["aperture Ap (µm)", "log₁₀ W (0: W = 1)", "relative error |p̂ − p|/p (%)"]),
    }
    assert "curves" not in figures  # no metrics given
    for name, (panels, labels) in expected.items():
        fig = figures[name]
        assert len(images(fig)) == panels, name
        assert sorted(colourbar_labels(fig)) == sorted(labels), name
        for image in images(fig):
            assert image.axes.get_xlabel() in ("x (mm)", ""), name
            # Inactive pixels are NaN and drawn in the neutral colour.
            assert np.ma.getmaskarray(image.get_array()).any(), name
            assert image.cmap.get_bad() == pytest.approx((*[float(INACTIVE_COLOUR)] * 3, 1.0)), name
    # Panels that compare share one scale.
    for name in ("pressure", "error"):
        assert len({i.get_clim() for i in images(figures[name])}) == 1, name
    # Map extent is the physical size of the fracture in mm.
    height, width = SHAPE
    extent = images(figures["aperture"])[0].get_extent()
    assert extent == pytest.approx([0, width * VOXEL_SIZE * 1e3, 0, height * VOXEL_SIZE * 1e3])


def test_pressure_scale_holds_every_field(fields):
    shown = showcase(fields)
    assert shown.split == "test"
    (low, high), *_ = {i.get_clim() for i in images(plot_pressure(shown))}
    solved = shown.solved
    for p in (shown.pressure, shown.pressure_compared, shown.pressure_reference):
        assert low <= p[solved].min() and p[solved].max() <= high


def test_error_titles_equal_metrics_computed_from_the_arrays(fields, run):
    held_out = [f for f in fields if f.split in ("val", "test")]
    for f in held_out:
        ax_lcl, ax_learned = (image.axes for image in images(plot_error(f)))
        # The metrics' pixels: solved, less the fixed inlet and outlet columns.
        mask = f.active & ~np.isnan(f.pressure)
        mask[:, [0, -1]] = False
        for ax, predicted in ((ax_lcl, f.baseline_pressures["lcl"]), (ax_learned, f.pressure)):
            shown = title_numbers(ax.get_title())
            expected = independent_errors(predicted, f.pressure_reference, mask)
            assert shown == tuple(float(f"{value:.3g}") for value in expected), (f.name, ax.get_title())
    # The gallery's titles say the same numbers, row by row (LCL, then learned).
    gallery = plot_gallery(held_out)
    titled = [title_numbers(i.axes.get_title()) for i in images(gallery) if "mean" in i.axes.get_title()]
    expected = [
        tuple(float(f"{v:.3g}") for v in independent_errors(p, f.pressure_reference, f.compared))
        for f in held_out
        for p in (f.baseline_pressures["lcl"], f.pressure)
    ]
    assert titled == expected
    # And the per-fracture means average to what the training module logged for the test split.
    test = [f for f in held_out if f.split == "test"]
    logged = metric_series(read_metrics(run), "test/rel_err_mean")[1][-1]
    mean = np.mean([independent_errors(f.pressure, f.pressure_reference, f.compared)[0] for f in test])
    assert mean == pytest.approx(logged, rel=1e-9)


def independent_departure_error(f, predicted: np.ndarray) -> float:
    """Σ(p̂ − p)²/Σ(p − line)² over the compared pixels, the line joining the mean heads of the first and last
    columns, from the arrays alone."""
    mask = f.compared
    inlet, outlet = np.nanmean(f.pressure[:, 0]), np.nanmean(f.pressure[:, -1])
    line = inlet + (outlet - inlet) * np.arange(mask.shape[-1]) / (mask.shape[-1] - 1)
    line = np.broadcast_to(line, mask.shape)
    reference = f.pressure_reference[mask]
    return float(np.sum((predicted[mask] - reference) ** 2) / np.sum((reference - line[mask]) ** 2))


def test_baseline_bars_are_the_median_departure_errors_per_split(fields):
    splits = {s: split_metrics(fields, s) for s in ("train", "val", "test")}
    fig = plot_baselines(splits)
    # The tiny run's fractures carry no flow rate: one panel, the departure error.
    (ax,) = fig.axes
    rows = list(splits["train"].metrics)
    assert rows[:1] == ["model"] and set(rows[1:]) <= set(BASELINE_NAMES) and "lcl" in rows
    heights = np.array([bar.get_height() for bar in ax.patches]).reshape(len(splits), len(rows))
    for s, split in enumerate(splits):
        chosen = [f for f in fields if f.split == split]
        for r, row in enumerate(rows):
            errors = [
                independent_departure_error(f, f.pressure if row == "model" else f.baseline_pressures[row])
                for f in chosen
            ]
            assert heights[s, r] == pytest.approx(np.median(errors), rel=1e-9), (split, row)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "learned" and "LCL" in labels


def test_no_baseline_bars_where_no_error_is_defined():
    # References on the straight line (uniform apertures) without flow rates: no departure or flow-rate error.
    undefined = {metric: np.array([math.nan]) for metric in VERDICT_METRICS}
    assert plot_baselines({"test": HeldOut(["f0"], {"model": undefined, "lcl": undefined}, math.nan)}) is None


def test_correction_scale_is_diverging_and_centred(fields):
    shown = showcase(fields)
    (image,) = images(plot_correction(shown))
    low, high = image.get_clim()
    assert low == pytest.approx(-high)
    log_w = np.log10(shown.correction[shown.solved])
    assert high == pytest.approx(np.abs(log_w).max())
    assert image.cmap.name.startswith("RdBu_r")
    # The exponent law's w moves as a whole from 0.5: a sequential scale over its range shows its pattern.
    w = np.where(
        shown.active, 0.4 + 0.1 * np.arange(shown.active.size).reshape(SHAPE) / shown.active.size, 0.0
    )
    exponent = dataclasses.replace(shown, law="exponent", correction_name="w", correction=w)
    (image,) = images(plot_correction(exponent))
    assert image.get_clim() == pytest.approx((w[shown.solved].min(), w[shown.solved].max()))
    assert image.cmap.name.startswith("plasma")
    assert "exponent w" in image.colorbar.ax.get_ylabel()


def test_aperture_scale_ignores_reservoir_columns(fields):
    shown = showcase(fields)
    (image,) = images(figure_set([shown])["aperture"])
    assert image.get_clim() == pytest.approx((0, shown.aperture.max() * 1e6))
    assert image.colorbar.extend == "neither"
    # Uniform open columns before and after the fracture (the original work's file has two at each end) are
    # reservoirs: drawn clipped and flagged, not stretched to.
    padded = dataclasses.replace(
        shown,
        **{
            # The map's columns, the last axis: log_k of a tensor law has its channels in front.
            name: np.pad(
                getattr(shown, name), [(0, 0)] * (getattr(shown, name).ndim - 1) + [(2, 2)], mode="edge"
            )
            for name in ("active", "correction", "log_k", "pressure", "pressure_reference")
        },
        baseline_pressures={
            name: np.pad(p, ((0, 0), (2, 2)), mode="edge") for name, p in shown.baseline_pressures.items()
        },
        aperture=np.pad(shown.aperture, ((0, 0), (2, 2)), constant_values=50 * shown.aperture.max()),
    )
    (image,) = images(figure_set([padded])["aperture"])
    assert image.get_clim() == pytest.approx((0, shown.aperture.max() * 1e6))
    assert image.colorbar.extend == "max"


def test_unknown_voxel_size_plots_in_pixels(fields):
    shown = dataclasses.replace(showcase(fields), voxel_size=math.nan)
    figure = plot_pressure(shown)
    for image in images(figure):
        assert image.get_extent() == [0, SHAPE[1], 0, SHAPE[0]]
        assert image.axes.get_ylabel() == "y (pixels)"
    assert colourbar_labels(figure_set([shown])["aperture"]) == ["aperture Ap (file units)"]


def test_curves_plot_the_logged_metrics(run):
    columns = read_metrics(run)
    fig = plot_curves(columns)
    loss_ax, error_ax = fig.axes
    lines = {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}
    for label, column in (
        ("train loss", "train/loss"),
        ("val MSE", "val/mse"),
        ("val, learned", "val/rel_err_mean"),
    ):
        epochs, values = metric_series(columns, column)
        np.testing.assert_array_equal(lines[label].get_xdata(), epochs)
        np.testing.assert_array_equal(lines[label].get_ydata(), values)
    # The LCL does not learn: its metric is logged at the first validation only and drawn as held to the last.
    (lcl_epoch,), (lcl,) = metric_series(columns, "val/lcl_rel_err_mean")
    val_epochs, _ = metric_series(columns, "val/rel_err_mean")
    assert len(val_epochs) > 1 and lcl_epoch == val_epochs[0]
    # (Labelled "val, LCL (best closed form)" where no other closed form does better.)
    (lcl_line,) = [line for label, line in lines.items() if label.startswith("val, LCL")]
    assert lcl_line.get_linestyle() == "--"
    np.testing.assert_array_equal(lcl_line.get_xdata(), [lcl_epoch, val_epochs[-1]])
    np.testing.assert_array_equal(lcl_line.get_ydata(), [lcl, lcl])
    assert loss_ax.get_yscale() == "log"
    assert error_ax.get_ylabel() == "|p̂ − p|/p (%)"


def test_single_fracture_set_has_no_gallery(fields):
    assert "gallery" not in figure_set([dataclasses.replace(fields[0], split="train")])


def test_callback_writes_progress_and_final_figures(run):
    figures = run / "figures"
    # Before training, then after epoch 2 of 3 (every 2 epochs; the tiny run lifts the time budget), then the
    # full set.
    assert sorted(p.name for p in figures.glob("epoch_*")) == ["epoch_000", "epoch_002"]
    for epoch_dir in figures.glob("epoch_*"):
        assert sorted(p.name for p in epoch_dir.iterdir()) == ["correction.png", "error.png", "pressure.png"]
    final = {"aperture", "correction", "pressure", "error", "curves", "gallery"}
    assert {p.stem for p in figures.glob("*.png")} == final


def test_callback_budget_and_tensorboard(tmp_path, run):
    # logger=tensorboard needs the tensorboard package, which no flowlearn extra installs.
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(
        tmp_path,
        f"data.path={run.parent / 'fractures.h5'}",
        "data.fractions=[0.5,0.25,0.25]",
        "trainer.max_epochs=1",
        "model.channels=4",
        "logger=tensorboard",
        "callbacks.figures.every_n_epochs=1",
        # No time for figures during training: only the render before it and the final set remain.
        "callbacks.figures.max_overhead=0",
    )
    assert [p.name for p in (tmp_path / "figures").glob("epoch_*")] == ["epoch_000"]
    assert (tmp_path / "figures" / "gallery.png").is_file()
    # A directory path makes the accumulator read every event file in it (fit and test write one each).
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0}).Reload()
    tags = events.Tags()["images"]
    assert {
        "figures/pressure",
        "figures/error",
        "figures/correction",
        "figures/aperture",
        "figures/gallery",
    } <= set(tags)


def test_volumes_show_their_middle_slice_and_whole_volume_errors(fields):
    flat = showcase(fields)
    # Three slices; the middle one is the 2D fracture, the others are scaled copies with larger errors.
    arrays = {
        name: np.stack([getattr(flat, name)] * 3)
        for name in ("aperture", "active", "correction", "log_k", "pressure_reference")
    }
    arrays["pressure"] = np.stack([flat.pressure * 1.01, flat.pressure, flat.pressure * 0.98])
    baselines = {name: np.stack([p] * 3) for name, p in flat.baseline_pressures.items()}
    volume = dataclasses.replace(flat, **arrays, baseline_pressures=baselines)
    figures = figure_set([volume])
    for name in ("aperture", "correction", "pressure", "error"):
        for image in images(figures[name]):
            assert image.get_array().shape == SHAPE
    assert "(slice 1 of 3)" in figures["pressure"].get_suptitle()
    learned = images(figures["error"])[-1].axes
    expected = independent_errors(volume.pressure, volume.pressure_reference, volume.compared)
    assert title_numbers(learned.get_title()) == tuple(float(f"{v:.3g}") for v in expected)
    # The learned-pressure panel, the last, is the middle slice itself.
    drawn = images(figures["pressure"])[-1].get_array().filled(np.nan)
    np.testing.assert_array_equal(drawn, np.where(flat.solved, flat.pressure, np.nan))


def first_lines(fig) -> list[str]:
    """The first line of the title of each map panel."""
    return [image.axes.get_title().split("\n")[0] for image in images(fig)]


def test_the_maps_draw_the_best_closed_form_beside_the_lcl_and_the_model(fields):
    shown = showcase(fields)
    mask = shown.active & ~np.isnan(shown.pressure)
    mask[:, [0, -1]] = False
    figure = plot_error(shown, "wedge")
    assert first_lines(figure) == ["LCL (T = Ap³/12)", "wedge, best closed form", "learned W"]
    _, wedge, _ = (image.axes for image in images(figure))
    expected = independent_errors(shown.baseline_pressures["wedge"], shown.pressure_reference, mask)
    assert title_numbers(wedge.get_title()) == tuple(float(f"{v:.3g}") for v in expected)
    figure = plot_pressure(shown, "wedge")
    assert first_lines(figure) == [
        "pressure: reference (LBM)",
        "pressure: LCL (T = Ap³/12)",
        "pressure: wedge, best closed form",
        "pressure: learned W",
    ]
    drawn = images(figure)[2].get_array().filled(np.nan)
    np.testing.assert_array_equal(drawn, np.where(shown.solved, shown.baseline_pressures["wedge"], np.nan))
    # Where the LCL is the best closed form, its own panel says so and no other is drawn.
    assert first_lines(plot_error(shown, "lcl")) == ["LCL (T = Ap³/12), best closed form", "learned W"]
    # A run's figures draw the closed form of lowest median departure error over the split's fractures, computed
    # here from the arrays alone (the fractures have no walls: the LCL and the wedge-corrected LCL apply).
    test = [f for f in fields if f.split == "test"]
    medians = {
        name: np.median([independent_departure_error(f, f.baseline_pressures[name]) for f in test])
        for name in ("lcl", "wedge")
    }
    best = min(medians, key=medians.get)
    titles = first_lines(figure_set(fields)["error"])
    assert titles == (
        ["LCL (T = Ap³/12), best closed form", "learned W"]
        if best == "lcl"
        else ["LCL (T = Ap³/12)", f"{best}, best closed form", "learned W"]
    )


def test_the_gallery_has_a_column_of_each_rows_best_closed_form(fields):
    held_out = [f for f in fields if f.split in ("val", "test")]
    gallery = plot_gallery(held_out, best={"test": "wedge", "val": "lcl"})
    axes = np.array(gallery.axes[: 5 * len(held_out)]).reshape(len(held_out), 5)
    for f, row in zip(held_out, axes):
        titles = [ax.get_title().split("\n")[0] for ax in row]
        if f.split == "test":
            assert titles[2:] == ["LCL", "wedge, best closed form", "learned W"], f.name
        else:
            # The LCL is the best closed form of the validation fractures: its panel says so, the next is empty.
            assert titles[2] == "LCL, best closed form" and not row[3].axison and titles[4] == "learned W"
    # Without a best closed form of their own, the rows have the four columns they always had.
    assert len(images(plot_gallery(held_out, best={"test": "lcl", "val": None}))) == 4 * len(held_out)


def test_the_curves_draw_the_best_closed_form_dotted_beside_the_lcl():
    nan = math.nan
    columns = {
        "epoch": np.array([0.0, 1.0, 2.0]),
        "train/loss": np.array([1e-3, 5e-4, 2e-4]),
        "val/mse": np.array([3e-4, 2e-4, 1e-4]),
        # The closed forms do not learn: logged once, held to the last epoch. power is lower, but fitted.
        "val/lcl_mse": np.array([4e-4, nan, nan]),
        "val/wedge_mse": np.array([2.5e-4, nan, nan]),
        "val/mlcl_mse": np.array([1.5e-4, nan, nan]),
        "val/power_mse": np.array([1e-6, nan, nan]),
        # Test metrics, logged once after training: points.
        "test/mse": np.array([nan, nan, 1e-4]),
        "test/lcl_mse": np.array([nan, nan, 2e-4]),
        "test/wedge_mse": np.array([nan, nan, 1.8e-4]),
    }
    fig = plot_curves(columns)
    lines = {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}
    best = lines["val MSE, mlcl (best closed form)"]
    assert best.get_linestyle() == ":" and lines["val MSE, LCL"].get_linestyle() == "--"
    np.testing.assert_array_equal(best.get_xdata(), [0, 2])
    np.testing.assert_array_equal(best.get_ydata(), [1.5e-4, 1.5e-4])
    assert not any("power" in label for label in lines)
    point = lines["test MSE, wedge (best closed form)"]
    assert point.get_marker() == "s" and point.get_markerfacecolor() == "none"
    np.testing.assert_array_equal(point.get_ydata(), [1.8e-4])
