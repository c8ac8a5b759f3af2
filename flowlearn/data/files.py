"""Fracture files read and written: the layouts of :mod:`flowlearn.data.schema` detected, listed, read (checked
against the schema as they are read) and written atomically, and converted between the two layouts.

Every violation raises :class:`~flowlearn.errors.DataValidationError` naming file, group and field; a file written
here is one flowlearn reads back.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from flowlearn.checks import available_memory, same_file, shown
from flowlearn.data.schema import (
    FLOWLEARN_FIELDS,
    OPTIONAL_FIELDS,
    ORIGINAL_FIELDS,
    ORIGINAL_OPTIONAL_FIELDS,
    PRESSURE_ATTRS,
    REQUIRED_ATTRS,
    RESERVED_ROOT_ATTRS,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    WALL_FIELDS,
    Fracture,
    FractureInfo,
    Layout,
    check_provenance,
    first_pixel,
    number_attribute,
    provenance_json,
    validate_fracture,
    where,
)
from flowlearn.errors import DataValidationError, OutputError


def check_path(value: object, argument: str = "path") -> None:
    """Raise :class:`DataValidationError` naming ``argument`` unless ``value`` is a file path (str or os.PathLike)."""
    if not isinstance(value, str | os.PathLike):
        raise DataValidationError(f"{argument} must be a file path (str or os.PathLike), got {shown(value)}")


def open_file(path: str | os.PathLike) -> h5py.File:
    """Open read-only, turning the ways a file can fail to be HDF5 into clear validation errors."""
    check_path(path)
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file")
    if p.is_dir():
        raise DataValidationError(f"{p}: a directory, not an HDF5 fracture file")
    if p.stat().st_size == 0:
        raise DataValidationError(f"{p}: empty file (0 bytes), not an HDF5 fracture file")
    if not h5py.is_hdf5(p):
        raise DataValidationError(f"{p}: not an HDF5 file (no HDF5 signature)")
    try:
        return h5py.File(p, "r")
    except OSError as err:
        raise DataValidationError(f"{p}: truncated or corrupt HDF5 file ({err})") from err


@contextlib.contextmanager
def _open(path: str | os.PathLike) -> Iterator[h5py.File]:
    f = open_file(path)
    try:
        yield f
    except (OSError, KeyError, RuntimeError) as err:
        # h5py meets damage where it reads: an object, an attribute list or data, each with its own exception.
        reason = err.args[0] if err.args else err
        raise DataValidationError(f"{path}: truncated or corrupt HDF5 file ({reason})") from err
    finally:
        f.close()


def _read_dataset(path: str | os.PathLike, group: str, obj: h5py.Group, name: str) -> np.ndarray:
    """The dataset ``name`` of ``obj`` as an array; :class:`DataValidationError` where it cannot be read, or where it
    declares more bytes than this process has available (a chunked dataset of a tiny file may declare any shape)."""
    try:
        dataset = obj[name]
        memory = available_memory()
        if dataset.nbytes > memory:
            raise DataValidationError(
                f"{where(path, group, name)}: shape {dataset.shape} of {dataset.dtype} needs "
                f"{dataset.nbytes / 2**30:.3g} GiB, more than the {memory / 2**30:.3g} GiB this process has available"
            )
        return dataset[()]
    except (OSError, KeyError, RuntimeError) as err:
        raise DataValidationError(
            f"{where(path, group, name)}: cannot be read (truncated or corrupt file?): {err}"
        ) from err


def detect_layout(f: h5py.File, path: str | os.PathLike) -> Layout:
    """Return "flowlearn" when the root carries the schema attribute, "original" when every group holds
    ``aperture_field``; raise :class:`DataValidationError` otherwise."""
    schema = f.attrs.get("schema")
    # MATLAB and other writers of fixed-length strings store text as bytes (numpy.bytes_), as flow_axis is read.
    if (schema.decode(errors="replace") if isinstance(schema, bytes) else schema) == SCHEMA_NAME:
        if "schema_version" not in f.attrs:
            raise DataValidationError(f"{where(path)}: missing root attribute 'schema_version'")
        value = f.attrs["schema_version"]
        version = np.asarray(value)
        if version.size != 1 or not np.issubdtype(version.dtype, np.integer):
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            text = text.item() if isinstance(text, np.generic) else text
            raise DataValidationError(
                f"{where(path)}: root attribute 'schema_version' is {text!r}; expected an integer (this flowlearn "
                f"reads version {SCHEMA_VERSION})"
            )
        version = int(version.reshape(()))
        if version != SCHEMA_VERSION:
            raise DataValidationError(
                f"{where(path)}: schema_version {version} is not supported (expected {SCHEMA_VERSION})"
            )
        return "flowlearn"
    if len(f) == 0:
        raise DataValidationError(f"{where(path)}: contains no fracture groups")
    objects = [_top_level(f, path, name) for name in f]
    if all(isinstance(obj, h5py.Group) and "aperture_field" in obj for obj in objects):
        return "original"
    raise DataValidationError(
        f"{where(path)}: neither the flowlearn layout (root attribute schema={SCHEMA_NAME!r}) nor the "
        f"original layout (every group holding 'aperture_field' and 'pressure_field')"
    )


def _top_level(f: h5py.File, path: str | os.PathLike, name: str) -> h5py.Group | h5py.Dataset:
    """The top-level object ``name`` of ``f``; :class:`DataValidationError` where it is a soft link (to a group of
    the file: the same fracture under a second name) or a link that cannot be resolved (a missing object or file).
    A resolvable external link, a group of another file, is read as a group of this one."""
    link = f.get(name, getlink=True)
    obj = f.get(name)
    if isinstance(link, h5py.HardLink):  # a name of the object itself, which always resolves
        return obj
    target = f"'{link.path}' in {link.filename}" if isinstance(link, h5py.ExternalLink) else f"'{link.path}'"
    if obj is None:
        raise DataValidationError(f"{where(path)}: '{name}' is a link to {target} that cannot be resolved")
    if isinstance(link, h5py.SoftLink):
        raise DataValidationError(
            f"{where(path, name)} is a link to {target}: store each fracture once, as a group"
        )
    return obj


def _group_names(f: h5py.File, path: str | os.PathLike) -> list[str]:
    """The names of the fracture groups of ``f``, sorted; :class:`DataValidationError` where a top-level object is a
    dataset, a link (:func:`_top_level`) or a second hard link to a group listed already (one fracture twice, which
    would land in two splits of a training)."""
    names: list[str] = []
    first: dict[h5py.h5g.GroupID, str] = {}  # ObjectIDs of one object are equal, whatever name opened them
    for name in sorted(f):
        obj = _top_level(f, path, name)
        if not isinstance(obj, h5py.Group):
            raise DataValidationError(
                f"{where(path)}: unexpected top-level dataset '{name}' (only fracture groups are allowed)"
            )
        if obj.id in first:
            raise DataValidationError(
                f"{where(path, name)} is a link to '/{first[obj.id]}' (a second hard link to one group): store each "
                "fracture once, as a group"
            )
        first[obj.id] = name
        names.append(name)
    if not names:
        raise DataValidationError(f"{where(path)}: contains no fracture groups")
    return names


def _check_members(
    path: str | os.PathLike, name: str, g: h5py.Group, required: Sequence[str], optional: Sequence[str]
) -> None:
    allowed = set(required) | set(optional)
    for member in required:
        if member not in g:
            raise DataValidationError(f"{where(path, name, member)}: missing field")
    for member, obj in g.items():
        if member not in allowed:
            raise DataValidationError(
                f"{where(path, name, member)}: unexpected field (allowed: {', '.join(sorted(allowed))})"
            )
        if not isinstance(obj, h5py.Dataset):
            raise DataValidationError(f"{where(path, name, member)}: expected a dataset, found a group")


def _read_group(path: str | os.PathLike, f: h5py.File, name: str, layout: Layout) -> Fracture:
    if not isinstance(name, str):
        raise DataValidationError(f"{where(path)}: name must be a group name (str), got {shown(name)}")
    if name not in f:
        raise DataValidationError(f"{where(path, name)}: no such group (groups: {', '.join(sorted(f))})")
    g = _top_level(f, path, name)
    if not isinstance(g, h5py.Group):
        raise DataValidationError(f"{where(path, name)}: expected a group, found a dataset")
    if layout == "original":
        _check_members(path, name, g, ORIGINAL_FIELDS, ORIGINAL_OPTIONAL_FIELDS)
        arrays = {"pressure_field": None}
        for fname in (f for f in (*ORIGINAL_FIELDS, *ORIGINAL_OPTIONAL_FIELDS) if f in g):
            arr = _read_dataset(path, name, g, fname)
            if arr.ndim != 4 or arr.shape[:2] != (1, 1):
                raise DataValidationError(
                    f"{where(path, name, fname)}: expected shape (1, 1, H, W), got {arr.shape}"
                )
            arrays[fname] = arr[0, 0]
        if (
            arrays["pressure_field"] is not None
            and arrays["pressure_field"].shape != arrays["aperture_field"].shape
        ):
            raise DataValidationError(
                f"{where(path, name, 'pressure_field')}: shape {arrays['pressure_field'].shape} does not "
                f"match aperture_field shape {arrays['aperture_field'].shape}"
            )
        return Fracture(name=name, aperture=arrays["aperture_field"], pressure=arrays["pressure_field"])
    _check_members(path, name, g, FLOWLEARN_FIELDS, OPTIONAL_FIELDS)
    for attr in (*REQUIRED_ATTRS, *(PRESSURE_ATTRS if "pressure" in g else ())):
        if attr not in g.attrs:
            raise DataValidationError(f"{where(path, name)}: missing attribute '{attr}'")
    mask = _read_dataset(path, name, g, "mask") if "mask" in g else None
    if mask is not None and mask.dtype != bool:
        # The schema's mask is bool: cast to bool, a float mask's 0.5 or an int mask's 2 would count as active cells,
        # whatever the file meant by them.
        raise DataValidationError(f"{where(path, name, 'mask')}: expected a bool dtype, got {mask.dtype}")
    flow_axis = g.attrs["flow_axis"]
    return Fracture(
        name=name,
        aperture=_read_dataset(path, name, g, "aperture"),
        pressure=_read_dataset(path, name, g, "pressure") if "pressure" in g else None,
        mask=mask,
        voxel_size=number_attribute(path, name, g.attrs, "voxel_size"),
        inlet_pressure=number_attribute(path, name, g.attrs, "inlet_pressure", 2.0),
        outlet_pressure=number_attribute(path, name, g.attrs, "outlet_pressure", 1.0),
        flow_axis=flow_axis.decode() if isinstance(flow_axis, bytes) else str(flow_axis),
        provenance=_provenance(path, name, g),
        flow_rate=number_attribute(path, name, g.attrs, "flow_rate") if "flow_rate" in g.attrs else None,
        bottom=_read_dataset(path, name, g, "bottom") if "bottom" in g else None,
        top=_read_dataset(path, name, g, "top") if "top" in g else None,
    )


def _provenance(path: str | os.PathLike, name: str, group: h5py.Group) -> dict:
    """The group's ``provenance`` attribute, a JSON object ({} where absent)."""
    text = group.attrs.get("provenance", "{}")
    try:
        provenance = json.loads(text)
    except (TypeError, ValueError) as error:  # JSONDecodeError is a ValueError; an array is a TypeError
        raise DataValidationError(
            f"{where(path, name)}: attribute 'provenance' is not a JSON text ({error})"
        ) from None
    check_provenance(provenance, path, name)
    return provenance


def list_fractures(path: str | os.PathLike) -> list[FractureInfo]:
    """Names, shapes, wall presence and whether the voxel size is known, of the fractures in a file of either
    layout, sorted by name, without loading arrays.

    Shapes are the per-fracture array shapes, (H, W) or (D, H, W) (the leading (1, 1) of the original layout
    dropped).
    """
    with _open(path) as f:
        layout = detect_layout(f, path)
        infos = []
        for name in _group_names(f, path):
            g = f[name]
            key = "aperture" if layout == "flowlearn" else "aperture_field"
            if key not in g:
                raise DataValidationError(f"{where(path, name, key)}: missing field")
            shape = tuple(g[key].shape)
            walls = layout == "flowlearn" and all(wall in g for wall in WALL_FIELDS)
            voxel = layout == "flowlearn" and math.isfinite(
                number_attribute(path, name, g.attrs, "voxel_size", math.nan)
            )
            axis = str(g.attrs.get("flow_axis", "x")) if layout == "flowlearn" else "x"
            infos.append(FractureInfo(name, shape[2:] if layout == "original" else shape, walls, voxel, axis))
        return infos


def validate_file(
    path: str | os.PathLike,
    require_pressure: bool = False,
    check: Callable[[Fracture, str | os.PathLike], object] | None = None,
) -> int:
    """Read and validate every fracture of ``path`` (either layout) one at a time, keeping none in memory, and pass
    each to ``check`` (with ``path``) where given: a caller's own check in the same pass.

    For a check before long work (``python train.py`` runs it before building anything, with ``require_pressure``
    since training needs the reference); returns the number of fractures.
    """
    with _open(path) as f:
        layout = detect_layout(f, path)
        names = _group_names(f, path)
        for name in names:
            fracture = _read_group(path, f, name, layout)
            validate_fracture(fracture, path)
            if require_pressure and fracture.pressure is None:
                raise missing_pressure(path, name)
            if check is not None:
                check(fracture, path)
    return len(names)


def missing_pressure(path: str | os.PathLike, name: str) -> DataValidationError:
    """The error of a fracture without a reference pressure where one is needed (training)."""
    return DataValidationError(
        f"{where(path, name, 'pressure')}: missing; training needs the reference pressure (an aperture map alone "
        "can be predicted on, with flowlearn predict)"
    )


def read_open(f: h5py.File, name: str, validate: bool = True) -> Fracture:
    """Read the group ``name`` from an already open file of either layout (for readers that keep a handle)."""
    fracture = _read_group(f.filename, f, name, detect_layout(f, f.filename))
    if validate:
        validate_fracture(fracture, f.filename)
    return fracture


def read_fracture(path: str | os.PathLike, name: str, validate: bool = True) -> Fracture:
    """Read the group ``name`` from a file of either layout; validate it unless ``validate`` is False."""
    with _open(path) as f:
        fracture = _read_group(path, f, name, detect_layout(f, path))
    if validate:
        validate_fracture(fracture, path)
    return fracture


def read_fractures(path: str | os.PathLike, validate: bool = True) -> list[Fracture]:
    """Read every fracture of a file of either layout, sorted by group name."""
    with _open(path) as f:
        layout = detect_layout(f, path)
        fractures = [_read_group(path, f, name, layout) for name in _group_names(f, path)]
    if validate:
        for fracture in fractures:
            validate_fracture(fracture, path)
    return fractures


def check_writable(path: str | os.PathLike) -> None:
    """Raise :class:`OutputError` unless a file ``path`` could be written: it is absent or a regular file (no
    directory, FIFO, socket or device), and its nearest existing folder is one this process may write into. For
    checks before long work; writes check again."""
    target = Path(path)
    _check_replaceable(target)
    folder = target.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{target}: cannot write here: {folder} is not a directory")
    # access() also reports a read-only file system, which permission bits do not show (root may write anyway).
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{target}: cannot write here: {folder} is not writable")


# What an existing path that is no regular file is, by the file type bits of its mode.
_SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _check_replaceable(target: Path) -> None:
    """Raise :class:`OutputError` where ``target`` exists and is no regular file: a directory, or a FIFO, socket or
    device, which the atomic rename of a written file would replace (as root, even /dev/full)."""
    if target.is_dir():
        raise OutputError(f"{target}: is a directory; give a file name to write")
    try:
        mode = target.stat().st_mode
    except OSError:  # absent, or not to be looked at: the write says why
        return
    for is_kind, kind in _SPECIAL_FILES:
        if is_kind(mode):
            raise OutputError(f"{target}: is {kind}, not a regular file; give a file name to write")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and rename it onto ``path``.

    The rename is atomic on POSIX, so readers see either the old file or the complete new one, and a writer
    killed part-way leaves at most a stray ``.<name>.*.tmp`` file, never a half-written ``path``. A place that
    cannot be written (read-only, full, a directory, FIFO, socket or device named ``path``) raises
    :class:`OutputError`, and the temporary file is removed.
    """
    target = Path(path)
    _check_replaceable(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise OutputError(f"{target}: cannot write here: {err.strerror or err}") from err
    os.close(fd)
    # mkstemp creates the file private (0600); give it the mode an ordinary open() would have given.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OutputError):
            raise
        raise OutputError(f"{target}: cannot write: {err.strerror or err}") from err
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # The rename itself is durable only once the directory entry is on disk.
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def atomic_hdf5(path: str | os.PathLike) -> Iterator[h5py.File]:
    """Yield a new, empty HDF5 file; on success write it atomically to ``path`` (see :func:`atomic_path`).

    The file is built in memory and written to disk with plain file writes. HDF5 writing straight to a disk
    that fills up fails part-way, and closing that file handle afterwards can crash the process (h5py
    segfaults flushing its metadata); a plain write fails with a clean ``OSError`` instead.
    """
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        yield f
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(buffer.getbuffer())


def write_fractures(
    path: str | os.PathLike,
    fractures: Sequence[Fracture],
    layout: Layout = "flowlearn",
    attrs: dict[str, Any] | None = None,
) -> None:
    """Validate ``fractures`` and write them atomically to ``path`` in the given layout.

    ``attrs`` are extra root attributes of the flowlearn layout (``recipe``: how the file was made): text or
    numbers, not ``schema`` or ``schema_version``, which the writer sets. The original layout stores only 2D
    aperture and pressure as (1, 1, H, W) float32 and drops mask, walls and attributes; it requires inlet 2 and
    outlet 1 along x, since that is what its readers assume, and a mask that leaves no cell of aperture > 0 inactive
    (:func:`check_original_layout`). Everything is checked (:func:`validate_fracture`, the reader's checks) before
    anything is written: a file written here is one flowlearn reads back.
    """
    if layout not in ("flowlearn", "original"):
        raise ValueError(f"unknown layout {layout!r}; expected 'flowlearn' or 'original'")
    check_path(path)
    if isinstance(fractures, Fracture) or not isinstance(fractures, Sequence):
        raise DataValidationError(
            f"{where(path)}: fractures must be a sequence of Fracture, got {type(fractures).__name__} (give a list)"
        )
    if not fractures:
        raise DataValidationError(f"{where(path)}: nothing to write (no fractures)")
    for index, fracture in enumerate(fractures):
        if not isinstance(fracture, Fracture):
            raise DataValidationError(
                f"{where(path)}: fractures[{index}] is {type(fracture).__name__}; expected a Fracture"
            )
    fractures = [validate_fracture(fracture, path) for fracture in fractures]
    names = [fr.name for fr in fractures]
    if len(set(names)) != len(names):
        raise DataValidationError(f"{where(path)}: duplicate fracture names in {names}")
    if layout == "original":
        for fracture in fractures:
            check_original_layout(fracture, path)
    _check_root_attributes(path, attrs or {})
    with atomic_hdf5(path) as f:
        if layout == "original":
            for fr in fractures:
                g = f.create_group(fr.name)
                g.create_dataset("aperture_field", data=fr.aperture[None, None].astype(np.float32))
                if fr.pressure is not None:
                    g.create_dataset("pressure_field", data=fr.pressure[None, None].astype(np.float32))
        else:
            f.attrs["schema"] = SCHEMA_NAME
            f.attrs["schema_version"] = SCHEMA_VERSION
            for key, value in (attrs or {}).items():
                f.attrs[key] = value
            for fr in fractures:
                g = f.create_group(fr.name)
                opts = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
                g.create_dataset("aperture", data=fr.aperture, **opts)
                if fr.pressure is not None:
                    g.create_dataset("pressure", data=fr.pressure, **opts)
                if fr.mask is not None:
                    g.create_dataset("mask", data=fr.mask.astype(bool), **opts)
                for wall in WALL_FIELDS:
                    if getattr(fr, wall) is not None:
                        g.create_dataset(wall, data=getattr(fr, wall), **opts)
                if fr.flow_rate is not None:
                    g.attrs["flow_rate"] = float(fr.flow_rate)
                g.attrs["voxel_size"] = float(fr.voxel_size)
                g.attrs["inlet_pressure"] = float(fr.inlet_pressure)
                g.attrs["outlet_pressure"] = float(fr.outlet_pressure)
                g.attrs["flow_axis"] = fr.flow_axis
                g.attrs["provenance"] = provenance_json(fr.provenance, path, fr.name)


def _check_root_attributes(path: str | os.PathLike, attrs: Mapping[str, Any]) -> None:
    """Raise :class:`DataValidationError` for a root attribute the writer may not store: one it sets itself
    (:data:`RESERVED_ROOT_ATTRS`), a name that is not text, or a value HDF5 stores as no text or numbers (a dict:
    give it as JSON text, as ``recipe`` is)."""
    if not isinstance(attrs, Mapping):
        raise DataValidationError(
            f"{where(path)}: attrs must be a dict of root attributes, got {shown(attrs)}"
        )
    for key, value in attrs.items():
        if not isinstance(key, str) or not key or key in RESERVED_ROOT_ATTRS:
            raise DataValidationError(
                f"{where(path)}: root attribute {shown(key)} cannot be given; expected non-empty text other than "
                f"{', '.join(RESERVED_ROOT_ATTRS)}, which the writer sets"
            )
        if not (isinstance(value, str | bytes) or np.asarray(value).dtype.kind in "biuf"):
            raise DataValidationError(
                f"{where(path)}: root attribute '{key}' is {shown(value)}; expected text or numbers (a record as "
                "JSON text: json.dumps(...))"
            )


def check_original_layout(fracture: Fracture, path: str | os.PathLike) -> None:
    """Raise :class:`DataValidationError` (naming ``path``, the group and what) where the original layout cannot
    hold ``fracture`` as the same fracture: a 3D map, flow along another axis or other heads than inlet 2 and outlet
    1 (what its readers assume), or a mask that makes cells of aperture > 0 inactive, which the layout, keeping no
    mask, would make active."""
    if (
        fracture.aperture.ndim != 2
        or fracture.flow_axis != "x"
        or (fracture.inlet_pressure, fracture.outlet_pressure) != (2.0, 1.0)
    ):
        raise DataValidationError(
            f"{where(path, fracture.name)}: the original layout holds only 2D fractures with flow "
            f"along x, inlet 2 and outlet 1"
        )
    if fracture.mask is not None:
        lost = ~fracture.mask.astype(bool) & (fracture.aperture > 0)
        if lost.any():
            raise DataValidationError(
                f"{where(path, fracture.name, 'mask')}: the original layout keeps no mask, so its {int(lost.sum())} "
                f"inactive cell(s) of aperture > 0 (the first at {first_pixel(lost)}) would become active; keep "
                "the flowlearn layout, or set their aperture to 0"
            )


def _root_attributes(path: str | os.PathLike) -> dict[str, Any]:
    """The optional root attributes of a file in the flowlearn layout (``recipe``), {} for the original layout."""
    with _open(path) as f:
        if detect_layout(f, path) != "flowlearn":
            return {}
        return {key: f.attrs[key] for key in ("recipe",) if key in f.attrs}


def _left_out_by_original(fractures: Sequence[Fracture], attrs: dict[str, Any]) -> list[str]:
    """What of ``fractures`` and the root attributes ``attrs`` the original layout does not keep, by name."""
    left_out = [
        name
        for name, kept in (
            ("voxel_size", any(math.isfinite(fr.voxel_size) for fr in fractures)),
            ("flow_rate", any(fr.flow_rate is not None for fr in fractures)),
            ("walls (bottom, top)", any(fr.bottom is not None for fr in fractures)),
            ("provenance", any(fr.provenance for fr in fractures)),
        )
        if kept
    ]
    left_out += [f"root attribute {key}" for key in attrs]
    wide = any(
        arr is not None and arr.dtype.itemsize > 4 for fr in fractures for arr in (fr.aperture, fr.pressure)
    )
    return left_out + (["float64 precision (it stores float32)"] if wide else [])


def convert(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    layout: Layout = "flowlearn",
    note: Callable[[str], None] | None = None,
) -> int:
    """Read every fracture of ``src`` (either layout), validate, and write them to ``dst`` in ``layout``, with the
    root attribute ``recipe`` where both layouts are flowlearn's.

    Converting to the original layout refuses what would change a fracture (:func:`check_original_layout`: a mask's
    inactive cells becoming active), naming ``src``; what the layout merely has no place for (voxel size, flow
    rate, walls, provenance, recipe, float64) is left out, and ``note`` is given one line naming it, once ``dst``
    is written. Refusing those too would refuse every file ``flowlearn generate`` writes, and with it the original
    layout, whose readers (the original work's) use the aperture and reference pressure alone, which are kept.
    ``dst`` may not be ``src`` (:func:`~flowlearn.checks.same_file`), which writing would replace before it was read in full.

    Returns the number of fractures written.
    """
    check_path(src, "src")
    check_path(dst, "dst")
    if same_file(src, dst):
        raise DataValidationError(f"dst {dst} is the input src {src} (one file): give a new file")
    fractures = read_fractures(src)
    attrs = _root_attributes(src)
    left_out = []
    if layout == "original":
        for fracture in fractures:
            check_original_layout(fracture, src)
        left_out, attrs = _left_out_by_original(fractures, attrs), {}
    write_fractures(dst, fractures, layout=layout, attrs=attrs)
    if left_out and note is not None:
        note(f"{dst}: the original layout keeps no {', '.join(left_out)}: written without them")
    return len(fractures)
