"""Fractures that a dataset holds more than once, under other names or in other files.

A training run splits its fractures at random into the training, validation and test splits, so two copies of one
map can land on both sides: the held-out figures would then score a map the model was trained on. Two files that
``flowlearn generate`` made with overlapping seed ranges hold such copies (a file of ``--count`` N fractures from
``--seed`` S holds the fractures of seeds S to S + N - 1). ``python train.py`` refuses a dataset with copies, naming
the first; :class:`Copies` finds them in the pass that validates every fracture before a run
(:func:`flowlearn.data.files.validate_file`).

Two fractures are copies where the Darcy problem on them is the same: the same aperture map, the same mask, the same
flow axis and, where they store walls, the same mid-surface up to a shift in height (the inclined laws take their
tensor from it: parallel plates and plates tilted by any slope share an aperture map, not a problem). The apertures
are compared rounded to float32, so that a copy stored in float32 (as the original layout of ``flowlearn convert
--layout original`` stores every map) counts as one in float64, and leading axes of length 1 are left out, so that
a map held as a volume one voxel deep counts too. Their reference pressures are not compared: two references on
one map would be two answers to one problem.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from flowlearn.data.schema import Fracture, where
from flowlearn.errors import DataValidationError


class Copies:
    """The fractures seen so far, by the fingerprint of their problem; :meth:`check` raises where one repeats an
    earlier one."""

    def __init__(self) -> None:
        self._first: dict[bytes, str] = {}  # fingerprint -> "<file>: group '<name>'" of its first fracture
        self._repeat: tuple[str, str] | None = None  # (the first copy found, the fracture it repeats)
        self._repeats = 0

    def add(self, fracture: Fracture, path: str | os.PathLike) -> None:
        """Note ``fracture`` of file ``path``."""
        key, place = fingerprint(fracture), where(path, fracture.name)
        if key not in self._first:
            self._first[key] = place
            return
        self._repeats += 1
        self._repeat = self._repeat or (place, self._first[key])

    def check(self) -> None:
        """Raise :class:`DataValidationError` naming the first copy and the fracture it repeats, and how many copies
        there are in all; nothing where every fracture is held once."""
        if self._repeat is None:
            return
        copy, original = self._repeat
        raise DataValidationError(
            f"{copy} holds the same map as {original} ({self._repeats} fracture(s) in all repeat an earlier one): "
            "a fracture held twice can be trained on and held out at once; keep one of each (two files of "
            "flowlearn generate repeat fractures where their seeds, --seed to --seed + --count - 1, overlap)"
        )


def _squeezed(values: np.ndarray) -> np.ndarray:
    """``values`` without its leading axes of length 1, down to a map (H, W)."""
    while values.ndim > 2 and values.shape[0] == 1:
        values = values[0]
    return values


def fingerprint(fracture: Fracture) -> bytes:
    """16 bytes that identify the Darcy problem on ``fracture``: its flow axis, shape and aperture (rounded to
    float32), both without leading axes of length 1, its mid-surface less its mean (where it stores walls), and
    mask."""
    aperture = _squeezed(np.asarray(fracture.aperture))
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{fracture.flow_axis} {aperture.shape}".encode())
    # float64 values rounded to float32 equal the float32 values of a copy made by that rounding, bit for bit.
    # Apertures beyond float32's range (1e300 m: another unit, refused later by name) become inf without a warning.
    with np.errstate(over="ignore"):
        digest.update(np.ascontiguousarray(aperture, dtype=np.float32).tobytes())
    if fracture.bottom is not None and fracture.top is not None:
        mid = 0.5 * (_squeezed(np.asarray(fracture.bottom)) + _squeezed(np.asarray(fracture.top)))
        with np.errstate(over="ignore"):
            digest.update(np.ascontiguousarray(mid - mid.mean(), dtype=np.float32).tobytes())
    # A mask that leaves out nothing poses the problem of no mask.
    if fracture.mask is not None and not np.all(fracture.mask):
        digest.update(np.ascontiguousarray(_squeezed(np.asarray(fracture.mask)), dtype=bool).tobytes())
    return digest.digest()
