"""What the three importers of :mod:`flowlearn.data.scans` share: reading files, checking options, cropping,
coarsening, the inlet-outlet check, checksums and the memory check, and the fracture they return.

Maps are (H, W) in the source's order; lengths are metres. A message about a file starts with its path; one about an
option is a :class:`~flowlearn.errors.SettingError` that starts with the option's name.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import numbers
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
from scipy import ndimage

from flowlearn.checks import available_memory, check_setting, check_voxel_size, nonfinite
from flowlearn.data.files import check_path
from flowlearn.data.schema import MIN_FLOW_LENGTH, Fracture, validate_fracture
from flowlearn.errors import DataValidationError

# Metres per unit of the lengths a map may hold.
LENGTH_UNITS = {"m": 1.0, "mm": 1e-3, "um": 1e-6}
TIFF_SUFFIXES = (".tif", ".tiff")
# The formats of a 2D map, by the file's suffix (lower case).
MAP_FORMATS = {
    ".csv": "csv",
    ".txt": "csv",
    ".npy": "npy",
    ".png": "png",
    **dict.fromkeys(TIFF_SUFFIXES, "tiff"),
}
# Bytes per pixel an import of a 2D map holds at its peak: the values, the aperture, two walls and two
# temporaries, float64 each.
MAP_BYTES_PER_PIXEL = 48
# The fewest characters a value of a text map takes: one digit and a delimiter (or the line's end). A CSV file of N
# bytes holds at most N / 2 values, the bound its memory check uses before parsing it.
CSV_BYTES_PER_VALUE = 2
# Bytes read at a time when computing a checksum.
_CHUNK = 1 << 22


@dataclass(frozen=True)
class MapReport:
    """What an import found, beside the fracture it returns.

    Attributes:
        shape: (H, W) of the map returned (after crop and coarsen), pixels.
        contact_fraction: the fraction of its pixels whose aperture is 0 (the walls touch).
        trimmed: (rows, columns) dropped from the ends of the map (last rows, last columns) because they did not
            fill a block of ``coarsen`` pixels; (0, 0) without coarsening.
    """

    shape: tuple[int, int]
    contact_fraction: float
    trimmed: tuple[int, int]


def as_integer(value: object) -> int | None:
    """``value`` as an int where it is an integer (numpy's included, bools not), else None."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        return int(value)
    return None


def check_length(value: object, option: str) -> float:
    """``value`` as a float where it is a voxel or pixel size in :data:`~flowlearn.checks.VOXEL_SIZE` (metres),
    else :class:`~flowlearn.errors.SettingError` naming ``option``."""
    check_voxel_size(value, option)
    return float(value)


def check_unit(value: object, option: str = "units") -> float:
    """Metres per unit of ``value`` ("m", "mm" or "um"), else :class:`~flowlearn.errors.SettingError`."""
    known = isinstance(value, str) and value in LENGTH_UNITS
    check_setting(known, option, f"must be one of {', '.join(LENGTH_UNITS)}", value)
    return LENGTH_UNITS[value]


def check_coarsen(value: object) -> int:
    """``value`` as an int where it is an integer >= 1, else :class:`~flowlearn.errors.SettingError`."""
    factor = as_integer(value)
    check_setting(factor is not None and factor >= 1, "coarsen", "must be an integer >= 1", value)
    return factor


def crop_slices(crop: object, shape: tuple[int, int]) -> tuple[slice, slice]:
    """The row and column slices of ``crop`` = (row0, row1, col0, col1), ends excluded, on a map of ``shape``
    (rows, columns as the source holds them); (all, all) where ``crop`` is None.

    Raises:
        SettingError: for ``crop`` unless it is four integers with 0 <= row0 < row1 <= H and 0 <= col0 < col1 <= W.
    """
    if crop is None:
        return slice(None), slice(None)
    rows, cols = shape
    bounds = [as_integer(v) for v in crop] if isinstance(crop, tuple | list) else []
    ok = len(bounds) == 4 and None not in bounds
    if ok:
        r0, r1, c0, c1 = bounds
        ok = 0 <= r0 < r1 <= rows and 0 <= c0 < c1 <= cols
    check_setting(
        ok,
        "crop",
        f"must be (row0, row1, col0, col1), integers with 0 <= row0 < row1 <= {rows} and 0 <= col0 < col1 <= {cols} "
        f"(the {rows}x{cols} map's rows and columns, ends excluded)",
        crop,
    )
    return slice(r0, r1), slice(c0, c1)


def coarsen_maps(maps: Sequence[np.ndarray], factor: int) -> tuple[list[np.ndarray], tuple[int, int]]:
    """Block means of ``factor`` x ``factor`` pixels of each float (H, W) map of ``maps`` (all of one shape).

    Rows and columns at the ends (the last ones) that do not fill a block are trimmed, not padded: a padded block
    would average in pixels that were not measured. Returns the coarse maps, float64 (H // factor, W // factor), and
    the (rows, columns) trimmed.

    Raises:
        SettingError: for ``coarsen`` where it shrinks the map to fewer than 2 rows or
            :data:`~flowlearn.data.schema.MIN_FLOW_LENGTH` columns (the inlet, the outlet and one between); a map
            that small to begin with is the schema's to refuse, naming the file.
    """
    rows, cols = maps[0].shape
    coarse = (rows // factor, cols // factor)
    check_setting(
        factor == 1 or (coarse[0] >= 2 and coarse[1] >= MIN_FLOW_LENGTH),
        "coarsen",
        f"must leave at least 2 rows and {MIN_FLOW_LENGTH} columns of the {rows}x{cols} map (at most "
        f"{max(min(rows // 2, cols // MIN_FLOW_LENGTH), 1)})",
        factor,
    )
    trimmed = (rows - coarse[0] * factor, cols - coarse[1] * factor)
    if factor == 1:
        return [np.asarray(m, dtype=np.float64) for m in maps], trimmed
    blocks = [
        m[: coarse[0] * factor, : coarse[1] * factor].reshape(coarse[0], factor, coarse[1], factor)
        for m in maps
    ]
    return [b.mean(axis=(1, 3), dtype=np.float64) for b in blocks], trimmed


def check_open_path(aperture: np.ndarray, path: str | os.PathLike, hint: str) -> None:
    """Raise :class:`DataValidationError` naming ``path`` unless open pixels (aperture > 0, 4-connected as the
    Darcy grid joins them) join the inlet (column 0) to the outlet (the last column) of the (H, W) ``aperture``:
    otherwise nothing flows through the map. ``hint`` ends the message: what to check."""
    labels, _ = ndimage.label(aperture > 0)
    joined = np.intersect1d(labels[:, 0], labels[:, -1])
    if not joined[joined > 0].size:
        raise DataValidationError(
            f"{path}: no open path (aperture > 0, 4-connected) joins the inlet (column 0) to the outlet (column "
            f"{aperture.shape[1] - 1}) of the {aperture.shape[0]}x{aperture.shape[1]} map "
            f"({float(np.mean(aperture > 0)):.3g} of it open): nothing would flow; {hint}"
        )


def check_memory(path: str | os.PathLike, needed: float, what: str) -> None:
    """Raise :class:`DataValidationError` naming ``path`` where importing ``what`` needs ``needed`` bytes, more
    than :func:`~flowlearn.checks.available_memory`: checked before the data is read."""
    memory = available_memory()
    if needed > memory:
        raise DataValidationError(
            f"{path}: {what} needs {needed / 2**30:.3g} GiB to import, more than the {memory / 2**30:.3g} GiB this "
            "process has available: import a part of it, or on a machine with more memory"
        )


def existing(path: object, option: str) -> Path:
    """``path`` as a Path where it names an existing file or folder; :class:`DataValidationError` where it is no
    path, ``FileNotFoundError`` where nothing is there."""
    check_path(path, option)
    found = Path(path)
    if not found.exists():
        raise FileNotFoundError(f"{found}: no such file or folder ({option})")
    return found


def sha256(files: Sequence[Path]) -> str:
    """The SHA-256 checksum (hex) of one file, as ``sha256sum`` prints it; of several (a folder's slices, in their
    order), the checksum of the lines ``<checksum>  <name>`` that ``sha256sum`` prints for them."""
    digests = []
    for file in files:
        digest = hashlib.sha256()
        with open(file, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
        digests.append(digest.hexdigest())
    if len(files) == 1:
        return digests[0]
    lines = "".join(f"{digest}  {file.name}\n" for digest, file in zip(digests, files))
    return hashlib.sha256(lines.encode()).hexdigest()


@contextlib.contextmanager
def tiff_damage(path: Path) -> Iterator[None]:
    """Turn what tifffile reports of a damaged file into one :class:`DataValidationError` naming ``path``.

    tifffile raises for a file that is no TIFF or whose data stops short, but logs (and goes on without) a page
    whose offset lies beyond the end of a truncated file: the volume read would silently lack its last slices. An
    error it logs while the block runs is therefore raised too.
    """
    logged: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = logged.append  # type: ignore[method-assign]
    logger = logging.getLogger("tifffile")
    logger.addHandler(handler)
    try:
        yield
    except DataValidationError:
        raise
    except (ValueError, struct.error, EOFError, OSError) as err:  # tifffile.TiffFileError is a ValueError
        reason = " ".join(str(err).split())
        raise DataValidationError(
            f"{path}: not a readable TIFF file (truncated or corrupt?): {reason}"
        ) from err
    finally:
        logger.removeHandler(handler)
    if logged:
        reason = " ".join(logged[0].getMessage().split())
        raise DataValidationError(f"{path}: not a readable TIFF file (truncated or corrupt?): {reason}")


def read_tiff(path: Path, bytes_per_pixel: float) -> np.ndarray:
    """The pages of a TIFF file as one (pages, H, W) array of its grey levels, in its dtype.

    ``bytes_per_pixel`` is what the import holds per pixel beyond the data itself: the memory check before reading
    asks for the data's bytes and that much more per pixel.

    Raises:
        DataValidationError: naming ``path``, for a file that is no TIFF, truncated or corrupt, pages of several
            samples (colour), pages of different shapes or dtypes, or more data than memory allows.
    """
    with tiff_damage(path), tifffile.TiffFile(path) as tif:
        pages = list(tif.pages)
        if not pages:
            raise DataValidationError(f"{path}: a TIFF file without pages (truncated or corrupt?)")
        first = pages[0]
        if len(first.shape) != 2:
            raise DataValidationError(
                f"{path}: page 0 has shape {first.shape}; expected grey levels, one sample per pixel (H, W)"
            )
        shape = (len(pages), *first.shape)
        check_memory(
            path, math.prod(shape) * (first.dtype.itemsize + bytes_per_pixel), f"its {shape_text(shape)} TIFF"
        )
        out = np.empty(shape, dtype=first.dtype)
        for index, page in enumerate(pages):
            if page.shape != first.shape or page.dtype != first.dtype:
                raise DataValidationError(
                    f"{path}: page {index} is {page.dtype} {page.shape}, page 0 {first.dtype} {first.shape}; a "
                    "volume's pages must be of one shape and dtype"
                )
            out[index] = page.asarray()
    return out


def read_map(path: Path, option: str) -> np.ndarray:
    """A 2D map as float64 (H, W): CSV or text (.csv, .txt: comma- or whitespace-separated numbers, '#' comments),
    TIFF (one page), PNG (grey levels, 8 or 16 bits) or .npy, by the file's suffix.

    PNG is read with Pillow (which matplotlib requires): matplotlib's own reader rescales grey levels to [0, 1],
    losing the level that a scale in metres per grey level multiplies. An RGB(A) image is read where its colour
    channels are equal (grey stored as colour); alpha is ignored.

    Raises:
        DataValidationError: naming the file, for an unknown suffix, a file that cannot be parsed, a map that is not
            2D, a colour image or more data than memory allows.
    """
    kind = MAP_FORMATS.get(path.suffix.lower())
    if kind is None or path.is_dir():
        raise DataValidationError(
            f"{path}: cannot read a map from it ({option}); expected a file ending in {', '.join(MAP_FORMATS)}"
        )
    if kind == "tiff":
        pages = read_tiff(path, MAP_BYTES_PER_PIXEL)
        if len(pages) != 1:
            raise DataValidationError(f"{path}: {len(pages)} pages; a map is one page")
        values = pages[0]
    elif kind == "png":
        values = _read_png(path)
    elif kind == "npy":
        mapped = open_npy(path)
        check_memory(path, mapped.size * MAP_BYTES_PER_PIXEL, f"its {shape_text(mapped.shape)} map")
        values = np.array(mapped)
    else:
        check_memory(path, path.stat().st_size / CSV_BYTES_PER_VALUE * MAP_BYTES_PER_PIXEL, "its text")
        with open(path, errors="replace") as fh:
            first_line = fh.readline()
        try:
            values = np.loadtxt(path, delimiter="," if "," in first_line else None, ndmin=2, dtype=np.float64)
        except ValueError as err:
            reason = " ".join(str(err).split())
            raise DataValidationError(f"{path}: not a table of numbers: {reason}") from err
    if values.ndim != 2 or min(values.shape) == 0:
        raise DataValidationError(f"{path}: shape {values.shape}; expected a 2D map (H, W)")
    if values.dtype.kind not in "biuf":
        raise DataValidationError(f"{path}: values of dtype {values.dtype}; expected numbers")
    return values.astype(np.float64, copy=False)


def open_npy(path: Path) -> np.ndarray:
    """The array of a .npy file, mapped from it (read where it is used); :class:`DataValidationError` naming
    ``path`` for a file that is no .npy, truncated, or holds Python objects."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise DataValidationError(f"{path}: not a readable .npy file (truncated or corrupt?): {err}") from err


def _read_png(path: Path) -> np.ndarray:
    """A PNG image's grey levels (H, W), in its own dtype (see :func:`read_map`)."""
    from PIL import Image  # Pillow: only where a PNG is read

    try:
        with Image.open(path) as image:
            check_memory(
                path,
                image.width * image.height * MAP_BYTES_PER_PIXEL,
                f"its {shape_text((image.height, image.width))} image",
            )
            if image.mode in ("1", "L", "I", "I;16", "I;16B", "I;16L", "F"):
                return np.asarray(image)
            colour = np.asarray(image.convert("RGB"))
    except DataValidationError:
        raise
    except (OSError, ValueError, SyntaxError) as err:  # Pillow raises SyntaxError for some broken PNGs
        raise DataValidationError(f"{path}: not a readable image (truncated or corrupt?): {err}") from err
    if not (
        np.array_equal(colour[..., 0], colour[..., 1]) and np.array_equal(colour[..., 0], colour[..., 2])
    ):
        raise DataValidationError(
            f"{path}: a colour image (mode {image.mode}); expected grey levels (one channel, or equal channels)"
        )
    return colour[..., 0]


def check_values(values: np.ndarray, path: Path, what: str, negative: bool) -> None:
    """Raise :class:`DataValidationError` naming ``path`` and ``what`` where ``values`` holds NaN or infinities,
    or, unless ``negative``, values below 0 (saying how many and where the first is)."""
    fault = nonfinite(values)
    if fault:
        raise DataValidationError(f"{path}: {what}: {fault}")
    if not negative and (values < 0).any():
        first = tuple(int(i) for i in np.argwhere(values < 0)[0])
        raise DataValidationError(
            f"{path}: {what}: {int((values < 0).sum())} negative value(s) (min {float(values.min()):.6g}), the first "
            f"at pixel {first}; expected values >= 0"
        )


def source(path: Path, files: Sequence[Path]) -> dict[str, str]:
    """The provenance record of a source: its absolute path and its checksum (:func:`sha256` of ``files``)."""
    return {"path": os.path.abspath(path), "sha256": sha256(files)}


def make_fracture(
    name: str,
    aperture: np.ndarray,
    walls: tuple[np.ndarray, np.ndarray] | None,
    pixel_size: float,
    record: dict[str, Any],
    path: str | os.PathLike,
) -> Fracture:
    """The imported fracture: a float64 (H, W) ``aperture`` in metres, the walls (bottom, top) in metres moved so
    that their mid-plane's mean lies at 0, or None; no pressure or flow rate. Flow runs along x (the columns).
    ``record`` becomes the provenance entry ``scan``. Validated as :func:`~flowlearn.data.schema.write_fractures`
    will, so that the fracture returned is one that can be written; the messages name ``path``."""
    bottom = top = None
    if walls is not None:
        bottom, top = walls
        shift = 0.5 * float(np.mean(bottom + top))
        bottom, top = bottom - shift, top - shift
    fracture = Fracture(
        name=name,
        aperture=aperture,
        pressure=None,
        voxel_size=pixel_size,
        flow_axis="x",
        provenance={"scan": record},
        bottom=bottom,
        top=top,
    )
    return validate_fracture(fracture, path)


def report_record(report: MapReport) -> dict[str, Any]:
    """``report`` as a JSON object (tuples as lists) for the provenance."""
    return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(report).items()}


def shape_text(shape: Sequence[int]) -> str:
    """``shape`` as messages write it: ``1000x1000x200``."""
    return "x".join(str(n) for n in shape)
