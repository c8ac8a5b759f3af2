"""Fractures imported from scans (flowlearn.data.scans) against fractures whose truth is known.

A volume is voxelised from two known walls (pore where a voxel's centre lies between them), written in each format,
and imported: the aperture of each column must be the walls' separation within one voxel (the count of voxel
centres between two heights is within one of their distance), and each wall its height within one voxel. Height
maps and aperture maps are written from known values and must come back in metres.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import tifffile
from PIL import Image

from flowlearn.data.files import read_fracture, write_fractures
from flowlearn.data.scans import import_aperture, import_volume, import_walls

VOXEL = 2e-5  # metres
SHAPE = (24, 40)  # map rows, columns
DEPTH = 24  # voxels across the fracture


def _walls(shape: tuple[int, int] = SHAPE) -> tuple[np.ndarray, np.ndarray]:
    """Bottom and top wall heights in voxels, float (H, W): a wavy mid-plane between 9.7 and 14.3 and a gap of
    half-width 2.4 +- 2.6 that closes to two contact islands (where sin(2 pi x / W) cos(2 pi y / H) nears -1),
    around which the pore joins every side. Slopes below 0.5, as in a fracture far wider than its gap."""
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]]
    mid = 12 + 1.5 * np.sin(2 * np.pi * x / shape[1]) + 0.8 * np.cos(2 * np.pi * y / shape[0])
    half = 2.4 + 2.6 * np.sin(2 * np.pi * x / shape[1]) * np.cos(2 * np.pi * y / shape[0])
    return mid - half, mid + half


def _voxelise(bottom: np.ndarray, top: np.ndarray, depth: int = DEPTH) -> np.ndarray:
    """uint8 (H, W, depth): 1 where a voxel's centre k + 0.5 lies strictly between the walls, else 0."""
    centres = np.arange(depth) + 0.5
    return ((bottom[..., None] < centres) & (centres < top[..., None])).astype(np.uint8)


def _first_pore(bottom: np.ndarray) -> np.ndarray:
    """The index of the first voxel whose centre lies above ``bottom``: the smallest k with k + 0.5 > bottom."""
    return np.floor(bottom - 0.5).astype(int) + 1


BOTTOM, TOP = _walls()
VOLUME = _voxelise(BOTTOM, TOP)
SEPARATION = np.maximum(TOP - BOTTOM, 0)  # voxels
# A column is open where a voxel centre lies between its walls: the first above the bottom lies below the top.
OPEN = _first_pore(BOTTOM) + 0.5 < TOP


def _write(volume: np.ndarray, kind: str, tmp_path) -> tuple[object, dict]:
    """Write ``volume`` (H, W, D) as ``kind``; return the path to import and the options a raw file needs."""
    if kind == "tiff":  # pages along the normal, as many scanners slice
        path = tmp_path / "scan.tif"
        tifffile.imwrite(path, np.moveaxis(volume, 2, 0), photometric="minisblack")
        return path, {}
    if kind == "slices":  # one file per map row; names unpadded, so that s10 sorts after s9
        path = tmp_path / "slices"
        path.mkdir()
        for index, plane in enumerate(volume):
            tifffile.imwrite(path / f"s{index}.tif", plane, photometric="minisblack")
        return path, {}
    if kind == "npy":
        path = tmp_path / "scan.npy"
        np.save(path, volume)
        return path, {}
    path = tmp_path / "scan.raw"  # big-endian 16-bit, as some scanners write
    volume.astype(">u2").tofile(path)
    return path, {"shape": volume.shape, "dtype": ">u2"}


@pytest.mark.parametrize("kind", ["tiff", "slices", "npy", "raw"])
def test_volume_round_trip_gives_the_walls_within_a_voxel(tmp_path, kind):
    path, options = _write(VOLUME, kind, tmp_path)
    fracture, report = import_volume(path, VOXEL, **options)
    assert fracture.shape == SHAPE
    assert report.normal == (0 if kind == "tiff" else 2)
    aperture = fracture.aperture / VOXEL
    assert np.abs(aperture - SEPARATION).max() <= 1
    assert np.array_equal(aperture > 0, OPEN)
    assert report.contact_fraction == pytest.approx(1 - OPEN.mean())
    assert 0 < report.contact_fraction < 0.3
    # Each wall within a voxel of its height, up to the one shift that puts the mid-plane's mean at 0.
    for wall, truth in ((fracture.bottom, BOTTOM), (fracture.top, TOP)):
        error = wall[OPEN] / VOXEL - truth[OPEN]
        assert error.max() - error.min() <= 1
    assert abs(np.mean(fracture.bottom + fracture.top)) < 1e-12 * VOXEL
    # Where the walls touch they are one height.
    assert np.array_equal(fracture.bottom[~OPEN], fracture.top[~OPEN])
    assert fracture.pressure is None and fracture.flow_rate is None
    assert fracture.voxel_size == VOXEL and fracture.flow_axis == "x"
    assert (report.dropped_voxels, report.multi_run_columns, report.cut_columns) == (0, 0, 0)


def test_provenance_names_the_source_its_checksum_and_every_option(tmp_path):
    path, _ = _write(VOLUME, "npy", tmp_path)
    fracture, report = import_volume(path, VOXEL, pore_label=1, crop=(0, 18, 2, 32), coarsen=2)
    record = fracture.provenance["scan"]
    assert record["function"] == "import_volume" and record["format"] == "npy"
    assert record["sources"]["volume"] == {
        "path": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    assert record["options"] == {
        "voxel_size": VOXEL,
        "pore_label": 1,
        "normal": None,
        "flow_axis": "columns",
        "shape": None,
        "dtype": None,
        "crop": [0, 18, 2, 32],
        "coarsen": 2,
    }
    assert record["report"]["normal"] == report.normal == 2
    assert record["report"]["shape"] == [9, 15]
    # What the import returns is what the file keeps.
    write_fractures(tmp_path / "out.h5", [fracture])
    back = read_fracture(tmp_path / "out.h5", "scan")
    assert json.dumps(back.provenance, sort_keys=True) == json.dumps(fracture.provenance, sort_keys=True)
    np.testing.assert_array_equal(back.aperture, fracture.aperture)


def test_a_folder_checksum_is_that_of_its_slices_sha256sum_lines(tmp_path):
    path, _ = _write(VOLUME, "slices", tmp_path)
    fracture, _ = import_volume(path, VOXEL)
    # What `sha256sum s0.tif s1.tif ... s19.tif | sha256sum` prints, in the slices' natural order.
    lines = "".join(
        f"{hashlib.sha256((path / f's{i}.tif').read_bytes()).hexdigest()}  s{i}.tif\n"
        for i in range(SHAPE[0])
    )
    assert (
        fracture.provenance["scan"]["sources"]["volume"]["sha256"]
        == hashlib.sha256(lines.encode()).hexdigest()
    )
    assert fracture.name == "slices"


@pytest.mark.parametrize("normal", [0, 1, 2])
def test_the_normal_is_found_along_each_axis(tmp_path, normal):
    path = tmp_path / "scan.npy"
    np.save(path, np.moveaxis(VOLUME, 2, normal))  # the other two axes keep their order: the map is the same
    fracture, report = import_volume(path, VOXEL)
    assert report.normal == normal
    thinnest = sorted(report.thickness)
    assert report.thickness[normal] == thinnest[0] and thinnest[1] >= 1.5 * thinnest[0]
    assert np.abs(fracture.aperture / VOXEL - SEPARATION).max() <= 1
    given, _ = import_volume(path, VOXEL, normal=normal)
    np.testing.assert_array_equal(given.aperture, fracture.aperture)


def test_the_thickness_of_parallel_plates_is_their_gap_and_their_sides(tmp_path):
    # A gap of 4 voxels across axis 2 of a 10 x 12 x 16 volume: every run along axis 0 is 10 long, along 1 is 12.
    volume = np.zeros((10, 12, 16), np.uint8)
    volume[:, :, 5:9] = 1
    path = tmp_path / "plates.npy"
    np.save(path, volume)
    fracture, report = import_volume(path, VOXEL)
    assert report.thickness == (10.0, 12.0, 4.0) and report.normal == 2
    np.testing.assert_allclose(fracture.aperture, 4 * VOXEL)
    np.testing.assert_allclose(fracture.top, 2 * VOXEL)


def test_isolated_pores_are_dropped_and_counted(tmp_path):
    clean, _ = import_volume(_write(VOLUME, "npy", tmp_path)[0], VOXEL)
    volume = VOLUME.copy()
    # The walls lie above z = 4.7 everywhere (mid-plane >= 9.7, half-gap <= 5): below, the rock is solid.
    volume[3, 5, 1] = volume[10, 20, 1] = volume[15, 2, 0] = 1  # three single voxels
    volume[7, 7, 1] = volume[7, 8, 1] = 1  # a cluster of two
    assert BOTTOM.min() > 4
    path = tmp_path / "specks.npy"
    np.save(path, volume)
    fracture, report = import_volume(path, VOXEL)
    assert report.dropped_voxels == 5
    assert report.pore_voxels == int(VOLUME.sum()) + 5
    np.testing.assert_array_equal(fracture.aperture, clean.aperture)


def test_a_column_of_two_runs_is_reported_and_keeps_its_pore_count(tmp_path):
    row, col = 4, 9
    pore = np.flatnonzero(VOLUME[row, col])
    assert pore.size >= 5
    volume = VOLUME.copy()
    volume[row, col, pore[2]] = 0  # a grain inside the gap: two runs of pore in this column
    path = tmp_path / "grain.npy"
    np.save(path, volume)
    fracture, report = import_volume(path, VOXEL)
    assert report.multi_run_columns == 1
    assert fracture.aperture[row, col] == pytest.approx((pore.size - 1) * VOXEL)
    # The walls, the aperture apart, centred on the mean height of the pore voxels' centres; compared with the
    # next column, of one run from face to face.
    centre = np.mean(np.delete(pore, 2) + 0.5)
    neighbour = np.flatnonzero(VOLUME[row, col + 1])
    assert np.all(np.diff(neighbour) == 1)
    mid = 0.5 * (fracture.bottom + fracture.top) / VOXEL
    assert mid[row, col] - mid[row, col + 1] == pytest.approx(
        centre - 0.5 * (neighbour[0] + neighbour[-1] + 1)
    )
    assert fracture.top[row, col] - fracture.bottom[row, col] == pytest.approx(fracture.aperture[row, col])


def test_pore_label_picks_one_phase_of_several(tmp_path):
    labelled = VOLUME * 3  # pore labelled 3
    labelled[:, :, :2] = 7  # a mineral layer, another nonzero label, that is no pore
    path = tmp_path / "labels.npy"
    np.save(path, labelled)
    fracture, report = import_volume(path, VOXEL, pore_label=3)
    assert report.normal == 2
    assert np.abs(fracture.aperture / VOXEL - SEPARATION).max() <= 1


def test_flow_along_rows_transposes_the_map(tmp_path):
    path, _ = _write(VOLUME, "npy", tmp_path)
    columns, _ = import_volume(path, VOXEL)
    rows, report = import_volume(path, VOXEL, flow_axis="rows")
    assert rows.shape == SHAPE[::-1]
    np.testing.assert_array_equal(rows.aperture, columns.aperture.T)
    assert rows.provenance["scan"]["options"]["flow_axis"] == "rows"
    assert report.shape == SHAPE[::-1]


def test_walls_cut_by_the_volume_are_reported(tmp_path):
    volume = VOLUME.copy()
    # Twelve columns open from their gap's first voxel up to the volume's last slice: their top wall is cut off.
    volume[0:3, 0:4] = np.arange(DEPTH) >= _first_pore(BOTTOM)[0:3, 0:4, None]
    path = tmp_path / "cut.npy"
    np.save(path, volume)
    _, report = import_volume(path, VOXEL)
    assert report.cut_columns == 12


def _block_mean(values: np.ndarray, factor: int) -> np.ndarray:
    """Means of whole factor x factor blocks, pixel by pixel: the last rows and columns that fill none left out."""
    rows, cols = values.shape[0] // factor, values.shape[1] // factor
    out = np.empty((rows, cols))
    for i in range(rows):
        for j in range(cols):
            out[i, j] = values[i * factor : (i + 1) * factor, j * factor : (j + 1) * factor].mean()
    return out


def test_crop_and_coarsen_of_a_volume(tmp_path):
    path, _ = _write(VOLUME, "npy", tmp_path)
    full, _ = import_volume(path, VOXEL)
    cropped, report = import_volume(path, VOXEL, crop=(2, 20, 5, 31))
    assert cropped.shape == report.shape == (18, 26)
    # The same pore voxels, the walls moved by another mid-plane mean.
    np.testing.assert_allclose(cropped.aperture, full.aperture[2:20, 5:31], rtol=0, atol=1e-12 * VOXEL)
    coarse, report = import_volume(path, VOXEL, coarsen=3)
    assert coarse.shape == (8, 13) and report.trimmed == (0, 1)
    assert coarse.voxel_size == pytest.approx(3 * VOXEL)
    np.testing.assert_allclose(coarse.aperture, _block_mean(full.aperture, 3), rtol=1e-12)
    np.testing.assert_allclose(coarse.top - coarse.bottom, coarse.aperture, rtol=0, atol=1e-12 * VOXEL)


# ------------------------------------------------------------------------------------------------ height maps

PIXEL = 1e-4  # metres
# Heights in mm: the top crosses below the bottom on a patch (a contact pressed together, or noise).
_y, _x = np.mgrid[0:16, 0:24]
WALL_BOTTOM = 0.05 * np.sin(2 * np.pi * _x / 24) + 0.02 * np.cos(2 * np.pi * _y / 16)
WALL_TOP = WALL_BOTTOM + 0.04 + 0.05 * np.sin(2 * np.pi * _x / 12) * np.sin(2 * np.pi * _y / 16)
OVERLAP = WALL_TOP < WALL_BOTTOM


def test_walls_in_mm_with_a_flipped_top(tmp_path):
    assert 0 < OVERLAP.sum() < OVERLAP.size / 4
    top, bottom = tmp_path / "s3_top.csv", tmp_path / "s3_bottom.npy"
    # The top measured from its own side: heights down into the gap, the negated heights.
    np.savetxt(top, -WALL_TOP, delimiter=",")
    np.save(bottom, WALL_BOTTOM)
    fracture, report = import_walls(top, bottom, PIXEL, units="mm", flip=True)
    truth = np.maximum(WALL_TOP - WALL_BOTTOM, 0) * 1e-3
    np.testing.assert_allclose(fracture.aperture, truth, rtol=0, atol=1e-15)
    assert report.overlap_pixels == int(OVERLAP.sum())
    assert report.contact_fraction == pytest.approx(np.mean(truth == 0))
    # Overlapping walls touch at their mean height; elsewhere each wall keeps its height (up to one shift).
    np.testing.assert_array_equal(fracture.bottom[OVERLAP], fracture.top[OVERLAP])
    shift = fracture.bottom[~OVERLAP] - WALL_BOTTOM[~OVERLAP] * 1e-3
    np.testing.assert_allclose(shift, shift[0], rtol=0, atol=1e-15)
    middle = 0.5 * (WALL_BOTTOM + WALL_TOP)[OVERLAP] * 1e-3
    np.testing.assert_allclose(fracture.top[OVERLAP], middle + shift[0], rtol=0, atol=1e-15)
    assert abs(np.mean(fracture.bottom + fracture.top)) < 1e-15
    assert fracture.name == "s3" and fracture.voxel_size == PIXEL
    record = fracture.provenance["scan"]
    assert record["options"] == {"pixel_size": PIXEL, "units": "mm", "flip": True, "crop": None, "coarsen": 1}
    assert record["sources"]["top"]["sha256"] == hashlib.sha256(top.read_bytes()).hexdigest()
    assert record["sources"]["bottom"]["path"] == str(bottom)


def test_walls_in_um_from_tiff_unflipped_and_coarsened(tmp_path):
    top, bottom = tmp_path / "top.tif", tmp_path / "bottom.tif"
    tifffile.imwrite(top, (WALL_TOP * 1e3).astype(np.float32))
    tifffile.imwrite(bottom, (WALL_BOTTOM * 1e3).astype(np.float32))
    fracture, report = import_walls(top, bottom, PIXEL, units="um", crop=(1, 16, 0, 24), coarsen=2)
    assert fracture.shape == report.shape == (7, 12) and report.trimmed == (1, 0)
    clipped = np.maximum(WALL_TOP - WALL_BOTTOM, 0)[1:15] * 1e-3
    np.testing.assert_allclose(fracture.aperture, _block_mean(clipped, 2), rtol=0, atol=1e-9)
    assert fracture.voxel_size == 2 * PIXEL


# ---------------------------------------------------------------------------------------------- aperture maps

GREY = np.zeros((12, 18), dtype=np.uint8)
GREY[:] = 40 + 3 * np.arange(18)  # open from the inlet to the outlet
GREY[2:5, 4:9] = 0  # a contact spot


@pytest.mark.parametrize("mode", ["L", "I;16", "RGB"])
def test_aperture_from_a_png_with_a_scale(tmp_path, mode):
    path = tmp_path / "map.png"
    # 16 bits: levels beyond 255, each a hundredth of a micrometre.
    levels, scale = (GREY.astype(np.uint16) * 200, 1e-8) if mode == "I;16" else (GREY, 1e-6)
    image = Image.fromarray(levels) if mode == "I;16" else Image.fromarray(GREY).convert(mode)
    image.save(path)
    fracture, report = import_aperture(path, PIXEL, scale=scale)
    np.testing.assert_allclose(fracture.aperture, levels * scale, rtol=1e-12)
    assert report.contact_fraction == pytest.approx(15 / GREY.size)
    assert fracture.bottom is None and fracture.top is None
    assert fracture.provenance["scan"]["options"]["scale"] == scale


def test_aperture_from_tiff_csv_and_npy(tmp_path):
    tiff, csv, npy = tmp_path / "a.tif", tmp_path / "a.txt", tmp_path / "a.npy"
    tifffile.imwrite(tiff, GREY.astype(np.uint16))
    np.savetxt(csv, GREY * 1.5)  # micrometres, whitespace-separated
    np.save(npy, GREY * 2e-6)  # metres
    by_scale, _ = import_aperture(tiff, PIXEL, scale=2e-6)
    in_um, _ = import_aperture(csv, PIXEL, units="um")
    in_m, _ = import_aperture(npy, PIXEL, units="m")
    for fracture, truth in ((by_scale, GREY * 2e-6), (in_um, GREY * 1.5e-6), (in_m, GREY * 2e-6)):
        np.testing.assert_allclose(fracture.aperture, truth, rtol=1e-12)


def test_aperture_crop_and_coarsen(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, GREY.astype(float))
    fracture, report = import_aperture(path, PIXEL, units="um", crop=(1, 12, 2, 18), coarsen=4)
    assert fracture.shape == (2, 4) and report.trimmed == (3, 0)
    np.testing.assert_allclose(fracture.aperture, _block_mean(GREY[1:12, 2:18] * 1e-6, 4), rtol=1e-12)
    assert fracture.voxel_size == 4 * PIXEL


def test_a_winding_open_path_joins_the_inlet_to_the_outlet(tmp_path):
    # A channel that bends, with dead ends: no row is open from the inlet to the outlet, yet it flows.
    ap = np.zeros((7, 9))
    ap[1, 0:7] = ap[1:6, 6] = ap[5, 2:7] = ap[3:6, 2] = ap[3, 2:9] = 1.0
    path = tmp_path / "winding.npy"
    np.save(path, ap)
    assert not ap.all(axis=1).any()
    fracture, report = import_aperture(path, PIXEL, units="um")
    assert report.contact_fraction == pytest.approx(np.mean(ap == 0))
    np.testing.assert_array_equal(fracture.aperture, ap * 1e-6)
