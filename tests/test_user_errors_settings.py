"""Library settings that cannot work as given: the LBM's threads and box, rough walls beyond the memory, the sizes
of a generated or Stokes box, and the figures' resolution and gallery rows. Each is refused with one line that
names the setting, its value and what is expected, before anything heavy starts and before anything is written.
One test per case of the fourth bad-input audit."""

from __future__ import annotations

import re

import numpy as np
import pytest
from matplotlib.figure import Figure
from test_ensemble import _fields
from test_user_errors import _flowlearn, _fracture, _one_line

from flowlearn.data.files import write_fractures
from flowlearn.errors import ProblemError, SettingError
from flowlearn.fractures.closure import ClosureParams
from flowlearn.fractures.roughness import RoughnessParams, rough_fracture
from flowlearn.reference import lbm, recipe_statistics
from flowlearn.reference.generate import DatasetConfig
from flowlearn.reference.lbm import LBMSettings, simulate
from flowlearn.reference.stokes import StokesSettings, check_box, check_walls
from flowlearn.reference.voxels import voxelize
from flowlearn.reporting.figures import plot_curves, plot_gallery, save_figures, write_png
from flowlearn.reporting.report import report_run, report_sweep
from flowlearn.threads import usable_cores

CORES = usable_cores()
CHANNEL = np.ones((8, 8, 4), bool)


@pytest.fixture
def no_lbm_run(monkeypatch):
    """A simulation that reaches lbmpy fails at once: the checks under test come before it."""

    def started(*args, **kwargs):
        raise AssertionError("the simulation started")

    monkeypatch.setattr(lbm, "_step_for", started)


# ----------------------------------------------------------------------------------------------------- the LBM


@pytest.mark.parametrize("threads", [CORES + 1, 100_000])
def test_lbm_threads_beyond_the_cores_are_refused_before_the_run(no_lbm_run, threads):
    # 100,000 OpenMP threads segfaulted. LBMSettings takes them (a SLURM job's settings are made on a login node
    # for the cluster's); the simulation, on the machine that runs it, refuses them.
    settings = LBMSettings(max_steps=200, threads=threads, target="cpu")
    message = f"threads must be an integer in [1, {CORES}] (the cores this process may use), got {threads}"
    with pytest.raises(SettingError, match=re.escape(message)):
        simulate(CHANNEL, settings, progress=False)


@pytest.mark.parametrize("fluid, got", [([[[True]]], "list"), (np.ones((8, 8, 4), int), "int64 (8, 8, 4)")])
def test_lbm_fluid_that_is_no_bool_array(no_lbm_run, fluid, got):
    with pytest.raises(ValueError, match=re.escape(f"fluid must be a bool (H, W, D) array, got {got}")):
        simulate(fluid, LBMSettings(target="cpu"), progress=False)


def test_an_lbm_box_beyond_the_memory_names_its_sizes_and_the_reservoir_that_fits(no_lbm_run):
    settings = LBMSettings(reservoir=10**9, target="cpu")
    with pytest.raises(ProblemError) as error:
        simulate(CHANNEL, settings, progress=False)
    message = str(error.value)
    assert message.startswith(
        "the LBM box of this 8x8x4-voxel map with reservoirs of 1000000000 columns at each end needs "
    )
    assert re.search(r"GiB available: use a reservoir of at most \d+ columns$", message), message


def test_walls_whose_box_exceeds_the_memory_are_refused_before_it_is_allocated():
    # numpy's "Maximum allowed size exceeded" at 1e300; walls given as arrays pass no RoughnessParams check.
    bottom, top = np.zeros((32, 32)), np.full((32, 32), 4.0)
    top[5, 7] = 1e300
    with pytest.raises(
        ProblemError, match=r"^walls from z = 0 to 1e\+300 voxels make a 32x32x1e\+300-voxel box"
    ) as error:
        voxelize(bottom, top)
    assert "GiB available: lower the walls' rms height (rms) or their separation (mean_aperture)" in str(
        error.value
    )


@pytest.mark.parametrize("field", ["rms", "mean_aperture"])
@pytest.mark.parametrize("value", [1e6, 1e300, 32.5, -1.0])
def test_wall_heights_beyond_the_map_are_refused(field, value):
    # rms=1e6 on a 32x32 map had built a 32x32x4.5e6-voxel box (4.3 GiB) wherever the memory allowed it.
    settings = {"rms": 1.0, "mean_aperture": 4.0, field: value}
    with pytest.raises(SettingError) as error:
        RoughnessParams((32, 32), 0.8, mismatch_length=16.0, seed=0, **settings)
    assert str(error.value) == (f"{field} must be in [0, 32] pixels (the map's longest side), got {value!r}")


@pytest.mark.parametrize("extent", [0, 17, 2.5])
def test_larger_walls_beyond_their_range_are_refused(extent):
    # The map as a window of walls extent times its size: 1 (its own walls) to 16 (256 times its memory).
    with pytest.raises(SettingError) as error:
        ClosureParams((16, 16), 4.0, 0.8, 0.4, 0.1, 32.0, 4.0, 0.1, seed=0, extent=extent)
    assert str(error.value) == (
        f"extent must be an integer in [1, 16] (the larger walls take extent² times the map's memory), got {extent!r}"
    )
    # The mismatch length may exceed the map, up to the larger walls' longest side.
    with pytest.raises(
        SettingError, match=r"at most the larger walls' longest side \(32 pixels\), got 40.0$"
    ):
        ClosureParams((16, 16), 4.0, 0.8, 0.4, 0.1, 40.0, 4.0, 0.1, seed=0, extent=2)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--count", "0"], "count must be an integer in [1, 1000000], got 0"),
        (
            ["--shape", "16", "16"],
            "shape is too small for mismatch_ratio up to 40 mean apertures of 6 pixels",
        ),
        (["--recipe", "marble"], "argument --recipe: invalid choice: 'marble'"),
    ],
)
def test_recipe_statistics_refuses_settings_before_any_fracture(capsys, options, message):
    with pytest.raises(SystemExit) as exit_:
        recipe_statistics.main(options)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_wall_heights_up_to_the_longest_side_make_walls():
    walls = rough_fracture(
        RoughnessParams((16, 32), 0.8, rms=32, mean_aperture=32, mismatch_length=8.0, seed=0)
    )
    # The generator's convention: the two walls' mean variance is rms², about mean planes mean_aperture apart.
    assert np.sqrt((walls.bottom.var() + walls.top.var()) / 2) == pytest.approx(32, rel=1e-9)
    assert np.mean(walls.top) - np.mean(walls.bottom) == pytest.approx(32, rel=1e-9)


# ------------------------------------------------------------------------------------- the sizes of a box


@pytest.mark.parametrize(
    "settings, field, advice",
    [
        (
            {"mean_aperture": 1e9},
            "mean_aperture",
            r"the mean aperture must stay below about \d+ voxels on this map",
        ),
        ({"lbm": LBMSettings(reservoir=10**9)}, "reservoir", r"use a reservoir of at most \d+ columns"),
        (
            {"shape": (100_000, 100_000)},
            "shape",
            r"H x W must stay below about \S+ pixels at this mean aperture",
        ),
    ],
)
def test_a_dataset_box_beyond_the_memory_blames_the_setting_that_sizes_it(settings, field, advice):
    # --mean-aperture 1e9 and --reservoir 1e9 were blamed on --shape.
    with pytest.raises(SettingError) as error:
        DatasetConfig(**settings)
    assert error.value.field == field
    config = {"shape": (64, 64), "mean_aperture": 8.0, "reservoir": 4} | settings
    reservoir = settings["lbm"].reservoir if "lbm" in settings else 4
    sizes = (
        f"(a box of the {config['shape'][0]}x{config['shape'][1]} map, its mean aperture of "
        f"{config['mean_aperture']:g} voxels and reservoirs of {reservoir} columns at each end): "
    )
    assert sizes in str(error.value)
    assert re.search(advice, str(error.value)), str(error.value)


@pytest.mark.parametrize(
    "option, value, advice",
    [
        ("--mean-aperture", "1e9", "the mean aperture must stay below about"),
        ("--reservoir", "1000000000", "use a reservoir of at most"),
    ],
)
def test_generate_names_the_option_that_makes_the_box_too_large(tmp_path, capsys, option, value, advice):
    status, err = _flowlearn(capsys, "generate", str(tmp_path / "out.h5"), "--quiet", option, value)
    _one_line(status, err, f"{option} needs at least", "for each fracture's LBM", advice)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("check", [check_box, check_walls])
@pytest.mark.parametrize(
    "settings, advice",
    [
        (StokesSettings(reservoir=10**9), r"use reservoir <= \d+, or solve a smaller map"),
        (StokesSettings(cells_per_voxel=40), r"use cells_per_voxel <= \d+, or solve a smaller map"),
        (
            StokesSettings(cells_per_voxel=8, reservoir=10**6),
            r"lower cells_per_voxel and reservoir together \(each alone is too large\)",
        ),
    ],
)
def test_a_stokes_mesh_beyond_the_memory_names_the_reservoir_and_the_cells_per_voxel(check, settings, advice):
    # --reservoir 1e9 had been told to lower cells_per_voxel (of 1).
    fluid = np.ones((16, 16, 8), bool)
    memory = 2**30
    with pytest.raises(ProblemError) as error:
        if check is check_box:
            check_box(fluid, settings, memory)
        else:
            check_walls(np.zeros((16, 16)), np.full((16, 16), 8.0), settings, memory)
    message = str(error.value)
    assert (
        f"at {settings.cells_per_voxel} cells per voxel "
        f"{'needs about' if check is check_box else 'may need'} " in message
    )
    assert (
        f"GiB with reservoirs of {settings.reservoir} columns at each end, more than the 1 GiB available"
        in message
    )
    assert re.search(advice + "$", message), message


def test_stokes_with_a_reservoir_beyond_the_memory_names_it(tmp_path, capsys):
    data = tmp_path / "data.h5"
    write_fractures(data, [_fracture("f0")])
    output = tmp_path / "out.h5"
    status, err = _flowlearn(capsys, "stokes", str(data), "--reservoir", "1000000000", "-o", str(output))
    _one_line(
        status,
        err,
        f"{data}, f0: the Stokes mesh",
        "with reservoirs of 1000000000 columns",
        "use reservoir <=",
    )
    assert not output.exists()


# ------------------------------------------------------------------------------------------------ the figures


@pytest.mark.parametrize("dpi", [100_000, 0, "high", 120.5])
def test_figures_at_a_dpi_out_of_range_are_refused_before_any_folder(tmp_path, dpi):
    # bad_alloc at 100,000, matplotlib's or a TypeError below; each had left an empty figures/ folder behind.
    message = f"dpi must be an integer in [10, 1200], got {dpi!r}"
    with pytest.raises(SettingError, match=re.escape(message)):
        save_figures({"empty": Figure()}, tmp_path / "figures", dpi=dpi)
    with pytest.raises(SettingError, match=re.escape(message)):
        write_png(Figure(), tmp_path / "figure.png", dpi=dpi)
    with pytest.raises(SettingError, match=re.escape(message)):
        report_run(tmp_path / "run", tmp_path / "report", dpi=dpi)
    with pytest.raises(SettingError, match=re.escape(message)):
        report_sweep(tmp_path / "sweep", tmp_path / "report", dpi=dpi)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("rows", [-2, 0, 2.5, "all"])
def test_a_gallery_of_rows_that_are_no_positive_integer(rows):
    # -2 drew a gallery silently short of its last 2 fractures.
    fields = [_fields(f"f{i}", 1.0, 1.0) for i in range(3)]
    with pytest.raises(SettingError, match=re.escape(f"max_rows must be a positive integer, got {rows!r}")):
        plot_gallery(fields, max_rows=rows)


@pytest.mark.parametrize("columns, got", [({}, "no column"), ({"epoch": np.arange(3.0)}, "columns epoch")])
def test_training_curves_without_a_metric_column(columns, got):
    # An empty figure.
    message = (
        "plot_curves needs at least one metric column of metrics.csv (train/loss, val/mse, val/lcl_mse, ...), "
        f"got {got}"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        plot_curves(columns)
