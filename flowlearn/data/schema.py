"""The HDF5 layouts of fracture datasets: read, validate and write (atomically).

flowlearn layout (``layout="flowlearn"``)::

    /                      attrs: schema = "flowlearn-fractures", schema_version = 1; optional recipe (JSON:
                           the settings, seeds and library versions that made the file)
    /<name>/               one group per fracture; attrs:
                             voxel_size       float, metres per voxel (cubic voxels) in [1e-9, 1], or NaN when
                                              unknown
                             inlet_pressure   float, pressure (head) imposed on the inlet face
                             outlet_pressure  float, pressure (head) imposed on the outlet face
                             flow_axis        "x" (array axis -1), "y" (axis -2) or "z" (axis -3, 3D only);
                                              the inlet is index 0 along it, the outlet the last index
                             provenance       JSON object: generator parameters, LBM settings, seed, versions
    /<name>/aperture       float (H, W) or (D, H, W), metres; 0 marks a contact spot (inactive cell)
    /<name>/pressure       optional float, same shape, in the units of inlet/outlet_pressure; absent in files of
                           aperture maps to predict on (then inlet/outlet_pressure are optional, default 2 and 1)
    /<name>/mask           optional bool, same shape; False marks further inactive cells
    /<name>/bottom, top    optional float (H, W), metres: the heights of the two walls (mid-plane at 0) that
                           the reference was computed between; where top <= bottom the walls touch. The
                           aperture is their separation max(top - bottom, 0), voxelised: within one voxel of it
                           (within 1e-6 of the mean separation where the voxel size is unknown)
    optional attribute     flow_rate: float, the reference flow rate through the outlet face as a Darcy model
                           counts it, Q mu / (p_inlet - p_outlet) x (inlet_pressure - outlet_pressure), in m^3
                           times the pressure's units; the Darcy solve with T = Ap^3/12 (Ap in metres), unit
                           thickness and square pixels gives the local cubic law's value in the same units;
                           within FLOW_RATE_BAND times the flow rate of parallel plates of the map's mean aperture

Each fracture is a group of its own: a top-level link (soft, external or a second hard link) to a group, the same
fracture under two names, is refused, as is a link that cannot be resolved.

The reference ``pressure`` of a 3D simulation (LBM) is the pressure averaged over the gap, weighted by the local
flux: the pressure that the flow carries, which a depth-averaged Darcy model describes.

Original layout (``layout="original"``), as written by the LBM workflow of the original work::

    /<name>/aperture_field   float (1, 1, H, W)
    /<name>/pressure_field   optional float (1, 1, H, W), inlet (column 0) at 2, outlet (last column) at 1

It carries no attributes; reading it assumes inlet 2, outlet 1, flow along x and an unknown voxel size.

Every violation raises :class:`DataValidationError` (a ``ValueError``) that names file, group and field.
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
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np

from flowlearn.checks import VOXEL_SIZE, available_memory, nonfinite, same_file, shown
from flowlearn.errors import DataValidationError, OutputError

SCHEMA_NAME = "flowlearn-fractures"
SCHEMA_VERSION = 1
FLOW_AXES = {"x": -1, "y": -2, "z": -3}
# Pixels along the flow axis a map needs: the inlet and the outlet, whose heads are fixed, and one between them.
MIN_FLOW_LENGTH = 3
REQUIRED_ATTRS = ("voxel_size", "flow_axis")
PRESSURE_ATTRS = ("inlet_pressure", "outlet_pressure")  # required where the group holds a pressure
FLOWLEARN_FIELDS = ("aperture",)
OPTIONAL_FIELDS = ("pressure", "mask", "bottom", "top")
WALL_FIELDS = ("bottom", "top")
ORIGINAL_FIELDS = ("aperture_field",)
ORIGINAL_OPTIONAL_FIELDS = ("pressure_field",)
# Tolerance on the boundary columns, as a fraction of |inlet - outlet|. LBM pressure is not exactly uniform
# across a rough inlet face (the shared original file deviates by up to 0.3%), so a column is judged by its
# mean over active cells.
BOUNDARY_TOLERANCE = 0.01
# How far beyond its inlet and outlet pressures a reference pressure may go, in units of their difference. Without
# sources the pressure stays between them (the maximum principle); an LBM reference overshoots by its compressibility
# and boundary layers: 0.8% on the real fracture, up to 3.5% in the embedded dataset.
PRESSURE_RANGE_TOLERANCE = 0.25
# The widest aperture a map may hold, in lengths of its longest side, where its voxel size is known. Lubrication
# flow needs gaps far narrower than the fracture is long, and apertures stored in voxels instead of metres come out
# thousands of times too wide: a gap of a few voxels read as metres is a few metres, on a map of millimetres.
WIDEST_APERTURE = 10
# How far the stored aperture may be from the walls' separation max(top - bottom, 0): one voxel, the rounding of a
# voxelised gap (the count of voxel centres between two walls is within one of their distance); where the voxel size
# is unknown, this fraction of the mean separation (the aperture is then expected to be the separation itself).
WALL_TOLERANCE_VOXELS = 1.0
WALL_TOLERANCE_RELATIVE = 1e-6
# The largest inlet or outlet pressure (head), in absolute value. Heads in pascals stay below 1e10 in any rock (a
# few GPa at the depth of the deepest wells), and in metres of water far below that; beyond 1e12 no unit of
# pressure describes a real fracture, and near float64's range their difference overflows (1e308 - -1e308 = inf),
# which had made every tolerance derived from it infinite and every check on it pass.
HEAD_LIMIT = 1e12
# How far a stored flow rate may be from that of parallel plates of the map's mean aperture (over its active cells)
# under the same head drop: H b^3/12 (h_in - h_out)/(W - 1) in pixels, as the Darcy solve counts it. Roughness and
# contacts lower a real fracture's flow below that (0.16-0.98 of it in the embedded dataset; near the percolation
# of its contacts by orders of magnitude more), and a few wide channels among narrow gaps raise it; a flow rate
# in another unit (voxels cubed instead of metres cubed: 1e15 times, per second instead of per unit of head over
# viscosity) or garbage (1e-300, 1e300) lies far outside, and would diverge a training or fill a table with
# nonsense. Checked without a solve: a file of thousands of maps is validated before every training.
FLOW_RATE_BAND = (1e-6, 1e6)
# The attributes of the root of a flowlearn file that the writer sets itself (a caller's ``attrs`` may not).
RESERVED_ROOT_ATTRS = ("schema", "schema_version")
# The per-fracture attributes that hold one number (flow_rate only where not None).
NUMBER_ATTRS = ("voxel_size", "inlet_pressure", "outlet_pressure", "flow_rate")
ARRAY_FIELDS = ("aperture", "pressure", "mask", "bottom", "top")

Layout = Literal["flowlearn", "original"]


@dataclass(frozen=True)
class Fracture:
    """One fracture: an aperture map and the reference pressure on it.

    Attributes:
        name: group name in the file.
        aperture: float array (H, W) or (D, H, W), metres (or the source's unit when ``voxel_size`` is NaN);
            zero marks a contact spot.
        pressure: float array of the same shape, or None for an aperture map without a reference (which can be
            predicted on, not trained on); values at inactive cells carry no information.
        mask: optional bool array of the same shape; False marks cells inactive beyond the contact spots.
        voxel_size: metres per voxel, NaN when unknown.
        inlet_pressure, outlet_pressure: pressures imposed at index 0 and at the last index of ``flow_axis``.
        flow_axis: "x" (array axis -1), "y" (-2) or "z" (-3).
        provenance: JSON-serialisable description of how the data was made.
        flow_rate: the reference flow rate through the outlet (see the module docstring for its units), or None.
        bottom, top: float (H, W) wall heights in metres, or None where the walls are unknown.
    """

    name: str
    aperture: np.ndarray
    pressure: np.ndarray | None
    mask: np.ndarray | None = None
    voxel_size: float = math.nan
    inlet_pressure: float = 2.0
    outlet_pressure: float = 1.0
    flow_axis: str = "x"
    provenance: dict[str, Any] = field(default_factory=dict)
    flow_rate: float | None = None
    bottom: np.ndarray | None = None
    top: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.aperture.shape)

    @property
    def active(self) -> np.ndarray:
        """Bool array shaped like ``aperture``: cells that carry flow (aperture > 0 and inside ``mask``)."""
        active = self.aperture > 0
        if self.mask is not None:
            active &= self.mask.astype(bool)
        return active


@dataclass(frozen=True)
class FractureInfo:
    """What a reader needs to plan batches without loading arrays: group name, array shape, whether the group
    stores the walls (``bottom`` and ``top``), whether its voxel size is known, and the axis its flow runs along."""

    name: str
    shape: tuple[int, ...]
    walls: bool = False
    voxel_size_known: bool = False
    flow_axis: str = "x"


def where(
    path: str | os.PathLike, group: str | None = None, field: str | None = None, attribute: str | None = None
) -> str:
    """``<path>: group '<group>'``, then the attribute or field: how every message about a file's content starts."""
    text = f"{os.fspath(path)}"
    if group is not None:
        text += f": group '{group}'"
    if attribute is not None:
        text += f": attribute '{attribute}'"
    if field is not None:
        text += f": field '{field}'"
    return text


def validate_fracture(fracture: Fracture, path: str | os.PathLike = "<memory>") -> Fracture:
    """Check one fracture against the schema; raise :class:`DataValidationError` on the first violation.

    Checks: what the file can hold (:func:`_check_types`: a group name, numpy arrays, one number per scalar
    attribute, a JSON object as provenance), 2D or 3D shape, equal shapes of aperture, pressure and mask, a known
    flow axis with at least ``MIN_FLOW_LENGTH`` pixels along it and 2 along every other axis, finite values,
    non-negative aperture, a voxel size in :data:`~flowlearn.checks.VOXEL_SIZE` or NaN, apertures below
    ``WIDEST_APERTURE`` lengths of the map's longest side where the voxel size is known, finite inlet and outlet
    pressures within ``HEAD_LIMIT`` of 0, boundary faces whose mean pressure over active cells matches the declared
    inlet and outlet within ``BOUNDARY_TOLERANCE`` of their difference, a pressure within
    ``PRESSURE_RANGE_TOLERANCE`` of their difference of the range between them, and a flow rate within
    ``FLOW_RATE_BAND`` of parallel plates' (:func:`_check_flow_rate`). Zero apertures are inactive cells, not errors.

    Returns:
        ``fracture`` with its scalar attributes as floats (what the writer stores).
    """
    fracture = _check_types(fracture, path)
    g = fracture.name
    ap, p = fracture.aperture, fracture.pressure
    fields = (("aperture", ap),) if p is None else (("aperture", ap), ("pressure", p))
    if ap.ndim not in (2, 3):
        raise DataValidationError(f"{where(path, g, 'aperture')}: expected 2D or 3D, got shape {ap.shape}")
    if p is not None and p.shape != ap.shape:
        raise DataValidationError(
            f"{where(path, g, 'pressure')}: shape {p.shape} does not match aperture shape {ap.shape}"
        )
    if fracture.mask is not None and fracture.mask.shape != ap.shape:
        raise DataValidationError(
            f"{where(path, g, 'mask')}: shape {fracture.mask.shape} does not match aperture shape {ap.shape}"
        )
    walls = [(name, getattr(fracture, name)) for name in WALL_FIELDS if getattr(fracture, name) is not None]
    if len(walls) == 1:
        raise DataValidationError(
            f"{where(path, g, walls[0][0])}: a wall without the other (store both or none)"
        )
    for fname, arr in walls:
        if arr.shape != ap.shape:
            raise DataValidationError(
                f"{where(path, g, fname)}: shape {arr.shape} does not match aperture shape {ap.shape}"
            )
    fields = (*fields, *walls)
    # The shape before any value: statistics of an empty map (its mean, its walls' mean) are NaN, with warnings.
    _check_shape(fracture, path)
    voxel = fracture.voxel_size
    # The range a simulation may be set up with: a voxel of real LBM or micro-CT data lies between a nanometre (below,
    # no continuum flow) and a metre (above, no gap is one voxel wide). Outside it the size is in another unit or
    # garbage: 1e300 m overflowed the wall slopes and dropped fields from predictions, 1e-300 m was blamed on the
    # apertures.
    low, high = VOXEL_SIZE
    if not (math.isnan(voxel) or low <= voxel <= high):
        raise DataValidationError(
            f"{where(path, g)}: attribute 'voxel_size' is {voxel!r}; expected a number in [{low:g}, {high:g}] "
            "(metres per voxel), or NaN where it is unknown"
        )
    for side in ("inlet_pressure", "outlet_pressure"):
        if not math.isfinite(getattr(fracture, side)):
            raise DataValidationError(
                f"{where(path, g)}: attribute '{side}' is {getattr(fracture, side)!r}; expected a finite number"
            )
    heads = (fracture.inlet_pressure, fracture.outlet_pressure)
    if any(abs(head) > HEAD_LIMIT for head in heads):
        raise DataValidationError(
            f"{where(path, g)}: attributes 'inlet_pressure' and 'outlet_pressure' are {heads[0]:g} and "
            f"{heads[1]:g}; each must be a number in [{-HEAD_LIMIT:g}, {HEAD_LIMIT:g}] (beyond, no unit describes a "
            "real fracture, and near float64's range their difference overflows)"
        )
    if fracture.flow_rate is not None and not (math.isfinite(fracture.flow_rate) and fracture.flow_rate > 0):
        raise DataValidationError(
            f"{where(path, g)}: attribute 'flow_rate' is {fracture.flow_rate!r}; expected a finite number > 0"
        )
    for fname, arr in fields:
        if not np.issubdtype(arr.dtype, np.floating):
            raise DataValidationError(f"{where(path, g, fname)}: expected a float dtype, got {arr.dtype}")
        fault = nonfinite(arr)
        if fault:
            raise DataValidationError(f"{where(path, g, fname)}: {fault}")
    if (ap < 0).any():
        first = _first_pixel(ap < 0)
        raise DataValidationError(
            f"{where(path, g, 'aperture')}: {int((ap < 0).sum())} negative apertures "
            f"(min {float(ap.min()):.6g}), first at {first}"
        )
    _check_aperture_unit(fracture, path)
    if walls:
        _check_walls(fracture, path)
    if p is not None:
        _check_boundaries(fracture, path)
    if fracture.flow_rate is not None:
        _check_flow_rate(fracture, path)
    return fracture


def _check_types(fracture: Fracture, path: str | os.PathLike) -> Fracture:
    """Raise :class:`DataValidationError` where a field of ``fracture`` (built in memory) is of a kind its file
    cannot hold as the reader reads it back: a name that is no HDF5 group name (empty, '.', containing '/', not
    text), arrays that are not numpy arrays, a scalar attribute that is not one number (the reader's
    :func:`number_attribute`), a flow axis that is not text, a provenance that is no JSON object or cannot be
    written as JSON (:func:`provenance_json`). Returns ``fracture`` with its scalar attributes as floats."""
    name = fracture.name
    if not isinstance(name, str) or name in ("", ".") or "/" in name:
        raise DataValidationError(
            f"{where(path)}: fracture name {shown(name)} cannot name an HDF5 group; expected non-empty text without "
            "'/' (which would nest a group), other than '.'"
        )
    for fname in ARRAY_FIELDS:
        value = getattr(fracture, fname)
        if not (isinstance(value, np.ndarray) or (value is None and fname != "aperture")):
            raise DataValidationError(
                f"{where(path, name, fname)} is a {type(value).__name__} ({shown(value, limit=40)}); expected a "
                "numpy array (np.asarray(...))"
            )
    if not isinstance(fracture.flow_axis, str):
        raise DataValidationError(
            f"{where(path, name)}: attribute 'flow_axis' is {shown(fracture.flow_axis)}; expected one of "
            f"{sorted(FLOW_AXES)}"
        )
    provenance_json(fracture.provenance, path, name)
    values = {attr: getattr(fracture, attr) for attr in NUMBER_ATTRS if getattr(fracture, attr) is not None}
    return replace(fracture, **{attr: number_attribute(path, name, values, attr) for attr in values})


def provenance_json(provenance: object, path: str | os.PathLike, name: str) -> str:
    """``provenance`` as the JSON text the writer stores: a JSON object (:func:`_check_provenance`), numpy scalars
    and arrays written as numbers and lists; :class:`DataValidationError` naming file and group where it holds what
    JSON cannot (a set, an object, keys of mixed types)."""
    _check_provenance(provenance, path, name)

    def plain(value: object) -> object:
        if isinstance(value, np.generic | np.ndarray):
            return value.tolist()
        raise TypeError(f"{type(value).__name__} {shown(value, limit=40)} is not JSON")

    try:
        return json.dumps(provenance, sort_keys=True, default=plain)
    except (TypeError, ValueError) as error:  # ValueError: a record that contains itself
        raise DataValidationError(
            f"{where(path, name)}: attribute 'provenance' cannot be written as JSON: {error}"
        ) from None


def _check_provenance(provenance: object, path: str | os.PathLike, name: str) -> None:
    """Raise :class:`DataValidationError` unless ``provenance`` (read from a file's JSON, or built in memory) is a
    JSON object, a dict."""
    if not isinstance(provenance, dict):
        raise DataValidationError(
            f"{where(path, name)}: attribute 'provenance' is JSON {type(provenance).__name__}; expected an object"
        )


def _check_flow_rate(fracture: Fracture, path: str | os.PathLike) -> None:
    """Raise :class:`DataValidationError` where the stored flow rate is not within :data:`FLOW_RATE_BAND` times the
    flow rate of parallel plates of the map's mean aperture over its active cells, under its head drop: n b^3/12
    |h_in - h_out| / (L - 1), with L the pixels along the flow axis and n = size / L across it (the Darcy solve's
    flow with unit pixels and thickness, in the flow rate's units: see the module docstring)."""
    active = fracture.active
    length = fracture.aperture.shape[FLOW_AXES[fracture.flow_axis]]
    mean = float(fracture.aperture[active].mean()) if active.any() else 0.0
    drop = abs(fracture.inlet_pressure - fracture.outlet_pressure)
    # In decimals, whose exponents have no float64 bounds: a flow rate of 1e300 is 1e313 times that of plates.
    plates = (
        Decimal(fracture.aperture.size // length) * Decimal(mean) ** 3 / 12 * Decimal(drop) / (length - 1)
    )
    ratio = Decimal(fracture.flow_rate) / plates if plates else Decimal("Infinity")
    low, high = FLOW_RATE_BAND
    if not low <= ratio <= high:
        raise DataValidationError(
            f"{where(path, fracture.name)}: attribute 'flow_rate' is {fracture.flow_rate:.6g}, {ratio:.3g} times the "
            f"flow rate {plates:.3g} of parallel plates of its mean aperture {mean:.3g} under its head drop "
            f"{drop:.6g}; expected within [{low:g}, {high:g}] times it (a flow rate in another unit?)"
        )


def _check_shape(fracture: Fracture, path: str | os.PathLike) -> None:
    """A known flow axis that the array has, at least :data:`MIN_FLOW_LENGTH` pixels along it and 2 along every
    other axis."""
    g, ap = fracture.name, fracture.aperture
    if fracture.flow_axis not in FLOW_AXES or -FLOW_AXES[fracture.flow_axis] > ap.ndim:
        raise DataValidationError(
            f"{where(path, g)}: attribute 'flow_axis' is {fracture.flow_axis!r}; "
            f"expected one of {sorted(FLOW_AXES)} that exists for a {ap.ndim}D array"
        )
    length = ap.shape[FLOW_AXES[fracture.flow_axis]]
    if length < MIN_FLOW_LENGTH:
        raise DataValidationError(
            f"{where(path, g, 'aperture')}: shape {ap.shape} has {length} pixel(s) along the flow axis "
            f"{fracture.flow_axis!r}; at least {MIN_FLOW_LENGTH} are needed, the inlet and outlet and one between "
            "them whose pressure is solved for"
        )
    narrow = [axis for axis, size in enumerate(ap.shape) if size < 2]
    if narrow:
        axis = narrow[0]
        pixels = "1 pixel" if ap.shape[axis] == 1 else f"{ap.shape[axis]} pixels"
        raise DataValidationError(
            f"{where(path, g, 'aperture')}: shape {ap.shape} has {pixels} along axis {axis}; a map needs at least 2 "
            "along every axis (the slopes of the aperture and the walls are differences between pixels)"
        )


def _check_aperture_unit(fracture: Fracture, path: str | os.PathLike) -> None:
    """Where the voxel size is known, no aperture is ``WIDEST_APERTURE`` times the map's longest side or more: a
    map like that holds its apertures in another unit (voxels: thousands of times too wide), not metres."""
    voxel, ap = fracture.voxel_size, fracture.aperture
    if math.isnan(voxel):
        return
    length = voxel * max(ap.shape)
    wide = ap >= WIDEST_APERTURE * length
    if wide.any():
        first = _first_pixel(wide)
        raise DataValidationError(
            f"{where(path, fracture.name, 'aperture')}: {int(wide.sum())} aperture(s) of at least {WIDEST_APERTURE} "
            f"times the map's longest side, {length:.6g} m ({max(ap.shape)} pixels of voxel_size {voxel:.6g} m); "
            f"the first is {float(ap[first]):.6g} at {first}. Apertures are in metres: apertures in voxels need "
            "multiplying by voxel_size"
        )


def _first_pixel(mask: np.ndarray) -> tuple[int, ...]:
    """The index of the first True pixel of ``mask`` (which has one), in C order."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _check_walls(fracture: Fracture, path: str | os.PathLike) -> None:
    """The walls lie the right way round (the top one above the bottom one on average), and the aperture is their
    separation to within :data:`WALL_TOLERANCE_VOXELS` voxels (or :data:`WALL_TOLERANCE_RELATIVE` of the mean
    separation where the voxel size is unknown)."""
    g = fracture.name
    bottom, top = (np.asarray(w, dtype=np.float64) for w in (fracture.bottom, fracture.top))
    if top.mean() <= bottom.mean():
        raise DataValidationError(
            f"{where(path, g, 'top')}: the top wall lies below the bottom wall (mean heights {top.mean():.6g} and "
            f"{bottom.mean():.6g} m): are 'bottom' and 'top' swapped?"
        )
    separation = np.maximum(top - bottom, 0.0)
    voxel = fracture.voxel_size
    if math.isfinite(voxel):
        tolerance, rule = WALL_TOLERANCE_VOXELS * voxel, f"{WALL_TOLERANCE_VOXELS:g} voxel ({voxel:.6g} m)"
    else:
        tolerance = WALL_TOLERANCE_RELATIVE * separation.mean()
        rule = f"{WALL_TOLERANCE_RELATIVE:g} of the mean separation (the voxel size is unknown)"
    off = np.abs(np.asarray(fracture.aperture, np.float64) - separation) > tolerance * (1 + 1e-9)
    if off.any():
        first = _first_pixel(off)
        raise DataValidationError(
            f"{where(path, g, 'aperture')}: {int(off.sum())} pixel(s) differ from the walls' separation "
            f"max(top - bottom, 0) by more than {rule}; the first is {first}: aperture "
            f"{float(fracture.aperture[first]):.6g} m, walls {float(separation[first]):.6g} m apart"
        )


def _check_boundaries(fracture: Fracture, path: str | os.PathLike) -> None:
    axis = FLOW_AXES[fracture.flow_axis]
    drop = abs(fracture.inlet_pressure - fracture.outlet_pressure)
    if drop == 0:
        raise DataValidationError(f"{where(path, fracture.name)}: inlet_pressure equals outlet_pressure")
    active = fracture.active
    for side, index, declared in (
        ("inlet", 0, fracture.inlet_pressure),
        ("outlet", -1, fracture.outlet_pressure),
    ):
        face = np.take(fracture.pressure, index, axis=axis)
        face_active = np.take(active, index, axis=axis)
        if not face_active.any():
            raise DataValidationError(
                f"{where(path, fracture.name, 'aperture')}: the {side} face (flow_axis "
                f"{fracture.flow_axis}, index {index}) has no active cell"
            )
        mean = float(face[face_active].mean())
        if abs(mean - declared) > BOUNDARY_TOLERANCE * drop:
            raise DataValidationError(
                f"{where(path, fracture.name, 'pressure')}: {side} face (flow_axis {fracture.flow_axis}, "
                f"index {index}) has mean {mean:.6g}, inconsistent with declared {side}_pressure "
                f"{declared:.6g} (tolerance {BOUNDARY_TOLERANCE:g} x |inlet - outlet|)"
            )
    low, high = sorted((fracture.inlet_pressure, fracture.outlet_pressure))
    margin = PRESSURE_RANGE_TOLERANCE * drop
    outside = active & ((fracture.pressure < low - margin) | (fracture.pressure > high + margin))
    if outside.any():
        first = _first_pixel(outside)
        raise DataValidationError(
            f"{where(path, fracture.name, 'pressure')}: {int(outside.sum())} active pixel(s) lie outside the range "
            f"[{low:.6g}, {high:.6g}] of the outlet and inlet pressures by more than {PRESSURE_RANGE_TOLERANCE:g} x "
            f"|inlet - outlet|; the first is {first}: {float(fracture.pressure[first]):.6g} (without sources the "
            "pressure lies between them: is the pressure in another unit than the inlet and outlet pressures?)"
        )


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


def number_attribute(
    path: str | os.PathLike, name: str, attrs: Mapping[str, Any], attribute: str, default: float | None = None
) -> float:
    """The attribute ``attribute`` of group ``name`` (its ``attrs``) as a float (``default`` where absent): one real
    number, not text or an array of several."""
    value = attrs.get(attribute, default)
    array = np.asarray(value)
    if array.size != 1 or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        raise DataValidationError(
            f"{where(path, name, attribute=attribute)} is {text!r}; expected one number"
        )
    return float(array.reshape(()))


def _provenance(path: str | os.PathLike, name: str, group: h5py.Group) -> dict:
    """The group's ``provenance`` attribute, a JSON object ({} where absent)."""
    text = group.attrs.get("provenance", "{}")
    try:
        provenance = json.loads(text)
    except (TypeError, ValueError) as error:  # JSONDecodeError is a ValueError; an array is a TypeError
        raise DataValidationError(
            f"{where(path, name)}: attribute 'provenance' is not a JSON text ({error})"
        ) from None
    _check_provenance(provenance, path, name)
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
                f"inactive cell(s) of aperture > 0 (the first at {_first_pixel(lost)}) would become active; keep "
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
