"""The default model is exact where the physics is, and dimensionless: W = 1 on parallel plates (flat, and tilted
along and across the flow), so the trained default run gives their exact flow; inputs and W do not change when the
apertures, walls and voxel size are scaled together."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_inputs import make_walled_dataset, walled_fracture
from test_train import ROOT, run_train

from flowlearn.data.files import write_fractures
from flowlearn.data.inputs import INPUTS, input_channels, plate_channels
from flowlearn.data.schema import Fracture
from flowlearn.fractures.inclination import aperture_slope, inclination_tensor
from flowlearn.models.correction import CNNCorrection, UNetCorrection
from flowlearn.models.laws import ClosedFormLaw, Geometry
from flowlearn.training.predictions import read_predictions

VOXEL = 1e-5
SHAPE = (12, 17)
GAP = 4 * VOXEL


def plates(slope_x: float = 0.0, slope_y: float = 0.0, shape: tuple[int, int] = SHAPE) -> Fracture:
    """Parallel plates a vertical distance GAP apart, their mid-surface rising by slope_x per metre along the flow
    (x) and slope_y across it; heads 2 -> 1 as the reference's (a linear profile)."""
    rows, columns = np.indices(shape) * VOXEL
    bottom = slope_x * columns + slope_y * rows
    line = np.broadcast_to(np.linspace(2.0, 1.0, shape[1]), shape).copy()
    return Fracture(
        f"plates_{slope_x}_{slope_y}",
        np.full(shape, GAP),
        line,
        voxel_size=VOXEL,
        bottom=bottom,
        top=bottom + GAP,
    )


TILTS = [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.3, 0.4)]


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("tilt", TILTS)
def test_plate_channels_are_what_plates_give(name, tilt):
    channels = input_channels(plates(*tilt), [name])
    expected = np.array(plate_channels([name], 2)).reshape(-1, 1, 1)
    flat_only = name in ("walls", "mid_surface")  # these see a tilted pair's slope
    if flat_only and tilt != (0.0, 0.0):
        assert not np.allclose(channels, expected, atol=1e-3)
    else:
        np.testing.assert_allclose(channels, np.broadcast_to(expected, channels.shape), atol=1e-12)


def _randomised(network: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    for parameter in network.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    return network


CUDA = pytest.param(
    "cuda",
    marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
)


@pytest.mark.parametrize("make", [CNNCorrection, UNetCorrection])
@pytest.mark.parametrize("shape", [(12, 17), (9, 9), (64, 64)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_a_network_returns_its_initial_value_on_plates_whatever_its_weights(make, shape, dtype, device):
    names = ["aperture", "aperture_gradient", "walls"]
    inputs = torch.from_numpy(input_channels(plates(shape=shape), names)).unsqueeze(0).expand(2, -1, -1, -1)
    anchored = _randomised(make(channels=4, inputs=names, initial=0.25)).to(dtype=dtype, device=device)
    # float32 convolutions give the plates and the anchor, which go through in one batch, the same bits; float64
    # ones (im2col and a matrix product over the whole batch) may round them differently, by an ulp of g.
    atol = 0 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(
        anchored(inputs.to(device)).cpu(),
        torch.full((2, *shape), 0.25, dtype=torch.float64),
        rtol=0,
        atol=atol,
    )


@pytest.mark.parametrize("make", [CNNCorrection, UNetCorrection])
def test_the_anchor_shifts_every_item_by_the_same_map(make):
    shape, names = (12, 17), ["aperture", "aperture_gradient", "walls"]
    inputs = torch.from_numpy(input_channels(plates(shape=shape), names)).unsqueeze(0)
    anchored = _randomised(make(channels=4, inputs=names, initial=0.25))
    bare = _randomised(make(channels=4, inputs=names, initial=0.25, exact_on_plates=False))
    assert (bare(inputs) - 0.25).abs().min() > 1e-3  # without the anchor, the weights move W on plates
    # And on a rough fracture the anchor changes the raw correction by a single map, the same for every item.
    rough = torch.from_numpy(input_channels(walled_fracture("f", shape, seed=3), names)).unsqueeze(0)
    both = torch.cat([rough, inputs])
    shift = bare(both) - anchored(both)
    torch.testing.assert_close(shift[0], shift[1], rtol=0, atol=1e-13)


def test_inputs_and_the_closed_form_scale_with_the_fracture():
    # Apertures, walls and voxel size 37 times larger: the same fracture in other units.
    small = walled_fracture("f", (16, 20), seed=1)
    scale = 37.0
    large = Fracture(
        "f", small.aperture * scale, small.pressure, voxel_size=small.voxel_size * scale,
        bottom=small.bottom * scale, top=small.top * scale,
    )  # fmt: skip
    names = list(INPUTS)
    np.testing.assert_allclose(
        input_channels(large, names), input_channels(small, names), rtol=1e-12, atol=1e-12
    )
    network = _randomised(CNNCorrection(channels=4, inputs=names))
    w = [network(torch.from_numpy(input_channels(fr, names)).unsqueeze(0)) for fr in (small, large)]
    torch.testing.assert_close(w[0], w[1], rtol=1e-12, atol=1e-12)
    # T_mlcl is a transmissivity: it scales as a length cubed, along both axes, its correlation unchanged.
    law = ClosedFormLaw()
    logs = []
    for fr in (small, large):
        log_ap = torch.from_numpy(np.log(np.maximum(fr.aperture, 1e-300))).unsqueeze(0)
        geometry = (torch.from_numpy(inclination_tensor(fr)), torch.from_numpy(aperture_slope(fr)))
        active = torch.from_numpy(fr.active).unsqueeze(0)
        logs.append(
            law.log_k(log_ap, torch.zeros_like(log_ap), Geometry(active, *(g.unsqueeze(0) for g in geometry)))
        )
    active = torch.from_numpy(small.active)
    for axis in (0, 1):
        shift = (logs[1][0, axis] - logs[0][0, axis])[active]
        torch.testing.assert_close(shift, torch.full_like(shift, 3 * math.log(scale)), rtol=0, atol=1e-11)
    torch.testing.assert_close(logs[1][0, 2], logs[0][0, 2], rtol=0, atol=1e-12)


def exact_flow_rate(fracture: Fracture, slope_x: float, slope_y: float) -> float:
    """Parallel plates of vertical gap b whose mid-surface is the plane of slopes (slope_x, slope_y): the normal gap
    is b cos θ, and the flow per unit head drop (unit viscosity) through the map's H rows over its W - 1 spacings is
    H (b cos θ)³/12 · g/(W - 1), where g = (1 + slope_y²)/(1 + |slope|²)^(1/2) is the plane's metric factor along
    the flow (cos θ for a slope along x, 1/cos θ across: the longer path, the wider section)."""
    height, width = fracture.shape
    norm2 = 1 + slope_x**2 + slope_y**2
    cos = 1 / math.sqrt(norm2)
    metric = (1 + slope_y**2) / math.sqrt(norm2)
    return height * (GAP * cos) ** 3 / 12 * metric / (width - 1)


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(("trainer.max_epochs=2", "model.channels=4"), id="short"),
        pytest.param(("trainer.max_epochs=2", "model.channels=4", "trainer.precision=32-true"), id="float32"),
        pytest.param((), id="default", marks=pytest.mark.slow),
    ],
)
def test_the_trained_default_model_gives_plates_their_exact_flow(tmp_path, overrides):
    # The default run (law=mlcl, the CNN) on walled rough fractures, or with no override on the embedded dataset.
    data = () if not overrides else (f"data.path={make_walled_dataset(tmp_path / 'train.h5', 8, (16, 20))}",)
    run = tmp_path / "run"
    run_train(*data, *overrides, "~callbacks.figures", run_dir=run)
    # Flat, and tilted along or across the flow (tilted both ways, the no-flow sides bend the pressure: no line).
    cases = {fr.name: (fr, tilt) for tilt in TILTS[:3] for fr in [plates(*tilt)]}
    write_fractures(tmp_path / "plates.h5", [fr for fr, _ in cases.values()])
    output = tmp_path / "predicted.h5"
    subprocess.run(
        [sys.executable, "-m", "flowlearn.cli", "predict", str(run), str(tmp_path / "plates.h5"), "-o", str(output)],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    predictions = read_predictions(output)
    assert len(predictions) == len(cases)
    for fields in predictions:
        fracture, tilt = cases[fields.name.split("__")[-1]]
        np.testing.assert_allclose(fields.correction, 1.0, rtol=0, atol=1e-12)
        assert fields.flow_rate == pytest.approx(exact_flow_rate(fracture, *tilt), rel=5e-3), fields.name
        np.testing.assert_allclose(fields.pressure, fracture.pressure, rtol=0, atol=1e-4, err_msg=fields.name)
