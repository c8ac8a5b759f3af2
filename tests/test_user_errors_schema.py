"""A fracture file, or a fracture to write, that flowlearn's own reader would refuse gets one line naming the file,
the group and the attribute, field or argument, before anything is written.

The cases of the fourth bad-input audit (rows 5, 7-9, 13, 29, 30, 34, 35, 38): a fracture stored twice through a
link or a link that cannot be resolved, a voxel size or a flow rate in no physical range (another unit, or garbage),
``write_fractures`` given what its reader refuses, paths that are no paths, a root ``schema`` stored as bytes, and
``convert`` writing over its own input.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_user_errors import _flowlearn, _one_line

from flowlearn.data.files import convert, read_fracture, read_fractures, validate_file, write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError

VOXEL = 1e-5  # metres
SHAPE = (6, 8)
APERTURE = 1e-4  # metres: 10 voxels
# The flow rate of parallel plates of the aperture above under heads 2 and 1: H b³/12 (2 - 1)/(W - 1), in m³.
PLATES = SHAPE[0] * APERTURE**3 / 12 / (SHAPE[1] - 1)


def _fracture(name: str = "f0", **fields) -> Fracture:
    """A uniform gap with the linear pressure from inlet 2 to outlet 1 and 0.8 times the plates' flow rate."""
    values = {
        "aperture": np.full(SHAPE, APERTURE),
        "pressure": np.tile(2 - np.arange(SHAPE[1]) / (SHAPE[1] - 1), (SHAPE[0], 1)),
        "voxel_size": VOXEL,
        "flow_rate": 0.8 * PLATES,
        **fields,
    }
    return Fracture(name, **values)


@pytest.fixture
def data(tmp_path) -> Path:
    """A valid file of two fractures."""
    path = tmp_path / "data.h5"
    write_fractures(path, [_fracture("f0"), _fracture("f1")])
    return path


# ------------------------------------------------------------------------------------------ links (rows 7, 35)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda f: f.__setitem__("f2", h5py.SoftLink("/f0")),
            "group 'f2' is a link to '/f0': store each fracture once, as a group",
        ),
        (
            lambda f: f.__setitem__("f2", f["f0"]),
            "group 'f2' is a link to '/f0' (a second hard link to one group): store each fracture once",
        ),
        (
            lambda f: f.__setitem__("f2", h5py.SoftLink("/nowhere")),
            "'f2' is a link to '/nowhere' that cannot be resolved",
        ),
        (
            lambda f: f.__setitem__("f2", h5py.ExternalLink("/nonexistent.h5", "/g")),
            "'f2' is a link to '/g' in /nonexistent.h5 that cannot be resolved",
        ),
    ],
    ids=["soft link", "hard link", "dangling link", "external link to no file"],
)
def test_a_fracture_stored_twice_or_a_broken_link_is_named(data, capsys, make, message):
    """Row 7: a link to a fracture put it in two splits of a training (counted as a fracture of its own); row 35: a
    link that cannot be resolved was called an "unexpected top-level dataset"."""
    with h5py.File(data, "a") as f:
        make(f)
    status, err = _flowlearn(capsys, "check", str(data))
    _one_line(status, err, f"{data}: {message}")
    with pytest.raises(DataValidationError, match=f"^{data}: "):
        validate_file(data)


def test_reading_one_fracture_through_a_soft_link_is_refused(data):
    with h5py.File(data, "a") as f:
        f["f2"] = h5py.SoftLink("/f0")
    with pytest.raises(DataValidationError, match="group 'f2' is a link to '/f0'"):
        read_fracture(data, "f2")


def _check_with_attribute(data, capsys, name: str, value: float) -> tuple[int, str]:
    """(exit status, stderr) of ``flowlearn check`` on ``data`` with fracture f1's attribute ``name`` set to
    ``value``."""
    with h5py.File(data, "a") as f:
        f["f1"].attrs[name] = value
    return _flowlearn(capsys, "check", str(data))


# ------------------------------------------------------------------------------------- voxel size (rows 8, 38)


@pytest.mark.parametrize("voxel", [1e300, 1e-300, 1e-12, 2.0])
def test_a_voxel_size_in_no_physical_range_is_named(data, capsys, voxel):
    """Row 8: 1e300 m was accepted and overflowed in the inclination (dropping fields from the predictions); row 38:
    1e-300 m and 1e-12 m were blamed on the apertures."""
    _one_line(
        *_check_with_attribute(data, capsys, "voxel_size", voxel),
        f"{data}: group 'f1': attribute 'voxel_size' is {voxel!r}; expected a number in [1e-09, 1] (metres per "
        "voxel), or NaN where it is unknown",
    )


# ---------------------------------------------------------------------------------------------- flow rate (row 9)


@pytest.mark.parametrize(
    "flow_rate, ratio",
    [(1e-300, "1.40e-287"), (1e300, "1.40e+313"), (0.8 * PLATES / VOXEL**3, "8.00e+14")],
    ids=["tiny", "huge", "in voxels cubed"],
)
def test_a_flow_rate_in_another_unit_is_named_before_training(data, capsys, flow_rate, ratio):
    """Row 9: 1e-300 diverged a training (blamed on the learning rate), 1e300 trained without a word; a flow rate in
    voxels³ instead of m³ is 1e15 times the plates'."""
    _one_line(
        *_check_with_attribute(data, capsys, "flow_rate", flow_rate),
        f"{data}: group 'f1': attribute 'flow_rate' is {flow_rate:.6g}, {ratio} times the flow rate {PLATES:.3g} of "
        f"parallel plates of its mean aperture 0.0001 under its head drop 1; expected within [1e-06, 1e+06] times "
        "it (a flow rate in another unit?)",
    )


# --------------------------------------------------------------------- what write_fractures writes (rows 13, 29)

WRITE_ROWS = [
    (
        lambda: [_fracture("a/b")],
        "fracture name 'a/b' cannot name an HDF5 group; expected non-empty text without '/'",
    ),
    (lambda: [_fracture("")], "fracture name '' cannot name an HDF5 group"),
    (lambda: [_fracture(7)], "fracture name 7 cannot name an HDF5 group"),
    (
        lambda: [_fracture(provenance=[1, 2])],
        "group 'f0': attribute 'provenance' is JSON list; expected an object",
    ),
    (
        lambda: [_fracture(provenance={"seeds": {1, 2}})],
        "group 'f0': attribute 'provenance' cannot be written as JSON: set {1, 2} is not JSON",
    ),
    (
        lambda: [_fracture(voxel_size="1e-5")],
        "group 'f0': attribute 'voxel_size' is '1e-5'; expected one number",
    ),
    (
        lambda: [_fracture(inlet_pressure="2")],
        "group 'f0': attribute 'inlet_pressure' is '2'; expected one number",
    ),
    (
        lambda: [_fracture(flow_rate="1e-14")],
        "group 'f0': attribute 'flow_rate' is '1e-14'; expected one number",
    ),
    (lambda: [_fracture(voxel_size=True)], "group 'f0': attribute 'voxel_size' is True; expected one number"),
    (
        lambda: [_fracture(aperture=[[APERTURE] * SHAPE[1]] * SHAPE[0])],
        "group 'f0': field 'aperture' is a list ([[0.0001, ",
    ),
    (
        lambda: [_fracture(flow_axis=["x"])],
        "group 'f0': attribute 'flow_axis' is ['x']; expected one of ['x', 'y', 'z']",
    ),
    (lambda: _fracture(), "fractures must be a sequence of Fracture, got Fracture (give a list)"),
    (lambda: [_fracture(), "f1"], "fractures[1] is str; expected a Fracture"),
]


@pytest.mark.parametrize("fractures, message", WRITE_ROWS)
def test_write_fractures_refuses_what_its_reader_refuses_and_writes_nothing(tmp_path, fractures, message):
    """Row 13: a name with '/', a provenance list and a reserved root attribute each wrote a file that the reader
    then refused; row 29: other types gave a TypeError or AttributeError from deep inside, or from h5py."""
    path = tmp_path / "out.h5"
    with pytest.raises(DataValidationError, match="^" + re.escape(f"{path}: {message}")):
        write_fractures(path, fractures())
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"schema_version": 7}, "root attribute 'schema_version' cannot be given"),
        ({"schema": "mine"}, "root attribute 'schema' cannot be given"),
        (
            {"recipe": {"seed": 1}},
            "root attribute 'recipe' is {'seed': 1}; expected text or numbers (a record as JSON text",
        ),
    ],
)
def test_write_fractures_refuses_root_attributes_it_sets_or_cannot_store(tmp_path, attrs, message):
    path = tmp_path / "out.h5"
    with pytest.raises(DataValidationError, match="^" + re.escape(f"{path}: {message}")):
        write_fractures(path, [_fracture()], attrs=attrs)
    assert os.listdir(tmp_path) == []


def test_numpy_numbers_are_written_as_numbers(tmp_path):
    """Row 29: numpy scalars in the provenance were a TypeError of the JSON encoder; they, and numpy scalar
    attributes, are stored as the numbers they are."""
    path = tmp_path / "out.h5"
    fracture = _fracture(
        voxel_size=np.float64(VOXEL), provenance={"seed": np.int64(3), "rms": np.float32(0.5)}
    )
    write_fractures(path, [fracture])
    (read,) = read_fractures(path)
    assert read.provenance == {"rms": 0.5, "seed": 3}
    assert read.voxel_size == VOXEL


# --------------------------------------------------------------------------------------------- paths (row 30)


@pytest.mark.parametrize("path", [None, 3])
def test_reading_what_is_no_path_names_the_argument(path):
    with pytest.raises(
        DataValidationError, match=f"^path must be a file path \\(str or os.PathLike\\), got {path}$"
    ):
        read_fractures(path)


def test_reading_a_fracture_of_no_name_names_the_argument(data):
    with pytest.raises(DataValidationError, match=f"^{data}: name must be a group name \\(str\\), got None$"):
        read_fracture(data, None)


# --------------------------------------------------------------------------------------- schema as bytes (row 34)


def test_a_schema_attribute_stored_as_bytes_is_read(data, capsys):
    """Row 34: MATLAB and fixed-length string writers store the root ``schema`` as bytes; the file was said to be
    in neither layout."""
    with h5py.File(data, "a") as f:
        f.attrs["schema"] = np.bytes_(b"flowlearn-fractures")
    assert [fracture.name for fracture in read_fractures(data)] == ["f0", "f1"]
    status, err = _flowlearn(capsys, "check", str(data))
    assert status == 0, err


# ------------------------------------------------------------------------------------ convert onto src (row 5)


@pytest.mark.parametrize(
    "same", [lambda src: src, lambda src: src.parent / "." / src.name], ids=["same", "./"]
)
@pytest.mark.parametrize("layout", ["original", "flowlearn"])
def test_convert_refuses_to_write_over_its_input(data, same, layout):
    """Row 5: converting a file onto itself in the original layout rewrote it in place, losing its voxel size, flow
    rate, walls, mask and provenance for good; the command refused it, the library did not."""
    before = data.read_bytes()
    with pytest.raises(
        DataValidationError, match="^" + re.escape(f"dst {same(data)} is the input src {data} (one file)")
    ):
        convert(data, same(data), layout=layout)
    assert data.read_bytes() == before


def test_convert_refuses_a_link_to_its_input(data, tmp_path):
    before = data.read_bytes()
    link = tmp_path / "link.h5"
    os.symlink(data, link)
    with pytest.raises(DataValidationError, match="is the input src"):
        convert(data, link, layout="original")
    assert data.read_bytes() == before
    copy = tmp_path / "copy.h5"
    shutil.copy(data, copy)
    assert convert(copy, tmp_path / "new.h5", layout="original") == 2
