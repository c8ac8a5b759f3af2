"""A fracture held twice is found whatever its name, file or precision; fractures that differ are not taken for
copies."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flowlearn.data.copies import Copies
from flowlearn.data.files import read_fracture, write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError


def _rough(name: str, seed: int = 0, **fields) -> Fracture:
    aperture = np.random.default_rng(seed).uniform(5e-5, 2e-4, size=(6, 8))
    return Fracture(name, aperture, None, **fields)


def _repeats(*placed: tuple[Fracture, str]) -> str | None:
    """The message of Copies.check for the fractures in this order (file, fracture), None where it passes."""
    copies = Copies()
    for fracture, path in placed:
        copies.add(fracture, path)
    try:
        copies.check()
    except DataValidationError as error:
        return str(error)
    return None


def test_a_copy_in_another_file_names_both_and_counts_the_copies():
    fractures = [_rough(f"f{i}", seed=i) for i in range(3)]
    message = _repeats(*((f, "a.h5") for f in fractures), *((f, "b.h5") for f in fractures[1:]))
    assert message.startswith("b.h5: group 'f1' holds the same map as a.h5: group 'f1' (2 fracture(s) in all")
    assert "--seed" in message


def test_a_copy_under_another_name_stored_in_float32_is_a_copy():
    original = _rough("f0")
    single = Fracture("g7", original.aperture.astype(np.float32).astype(np.float64), None)
    # A map already rounded to float32, held in float64 and in float32.
    stored = Fracture("g8", single.aperture.astype(np.float32), None)
    assert _repeats((single, "a.h5"), (stored, "a.h5")) is not None


def test_a_float64_map_and_its_float32_copy_are_copies():
    # The float64 map itself, not one rounded to float32 first: compared as float64 the two had differed.
    original = _rough("f0")
    assert _repeats((original, "a.h5"), (Fracture("g", original.aperture.astype(np.float32), None), "b.h5"))


def test_a_map_held_as_a_volume_one_voxel_deep_is_a_copy():
    original = _rough("f0")
    assert _repeats((original, "a.h5"), (Fracture("g", original.aperture[None], None), "b.h5"))


def test_a_copy_in_the_original_layout_is_a_copy(tmp_path):
    # flowlearn convert --layout original stores the map as (1, 1, H, W) float32.
    pressure = np.tile(2 - np.arange(8) / 7, (6, 1))
    fractures = [replace(_rough(f"f{i}", seed=i), pressure=pressure) for i in range(2)]
    for layout in ("flowlearn", "original"):
        write_fractures(tmp_path / f"{layout}.h5", fractures, layout=layout)
    placed = [
        (read_fracture(tmp_path / f"{layout}.h5", name), f"{layout}.h5")
        for layout in ("flowlearn", "original")
        for name in ("f0", "f1")
    ]
    assert _repeats(*placed).startswith(
        "original.h5: group 'f0' holds the same map as flowlearn.h5: group 'f0'"
    )


@pytest.mark.parametrize(
    "other",
    [
        _rough("g", seed=1),  # another map
        _rough("g", flow_axis="y"),  # the same map, the flow along the other axis: another problem
        _rough("g", mask=np.arange(48).reshape(6, 8) != 5),  # one more cell left out
    ],
)
def test_fractures_that_pose_another_problem_are_no_copies(other):
    assert _repeats((_rough("f"), "a.h5"), (other, "a.h5")) is None


def test_a_mask_that_leaves_out_nothing_poses_the_same_problem():
    assert _repeats((_rough("f"), "a.h5"), (_rough("g", mask=np.ones((6, 8), bool)), "a.h5")) is not None


def test_a_repeated_pressure_is_not_needed_for_a_copy():
    """Two references on one map are two answers to one problem: still a copy."""
    first, second = (
        replace(_rough(name), pressure=np.full((6, 8), value)) for name, value in (("f", 1), ("g", 2))
    )
    assert _repeats((first, "a.h5"), (second, "a.h5")) is not None


def _plates(name: str, slope: float, shift: float = 0.0) -> Fracture:
    """Plates 1e-4 m apart, tilted along the flow by ``slope`` and raised by ``shift`` metres."""
    bottom = np.tile(slope * 1e-5 * np.arange(8), (6, 1)) + shift
    aperture = np.full((6, 8), 1e-4)
    return Fracture(name, aperture, None, bottom=bottom, top=bottom + aperture)


def test_plates_tilted_by_another_slope_are_no_copies_of_parallel_plates():
    # One aperture map, but the inclined laws' tensor differs with the mid-surface's slope.
    assert _repeats((_plates("f", 0.0), "a.h5"), (_plates("g", 0.3), "a.h5")) is None


def test_walls_raised_as_a_whole_pose_the_same_problem():
    assert _repeats((_plates("f", 0.3), "a.h5"), (_plates("g", 0.3, shift=4e-4), "a.h5")) is not None
