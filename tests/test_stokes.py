"""The independent Stokes solve (OpenFOAM): exact on plates, in the LBM's convention, and agreeing with the LBM.

On plates b voxels apart the finite-volume scheme (cells of side 1/r, no-slip faces on the walls) carries exactly
G b³ / (12 ν) (1 + 2 / (r b)²) per unit width under a pressure gradient G: the midpoint sum of its parabola, whose
wall cells sit 1/(2r) from the walls (derived in docs/laws.md's resolution section). Two refinements therefore
extrapolate to the plates' exact conductance.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from conftest import require_openfoam
from test_train import ROOT

from flowlearn.cli import main
from flowlearn.data.schema import read_fracture
from flowlearn.data.stokes import VISCOSITY, StokesSettings, extrapolate, solve
from flowlearn.errors import ReferenceConvergenceError

require_openfoam()

H, W = 4, 24


def _plates(b: int, solid: int = 0) -> np.ndarray:
    """Plates b voxels apart, with ``solid`` voxels of wall above and below (the reservoirs open over all)."""
    fluid = np.zeros((H, W, b + 2 * solid), bool)
    fluid[:, :, solid : solid + b] = True
    return fluid


@pytest.mark.parametrize("b, r, solid", [(4, 1, 0), (3, 2, 0), (4, 1, 1)])
def test_plates_carry_the_schemes_exact_flux(b, r, solid, tmp_path):
    result = solve(
        _plates(b, solid), StokesSettings(cells_per_voxel=r), case_dir=tmp_path / "case", progress=False
    )
    # The gradient where the flow is developed, away from the reservoirs' entry and exit.
    middle = slice(W // 4, 3 * W // 4)
    gradient = -np.polyfit(np.arange(W)[middle], result.pressure_kinematic[:, middle].mean(axis=0), 1)[0]
    expected = H * gradient * b**3 / (12 * VISCOSITY) * (1 + 2 / (r * b) ** 2)
    assert result.flow_rate == pytest.approx(expected, rel=1e-5)
    assert result.flux_imbalance < 1e-6
    assert np.allclose(result.pressure[:, 0].mean(), 2.0) and np.allclose(result.pressure[:, -1].mean(), 1.0)
    assert (tmp_path / "case" / "log.simpleFoam").is_file()  # the case is kept where asked


def test_two_refinements_extrapolate_to_the_exact_plate_conductance():
    b = 3
    coarse, fine = (solve(_plates(b), StokesSettings(cells_per_voxel=r), progress=False) for r in (1, 2))
    # Q ν / Δp between the first and last columns' centres, W - 1 apart; the reservoirs are as deep as the gap, so
    # the flow is developed all along.
    exact = H * b**3 / 12 / (W - 1)
    assert coarse.conductance > exact * 1.2  # the 1x scheme is 2/b² = 22% high
    assert extrapolate(coarse.conductance, fine.conductance, 2) == pytest.approx(exact, rel=1e-5)


@pytest.fixture(scope="module")
def example_stokes(tmp_path_factory):
    """`flowlearn stokes` on fracture_002 of the example dataset, written to a file."""
    output = tmp_path_factory.mktemp("stokes") / "stokes.h5"
    status = main(
        [
            "stokes",
            str(ROOT / "data" / "fractures.h5"),
            "--fracture",
            "fracture_002",
            "-o",
            str(output),
            "--quiet",
        ]
    )
    assert status == 0
    return read_fracture(output, "fracture_002"), read_fracture(
        ROOT / "data" / "fractures.h5", "fracture_002"
    )


def test_the_lbm_and_the_stokes_solve_agree_on_a_rough_fracture(example_stokes):
    # Two independent solvers of the same voxels: halfway bounce-back LBM and finite volumes at one cell per voxel
    # agree to a few percent in flow rate and closely in the gap-averaged pressure (their grid errors differ).
    stokes, lbm = example_stokes
    assert abs(stokes.flow_rate / lbm.flow_rate - 1) < 0.03
    both = stokes.active & lbm.active
    residual = ((stokes.pressure - lbm.pressure)[both] ** 2).sum()
    assert residual / ((lbm.pressure[both] - lbm.pressure[both].mean()) ** 2).sum() < 2e-3


def test_the_written_file_is_in_the_datasets_convention(example_stokes):
    stokes, lbm = example_stokes
    # read_fracture validated it: boundary columns at 2 and 1, walls within a voxel of the aperture.
    assert np.array_equal(stokes.aperture, lbm.aperture) and np.array_equal(stokes.bottom, lbm.bottom)
    assert stokes.voxel_size == lbm.voxel_size
    assert stokes.provenance["stokes"]["settings"]["cells_per_voxel"] == 1
    assert math.isfinite(stokes.flow_rate) and stokes.flow_rate > 0


def test_without_openfoam_one_line_and_nothing_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    output = tmp_path / "out.h5"
    status = main(
        ["stokes", str(ROOT / "data" / "fractures.h5"), "--fracture", "fracture_002", "-o", str(output)]
    )
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "blockMesh, subsetMesh, simpleFoam is not on PATH: install it (apt-get install openfoam" in err
    assert not output.exists() and os.listdir(tmp_path) == []


def test_an_unsteady_solve_stops_with_its_residual():
    fluid = _plates(4, solid=1)
    with pytest.raises(
        ReferenceConvergenceError, match=r"not steady after 5 iterations: the pressure's residual"
    ):
        solve(fluid, StokesSettings(max_iterations=5), progress=False)
