"""Import a fracture from a segmented 3D scan (micro-CT): the pore voxels of the gap between two rock walls.

The volume's axes keep their order: the axis across the fracture is the *normal*, and the map's rows and columns
are the other two axes in their order. Along each line across the fracture (a map column) the pore voxels give the
aperture and the two walls. Every step works on whole arrays (one comparison, one labelling, counts and arg-maxima
along the normal), so that a 1000 x 1000 x 200 volume imports in seconds (``benchmarks/bench_import.py``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tifffile
from scipy import ndimage

from flowlearn.checks import check_setting
from flowlearn.data.scans.common import (
    TIFF_SUFFIXES,
    MapReport,
    as_integer,
    check_coarsen,
    check_length,
    check_memory,
    coarsen_maps,
    crop_slices,
    existing,
    make_fracture,
    open_npy,
    read_tiff,
    report_record,
    shape_text,
    source,
)
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError, SettingError

# How much thinner than along every other axis the fracture must be along an axis for that axis to be taken as its
# normal, in mean pore-run thickness. A fracture is a gap far thinner than it is wide: tens of voxels across,
# hundreds along. Where the two thinnest axes are within this factor of each other (a cube of porous rock, a gap
# as thick as the scan is wide), guessing could pick the wrong axis, and the import stops instead.
NORMAL_MARGIN = 1.5
# Bytes per voxel an import holds at its peak beyond the file's data that it reads into memory (TIFF): the bool
# pore and ndimage.label's int32 labels (5), and one for what lies beside them (slabs of the cluster count, the
# per-column maps); benchmarks/bench_import.py measures the peak. A .npy or raw volume is mapped from the file,
# not read into memory.
IMPORT_BYTES_PER_VOXEL = 6
# Voxels handled at a time where a whole-volume temporary is avoided: 1 MB of bool, 8 MB of int64 labels.
_SLAB = 2**20


@dataclass(frozen=True)
class VolumeReport(MapReport):
    """What :func:`import_volume` found (see :class:`~flowlearn.data.scans.common.MapReport` for the rest).

    Attributes:
        normal: the volume's axis across the fracture (0, 1 or 2), detected or given.
        thickness: the mean pore-run thickness along axes 0, 1 and 2, voxels, where the normal was detected; None
            where it was given.
        pore_voxels: pore voxels in the volume (within ``crop``).
        dropped_voxels: pore voxels left out because they are not connected to the fracture (isolated pores, and
            clusters that are smaller than it or do not join its inlet to its outlet).
        multi_run_columns: map columns (before coarsening) whose pore voxels along the normal form several separate
            runs (a grain or a bridge of rock inside the gap).
        cut_columns: map columns whose pore reaches the first or the last slice along the normal: their wall lies
            outside the volume, so their aperture is a lower bound.
    """

    normal: int
    thickness: tuple[float, float, float] | None
    pore_voxels: int
    dropped_voxels: int
    multi_run_columns: int
    cut_columns: int


def import_volume(
    path: str | os.PathLike,
    voxel_size: float,
    *,
    pore_label: int | None = None,
    normal: int | None = None,
    flow_axis: str = "columns",
    shape: tuple[int, int, int] | None = None,
    dtype: str | None = None,
    crop: tuple[int, int, int, int] | None = None,
    coarsen: int = 1,
) -> tuple[Fracture, VolumeReport]:
    """A fracture from a segmented 3D volume of pore and solid voxels.

    Args:
        path: a multi-page TIFF (.tif, .tiff: pages are axis 0), a folder of single-page TIFF slices (axis 0, in
            the natural order of their names: ``s2`` before ``s10``), a .npy file, or a raw file (any other name) of
            ``shape`` and ``dtype`` in C order.
        voxel_size: metres per voxel (cubic voxels), in :data:`~flowlearn.checks.VOXEL_SIZE`.
        pore_label: the value of pore voxels; None takes every nonzero voxel as pore.
        normal: the volume's axis across the fracture (0, 1 or 2); None detects it as the axis along which the
            pore is thinnest: the mean length of its runs of pore voxels (pore voxels over runs) along it must be
            :data:`NORMAL_MARGIN` times below that along the next thinnest axis.
        flow_axis: "columns": the flow runs along the map's columns (the last of the two other axes), inlet at
            column 0; "rows": along its rows (the first of them), which the map returned is transposed for, so
            that its flow still runs along axis -1 from column 0.
        shape, dtype: the axes and numpy dtype (``"uint8"``, ``"<u2"``) of a raw file; for raw files only.
        crop: (row0, row1, col0, col1), ends excluded: the part of the map to import, in the rows and columns of
            the two other axes in their order (before any transposition for ``flow_axis="rows"``). Applied before
            the pore's connectivity is analysed.
        coarsen: an integer factor: block means of ``coarsen`` x ``coarsen`` map pixels (aperture and walls); the
            last rows and columns that do not fill a block are trimmed.

    Along each map column (a line along the normal), of the pore voxels kept (those face-connected to the
    fracture: the largest cluster joining the inlet face to the outlet face):

    * the aperture is their count times ``voxel_size``;
    * where they form one run, the bottom wall is the lower face of its first voxel and the top wall the upper face
      of its last; where they form several runs (a grain or a bridge of rock in the gap), the walls are centred on
      the mean position of the pore voxels, the aperture apart: the outermost faces would enclose the rock
      between the runs, a wider gap than the pore holds, and the schema requires the walls' separation to be the
      aperture;
    * where there are none, the walls touch (aperture 0), at the mid-plane height of the nearest column with pore.

    Heights are metres along the normal, both walls moved so that their mid-plane's mean is 0.

    Returns:
        The fracture (float64 (H, W) aperture, bottom and top, voxel size ``voxel_size * coarsen``, flow along x, no
        pressure; named after the file or folder, provenance ``scan``: the source's path and SHA-256, the format,
        every option and the report) and the :class:`VolumeReport`.

    Raises:
        SettingError: an option out of its range (naming it and the value).
        FileNotFoundError: nothing at ``path``.
        DataValidationError: naming the file, for an unreadable, truncated or corrupt file, a raw file whose size is
            not that of ``shape`` and ``dtype``, a volume without pore or without solid, a normal that cannot be
            told, no pore path from the inlet to the outlet, or a volume larger than memory allows.
    """
    voxel = check_length(voxel_size, "voxel_size")
    label = as_integer(pore_label)
    check_setting(
        pore_label is None or label is not None,
        "pore_label",
        "must be None (every nonzero voxel is pore) or an integer",
        pore_label,
    )
    check_setting(
        normal is None or as_integer(normal) in (0, 1, 2),
        "normal",
        "must be None (detected) or 0, 1 or 2 (the volume's axis across the fracture)",
        normal,
    )
    check_setting(flow_axis in ("columns", "rows"), "flow_axis", "must be 'columns' or 'rows'", flow_axis)
    factor = check_coarsen(coarsen)
    found = existing(path, "path")
    volume, kind, files = _read_volume(found, shape, dtype)
    what = "nonzero" if label is None else f"equal to pore_label {label}"
    pore = volume != 0 if label is None else volume == label
    del volume  # the pore is all that is used: a volume read into memory (TIFF) is freed here
    _check_pore(pore, found, what)
    thickness = None
    axis = None if normal is None else as_integer(normal)
    if axis is None:
        thickness = _thickness(pore)
        axis = _detect_normal(thickness, found)
    plane = [a for a in range(3) if a != axis]
    rows, cols = crop_slices(crop, (pore.shape[plane[0]], pore.shape[plane[1]]))
    if crop is not None:
        index = [slice(None)] * 3
        index[plane[0]], index[plane[1]] = rows, cols
        pore = np.ascontiguousarray(pore[tuple(index)])
        _check_pore(pore, found, f"{what} within crop {tuple(crop)}")
    pore_voxels = int(np.count_nonzero(pore))
    flow = plane[1] if flow_axis == "columns" else plane[0]
    keep = _fracture_component(pore, flow, found)
    count, bottom, top, multi = _column_maps(keep, axis)
    cut = int(np.count_nonzero(keep.take(0, axis=axis) | keep.take(-1, axis=axis)))
    maps = [count * voxel, bottom * voxel, top * voxel]
    if flow_axis == "rows":
        maps = [m.T for m in maps]
    # No 2D inlet-outlet check: the fracture's cluster joins them in 3D, and its columns join them on the map.
    (aperture, bottom, top), trimmed = coarsen_maps(maps, factor)
    report = VolumeReport(
        shape=aperture.shape,
        contact_fraction=float(np.mean(aperture == 0)),
        trimmed=trimmed,
        normal=axis,
        thickness=thickness,
        pore_voxels=pore_voxels,
        dropped_voxels=pore_voxels - int(count.sum()),
        multi_run_columns=multi,
        cut_columns=cut,
    )
    record = {
        "function": "import_volume",
        "sources": {"volume": source(found, files)},
        "format": kind,
        "options": {
            "voxel_size": voxel,
            "pore_label": label,
            "normal": None if normal is None else axis,
            "flow_axis": flow_axis,
            "shape": None if shape is None else [int(n) for n in shape],
            "dtype": None if dtype is None else np.dtype(dtype).str,
            "crop": None if crop is None else [int(n) for n in crop],
            "coarsen": factor,
        },
        "report": report_record(report),
    }
    name = found.name if found.is_dir() else found.stem
    fracture = make_fracture(name, aperture, (bottom, top), voxel * factor, record, found)
    return fracture, report


def _read_volume(path: Path, shape: object, dtype: object) -> tuple[np.ndarray, str, list[Path]]:
    """The volume at ``path`` (3D, of its dtype; mapped from the file for .npy and raw), its format ("tiff",
    "tiff slices", "npy", "raw") and the files it was read from (for the checksum)."""
    suffix = path.suffix.lower()
    if path.is_dir():
        kind = "tiff slices"
    elif suffix in TIFF_SUFFIXES:
        kind = "tiff"
    elif suffix == ".npy":
        kind = "npy"
    else:
        kind = "raw"
    if kind != "raw" and (shape is not None or dtype is not None):
        raise SettingError(
            "shape",
            f"and dtype describe raw files only; {path} is read as {kind}, which gives its own (give neither)",
        )
    files = [path]
    if kind == "raw":
        volume = _read_raw(path, shape, dtype)
    elif kind == "npy":
        volume = open_npy(path)
        if volume.ndim == 3:
            check_memory(path, volume.size * IMPORT_BYTES_PER_VOXEL, f"its {shape_text(volume.shape)} volume")
    elif kind == "tiff":
        volume = read_tiff(path, IMPORT_BYTES_PER_VOXEL)
    else:
        files = [
            path / name
            for name in tifffile.natural_sorted(
                [p.name for p in path.iterdir() if p.suffix.lower() in TIFF_SUFFIXES and p.is_file()]
            )
        ]
        volume = _read_slices(path, files)
    if volume.ndim != 3 or min(volume.shape) < 2:
        raise DataValidationError(
            f"{path}: shape {volume.shape}; expected a 3D volume with at least 2 voxels along each axis"
        )
    if volume.dtype.kind not in "biuf":
        raise DataValidationError(
            f"{path}: voxels of dtype {volume.dtype}; expected numbers (pore and solid labels)"
        )
    return volume, kind, files


def _read_raw(path: Path, shape: object, dtype: object) -> np.ndarray:
    """A raw volume of ``shape`` and ``dtype``, C order, mapped from the file after its size is checked."""
    if shape is None or dtype is None:
        raise SettingError(
            "shape",
            f"and dtype are needed to read {path} as a raw volume (a file not ending in .tif, .tiff or .npy, nor a "
            f"folder of TIFF slices); got shape={shape!r}, dtype={dtype!r}",
        )
    dims = [as_integer(n) for n in shape] if isinstance(shape, tuple | list) else []
    check_setting(
        len(dims) == 3 and all(n is not None and n >= 1 for n in dims),
        "shape",
        "must be three integers >= 1 (the raw volume's axes, C order)",
        shape,
    )
    try:
        kind = np.dtype(dtype)
    except TypeError:
        kind = None
    check_setting(
        kind is not None and kind.kind in "biuf",
        "dtype",
        "must be a numeric numpy dtype ('uint8', '<u2', 'float32', ...)",
        dtype,
    )
    expected, actual = math.prod(dims) * kind.itemsize, path.stat().st_size
    if expected != actual:
        raise DataValidationError(
            f"{path}: {actual} bytes, but shape {tuple(dims)} of {kind} takes {expected} bytes: the shape or dtype "
            "is wrong, or the file is truncated"
        )
    check_memory(path, math.prod(dims) * IMPORT_BYTES_PER_VOXEL, f"its {shape_text(dims)} volume")
    return np.memmap(path, dtype=kind, mode="r", shape=tuple(dims))


def _read_slices(folder: Path, files: list[Path]) -> np.ndarray:
    """The single-page TIFF ``files`` of ``folder`` stacked along axis 0: (len(files), H, W) of their dtype."""
    if not files:
        raise DataValidationError(f"{folder}: a folder without TIFF slices (files ending in .tif or .tiff)")
    first = read_tiff(files[0], 0)
    layout = (len(files), *first.shape[1:])
    check_memory(
        folder,
        math.prod(layout) * (first.dtype.itemsize + IMPORT_BYTES_PER_VOXEL),
        f"its {shape_text(layout)} volume of {len(files)} slices",
    )
    volume = np.empty(layout, dtype=first.dtype)
    for index, file in enumerate(files):
        page = first if index == 0 else read_tiff(file, 0)
        if page.shape != (1, *layout[1:]) or page.dtype != first.dtype:
            raise DataValidationError(
                f"{file}: {page.dtype} of {page.shape[0]} page(s) of {page.shape[1:]}; the slices of {folder} must "
                f"be single pages of one shape and dtype, as {files[0].name}: {first.dtype} {layout[1:]}"
            )
        volume[index] = page[0]
    return volume


def _check_pore(pore: np.ndarray, path: Path, what: str) -> None:
    """Raise :class:`DataValidationError` where the bool volume ``pore`` holds no pore, or nothing else."""
    count = np.count_nonzero(pore)
    if count == 0:
        raise DataValidationError(
            f"{path}: no pore voxel (none {what}) among the {pore.size} of the {shape_text(pore.shape)} volume: "
            "nothing to import; is pore_label right?"
        )
    if count == pore.size:
        raise DataValidationError(
            f"{path}: every voxel of the {shape_text(pore.shape)} volume is pore ({what}): no walls; is the "
            "segmentation inverted (give pore_label)?"
        )


def _thickness(pore: np.ndarray) -> tuple[float, float, float]:
    """The mean length of the runs of pore voxels along each axis of the bool volume ``pore``, voxels: its pore
    voxels over its runs along that axis. Each run has two ends, each a change between solid and pore along the
    axis or a pore voxel on the first or the last slice."""
    changes = [0, 0, 0]
    # Slab by slab along axis 0 (each with the next slab's first plane, for the changes between them): the
    # comparisons stay in cache, and no temporary the size of the volume is made (three took longer to allocate
    # in a fresh process than to compute).
    block = max(1, _SLAB // pore[0].size)
    for start in range(0, pore.shape[0], block):
        part = pore[start : start + block + 1]
        own = part[:block]
        changes[0] += np.count_nonzero(part[1:] != part[:-1])
        changes[1] += np.count_nonzero(own[:, 1:] != own[:, :-1])
        changes[2] += np.count_nonzero(own[:, :, 1:] != own[:, :, :-1])
    total = np.count_nonzero(pore)
    thickness = []
    for axis in range(3):
        ends = np.count_nonzero(pore.take(0, axis=axis)) + np.count_nonzero(pore.take(-1, axis=axis))
        thickness.append(float(2 * total / (changes[axis] + ends)))
    return tuple(thickness)


def _detect_normal(thickness: tuple[float, float, float], path: Path) -> int:
    """The axis of the smallest ``thickness`` where it is :data:`NORMAL_MARGIN` times below the next; else
    :class:`DataValidationError` saying the thickness along each axis and how to give the normal."""
    order = sorted(range(3), key=thickness.__getitem__)
    if thickness[order[1]] < NORMAL_MARGIN * thickness[order[0]]:
        along = ", ".join(f"{t:.3g}" for t in thickness)
        raise DataValidationError(
            f"{path}: cannot tell the fracture's normal: the mean thickness of the pore runs is {along} voxels along "
            f"axes 0, 1, 2, and none is {NORMAL_MARGIN:g} times below the others; give normal= (0, 1 or 2, the "
            "axis across the fracture)"
        )
    return order[0]


def _fracture_component(pore: np.ndarray, flow: int, path: Path) -> np.ndarray:
    """The fracture's pore voxels: the largest cluster of ``pore`` (face-connected) that joins the first slice to
    the last along the volume axis ``flow`` (the inlet to the outlet). Written into ``pore``'s memory, which is
    returned: the volume's largest array is not made twice."""
    labels, clusters = ndimage.label(pore)
    ends = np.intersect1d(labels.take(0, axis=flow), labels.take(-1, axis=flow))
    ends = ends[ends > 0]
    if not ends.size:
        raise DataValidationError(
            f"{path}: no pore cluster (face-connected) joins the inlet to the outlet, the first and last slices "
            f"along volume axis {flow}, among its {clusters} cluster(s): nothing would flow; is flow_axis right "
            "('columns' or 'rows')?"
        )
    # Cluster sizes counted a slab at a time: np.bincount copies its input to int64 (of the whole volume, 8 bytes a
    # voxel, more than the rest of the import holds), and runs several times faster on slabs that stay in cache.
    sizes = np.zeros(clusters + 1, dtype=np.int64)
    flat = labels.reshape(-1)
    for start in range(0, flat.size, _SLAB):
        sizes += np.bincount(flat[start : start + _SLAB], minlength=clusters + 1)
    return np.equal(labels, ends[np.argmax(sizes[ends])], out=pore)


def _column_maps(keep: np.ndarray, normal: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per line of the bool volume ``keep`` along ``normal``: the count of its pore voxels, the bottom and top
    walls (float64, voxels along ``normal`` from the volume's first face), see :func:`import_volume` for the rule;
    and the number of lines of several runs. Maps are (H, W): the two other axes in their order."""
    depth = keep.shape[normal]
    count = np.count_nonzero(keep, axis=normal)
    first = np.argmax(keep, axis=normal)
    last = depth - 1 - np.argmax(np.flip(keep, axis=normal), axis=normal)
    bottom, top = first.astype(np.float64), last + 1.0
    pore = count > 0
    # A line of one run holds as many pore voxels as its span; fewer where solid lies between runs.
    multi = pore & (count < last - first + 1)
    if multi.any():
        rows, cols = np.nonzero(multi)
        lines = np.moveaxis(keep, normal, -1)[rows, cols]  # (lines, depth): only the lines of several runs
        # einsum casts the bool lines in buffers, never the whole of them to float64.
        centre = np.einsum("ij,j->i", lines, np.arange(depth) + 0.5) / count[rows, cols]
        bottom[rows, cols] = centre - 0.5 * count[rows, cols]
        top[rows, cols] = centre + 0.5 * count[rows, cols]
    if not pore.all():
        nearest = ndimage.distance_transform_edt(~pore, return_distances=False, return_indices=True)
        mid = (0.5 * (bottom + top))[tuple(nearest)]
        bottom, top = np.where(pore, bottom, mid), np.where(pore, top, mid)
    return count, bottom, top, int(np.count_nonzero(multi))
