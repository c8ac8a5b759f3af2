"""The recipes of rough fractures: walls in contact by closure (``published``), the same as windows of larger walls
with the slopes of rock joints (``rock``), and the winding recipe of the example dataset, which must still reproduce
it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest

from flowlearn.data.files import read_fractures
from flowlearn.fractures.closure import ClosureParams, closed_fracture
from flowlearn.fractures.inclination import smoothed_gradient
from flowlearn.fractures.recipes import RECIPES, Published, Rock, Winding
from flowlearn.fractures.roughness import refine, refine_wall, window
from flowlearn.fractures.statistics import JOINT_RANGES, joint_statistics
from flowlearn.reference.generate import DatasetConfig

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "fractures.h5"


def _params(**changes) -> ClosureParams:
    base = dict(
        shape=(64, 96),
        mean_aperture=8.0,
        hurst=0.7,
        aperture_std=0.4,
        contact_fraction=0.1,
        mismatch_length=32.0,
        min_wavelength=4.0,
        mid_slope=0.3,
        seed=3,
    )
    return ClosureParams(**{**base, **changes})


def test_parallel_plates_are_exactly_parallel():
    fr = closed_fracture(_params(kind="parallel"))
    np.testing.assert_array_equal(fr.aperture, 8.0)
    np.testing.assert_array_equal(fr.bottom, -4.0)
    np.testing.assert_array_equal(fr.top, 4.0)


@pytest.mark.parametrize("kind, axis", [("tilted_along", 1), ("tilted_across", 0)])
def test_tilted_plates_slope_by_mid_slope_along_their_axis(kind, axis):
    fr = closed_fracture(_params(kind=kind, mid_slope=0.25))
    np.testing.assert_allclose(fr.top - fr.bottom, 8.0, rtol=0, atol=1e-12)
    slope = np.diff(fr.bottom, axis=axis)
    np.testing.assert_allclose(slope, 0.25, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.diff(fr.bottom, axis=1 - axis), 0.0, atol=1e-12)


def test_closure_sets_the_mean_aperture_and_the_contact_area():
    fr = closed_fracture(_params(contact_fraction=0.2))
    assert fr.aperture.mean() == pytest.approx(8.0, rel=1e-12)
    # The closure is the open gap's quantile at the contact fraction: the share of cells at 0 is that fraction, up to
    # the one cell the quantile interpolates through.
    assert abs((fr.aperture == 0).mean() - 0.2) <= 1.0 / fr.aperture.size
    # Where the walls touch they overlap (the top one at or below the bottom one), as pressed walls do.
    assert np.all(fr.top[fr.aperture == 0] <= fr.bottom[fr.aperture == 0])


def test_an_open_gap_has_the_spread_it_was_given():
    # At 0.2 the Gaussian gap stays open (its lowest cell is 5 sigma away), so no closure or opening changes it.
    fr = closed_fracture(_params(contact_fraction=0.0, aperture_std=0.2))
    assert (fr.aperture > 0).all()
    assert fr.aperture.std() / fr.aperture.mean() == pytest.approx(0.2, rel=1e-9)


def test_a_flat_mid_surface_mirrors_the_walls():
    fr = closed_fracture(_params(kind="flat_mid_surface"))
    np.testing.assert_allclose(fr.top, -fr.bottom, atol=1e-12)
    assert fr.aperture.std() > 0


def test_the_smoothed_mid_surface_has_the_slope_it_was_given():
    """Measured with the inclination law's own smoothing (a real-space Gaussian derivative), not the synthesis's
    Fourier filter: the rms slope lands on ``mid_slope`` where the matched wavelengths carry most of it."""
    params = _params(
        shape=(128, 128), aperture_std=0.05, contact_fraction=0.0, mismatch_length=64.0, mid_slope=0.2
    )
    fr = closed_fracture(params)
    gx, gy = smoothed_gradient((fr.top + fr.bottom) / 2, 1.0, params.mean_aperture)
    inside = (
        slice(16, -16),
        slice(16, -16),
    )  # away from the edges, where the map is not continued periodically
    rms = math.sqrt(np.mean(gx[inside] ** 2 + gy[inside] ** 2))
    assert rms == pytest.approx(0.2, rel=0.15)


def test_equal_parameters_give_equal_fractures_and_seeds_differ():
    np.testing.assert_array_equal(closed_fracture(_params()).top, closed_fracture(_params()).top)
    assert not np.array_equal(closed_fracture(_params()).top, closed_fracture(_params(seed=4)).top)


def test_refining_a_closed_fracture_keeps_its_shape_in_finer_voxels():
    coarse = closed_fracture(_params(shape=(16, 24), mismatch_length=12.0))
    fine = refine(coarse, 2)
    assert fine.params.mean_aperture == 16.0 and fine.params.shape == (32, 48)
    # Fourier interpolation passes through the coarse nodes, heights doubled.
    np.testing.assert_allclose(fine.top[::2, ::2], 2 * coarse.top, atol=1e-9)


def test_published_recipe_makes_the_exact_cases_of_every_block():
    recipe = Published(special_every=8)
    kinds = [recipe.kind(i) for i in range(16)]
    assert kinds[:5] == ["parallel", "tilted_along", "tilted_across", "flat_mid_surface", "flat_mid_surface"]
    # Parallel plates of one mean aperture are one problem: the later blocks draw a rough fracture in their place.
    assert kinds[5:8] == ["rough"] * 3 and kinds[8:13] == ["rough", *kinds[1:5]]
    assert {Published(special_every=0).kind(i) for i in range(16)} == {"rough"}


def test_draws_stay_in_their_ranges_and_the_mismatch_is_log_uniform():
    recipe = Published()
    draws = [recipe.draws(0, i) for i in range(400)]
    for name in recipe.ranged():
        low, high = getattr(recipe, name)
        assert all(low <= d[name] <= high for d in draws), name
    # Log-uniform on [2, 4]: half the draws below the geometric mean sqrt(8), not the arithmetic mean 3.
    below = np.mean([d["mismatch_ratio"] < math.sqrt(8.0) for d in draws])
    assert 0.43 < below < 0.57


def test_the_published_recipe_lands_in_the_published_ranges_of_aperture_and_contacts():
    """σ/⟨b⟩ 0.3-1.2 with a median >= 0.4, contact area 0-30 % with half the fractures at 5 % or more (data/README.md
    gives the sources), on the default grid."""
    config = DatasetConfig(count=64)
    rough = [config.walls(i) for i in range(config.count) if config.recipe.kind(i) != "parallel"]
    spread = np.array([w.aperture.std() / w.aperture.mean() for w in rough])
    contact = np.array([(w.aperture == 0).mean() for w in rough])
    sloped = [s for s, w in zip(spread, rough, strict=True) if w.params.kind == "rough"]
    assert 0.3 <= min(sloped) and max(spread) <= 1.2 and np.median(spread) >= 0.4
    assert contact.max() <= 0.3 + 1e-3 and np.mean(contact >= 0.05) >= 0.5


def test_the_recipes_table_names_each_recipe_by_its_name():
    assert set(RECIPES) == {"published", "rock", "winding"}
    assert all(cls.name == name for name, cls in RECIPES.items())


def test_the_rock_recipe_lands_in_the_ranges_of_rock_joints():
    """Rough fractures of the rock recipe meet every range of JOINT_RANGES (published measurements of rock joints,
    data/README.md gives the sources): σ/⟨b⟩, contact area, b_h/⟨b⟩ of the LCL, the smoothed mid-surface's slope and
    the walls' slope at half a mean aperture. 48 fractures on 48x48 maps at 4.5 pixels per mean aperture (10.7 mean
    apertures long, as the recipe's 64x64 maps at 6), measured on the walls' own gap."""
    config = DatasetConfig(count=48, shape=(48, 48), mean_aperture=4.5, recipe=Rock(special_every=0))
    rows = []
    for index in range(config.count):
        walls = config.walls(index)
        rows.append(joint_statistics(walls.bottom, walls.top, walls.aperture, 1.0))
    for name in ("relative_std", "contact_fraction", "hydraulic_ratio", "mid_slope", "wall_slope"):
        values = np.array([row[name] for row in rows])
        assert JOINT_RANGES[name].holds(values), (name, np.median(values), values.min(), values.max())


def test_the_rock_recipe_makes_exact_plates():
    recipe = Rock(special_every=8)
    assert [recipe.kind(i) for i in range(16)] == [Published(special_every=8).kind(i) for i in range(16)]
    parallel = recipe.walls((24, 32), 3.0, 0, 0)
    np.testing.assert_array_equal(parallel.aperture, 3.0)
    np.testing.assert_array_equal(parallel.bottom, -1.5)
    assert joint_statistics(parallel.bottom, parallel.top, parallel.aperture, 1.0) == pytest.approx(
        {"relative_std": 0, "contact_fraction": 0, "hydraulic_ratio": 1, "mid_slope": 0, "wall_slope": 0},
        abs=1e-12,
    )
    along = recipe.walls((24, 32), 3.0, 0, 9)
    slope = recipe.draws(0, 9)["mid_slope"]
    np.testing.assert_allclose(along.top - along.bottom, 3.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.diff(along.bottom, axis=1), slope, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.diff(along.bottom, axis=0), 0.0, atol=1e-12)
    statistics = joint_statistics(along.bottom, along.top, along.aperture, 1.0)
    assert statistics["hydraulic_ratio"] == pytest.approx(1.0, rel=1e-12)
    assert statistics["mid_slope"] == pytest.approx(slope, rel=1e-9)
    across = recipe.walls((24, 32), 3.0, 0, 10)
    np.testing.assert_allclose(np.diff(across.bottom, axis=0), recipe.draws(0, 10)["mid_slope"], atol=1e-12)


def test_a_rock_map_is_a_window_of_its_larger_walls_and_refines_exactly():
    recipe = Rock()
    walls = recipe.walls((24, 32), 3.0, 0, 5)
    assert walls.larger[0].shape == (240, 320) and walls.params.extent == 10
    np.testing.assert_array_equal(window(walls.larger[1], walls.origin, (24, 32)), walls.top)
    # Equal settings and seed, equal walls; the closure and the scale were set on the map itself.
    np.testing.assert_array_equal(recipe.walls((24, 32), 3.0, 0, 5).bottom, walls.bottom)
    assert walls.aperture.mean() == pytest.approx(3.0, rel=1e-12)
    assert (walls.aperture == 0).mean() == pytest.approx(recipe.draws(0, 5)["contact_fraction"], abs=1 / 768)
    # Refined, the window is the same surfaces: the larger walls' Fourier series, through the coarse nodes. Refining
    # the window's own values instead treats it as periodic: it rings, here by more than half a mean aperture (what
    # `flowlearn generate --refine-every` would do, and refuses for this recipe).
    fine = refine(walls, 2)
    assert fine.params.mean_aperture == 6.0 and fine.bottom.shape == (48, 64)
    np.testing.assert_allclose(fine.top[::2, ::2], 2 * walls.top, atol=1e-9)
    np.testing.assert_array_equal(fine.top, window(refine_wall(walls.larger[1], 2), (0, 0), (48, 64)))
    assert np.abs(refine_wall(walls.top, 2) - fine.top).max() > 0.5 * fine.params.mean_aperture


def test_a_rock_map_that_its_contacts_close_off_is_moved_to_the_next_window():
    """Of the 162 rough fractures of the first 192 on 64x64 maps at 6 voxels, three have a first window that no open
    path crosses; each is the next window of its larger walls, which one does."""
    walls = Rock().walls((64, 64), 6.0, 0, 76)
    assert walls.origin == (0, 64)
    assert joint_statistics(None, None, walls.aperture, math.nan)["hydraulic_ratio"] > 0


def test_the_winding_recipe_reproduces_the_example_dataset():
    """data/fractures.h5 was made by the winding recipe at its defaults: the same draws and the same walls."""
    recorded = json.loads(h5py.File(EXAMPLE, "r").attrs["recipe"])["config"]
    config = DatasetConfig(
        count=recorded["count"],
        shape=tuple(recorded["shape"]),
        mean_aperture=recorded["mean_aperture"],
        recipe=Winding(),
        seed=recorded["seed"],
    )
    for fracture in read_fractures(EXAMPLE)[:4]:
        index = fracture.provenance["dataset"]["index"]
        assert config.draws(index) == pytest.approx(fracture.provenance["dataset"]["drawn"], rel=1e-15)
        walls = config.walls(index)
        np.testing.assert_allclose(walls.bottom * config.voxel_size, fracture.bottom, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(walls.top * config.voxel_size, fracture.top, rtol=1e-6, atol=1e-12)


def test_the_convergence_study_as_generated_takes_the_example_dataset_walls():
    """`python -m flowlearn.reference.convergence --as-generated --shape 64 64 --index I` studies data/fractures.h5's
    fracture I itself (its README's resolution figures are of fracture_095)."""
    from flowlearn.reference.convergence import study_walls

    for fracture in read_fractures(EXAMPLE)[:2]:
        walls = study_walls(fracture.provenance["dataset"]["index"], (64, 64), 8.0, as_generated=True)
        voxel = fracture.voxel_size
        np.testing.assert_allclose(walls.bottom * voxel, fracture.bottom, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(walls.top * voxel, fracture.top, rtol=1e-6, atol=1e-12)
