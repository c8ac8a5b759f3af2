"""The input channels of a correction model: dimensionless maps of a fracture's geometry, chosen by name.

A model that is given ``inputs=[aperture, mid_surface, aperture_gradient]`` sees the channels of those inputs,
in that order, stacked into a float array (C, *shape). Each input is computed from the fracture alone:

- ``aperture`` (any map): log(Ap / ⟨Ap⟩_g), the log-aperture relative to its mean over the active pixels (0 where
  inactive), and the active mask (1 active, 0 inactive). Two channels; every model can be given it.
- ``aperture_gradient`` (any map): the components of ∇Ap / ⟨Ap⟩ along x (the flow), y (and z for volumes), by
  central differences in pixels (one-sided at the edges). One channel per axis.
- ``walls`` (needs the walls ``bottom`` and ``top``): each wall's height relative to the mean mid-surface height,
  over ⟨Ap⟩. Two channels: bottom, top.
- ``mid_surface`` (needs the walls): the mid-surface (bottom + top)/2 relative to its mean, over ⟨Ap⟩. One channel.

Parallel plates, flat or tilted, have the same channels whatever their aperture, slope or size, where the inputs
are ``aperture`` and ``aperture_gradient`` (:func:`plate_channels`): log-ratio 0, mask 1, gradient 0 (``walls`` and
``mid_surface`` tell a tilted pair from a flat one).

⟨Ap⟩_g is the geometric and ⟨Ap⟩ the arithmetic mean of the aperture over the active pixels; wall heights and
apertures share their unit (metres in the flowlearn layout), so every channel is a pure number (gradients per
pixel). Only the ``aperture`` channels are zeroed at inactive pixels (where the log-aperture does not exist); the
others describe the geometry everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flowlearn.data.files import list_fractures
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError


@dataclass(frozen=True)
class ModelInput:
    """One named input: how many channels it has, whether it needs the walls, and how to compute it.

    Attributes:
        name: the name a config lists (``model.inputs``).
        needs_walls: True when the fracture must store ``bottom`` and ``top``.
        channel_count: channels for a map of ``ndim`` dimensions.
        compute: ``(fracture, active) -> float64 (channels, *shape)``, ``active`` the fracture's bool mask.
        plates: the value of each channel on flat parallel plates (a constant map), for ``ndim`` dimensions.
    """

    name: str
    needs_walls: bool
    channel_count: Callable[[int], int]
    compute: Callable[[Fracture, np.ndarray], np.ndarray]
    plates: Callable[[int], tuple[float, ...]]


def _mean_aperture(fracture: Fracture, active: np.ndarray) -> float:
    """⟨Ap⟩ over the active pixels (1 where none is active, so that an empty map gives zeros, not NaN)."""
    return float(fracture.aperture[active].mean()) if active.any() else 1.0


def _aperture(fracture: Fracture, active: np.ndarray) -> np.ndarray:
    tiny = np.finfo(np.float64).tiny
    log_aperture = np.where(active, np.log(np.maximum(fracture.aperture.astype(np.float64), tiny)), 0.0)
    mean = log_aperture[active].mean() if active.any() else 0.0
    mask = active.astype(np.float64)
    return np.stack([(log_aperture - mean) * mask, mask])


def _aperture_gradient(fracture: Fracture, active: np.ndarray) -> np.ndarray:
    aperture = fracture.aperture.astype(np.float64)
    axes = range(aperture.ndim - 1, -1, -1)  # x (columns), y (rows), z
    return np.stack([np.gradient(aperture, axis=axis) for axis in axes]) / _mean_aperture(fracture, active)


def _walls(fracture: Fracture, active: np.ndarray) -> np.ndarray:
    bottom, top = (np.asarray(wall, dtype=np.float64) for wall in (fracture.bottom, fracture.top))
    middle = 0.5 * (bottom + top).mean()
    return np.stack([bottom - middle, top - middle]) / _mean_aperture(fracture, active)


def _mid_surface(fracture: Fracture, active: np.ndarray) -> np.ndarray:
    middle = 0.5 * (
        np.asarray(fracture.bottom, dtype=np.float64) + np.asarray(fracture.top, dtype=np.float64)
    )
    return (middle - middle.mean())[None] / _mean_aperture(fracture, active)


INPUTS: dict[str, ModelInput] = {
    spec.name: spec
    for spec in (
        ModelInput("aperture", False, lambda ndim: 2, _aperture, lambda ndim: (0.0, 1.0)),
        ModelInput(
            "aperture_gradient", False, lambda ndim: ndim, _aperture_gradient, lambda ndim: (0.0,) * ndim
        ),
        ModelInput("walls", True, lambda ndim: 2, _walls, lambda ndim: (-0.5, 0.5)),
        ModelInput("mid_surface", True, lambda ndim: 1, _mid_surface, lambda ndim: (0.0,)),
    )
}
# What a model sees unless told otherwise: the aperture map alone, which every fracture file has.
DEFAULT_INPUTS = ("aperture",)


def check_input_names(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` as a tuple, or ``ValueError`` unless it is a non-empty list of distinct names of :data:`INPUTS`."""
    if isinstance(names, str):
        raise ValueError(f"must be a list of distinct inputs from {list(INPUTS)}, got {names!r} (not a list)")
    names = tuple(names)
    unknown = [name for name in names if name not in INPUTS]
    if not names or unknown or len(set(names)) != len(names):
        problem = f"unknown {unknown}" if unknown else "empty or repeated names"
        raise ValueError(
            f"must be a list of distinct inputs from {list(INPUTS)}, got {list(names)} ({problem})"
        )
    return names


def channel_count(names: Sequence[str], ndim: int) -> int:
    """Channels of the inputs ``names`` for maps of ``ndim`` (2 or 3) dimensions."""
    return sum(INPUTS[name].channel_count(ndim) for name in check_input_names(names))


def plate_channels(names: Sequence[str], ndim: int) -> tuple[float, ...]:
    """The value of every channel of the inputs ``names`` on flat parallel plates (of any aperture and size), for
    maps of ``ndim`` (2 or 3) dimensions."""
    return tuple(value for name in check_input_names(names) for value in INPUTS[name].plates(ndim))


def needing_walls(names: Sequence[str]) -> list[str]:
    """The inputs of ``names`` that need the walls."""
    return [name for name in names if INPUTS[name].needs_walls]


def missing_walls(
    path: str | os.PathLike, group: str, names: Sequence[str], needed_by: str
) -> DataValidationError:
    """The error of a fracture without walls given to a model whose inputs ``names`` need them."""
    from_aperture = [name for name in INPUTS if not INPUTS[name].needs_walls]
    return DataValidationError(
        f"{os.fspath(path)}: group '{group}': {needed_by} {needing_walls(names)}, which need the walls (fields "
        f"'bottom' and 'top'), and this fracture has none; inputs from the aperture alone: {from_aperture}"
    )


def require_inputs(paths: Sequence[str | os.PathLike], names: Sequence[str], needed_by: str) -> None:
    """Raise :class:`DataValidationError` for the first fracture of ``paths`` that a model reading ``names`` cannot
    take: a flow along another axis than x (the pressure solves of training and prediction impose their heads on
    the first and last columns), or no walls where ``names`` need them (:func:`missing_walls`). Reads no arrays, so
    it suits a check before long work."""
    for path in paths:
        for info in list_fractures(path):
            if info.flow_axis != "x":
                raise DataValidationError(
                    f"{os.fspath(path)}: group '{info.name}': attribute 'flow_axis' is {info.flow_axis!r}; training "
                    "and prediction solve with the flow along x (the last array axis): transpose its fields so that "
                    "the flow runs along x"
                )
            if needing_walls(names) and not info.walls:
                raise missing_walls(path, info.name, names, needed_by)


def input_channels(
    fracture: Fracture, names: Sequence[str], path: str | os.PathLike = "<memory>", needed_by: str = "inputs"
) -> np.ndarray:
    """The channels of ``names`` for ``fracture``, float64 (C, *shape) (see the module docstring).

    A fracture without walls given inputs that need them raises :class:`DataValidationError` naming ``path``, the
    group and ``needed_by`` (what asked for them, e.g. ``model.inputs``).
    """
    names = check_input_names(names)
    if needing_walls(names) and fracture.bottom is None:
        raise missing_walls(path, fracture.name, names, needed_by)
    active = fracture.active
    return np.concatenate([INPUTS[name].compute(fracture, active) for name in names])


# What a law does with a fracture that lacks what it reads, for warnings that name the fracture: no walls (a law
# that reads the inclination), or no voxel size (a law that reads the aperture slope).
NO_WALLS = (
    "no walls, so the mid-surface is taken as flat (cos θ = 1): the inclination tensor is the identity there"
)
NO_VOXEL_SIZE = "no voxel size, so the aperture slope is unknown: the wedge factor is 1 there"


def missing_geometry(paths: Sequence[str | os.PathLike], walls: bool, slope: bool) -> dict[str, list[str]]:
    """``"<path>: group '<name>'"`` of every fracture of ``paths`` whose inclination tensor is unknown (no walls, or
    a 3D map; asked with ``walls``) or whose aperture slope is (no voxel size, or a 3D map; asked with ``slope``),
    keyed by what a law assumes there (:data:`NO_WALLS`, :data:`NO_VOXEL_SIZE`); reads no arrays."""
    asked = {NO_WALLS: walls, NO_VOXEL_SIZE: slope}
    missing: dict[str, list[str]] = {}
    for path in paths:
        for info in list_fractures(path):
            lacks = {NO_WALLS: not info.walls, NO_VOXEL_SIZE: not info.voxel_size_known}
            for what, lacking in lacks.items():
                if asked[what] and (lacking or len(info.shape) != 2):
                    missing.setdefault(what, []).append(f"{os.fspath(path)}: group '{info.name}'")
    return missing
