"""`flowlearn` commands given an input they cannot use as asked: one `error:` line naming the file, group, option
or value and what is expected, exit status 2, every input as it was and nothing written (no output, no temporary
file). One test per case of the second bad-input audit."""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_ensemble import _fields, _members
from test_user_errors import _flowlearn, _fracture, _one_line

from flowlearn.data.files import read_fractures, write_fractures
from flowlearn.training.predictions import write_fields


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones, such as a temporary file, too) with its contents; a link as the
    text of its target."""
    return {
        str(path.relative_to(folder)): os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() or path.is_symlink()
    }


def _refused(capsys, folder: Path, *argv: str | Path) -> str:
    """Run ``flowlearn argv`` and check that it changed no file under ``folder`` and left none there; its stderr."""
    before = _files(folder)
    status, err = _flowlearn(capsys, *map(str, argv))
    assert _files(folder) == before, "an input was changed, or an output or temporary file left"
    assert status == 2, err
    return err


@pytest.fixture
def data(tmp_path) -> Path:
    """A small good fracture file in the flowlearn layout, made by a recipe (the root attribute ``recipe``)."""
    path = tmp_path / "data.h5"
    write_fractures(
        path, [_fracture(f"f{i}", flow_rate=1e-14) for i in range(3)], attrs={"recipe": '{"seed": 7}'}
    )
    return path


# ---------------------------------------------------------------------------------- outputs that are an input


def test_departure_does_not_write_its_figure_over_the_data(data, tmp_path, capsys):
    # The PNG had replaced the fracture file, with status 0.
    figure = f"{tmp_path}/./data.h5"
    err = _refused(capsys, tmp_path, "departure", data, "--figure", figure)
    _one_line(2, err, f"error: --figure {figure} is the input DATA: give a new file")


@pytest.mark.parametrize("how", ["same name", "other name", "symlink", "hard link"])
def test_convert_does_not_write_over_its_source(data, tmp_path, capsys, how):
    # The file had been rewritten in place (losing its recipe), and a link to it replaced by a file.
    dst = {"same name": data, "other name": tmp_path / "sub" / ".." / "data.h5"}.get(how, tmp_path / "dst.h5")
    (tmp_path / "sub").mkdir()
    if how == "symlink":
        dst.symlink_to(data)
    elif how == "hard link":
        os.link(data, dst)
    link = "a link to " if how == "symlink" else ""
    err = _refused(capsys, tmp_path, "convert", data, dst)
    _one_line(2, err, f"error: DST {dst} is {link}the input SRC: give a new file")
    assert dst.is_symlink() == (how == "symlink")


def test_convert_keeps_the_recipe(data, tmp_path, capsys):
    dst = tmp_path / "copy.h5"
    status, err = _flowlearn(capsys, "convert", str(data), str(dst))
    assert (status, err) == (0, "")
    with h5py.File(dst) as f:
        assert f.attrs["recipe"] == '{"seed": 7}'


# ------------------------------------------------------------------------------------- convert --layout original


def test_converting_a_mask_to_the_original_layout_is_refused(tmp_path, capsys):
    # The original layout keeps no mask: its 5 inactive cells had silently become active.
    mask = np.ones((6, 8), bool)
    mask[2, 2:7] = False
    src = tmp_path / "masked.h5"
    write_fractures(src, [_fracture("f0"), _fracture("f1", mask=mask)])
    err = _refused(capsys, tmp_path, "convert", src, tmp_path / "orig.h5", "--layout", "original")
    _one_line(
        2,
        err,
        f"error: {src}: group 'f1': field 'mask': the original layout keeps no mask, so its 5 inactive cell(s) of "
        "aperture > 0 (the first at (2, 2)) would become active; keep the flowlearn layout, or set their aperture to 0",
    )


def test_converting_to_the_original_layout_names_what_it_leaves_out(data, tmp_path, capsys):
    # A mask that leaves only contact spots inactive loses nothing; the attributes the layout has no place for are
    # named on one line (they had been dropped without a word).
    mask = np.ones((6, 8), bool)
    mask[0, 0] = False
    contact = _fracture("f0").aperture.copy()
    contact[0, 0] = 0.0
    fracture = _fracture("f0", flow_rate=1e-14, mask=mask, provenance={"seed": 1})
    src = tmp_path / "src.h5"
    write_fractures(src, [dataclasses.replace(fracture, aperture=contact)], attrs={"recipe": "{}"})
    dst = tmp_path / "orig.h5"
    status, err = _flowlearn(capsys, "convert", str(src), str(dst), "--layout", "original")
    assert status == 0, err
    assert err.splitlines() == [
        f"flowlearn convert: note: {dst}: the original layout keeps no voxel_size, flow_rate, provenance, root "
        "attribute recipe, float64 precision (it stores float32): written without them"
    ]
    (back,) = read_fractures(dst)
    np.testing.assert_array_equal(back.active, fracture.active & (contact > 0))


# ------------------------------------------------------------------------------------------------------- check


def test_check_refuses_a_file_given_twice(data, tmp_path, capsys):
    # Its fractures had been counted twice ("6 of 6 fractures").
    err = _refused(capsys, tmp_path, "check", data, f"{tmp_path}/./data.h5")
    _one_line(
        2,
        err,
        f"error: DATA gives {tmp_path}/./data.h5 twice (also as {data}): give each file once (its fractures would "
        "be counted twice)",
    )


def test_check_an_empty_aperture_map(data, tmp_path, capsys):
    # Two RuntimeWarnings had come first, and the error said "1 pixel" along an axis of 0.
    with h5py.File(data, "r+") as f:
        for name in ("aperture", "pressure"):
            del f["f1"][name]
            f["f1"][name] = np.zeros((0, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        err = _refused(capsys, tmp_path, "check", data)
    assert [str(w.message) for w in caught] == []
    _one_line(
        2,
        err,
        f"error: {data}: group 'f1': field 'aperture': shape (0, 8) has 0 pixels along axis 0; a map needs at "
        "least 2 along every axis",
    )


@pytest.mark.parametrize("inlet, outlet", [(1e308, -1e308), (2e12, 1.0), (1.0, -1e13)])
def test_check_heads_beyond_any_pressure(data, tmp_path, capsys, inlet, outlet):
    # |inlet - outlet| had overflowed to inf, which made the boundary tolerance infinite: accepted with status 0.
    with h5py.File(data, "r+") as f:
        group = f["f2"]
        group.attrs["inlet_pressure"], group.attrs["outlet_pressure"] = inlet, outlet
        group["pressure"][...] = np.where(np.arange(8) == 0, inlet, outlet) * np.ones((6, 1))
    err = _refused(capsys, tmp_path, "check", data)
    _one_line(
        2,
        err,
        f"error: {data}: group 'f2': attributes 'inlet_pressure' and 'outlet_pressure' are {inlet:g} and "
        f"{outlet:g}; each must be a number in [-1e+12, 1e+12]",
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["check", "{data}", "--tolerance", "inf"],
            "argument --tolerance: must be a number in (0, 1] (a fraction: 0.01 is 1 %), got inf",
        ),
        (
            ["generate", "{tmp}/new.h5", "--tolerance", "inf"],
            "--tolerance must be a finite number > 0, got inf",
        ),
        (
            ["generate", "{tmp}/new.h5", "--mean-aperture", "inf"],
            "--mean-aperture must be a finite number > 0",
        ),
    ],
)
def test_an_infinite_value_where_a_finite_number_is_needed(data, tmp_path, capsys, argv, message):
    # "must be > 0, got inf": inf is > 0.
    err = _refused(capsys, tmp_path, *(a.format(data=data, tmp=tmp_path) for a in argv))
    _one_line(2, err, f"error: {message}")


# ----------------------------------------------------------------------------------------------------- predict


def test_predict_refuses_two_fractures_of_one_output_group(tmp_path, capsys):
    # x.h5's group y__z and x__y.h5's group z are both x__y__z: a 32-line traceback from h5py.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first, second = tmp_path / "x.h5", tmp_path / "x__y.h5"
    write_fractures(first, [_fracture("a"), _fracture("y__z")])
    write_fractures(second, [_fracture("z")])
    err = _refused(capsys, tmp_path, "predict", run_dir, first, second, "-o", tmp_path / "p.h5")
    _one_line(
        2,
        err,
        f"error: INPUTS: {first} group 'y__z' and {second} group 'z' both become 'x__y__z' in the output: rename one",
    )


def test_predict_given_a_file_for_the_run_directory(data, tmp_path, capsys):
    # "no such run directory", of a file that exists.
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
    write_fields(run_dir / "predictions.h5", [_fields("f0", 1.0, 1.0)], None)
    err = _refused(capsys, tmp_path, "predict", run_dir / "predictions.h5", data, "-o", tmp_path / "p.h5")
    _one_line(
        2,
        err,
        f"error: RUN_DIR {run_dir}/predictions.h5 is a file, not a run directory: give the folder that python "
        f"train.py wrote ({run_dir}?)",
    )


# ---------------------------------------------------------------------------------------------------- evaluate


def test_evaluate_given_a_run_directory(tmp_path, capsys):
    # "no predictions file RUN_DIR", of a folder that holds one.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_fields(run_dir / "predictions.h5", [_fields("f0", 1.0, 1.0)], None)
    err = _refused(capsys, tmp_path, "evaluate", run_dir)
    _one_line(2, err, f"error: PREDICTIONS {run_dir} is a run directory: give {run_dir}/predictions.h5")


# ---------------------------------------------------------------------------------------------------- ensemble


def _two_members(tmp_path: Path, splits: list[str]) -> list[Path]:
    """Two members' predictions of one fracture per split of ``splits``, each with a reference flow rate."""
    rng = np.random.default_rng(0)
    references = np.exp(rng.normal(size=len(splits)))
    rates = references * np.exp(0.1 * rng.normal(size=(2, len(splits))))
    return _members(tmp_path / "members", rates, references, splits)


def test_ensemble_level_beyond_its_calibration_fractures(tmp_path, capsys):
    # With 16 val fractures the rank ceil(17 x 0.99) is beyond them: the interval had been inf, and dropped.
    members = _two_members(tmp_path, ["val"] * 16 + ["test"] * 4)
    err = _refused(capsys, tmp_path, "ensemble", *members, "-o", tmp_path / "e.h5", "--level", "0.99")
    _one_line(
        2,
        err,
        "error: --level 0.99 needs at least 99 val fractures with a reference flow rate for a finite split-conformal "
        "interval, and the members have 16: use --level at most 0.941, or --calibrate none",
    )
    # The largest level it names is one that works.
    status, err = _flowlearn(
        capsys, "ensemble", *map(str, members), "-o", str(tmp_path / "e.h5"), "--level=0.941"
    )
    assert status == 0, err
    assert all(
        math.isfinite(end) for end in h5py.File(tmp_path / "e.h5")["f0000"].attrs["flow_rate_interval"]
    )


@pytest.mark.parametrize("named", ["absolute", "relative"])
def test_ensemble_of_an_ensemble_of_its_members(tmp_path, capsys, monkeypatch, named):
    # The ensemble of member0 and member1 given with them had counted each twice ("the ensemble of 3 members").
    members = _two_members(tmp_path, ["val"] * 20 + ["test"] * 4)
    monkeypatch.chdir(tmp_path)
    given = [m.relative_to(tmp_path) if named == "relative" else m for m in members]
    assert _flowlearn(capsys, "ensemble", *map(str, given), "-o", "both.h5") == (0, "")
    err = _refused(capsys, tmp_path, "ensemble", *members, tmp_path / "both.h5", "-o", tmp_path / "e.h5")
    _one_line(
        2,
        err,
        f"error: PREDICTIONS {tmp_path}/both.h5 is itself an ensemble of {members[0]}, {members[1]}, which the other "
        "members count again: give each run once",
    )


def test_ensemble_calibrated_on_a_split_no_member_holds(tmp_path, capsys):
    # --calibrate test on files of flowlearn predict (split predict) had become a Student-t interval silently.
    members = _two_members(tmp_path, ["predict"] * 6)
    err = _refused(capsys, tmp_path, "ensemble", *members, "-o", tmp_path / "e.h5", "--calibrate", "test")
    _one_line(
        2,
        err,
        "error: --calibrate test: no member fracture is in split test (the members hold split predict); use "
        "--calibrate none",
    )
