"""What a command writes, and over what: one `error:` line and exit status 2, with every file as it was, where an
output would replace a run's checkpoint or predictions.h5, or an existing file of another kind than the command
writes (a checkpoint, a fracture file, a figure); an earlier output of the same kind is replaced. Also the
arguments of the ensemble's library functions, `departure --figure`'s format, `check --tolerance`'s range and the
options of `refine` that cannot go together. One test per case of the fourth bad-input audit."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from test_ensemble import _fields
from test_user_errors import _flowlearn, _fracture, _one_line, _plates
from test_user_errors_cli import _files, _refused

from flowlearn.data.files import write_fractures
from flowlearn.errors import SettingError
from flowlearn.reporting.ensemble import combine, write_ensemble
from flowlearn.training.predictions import read_predictions, write_fields


@pytest.fixture
def data(tmp_path) -> Path:
    """A small good fracture file in the flowlearn layout, with reference flow rates."""
    path = tmp_path / "data.h5"
    write_fractures(path, _plates(3, flow_rate=1e-14))
    return path


def _checkpoint(path: Path) -> Path:
    """A torch archive at ``path``, as Lightning saves a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "global_step": 1, "state_dict": {"w": torch.zeros(10)}}, path)
    return path


def _predictions(path: Path, rate: float) -> Path:
    """A predictions file of three test fractures predicted at flow rate ``rate`` (references 1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_fields(path, [_fields(f"f{i}", rate, 1.0) for i in range(3)], None)
    return path


def _run(folder: Path, rate: float) -> Path:
    """A run directory as python train.py leaves it: .hydra/, checkpoints/last.ckpt and predictions.h5."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("seed: 0\n")
    _checkpoint(folder / "checkpoints" / "last.ckpt")
    _predictions(folder / "predictions.h5", rate)
    return folder.resolve()


# ------------------------------------------------------------------------------- a run's checkpoints and record


def test_predict_does_not_write_over_its_own_checkpoint(data, tmp_path, capsys):
    # The run's model had been replaced by a predictions file; every later predict of the run then failed.
    run = _run(tmp_path / "run", 1.0)
    output = run / "checkpoints" / "last.ckpt"
    err = _refused(capsys, tmp_path, "predict", run, data, "-o", output)
    _one_line(2, err, f"error: --output {output} is one of the run's own checkpoints: give a new file")
    # Nor does it write into the checkpoints folder, where a new last.ckpt would be taken for the model.
    output.unlink()
    err = _refused(capsys, tmp_path, "predict", run, data, "-o", output)
    _one_line(2, err, f"error: --output {output} is in the run's own checkpoints folder: give a new file")


def test_predict_does_not_write_over_another_runs_predictions(data, tmp_path, capsys):
    # report and evaluate of the other run would have read this prediction as its training's record.
    run, other = _run(tmp_path / "run", 1.0), _run(tmp_path / "other", 2.0)
    output = f"{tmp_path}/other/./predictions.h5"
    err = _refused(capsys, tmp_path, "predict", run, data, "-o", output)
    _one_line(2, err, f"error: --output {output} is the predictions.h5 of the run {other}: give a new file")


def test_ensemble_does_not_write_over_a_members_checkpoint(tmp_path, capsys):
    run_x, run_b = _run(tmp_path / "runX", 1.0), _run(tmp_path / "runB", 2.0)
    output = run_x / "checkpoints" / "last.ckpt"
    err = _refused(
        capsys,
        tmp_path,
        "ensemble",
        run_x / "predictions.h5",
        run_b / "predictions.h5",
        "-o",
        output,
        "--calibrate",
        "none",
    )
    _one_line(2, err, f"error: --output {output} is a checkpoint of the run {run_x}: give a new file")


def test_departure_does_not_write_its_figure_over_a_checkpoint(data, tmp_path, capsys):
    # The checkpoint had become a PNG image.
    run = _run(tmp_path / "run", 1.0)
    figure = run / "checkpoints" / "last.ckpt"
    err = _refused(capsys, tmp_path, "departure", data, "--figure", figure)
    _one_line(2, err, f"error: --figure {figure} is a checkpoint of the run {run}: give a new file")
    # A checkpoint outside a run is told by its contents.
    figure = _checkpoint(tmp_path / "model.png")
    err = _refused(capsys, tmp_path, "departure", data, "--figure", figure)
    _one_line(
        2, err, f"error: --figure {figure} exists and is a torch checkpoint, not a PNG image: give a new file"
    )


@pytest.mark.parametrize("command", ["convert", "stokes"])
def test_fracture_outputs_do_not_replace_a_checkpoint(data, tmp_path, capsys, command):
    # The checkpoint had been replaced by an HDF5 fracture file, with status 0.
    run = _run(tmp_path / "run", 1.0)
    in_run = run / "checkpoints" / "best-epoch=000.ckpt"
    _checkpoint(in_run)
    loose = _checkpoint(tmp_path / "model.ckpt")
    option = "DST" if command == "convert" else "--output"
    for output, what in (
        (in_run, f"is a checkpoint of the run {run}"),
        (loose, "exists and is a torch checkpoint, not a fracture file"),
    ):
        argv = [data, output] if command == "convert" else [data, "--fracture", "f0", "-o", output]
        err = _refused(capsys, tmp_path, command, *argv)
        _one_line(2, err, f"error: {option} {output} {what}: give a new file")


def test_convert_replaces_a_fracture_file_and_nothing_else(data, tmp_path, capsys):
    dst = tmp_path / "copy.h5"
    for layout in ("flowlearn", "original"):  # an earlier output, in either layout, is replaced
        assert _flowlearn(capsys, "convert", str(data), str(dst), "--layout", layout)[0] == 0
    predictions = _predictions(tmp_path / "p.h5", 1.0)
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    for output, what in ((predictions, "a predictions file"), (notes, "a text file")):
        err = _refused(capsys, tmp_path, "convert", data, output)
        _one_line(2, err, f"error: DST {output} exists and is {what}, not a fracture file: give a new file")


def test_ensemble_replaces_an_ensemble_but_not_a_data_file(data, tmp_path, capsys):
    # The fracture file, or another run's predictions.h5, had been replaced by the ensemble.
    members = [_predictions(tmp_path / f"m{k}.h5", rate) for k, rate in enumerate((1.0, 2.0))]
    output = tmp_path / "ensemble.h5"
    for _ in range(2):
        status, err = _flowlearn(
            capsys, "ensemble", *map(str, members), "-o", str(output), "--calibrate", "none"
        )
        assert status == 0, err
    assert read_predictions(output)[0].flow_rate == pytest.approx(math.sqrt(2))
    err = _refused(capsys, tmp_path, "ensemble", *members, "-o", data, "--calibrate", "none")
    _one_line(
        2,
        err,
        f"error: --output {data} exists and is a fracture file (flowlearn layout), not a predictions file: give a "
        "new file",
    )
    other = _run(tmp_path / "runY", 3.0)
    err = _refused(
        capsys, tmp_path, "ensemble", *members, "-o", other / "predictions.h5", "--calibrate", "none"
    )
    _one_line(
        2,
        err,
        f"error: --output {other}/predictions.h5 is the predictions.h5 of the run {other}: give a new file",
    )


# ------------------------------------------------------------------------------------ departure --figure format


@pytest.mark.parametrize("name", ["dep.pdf", "dep.h5", "dep"])
def test_departure_writes_png_files_only(data, tmp_path, capsys, name):
    # PNG bytes had been written into a .pdf, a .h5 and a file without a suffix.
    figure = tmp_path / name
    err = _refused(capsys, tmp_path, "departure", data, "--figure", figure)
    _one_line(2, err, f"error: --figure {figure}: only PNG is written: give a file name ending in .png")


def test_departure_replaces_its_figure_but_not_another_file(data, tmp_path, capsys):
    figure = tmp_path / "dep.png"
    for _ in range(2):
        status, err = _flowlearn(capsys, "departure", str(data), "--figure", str(figure))
        assert status == 0, err
    assert figure.read_bytes().startswith(b"\x89PNG")
    other = tmp_path / "other.png"
    write_fractures(other, [_fracture("f0")])
    err = _refused(capsys, tmp_path, "departure", data, "--figure", other)
    _one_line(
        2,
        err,
        f"error: --figure {other} exists and is a fracture file (flowlearn layout), not a PNG image: give a new file",
    )


# ------------------------------------------------------------------------------------------ check --tolerance


@pytest.mark.parametrize("value", ["1e300", "1.5", "inf"])
def test_check_tolerance_is_a_fraction(data, tmp_path, capsys, value):
    # 1e300 had printed a 300-digit percentage.
    err = _refused(capsys, tmp_path, "check", data, "--tolerance", value)
    _one_line(
        2,
        err,
        f"error: argument --tolerance: must be a number in (0, 1] (a fraction: 0.01 is 1 %), got {float(value)!r}",
    )


# -------------------------------------------------------------------------------------- refine's option pairs


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--fracture", "f0", "--every", "5"],
            "--every applies only without --fracture, which names the fractures to measure",
        ),
        (
            ["--fracture", "f0", "--infer-only"],
            "--fracture chooses fractures to measure, and --infer-only measures none",
        ),
        (
            ["--every", "2", "--infer-only"],
            "--every chooses fractures to measure, and --infer-only measures none",
        ),
    ],
)
def test_refine_refuses_options_that_would_be_ignored(data, tmp_path, capsys, options, message):
    # --every with --fracture had been ignored, and --fracture with --infer-only too.
    err = _refused(capsys, tmp_path, "refine", data, *options)
    _one_line(2, err, f"error: {message}")


# ------------------------------------------------------------------------------------ the ensemble's library API


@pytest.fixture
def members(tmp_path) -> list[Path]:
    return [_predictions(tmp_path / f"m{k}.h5", rate) for k, rate in enumerate((1.0, 2.0))]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        # A zero-width "interval of 2 members" had been returned.
        (
            lambda m: ([m[0], m[0]], {"calibrate": None}),
            "paths gives {m0} twice: the members must be different runs",
        ),
        (
            lambda m: ([m[0], f"{m[0].parent}/./{m[0].name}"], {}),
            "paths gives {m0dot} twice (also as {m0}): the members must be different runs",
        ),
        # An unknown split had fallen back to the Student-t interval.
        (
            lambda m: (m, {"calibrate": "tset"}),
            "calibrate must be one of train, val, test or None, got 'tset'",
        ),
        (lambda m: (m, {"level": "0.9"}), "level must be a number in (0, 1), got '0.9'"),
        (lambda m: (m, {"level": math.nan}), "level must be a number in (0, 1), got nan"),
        (lambda m: (m, {"level": True}), "level must be a number in (0, 1), got True"),
        # A str had been read character by character ("no predictions file /").
        (lambda m: (str(m[0]), {}), "paths must be a list of predictions files, got one: {m0}"),
        (lambda m: (m[0], {}), "paths must be a list of predictions files, got one: {m0}"),
        (lambda m: (3, {}), "paths must be a list of predictions files, got 3 (int)"),
        (lambda m: ([m[0]], {}), "paths must be at least 2 files (the members), got 1"),
    ],
)
def test_combine_refuses_bad_arguments(members, arguments, message):
    paths, keywords = arguments(members)
    expected = message.format(m0=members[0], m0dot=f"{members[0].parent}/./{members[0].name}")
    with pytest.raises(SettingError) as raised:
        combine(paths, **keywords)
    assert str(raised.value) == expected


def test_write_ensemble_does_not_write_over_a_member(members, tmp_path):
    # The member had been replaced by the ensemble of itself and another.
    before = _files(tmp_path)
    link = tmp_path / "link.h5"
    link.symlink_to(members[0])
    for output, what in ((members[0], ""), (link, "a link to ")):
        with pytest.raises(SettingError) as raised:
            write_ensemble(members, output, calibrate=None)
        assert str(raised.value) == f"output {output} is {what}one of the members: give a new file"
    link.unlink()
    assert _files(tmp_path) == before
