"""Import a fracture from two height maps: the surfaces of its two walls, measured one by one (profilometry)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from flowlearn.checks import check_setting
from flowlearn.data.scans.common import (
    MapReport,
    check_coarsen,
    check_length,
    check_open_path,
    check_unit,
    check_values,
    coarsen_maps,
    crop_slices,
    existing,
    make_fracture,
    read_map,
    report_record,
    source,
)
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError


@dataclass(frozen=True)
class WallsReport(MapReport):
    """What :func:`import_walls` found (see :class:`~flowlearn.data.scans.common.MapReport` for the rest).

    Attributes:
        overlap_pixels: pixels (within ``crop``, before coarsening) where the top surface lay below the bottom one:
            both walls were set to their mean height there, so that they touch.
    """

    overlap_pixels: int


def import_walls(
    top_path: str | os.PathLike,
    bottom_path: str | os.PathLike,
    pixel_size: float,
    *,
    units: str = "m",
    flip: bool = False,
    crop: tuple[int, int, int, int] | None = None,
    coarsen: int = 1,
) -> tuple[Fracture, WallsReport]:
    """A fracture from the height maps of its top and bottom walls.

    Args:
        top_path, bottom_path: 2D maps of one shape (CSV or text, TIFF, PNG or .npy; see
            :func:`~flowlearn.data.scans.common.read_map`), pixel (i, j) of both the same point of the fracture
            plane: heights in ``units`` from one reference plane, upwards (from the bottom wall towards the top
            one). Heights may be negative (a surface measured about its mean), not NaN or infinite.
        pixel_size: metres between pixels (square pixels), in :data:`~flowlearn.checks.VOXEL_SIZE`.
        units: the unit of the heights: "m", "mm" or "um".
        flip: the top map holds heights measured from the top wall's own side, as a surface turned over to be
            scanned face up: increasing downwards, into the gap, from the same reference plane. They are negated
            (top = -values). The map is not mirrored: turning a specimen over mirrors it, which must be undone
            before (pixel (i, j) of both maps is one point).
        crop: (row0, row1, col0, col1), ends excluded: the part of the maps to import.
        coarsen: an integer factor: block means of ``coarsen`` x ``coarsen`` pixels of both walls; the last rows
            and columns that do not fill a block are trimmed.

    The aperture is max(top - bottom, 0). Where the top lies below the bottom (the surfaces overlap: a contact
    pressed together, noise or a registration error), both walls are set to their mean height, so that they touch
    there (the report counts these pixels). The walls then never cross, so that the block mean of the aperture is
    the separation of the block means of the walls, as the schema requires of a coarsened map. The walls are moved
    so that their mid-plane's mean is 0. The flow runs along the map's columns, inlet at column 0.

    Returns:
        The fracture (float64 (H, W) aperture, bottom and top in metres, voxel size ``pixel_size * coarsen``, no
        pressure; named after the files' common prefix, provenance ``scan``: both sources' paths and SHA-256,
        every option and the report) and the :class:`WallsReport`.

    Raises:
        SettingError: an option out of its range (naming it and the value).
        FileNotFoundError: no file at ``top_path`` or ``bottom_path``.
        DataValidationError: naming the file, for an unreadable file, maps of different shapes, NaN or infinite
            heights, no open path from the inlet to the outlet, or a map larger than memory allows.
    """
    pixel = check_length(pixel_size, "pixel_size")
    metres = check_unit(units)
    check_setting(isinstance(flip, bool), "flip", "must be True or False", flip)
    factor = check_coarsen(coarsen)
    top_file, bottom_file = existing(top_path, "top_path"), existing(bottom_path, "bottom_path")
    top, bottom = read_map(top_file, "top_path"), read_map(bottom_file, "bottom_path")
    if top.shape != bottom.shape:
        raise DataValidationError(
            f"{top_file}: shape {top.shape}, but {bottom_file} has shape {bottom.shape}; the two height maps must "
            "be of one shape, pixel for pixel one point of the fracture"
        )
    check_values(top, top_file, "top heights", negative=True)
    check_values(bottom, bottom_file, "bottom heights", negative=True)
    rows, cols = crop_slices(crop, top.shape)
    top = (-metres if flip else metres) * top[rows, cols]
    bottom = metres * bottom[rows, cols]
    overlap = top < bottom
    mid = 0.5 * (top + bottom)
    top, bottom = np.where(overlap, mid, top), np.where(overlap, mid, bottom)
    (aperture, bottom, top), trimmed = coarsen_maps([top - bottom, bottom, top], factor)
    both = f"{top_file} and {bottom_file}"
    check_open_path(aperture, both, "are top_path and bottom_path swapped, or does the top need flip=True?")
    report = WallsReport(
        shape=aperture.shape,
        contact_fraction=float(np.mean(aperture == 0)),
        trimmed=trimmed,
        overlap_pixels=int(np.count_nonzero(overlap)),
    )
    record = {
        "function": "import_walls",
        "sources": {"top": source(top_file, [top_file]), "bottom": source(bottom_file, [bottom_file])},
        "options": {
            "pixel_size": pixel,
            "units": units,
            "flip": flip,
            "crop": None if crop is None else [int(n) for n in crop],
            "coarsen": factor,
        },
        "report": report_record(report),
    }
    # Named after what the two file names share ("s3" of "s3_top" and "s3_bottom"): a prefix of characters.
    name = os.path.commonprefix([top_file.stem, bottom_file.stem]).rstrip("_-. ") or top_file.stem  # noqa: RUF071
    fracture = make_fracture(name, aperture, (bottom, top), pixel * factor, record, both)
    return fracture, report
