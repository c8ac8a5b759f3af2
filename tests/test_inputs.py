"""Input channels of the correction models (flowlearn.data.inputs) and the networks that read them.

Expected channels come from geometry written down by hand: a linear aperture ramp has a constant gradient, a
planar mid-surface is its own relative height, and every channel is a pure number, so scaling a fracture's lengths
changes none of them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.data.files import write_fractures
from flowlearn.data.inputs import INPUTS, channel_count, check_input_names, input_channels, require_inputs
from flowlearn.data.schema import Fracture
from flowlearn.errors import DataValidationError
from flowlearn.fractures.roughness import RoughnessParams, rough_fracture
from flowlearn.models import CNNCorrection, UNetCorrection

VOXEL = 1e-5  # metres per pixel


def planar_fracture(scale: float = 1.0, contact: bool = False) -> Fracture:
    """6 x 8 walls around a planar mid-surface 0.3 x + 0.1 y and an aperture ramp 2 + 0.5 x (pixels, times
    ``scale`` voxels); ``contact`` closes the gap at pixel (2, 3)."""
    y, x = np.mgrid[0:6, 0:8].astype(np.float64)
    aperture = scale * VOXEL * (2 + 0.5 * x)
    middle = scale * VOXEL * (0.3 * x + 0.1 * y)
    if contact:
        aperture[2, 3] = 0.0
    return Fracture(
        "planar",
        aperture,
        None,
        voxel_size=VOXEL,
        bottom=middle - aperture / 2,
        top=middle + aperture / 2,
    )


def walled_fracture(name: str, shape: tuple[int, int], seed: int, scale: float = 1.0) -> Fracture:
    """A rough fracture with its walls (metres, ``scale`` times a 4-voxel mean gap) and, as reference, the Darcy
    pressure of a hidden correction W* = (Ap / mean Ap)^0.5."""
    params = RoughnessParams(
        shape, hurst=0.8, rms=1.0, mean_aperture=4.0, mismatch_length=16.0, seed=seed, shear=2.0
    )
    rough = rough_fracture(params)
    aperture = rough.aperture * VOXEL * scale
    problem = DarcyProblem.fracture(shape, active=aperture > 0, drop_unconnected=True)
    mean = aperture[problem.active].mean()
    log_k = np.where(problem.active, 2.5 * np.log(np.maximum(aperture, 1e-300)) - 0.5 * np.log(mean), 0.0)
    pressure = solve_pressure(torch.from_numpy(log_k), problem).numpy()
    return Fracture(
        name,
        aperture,
        np.where(problem.active, pressure, 1.5),
        mask=problem.active | (aperture == 0),
        voxel_size=VOXEL,
        bottom=rough.bottom * VOXEL * scale,
        top=rough.top * VOXEL * scale,
    )


def make_walled_dataset(
    path: Path, count: int, shape: tuple[int, int], seed: int = 0, scale: float = 1.0
) -> Path:
    write_fractures(
        path, [walled_fracture(f"fracture_{i:02d}", shape, seed + i, scale) for i in range(count)]
    )
    return path


def test_the_channels_of_a_planar_fracture():
    fracture = planar_fracture()
    y, x = np.mgrid[0:6, 0:8].astype(np.float64)
    mean = 2 + 0.5 * x.mean()  # <Ap> in voxels
    gradient = input_channels(fracture, ["aperture_gradient"])
    np.testing.assert_allclose(gradient[0], 0.5 / mean, rtol=1e-12)  # d(Ap)/dx / <Ap>, edges included
    np.testing.assert_allclose(gradient[1], 0.0, atol=1e-15)
    middle = 0.3 * x + 0.1 * y
    (mid_surface,) = input_channels(fracture, ["mid_surface"])
    np.testing.assert_allclose(mid_surface, (middle - middle.mean()) / mean, atol=1e-13)
    bottom, top = input_channels(fracture, ["walls"])
    np.testing.assert_allclose(top - bottom, (2 + 0.5 * x) / mean, rtol=1e-12)  # the gap over its mean
    np.testing.assert_allclose((top + bottom) / 2, mid_surface, atol=1e-13)
    relative, mask = input_channels(fracture, ["aperture"])
    log_aperture = np.log(2 + 0.5 * x)
    np.testing.assert_allclose(relative, log_aperture - log_aperture.mean(), atol=1e-13)
    assert (mask == 1).all()


def test_a_contact_spot_is_masked_and_left_out_of_the_means():
    fracture = planar_fracture(contact=True)
    relative, mask = input_channels(fracture, ["aperture"])
    assert mask[2, 3] == 0 and relative[2, 3] == 0 and mask.sum() == 47
    assert abs(relative[mask == 1].mean()) < 1e-14
    gradient = input_channels(fracture, ["aperture_gradient"])
    open_mean = fracture.aperture[fracture.aperture > 0].mean()
    # Central differences across the closed pixel see the gap drop to zero.
    expected = (0 - fracture.aperture[2, 1]) / 2 / open_mean
    assert gradient[0, 2, 2] == pytest.approx(expected, rel=1e-12)


def test_channels_are_dimensionless_and_follow_the_order_asked():
    names = ["mid_surface", "aperture", "walls", "aperture_gradient"]
    small, large = (input_channels(planar_fracture(scale), names) for scale in (1.0, 7.0))
    assert small.shape == (channel_count(names, 2), 6, 8) == (7, 6, 8)
    np.testing.assert_allclose(large, small, atol=1e-12)
    one_by_one = np.concatenate([input_channels(planar_fracture(), [name]) for name in names])
    np.testing.assert_array_equal(small, one_by_one)


def test_inputs_that_need_walls_refuse_a_fracture_without_them(tmp_path):
    bare = Fracture("bare", planar_fracture().aperture, None, voxel_size=VOXEL)
    for name, spec in INPUTS.items():
        if spec.needs_walls:
            with pytest.raises(
                DataValidationError, match=rf"group 'bare': model.inputs \['{name}'\], which need"
            ):
                input_channels(bare, ["aperture", name], "f.h5", "model.inputs")
        else:
            assert input_channels(bare, [name]).shape[0] == spec.channel_count(2)
    path = tmp_path / "bare.h5"
    write_fractures(path, [bare, planar_fracture()])
    require_inputs([path], ["aperture", "aperture_gradient"], "model.inputs")  # no walls needed: no error
    with pytest.raises(DataValidationError, match=rf"{path}: group 'bare': model.inputs \['mid_surface'\]"):
        require_inputs([path], ["aperture", "mid_surface"], "model.inputs")


@pytest.mark.parametrize("names", [[], ["aperture", "aperture"], ["aperture", "curvature"]])
def test_input_names_must_be_known_and_distinct(names):
    with pytest.raises(ValueError, match="must be a list of distinct inputs from"):
        check_input_names(names)


NETWORKS = {
    "cnn": lambda dim, inputs: CNNCorrection(
        dim=dim, channels=4, depth=2, kernel_size=3, initial=0.25, inputs=inputs
    ),
    "unet": lambda dim, inputs: UNetCorrection(dim=dim, channels=4, levels=2, initial=0.25, inputs=inputs),
}


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (12, 16), (9, 2), (3, 5, 6)])
def test_networks_start_at_the_law_on_maps_of_any_size(network, shape):
    inputs = ["aperture", "aperture_gradient"]
    model = NETWORKS[network](len(shape), inputs)
    features = torch.randn(3, channel_count(inputs, len(shape)), *shape, dtype=torch.float64)
    raw = model(features)
    assert raw.shape == (3, *shape) and raw.dtype == torch.float64
    assert (raw == 0.25).all()  # the zero head: training starts from the law
    raw.sum().backward()  # and the head gets a gradient, so training moves off it
    assert model.head.weight.grad.abs().sum() > 0


def _reach(model: torch.nn.Module, distance: int) -> float:
    """How much the output at ``distance`` pixels from a changed input pixel moves (a 40 x 40 map)."""
    torch.manual_seed(0)
    torch.nn.init.normal_(model.head.weight)
    features = torch.randn(1, 2, 40, 40, dtype=torch.float64)
    changed = features.clone()
    changed[0, :, 20, 10] += 1.0
    with torch.no_grad():
        return float((model(changed) - model(features))[0, 20, 10 + distance].abs())


def test_the_unet_sees_farther_than_the_cnn():
    # Three 5 x 5 convolutions reach 6 pixels; two levels of halving take the U-Net's 3 x 3 convolutions well
    # beyond that.
    cnn = CNNCorrection(channels=4, depth=3, kernel_size=5)
    unet = UNetCorrection(channels=4, levels=2, kernel_size=3)
    assert _reach(cnn, 6) > 0 and _reach(cnn, 7) == 0
    assert _reach(unet, 16) > 0
