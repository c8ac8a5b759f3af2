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

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Literal

import numpy as np

from flowlearn.checks import VOXEL_SIZE, nonfinite, shown
from flowlearn.errors import DataValidationError

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
# Tolerance on the boundary columns' mean over active cells, as a fraction of |inlet - outlet|: it catches a
# pressure in another unit or heads that are not the file's. A 3D reference's pressure is not uniform across a
# rough end column (the shared original file's plain mean is 0.3 % off its head), and flowlearn's references set
# the heads at the end columns' flux-weighted means (flowlearn.reference.voxels.end_pressure), from which the
# plain mean lies up to 4.5 % away where contacts close most of the column (rock fracture 14).
BOUNDARY_TOLERANCE = 0.1
# How far beyond its inlet and outlet pressures a reference pressure may go, in units of their difference: it catches
# a pressure in another unit. Without sources a 2D Darcy pressure stays between them (the maximum principle); a 3D
# reference's overshoots where an end column is no equipotential: the LBM's compressibility and boundary layers, 0.8 %
# on the real fracture, up to 3.5 % in the embedded dataset; and the reservoir's pressure beyond the end column's
# flow-weighted head, where the gap narrows at the map's end (rock fracture 27: 55 pixels fed from the outlet's
# reservoir at 0.746, heads 2 and 1; the plain means did no better).
PRESSURE_RANGE_TOLERANCE = 0.5
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
        first = first_pixel(ap < 0)
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
    """``provenance`` as the JSON text the writer stores: a JSON object (:func:`check_provenance`), numpy scalars
    and arrays written as numbers and lists; :class:`DataValidationError` naming file and group where it holds what
    JSON cannot (a set, an object, keys of mixed types)."""
    check_provenance(provenance, path, name)

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


def check_provenance(provenance: object, path: str | os.PathLike, name: str) -> None:
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
        first = first_pixel(wide)
        raise DataValidationError(
            f"{where(path, fracture.name, 'aperture')}: {int(wide.sum())} aperture(s) of at least {WIDEST_APERTURE} "
            f"times the map's longest side, {length:.6g} m ({max(ap.shape)} pixels of voxel_size {voxel:.6g} m); "
            f"the first is {float(ap[first]):.6g} at {first}. Apertures are in metres: apertures in voxels need "
            "multiplying by voxel_size"
        )


def first_pixel(mask: np.ndarray) -> tuple[int, ...]:
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
        first = first_pixel(off)
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
        first = first_pixel(outside)
        raise DataValidationError(
            f"{where(path, fracture.name, 'pressure')}: {int(outside.sum())} active pixel(s) lie outside the range "
            f"[{low:.6g}, {high:.6g}] of the outlet and inlet pressures by more than {PRESSURE_RANGE_TOLERANCE:g} x "
            f"|inlet - outlet|; the first is {first}: {float(fracture.pressure[first]):.6g} (without sources the "
            "pressure lies between them: is the pressure in another unit than the inlet and outlet pressures?)"
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
