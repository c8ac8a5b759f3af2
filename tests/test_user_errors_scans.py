"""Scans that cannot be imported (flowlearn.data.scans) get one line naming the file or option, the value and what
was expected, before anything is computed from them; a row per case.
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from PIL import Image
from test_scans import BOTTOM, TOP, VOLUME, VOXEL, _voxelise, _write

from flowlearn.data.scans import common, import_aperture, import_volume, import_walls
from flowlearn.errors import DataValidationError, SettingError

PIXEL = 1e-4  # metres
MAP = np.full((6, 8), 50.0)  # micrometres, open everywhere


def _fails(call, error: type[Exception], *names: str) -> None:
    """``call()`` raises ``error`` (exactly that type or a subclass) with a one-line message naming each of
    ``names``."""
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, (name, message)


def _npy(tmp_path, array: np.ndarray, name: str = "scan.npy"):
    path = tmp_path / name
    np.save(path, array)
    return path


# -------------------------------------------------------------------------------------------------- volumes


def _blocked() -> np.ndarray:
    """The test volume with a solid wall across it at column 20: pore on both sides, no path between them."""
    volume = VOLUME.copy()
    volume[:, 20, :] = 0
    return volume


def _unclear() -> np.ndarray:
    """A pore layer as thick along the normal as the runs of pore along the map (a thick gap of steep walls)."""
    y, x = np.mgrid[0:24, 0:40]
    mid = 30 + 10 * np.sin(2 * np.pi * x / 40) + 6 * np.cos(2 * np.pi * y / 24)
    return _voxelise(mid - 6, mid + 6, 60)


VOLUME_ROWS = [
    # (name of the file, the array, the options, the error, what the message names)
    ("empty.npy", np.zeros((8, 9, 10), np.uint8), {}, DataValidationError, ["empty.npy", "no pore voxel"]),
    (
        "full.npy",
        np.ones((8, 9, 10), np.uint8),
        {},
        DataValidationError,
        ["full.npy", "every voxel", "pore_label"],
    ),
    ("label.npy", VOLUME, {"pore_label": 5}, DataValidationError, ["label.npy", "equal to pore_label 5"]),
    (
        "blocked.npy",
        _blocked(),
        {},
        DataValidationError,
        ["blocked.npy", "joins the inlet to the outlet", "axis 1"],
    ),
    (
        "unclear.npy",
        _unclear(),
        {},
        DataValidationError,
        ["unclear.npy", "cannot tell the fracture's normal", "voxels along axes 0, 1, 2", "normal="],
    ),
    ("scan.npy", VOLUME, {"normal": 3}, SettingError, ["normal must be", "got 3"]),
    (
        "scan.npy",
        VOLUME,
        {"flow_axis": "x"},
        SettingError,
        ["flow_axis must be 'columns' or 'rows', got 'x'"],
    ),
    ("scan.npy", VOLUME, {"pore_label": 1.5}, SettingError, ["pore_label must be", "got 1.5"]),
    (
        "scan.npy",
        VOLUME,
        {"crop": (0, 25, 0, 40)},
        SettingError,
        ["crop must be", "row1 <= 24", "(0, 25, 0, 40)"],
    ),
    ("scan.npy", VOLUME, {"crop": (3, 3, 0, 40)}, SettingError, ["crop must be", "got (3, 3, 0, 40)"]),
    ("scan.npy", VOLUME, {"coarsen": 0}, SettingError, ["coarsen must be an integer >= 1, got 0"]),
    ("scan.npy", VOLUME, {"coarsen": 14}, SettingError, ["coarsen must leave", "24x40", "got 14"]),
    ("scan.npy", VOLUME, {"shape": (24, 40, 24)}, SettingError, ["shape and dtype describe raw files only"]),
    ("scan.raw", VOLUME, {}, SettingError, ["shape and dtype are needed", "scan.raw", "shape=None"]),
    ("scan.raw", VOLUME, {"shape": (24, 40), "dtype": "u1"}, SettingError, ["shape must be three integers"]),
    (
        "scan.raw",
        VOLUME,
        {"shape": (24, 40, 24), "dtype": "pixel"},
        SettingError,
        ["dtype must be", "'pixel'"],
    ),
    # The file holds the 24 x 40 x 24 uint8 volume: 23040 bytes.
    (
        "scan.raw",
        VOLUME,
        {"shape": (24, 40, 25), "dtype": "u1"},
        DataValidationError,
        ["23040 bytes", "24000 bytes"],
    ),
    (
        "scan.raw",
        VOLUME,
        {"shape": (24, 40, 24), "dtype": "<u2"},
        DataValidationError,
        ["23040 bytes", "46080"],
    ),
    ("flat.npy", VOLUME[:, :, :1], {}, DataValidationError, ["flat.npy", "shape (24, 40, 1)"]),
]


@pytest.mark.parametrize("name, array, options, error, names", VOLUME_ROWS)
def test_bad_volumes_and_options(tmp_path, name, array, options, error, names):
    path = tmp_path / name
    if name.endswith(".npy"):
        np.save(path, array)
    else:
        array.tofile(path)
    _fails(lambda: import_volume(path, VOXEL, **options), error, *names)


@pytest.mark.parametrize(
    "size, names",
    [
        (-1e-5, ["voxel_size must be a number in [1e-09, 1]", "got -1e-05"]),
        (float("nan"), ["voxel_size must be", "got nan"]),
        (float("inf"), ["voxel_size must be", "got inf"]),
        (0, ["voxel_size must be", "got 0"]),
        ("1e-5", ["voxel_size must be", "got '1e-5'"]),
    ],
)
def test_bad_voxel_sizes(tmp_path, size, names):
    path = _npy(tmp_path, VOLUME)
    _fails(lambda: import_volume(path, size), SettingError, *names)


def _tiff(tmp_path):
    path = tmp_path / "scan.tif"
    tifffile.imwrite(path, np.moveaxis(VOLUME, 2, 0), photometric="minisblack")
    return path


def _pagewise(tmp_path):
    """A TIFF written page by page (each page's header before its data), cut where the last page's header starts:
    every page before it is whole, and tifffile, which only logs the missing page, would read one page less."""
    path = tmp_path / "pages.tif"
    with tifffile.TiffWriter(path) as tif:
        for plane in np.moveaxis(VOLUME, 2, 0):
            tif.write(plane, contiguous=False, photometric="minisblack")
    with tifffile.TiffFile(path) as tif:
        last = tif.pages[-1].offset
    path.write_bytes(path.read_bytes()[:last])
    return path


def _cut(path, keep: float):
    """``path`` cut to ``keep`` of its bytes, as a copy that stopped early leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


@pytest.mark.parametrize(
    "make, names",
    [
        (lambda tmp: _cut(_tiff(tmp), 0.5), ["scan.tif", "not a readable TIFF file", "truncated"]),
        (
            _pagewise,
            ["pages.tif", "not a readable TIFF file", "invalid page offset"],
        ),
        (lambda tmp: _cut(_tiff(tmp), 0.0001), ["scan.tif", "not a readable TIFF file"]),
        (
            lambda tmp: (tmp / "junk.tif").write_bytes(b"not an image at all") and tmp / "junk.tif",
            ["junk.tif", "not a readable TIFF file"],
        ),
        (
            lambda tmp: (tmp / "bare.tif").write_bytes(b"II*\x00\x00\x00\x00\x00") and tmp / "bare.tif",
            ["bare.tif", "a TIFF file without pages"],
        ),
        (lambda tmp: _cut(_npy(tmp, VOLUME), 0.5), ["scan.npy", "not a readable .npy file"]),
        (
            lambda tmp: _npy(tmp, np.array([{"a": 1}] * 8).reshape(2, 2, 2)),
            ["scan.npy", "not a readable .npy file"],
        ),
    ],
)
def test_unreadable_truncated_or_corrupt_volumes(tmp_path, make, names):
    path = make(tmp_path)
    _fails(lambda: import_volume(path, VOXEL), DataValidationError, *names)


def test_a_missing_volume(tmp_path):
    _fails(lambda: import_volume(tmp_path / "none.tif", VOXEL), FileNotFoundError, "none.tif", "no such file")


def test_folders_of_slices_that_are_no_volume(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no slices here")
    _fails(lambda: import_volume(empty, VOXEL), DataValidationError, "empty", "without TIFF slices")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for index, plane in enumerate(VOLUME[:5]):
        tifffile.imwrite(
            mixed / f"s{index}.tif", plane if index != 3 else plane[:, :20], photometric="minisblack"
        )
    _fails(
        lambda: import_volume(mixed, VOXEL), DataValidationError, "s3.tif", "(40, 20)", "s0.tif", "(40, 24)"
    )


@pytest.mark.parametrize("kind", ["npy", "raw", "tiff", "slices"])
def test_a_volume_larger_than_memory_is_refused_before_it_is_read(tmp_path, monkeypatch, kind):
    path, options = _write(VOLUME, kind, tmp_path)
    monkeypatch.setattr(common, "available_memory", lambda: 10_000)
    _fails(lambda: import_volume(path, VOXEL, **options), DataValidationError, path.name, "GiB", "available")


# ---------------------------------------------------------------------------------------------- height maps


def _maps(tmp_path, top: np.ndarray, bottom: np.ndarray):
    top_path, bottom_path = tmp_path / "top.npy", tmp_path / "bottom.npy"
    np.save(top_path, top)
    np.save(bottom_path, bottom)
    return top_path, bottom_path


def _nan_at(values: np.ndarray, pixel: tuple[int, int]) -> np.ndarray:
    values = values.copy()
    values[pixel] = np.nan
    return values


WALL_ROWS = [
    # (top heights, bottom heights, options, error, what the message names)
    (TOP, BOTTOM[:, :30], {}, DataValidationError, ["top.npy", "(24, 40)", "bottom.npy", "(24, 30)"]),
    (_nan_at(TOP, (2, 3)), BOTTOM, {}, DataValidationError, ["top.npy", "top heights", "NaN", "(2, 3)"]),
    (TOP, BOTTOM + np.inf, {}, DataValidationError, ["bottom.npy", "bottom heights", "inf"]),
    # Swapped: the top below the bottom everywhere, they touch everywhere and nothing flows.
    (BOTTOM, TOP, {}, DataValidationError, ["top.npy and ", "bottom.npy", "no open path", "flip=True"]),
    (TOP, BOTTOM, {"units": "inch"}, SettingError, ["units must be one of m, mm, um, got 'inch'"]),
    (TOP, BOTTOM, {"flip": "yes"}, SettingError, ["flip must be True or False, got 'yes'"]),
    (TOP, BOTTOM, {"pixel_size": -1.0}, SettingError, ["pixel_size must be", "got -1.0"]),
    (
        TOP,
        BOTTOM,
        {"crop": (0, 10, 0)},
        SettingError,
        ["crop must be (row0, row1, col0, col1)", "got (0, 10, 0)"],
    ),
    # Heights in micrometres read as metres: gaps of metres on a map of millimetres.
    (TOP * 10, BOTTOM * 10, {"units": "m"}, DataValidationError, ["top.npy", "longest side", "voxel_size"]),
]


@pytest.mark.parametrize("top, bottom, options, error, names", WALL_ROWS)
def test_bad_height_maps(tmp_path, top, bottom, options, error, names):
    top_path, bottom_path = _maps(tmp_path, top, bottom)
    options = {"pixel_size": PIXEL, **options}
    _fails(lambda: import_walls(top_path, bottom_path, **options), error, *names)


# -------------------------------------------------------------------------------------------- aperture maps


def _blocked_map() -> np.ndarray:
    """Open pixels joined from inlet to outlet only through a diagonal step, which no Darcy cell's face crosses."""
    values = MAP.copy()
    values[:, 4:] = 0
    values[3:, 4:] = 50.0
    values[3:, :4] = 0
    return values


def _negative() -> np.ndarray:
    values = MAP.copy()
    values[4, 5] = -2.0
    return values


APERTURE_ROWS = [
    # (the map, the options, the error, what the message names)
    (
        _negative(),
        {"units": "um"},
        DataValidationError,
        ["map.npy", "apertures", "1 negative", "(4, 5)", "-2"],
    ),
    (_nan_at(MAP, (1, 1)), {"units": "um"}, DataValidationError, ["map.npy", "non-finite", "(1, 1)"]),
    (
        _blocked_map(),
        {"units": "um"},
        DataValidationError,
        ["map.npy", "no open path", "4-connected", "column 7"],
    ),
    (MAP, {"scale": -1e-6}, SettingError, ["scale must be a number > 0", "got -1e-06"]),
    (MAP, {"scale": float("inf")}, SettingError, ["scale must be a finite number > 0", "got inf"]),
    (MAP, {"scale": float("nan")}, SettingError, ["scale must be", "got nan"]),
    (MAP, {}, SettingError, ["scale or units: give exactly one", "scale=None, units=None"]),
    (MAP, {"scale": 1e-6, "units": "um"}, SettingError, ["give exactly one", "scale=1e-06, units='um'"]),
    (MAP, {"units": "um", "coarsen": 3}, SettingError, ["coarsen must leave", "6x8", "got 3"]),
    (MAP, {"units": "um", "coarsen": 1.5}, SettingError, ["coarsen must be an integer >= 1, got 1.5"]),
]


@pytest.mark.parametrize("values, options, error, names", APERTURE_ROWS)
def test_bad_aperture_maps_and_options(tmp_path, values, options, error, names):
    path = _npy(tmp_path, values, "map.npy")
    _fails(lambda: import_aperture(path, PIXEL, **options), error, *names)


def _colour(path):
    rgb = np.zeros((6, 8, 3), np.uint8)
    rgb[..., 0] = 90
    Image.fromarray(rgb).save(path)


@pytest.mark.parametrize(
    "name, write, names",
    [
        ("map.csv", lambda p: p.write_text("1,2,3\n4,x,6\n"), ["map.csv", "not a table of numbers", "'x'"]),
        ("map.csv", lambda p: p.write_text("1,2,3\n4,5\n"), ["map.csv", "not a table of numbers"]),
        ("map.png", _colour, ["map.png", "a colour image", "grey levels"]),
        (
            "map.png",
            lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n broken"),
            ["map.png", "not a readable image"],
        ),
        ("map.tif", lambda p: tifffile.imwrite(p, np.ones((2, 6, 8), np.uint8)), ["map.tif", "2 pages"]),
        ("map.jpg", lambda p: p.write_bytes(b"\xff\xd8"), ["map.jpg", "cannot read a map", ".csv"]),
        ("map.npy", lambda p: np.save(p, np.ones(8)), ["map.npy", "shape (8,)", "2D map"]),
    ],
)
def test_unreadable_maps(tmp_path, name, write, names):
    path = tmp_path / name
    write(path)
    _fails(lambda: import_aperture(path, PIXEL, scale=1e-6), DataValidationError, *names)


@pytest.mark.parametrize("name", ["map.csv", "map.npy", "map.tif", "map.png"])
def test_a_map_larger_than_memory_is_refused_before_it_is_read(tmp_path, monkeypatch, name):
    path = tmp_path / name
    levels = MAP.astype(np.uint8)
    {
        "map.csv": lambda: np.savetxt(path, levels, delimiter=","),
        "map.npy": lambda: np.save(path, levels),
        "map.tif": lambda: tifffile.imwrite(path, levels),
        "map.png": lambda: Image.fromarray(levels).save(path),
    }[name]()
    import_aperture(path, PIXEL, scale=1e-6)  # readable with the memory there is
    monkeypatch.setattr(common, "available_memory", lambda: 1000)
    _fails(lambda: import_aperture(path, PIXEL, scale=1e-6), DataValidationError, name, "GiB to import")


def test_missing_height_map(tmp_path):
    top_path, _ = _maps(tmp_path, TOP, BOTTOM)
    _fails(
        lambda: import_walls(top_path, tmp_path / "gone.csv", PIXEL),
        FileNotFoundError,
        "gone.csv",
        "bottom_path",
    )
