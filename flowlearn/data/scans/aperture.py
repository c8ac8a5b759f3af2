"""Import a fracture from a map of its aperture: an image of grey levels, or lengths in a table or array."""

from __future__ import annotations

import os

import numpy as np

from flowlearn.checks import check_setting, is_number
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
from flowlearn.errors import SettingError


def import_aperture(
    path: str | os.PathLike,
    pixel_size: float,
    *,
    scale: float | None = None,
    units: str | None = None,
    crop: tuple[int, int, int, int] | None = None,
    coarsen: int = 1,
) -> tuple[Fracture, MapReport]:
    """A fracture from an aperture map, without walls.

    Args:
        path: a 2D map (CSV or text, TIFF, PNG or .npy; see :func:`~flowlearn.data.scans.common.read_map`) of
            values >= 0, finite; 0 marks a contact.
        pixel_size: metres between pixels (square pixels), in :data:`~flowlearn.checks.VOXEL_SIZE`.
        scale: metres per grey level (value) of an image: aperture = value x scale.
        units: the unit of values that are lengths: "m", "mm" or "um". Exactly one of ``scale`` and ``units``.
        crop: (row0, row1, col0, col1), ends excluded: the part of the map to import.
        coarsen: an integer factor: block means of ``coarsen`` x ``coarsen`` pixels; the last rows and columns
            that do not fill a block are trimmed.

    The flow runs along the map's columns, inlet at column 0.

    Returns:
        The fracture (float64 (H, W) aperture in metres, voxel size ``pixel_size * coarsen``, no walls or pressure;
        named after the file, provenance ``scan``: the source's path and SHA-256, every option and the report) and
        the :class:`~flowlearn.data.scans.common.MapReport`.

    Raises:
        SettingError: an option out of its range, or both or neither of ``scale`` and ``units``.
        FileNotFoundError: no file at ``path``.
        DataValidationError: naming the file, for an unreadable file, negative, NaN or infinite values, no open
            path from the inlet to the outlet, or a map larger than memory allows.
    """
    pixel = check_length(pixel_size, "pixel_size")
    if (scale is None) == (units is None):
        raise SettingError(
            "scale",
            "or units: give exactly one (scale: metres per grey level of an image; units: the unit of values that "
            f"are lengths, m, mm or um), got scale={scale!r}, units={units!r}",
        )
    if scale is None:
        metres = check_unit(units)
    else:
        check_setting(
            is_number(scale) and scale > 0, "scale", "must be a number > 0 (metres per grey level)", scale
        )
        metres = float(scale)
    factor = check_coarsen(coarsen)
    found = existing(path, "path")
    values = read_map(found, "path")
    check_values(values, found, "apertures", negative=False)
    rows, cols = crop_slices(crop, values.shape)
    (aperture,), trimmed = coarsen_maps([metres * values[rows, cols]], factor)
    check_open_path(aperture, found, "crop to a part that is open from the inlet to the outlet")
    report = MapReport(shape=aperture.shape, contact_fraction=float(np.mean(aperture == 0)), trimmed=trimmed)
    record = {
        "function": "import_aperture",
        "sources": {"aperture": source(found, [found])},
        "options": {
            "pixel_size": pixel,
            "scale": None if scale is None else metres,
            "units": units,
            "crop": None if crop is None else [int(n) for n in crop],
            "coarsen": factor,
        },
        "report": report_record(report),
    }
    fracture = make_fracture(found.stem, aperture, None, pixel * factor, record, found)
    return fracture, report
