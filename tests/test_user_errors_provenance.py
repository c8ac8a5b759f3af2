"""A provenance entry that a command reads as a number, or a map a command cannot solve, gets one line naming the
file, the group and the entry (``provenance convergence.flow_rate_change``), exit status 2, and no rewritten file.

The cases of the second bad-input audit (rows 13-17 and 26): ``flowlearn departure`` on text where a number is
recorded and on maps that are not 2D with flow along x, ``flowlearn refine --infer-only`` on a measured change that
is text or NaN, ``flowlearn smooth-walls --infer`` and ``python train.py`` on a measured reference error that is text,
and ``flowlearn refine`` on LBM settings out of range in the provenance.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_user_errors import _flowlearn

from flowlearn.cli import main
from flowlearn.data.files import validate_file, write_fractures
from flowlearn.data.provenance import recorded_error
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError
from flowlearn.reference import reference_error
from flowlearn.reference.refinement import MEASURED as CONVERGENCE_MEASURED

ROOT = Path(__file__).resolve().parents[1]
VOXEL = 1e-5  # metres
SHAPE = (8, 12)


def _gap(name: str, provenance: dict | None = None, slope: float = 0.0, **fields) -> Fracture:
    """Plates 4 voxels apart, both walls tilted across the flow by ``slope``, with the linear pressure from inlet 2
    to outlet 1 along x and a reference flow rate."""
    y = np.arange(SHAPE[0], dtype=np.float64)[:, None] * np.ones(SHAPE)
    bottom = slope * y * VOXEL
    values = {
        "aperture": np.full(SHAPE, 4 * VOXEL),
        "pressure": np.tile(np.linspace(2.0, 1.0, SHAPE[1]), (SHAPE[0], 1)),
        "voxel_size": VOXEL,
        "flow_rate": 1e-15,
        "bottom": bottom,
        "top": bottom + 4 * VOXEL,
        "provenance": provenance or {},
        **fields,
    }
    return Fracture(name=name, **values)


def _one_line(status: int, err: str, command: str, message: str) -> None:
    """Exit status 2 and one stderr line, the error of ``command`` (``error:`` after the command's name, as
    ``flowlearn`` prefixes it; ``error:`` first for ``train.py``), holding ``message``."""
    assert status == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    prefix = "error: " if command == "train.py" else f"flowlearn {command}: error: "
    assert lines[0].startswith(prefix), err
    assert message in lines[0], (message, err)


def _unchanged(path: Path, before: bytes, modified: int) -> None:
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == modified


# ------------------------------------------------------------------------------------------- flowlearn departure


def test_departure_on_a_recorded_change_that_is_text(tmp_path, capsys):
    """Row 13: a convergence.flow_rate_change of 'big' was a traceback from float()."""
    path = tmp_path / "data.h5"
    write_fractures(
        path, [_gap("f0"), _gap("f1", {"convergence": {"flow_rate_change": "big", "how": "measured"}})]
    )
    status, err = _flowlearn(capsys, "departure", str(path), "--table")
    _one_line(
        status,
        err,
        "departure",
        f"{path}: group 'f1': provenance convergence.flow_rate_change is 'big'; expected a number",
    )


def test_departure_on_a_wall_slope_that_is_a_record(tmp_path, capsys):
    """The other number departure reads from the provenance, geometry.wall_slope, the same way."""
    path = tmp_path / "data.h5"
    write_fractures(path, [_gap("f0", {"geometry": {"wall_slope": {"rms": 0.2}}})])
    status, err = _flowlearn(capsys, "departure", str(path))
    _one_line(
        status,
        err,
        "departure",
        f"{path}: group 'f0': provenance geometry.wall_slope is {{'rms': 0.2}}; expected a number",
    )


def test_departure_on_a_roughness_record_that_is_text(tmp_path, capsys):
    """departure reads roughness.kind to leave a recipe's exact cases out of its table against rock joints."""
    path = tmp_path / "data.h5"
    write_fractures(path, [_gap("f0", {"roughness": "published"})])
    status, err = _flowlearn(capsys, "departure", str(path))
    _one_line(
        status,
        err,
        "departure",
        f"{path}: group 'f0': provenance roughness is 'published'; expected an object",
    )


def test_departure_on_a_map_with_flow_along_y(tmp_path, capsys):
    """Row 14: a valid file whose map flows along y was a traceback from the LCL solve."""
    path = tmp_path / "data.h5"
    across = Fracture(
        "fy",
        np.full((12, 8), 4 * VOXEL),
        np.tile(np.linspace(2.0, 1.0, 12)[:, None], (1, 8)),
        voxel_size=VOXEL,
        flow_axis="y",
        flow_rate=1e-15,
    )
    write_fractures(path, [_gap("f0"), across])
    status, err = _flowlearn(capsys, "departure", str(path))
    _one_line(
        status,
        err,
        "departure",
        f"{path}: group 'fy': the LCL flow rate needs a 2D map with flow along x, this one has flow_axis 'y'",
    )


def test_departure_on_a_3d_map(tmp_path, capsys):
    """Row 14: a 3D group, the same."""
    path = tmp_path / "data.h5"
    volume = Fracture(
        "v0",
        np.full((2, *SHAPE), 4 * VOXEL),
        np.tile(np.linspace(2.0, 1.0, SHAPE[1]), (2, SHAPE[0], 1)),
        voxel_size=VOXEL,
        flow_rate=1e-15,
    )
    write_fractures(path, [_gap("f0"), volume])
    status, err = _flowlearn(capsys, "departure", str(path), "--table")
    _one_line(
        status,
        err,
        "departure",
        f"{path}: group 'v0': the LCL flow rate needs a 2D map with flow along x, this one is 3D (2x8x12)",
    )


# ---------------------------------------------------------------------------------------------- flowlearn refine


def _measured_file(path: Path, bad_change: object) -> Path:
    """Three fractures with measured changes (the second one ``bad_change``) and an unmeasured one."""
    changes = (0.02, bad_change, 0.04)
    fractures = [
        _gap(
            f"m{i}", {"convergence": {"flow_rate_change": change, "how": CONVERGENCE_MEASURED}}, slope=0.1 * i
        )
        for i, change in enumerate(changes)
    ]
    write_fractures(path, [*fractures, _gap("u0", slope=0.5)])
    return path


@pytest.mark.parametrize(
    "bad, shown, expected",
    [
        # Row 15: text was a traceback from the fit.
        ("big", "'big'", "a number"),
        # Row 16: NaN recorded the rule 'nan + nan x slope' in every other fracture, and rewrote the file.
        (math.nan, "nan", "a finite number"),
    ],
)
def test_refine_infer_only_on_a_measured_change_that_is_not_a_number(tmp_path, capsys, bad, shown, expected):
    path = _measured_file(tmp_path / "data.h5", bad)
    before, modified = path.read_bytes(), path.stat().st_mtime_ns
    status, err = _flowlearn(capsys, "refine", str(path), "--infer-only")
    _one_line(
        status,
        err,
        "refine",
        f"{path}: group 'm1': provenance convergence.flow_rate_change is {shown}; expected {expected}",
    )
    _unchanged(path, before, modified)


@pytest.mark.parametrize(
    "omega, message",
    [
        # Row 26: "omega must be in (0, 2), got 5" read like an option and named no file.
        (5, "provenance lbm.settings.omega is 5; it must be in (0, 2)"),
        ("fast", "provenance lbm.settings.omega is 'fast'; it must be in (0, 2)"),
    ],
)
def test_refine_on_recorded_lbm_settings_out_of_range(tmp_path, capsys, omega, message):
    """Refused before any LBM run (lbmpy is not needed to see it)."""
    path = tmp_path / "data.h5"
    write_fractures(path, [_gap("f0", {"lbm": {"settings": {"omega": omega, "magic": 0.1875}}}), _gap("f1")])
    before, modified = path.read_bytes(), path.stat().st_mtime_ns
    status = main(["refine", str(path), "--fracture", "f0", "--threads", "1"])
    out, err = capsys.readouterr()
    _one_line(status, err, "refine", f"{path}: group 'f0': {message}")
    assert out == ""  # not even the table's header
    _unchanged(path, before, modified)


def test_refine_then_infer_checks_every_record_before_the_first_run(tmp_path, capsys):
    """``--infer`` reads every fracture's convergence record after the LBM runs: a bad one was found only then,
    after minutes of runs, with the measured fracture already written."""
    path = _measured_file(tmp_path / "data.h5", "big")
    before, modified = path.read_bytes(), path.stat().st_mtime_ns
    status, err = _flowlearn(capsys, "refine", str(path), "--fracture", "u0", "--infer", "--threads", "1")
    _one_line(
        status,
        err,
        "refine",
        f"{path}: group 'm1': provenance convergence.flow_rate_change is 'big'; expected a number",
    )
    _unchanged(path, before, modified)


# ------------------------------------------------------------------------------- smooth-walls and the training data


def _reference_error_file(path: Path) -> Path:
    """Three fractures with measured reference errors, the second one's departure error 'big', and one without."""
    records = [
        {
            "flow_rate_error": -0.05,
            "departure_error": error,
            "pressure_mse": 1e-5,
            "how": reference_error.MEASURED,
        }
        for error in (0.01, "big", 0.02)
    ]
    fractures = [_gap(f"m{i}", {reference_error.RECORD: record}) for i, record in enumerate(records)]
    write_fractures(path, [*fractures, _gap("u0")])
    return path


MESSAGE_17 = "group 'm1': provenance reference_error.departure_error is 'big'; expected a number"


def test_smooth_walls_infer_on_a_measured_error_that_is_text(tmp_path, capsys):
    """Row 17: a traceback from float(); nothing may be written."""
    path = _reference_error_file(tmp_path / "data.h5")
    before, modified = path.read_bytes(), path.stat().st_mtime_ns
    status, err = _flowlearn(capsys, "smooth-walls", str(path), "--infer")
    _one_line(status, err, "smooth-walls", f"{path}: {MESSAGE_17}")
    _unchanged(path, before, modified)


def test_train_py_on_a_measured_error_that_is_text(tmp_path):
    """Row 17, in `python train.py`: a 60-line traceback. Every fracture in the training split, whose items are
    read before the trainer starts. (The dataset reads the record without the file's name, so the line names the
    group and the entry; :func:`~flowlearn.data.files.validate_file` names the file too.)"""
    path = _reference_error_file(tmp_path / "data.h5")
    process = subprocess.run(
        [
            sys.executable,
            "train.py",
            f"data.path={path}",
            "data.fractions=[1,0,0]",
            "trainer.max_epochs=1",
            "callbacks.figures=null",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    _one_line(process.returncode, process.stderr, "train.py", MESSAGE_17)


def test_the_check_before_training_names_the_file(tmp_path):
    """The check a training run makes before any start-up: every fracture's record, in the schema's pass."""
    path = _reference_error_file(tmp_path / "data.h5")
    with pytest.raises(DataValidationError) as error:
        validate_file(path, check=recorded_error)
    assert str(error.value) == f"{path}: {MESSAGE_17}"
    good = tmp_path / "good.h5"
    write_fractures(good, [_gap("f0"), _gap("f1")])
    assert validate_file(good, check=recorded_error) == 2
