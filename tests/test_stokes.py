"""The independent Stokes solve (OpenFOAM): exact on plates, in the LBM's convention, and agreeing with the LBM.

On plates b voxels apart the finite-volume scheme (cells of side 1/r, no-slip faces on the walls) carries exactly
G b³ / (12 ν) (1 + 2 / (r b)²) per unit width under a pressure gradient G. With h = 1/r, the velocities
u_i = G/(2ν) (y_i (b - y_i) + h²/4) at the cell centres y_i solve its equations: the three-point Laplacian is exact on
a parabola, and in a wall cell the one-sided gradient u_0 / (h/2) balances with that constant. Their sum times h is
G/(2ν) (b³/6 + b h²/12 + b h²/4) (the midpoint rule on the parabola, then the constant). Two refinements therefore
extrapolate to the plates' exact conductance (docs/data.md, "Exact on plates").
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from conftest import require_openfoam
from test_train import ROOT

from flowlearn.cli import main
from flowlearn.data.files import read_fracture
from flowlearn.errors import ReferenceConvergenceError
from flowlearn.reference.stokes import VISCOSITY, StokesSettings, extrapolate, solve, solve_walls

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


@pytest.mark.parametrize("r", [1, 2])
def test_the_wall_fitted_mesh_carries_the_schemes_exact_flux_on_plates(r):
    """The same scheme on the mesh that follows the walls: on plates it is the voxel mesh's, reservoirs aside."""
    b = 4.0
    result = solve_walls(
        np.zeros((H, W)), np.full((H, W), b), StokesSettings(cells_per_voxel=r), progress=False
    )
    middle = slice(W // 4, 3 * W // 4)
    gradient = -np.polyfit(np.arange(W)[middle], result.pressure_kinematic[:, middle].mean(axis=0), 1)[0]
    expected = H * gradient * b**3 / (12 * VISCOSITY) * (1 + 2 / (r * b) ** 2)
    assert result.flow_rate == pytest.approx(expected, rel=1e-5)
    assert result.flux_imbalance < 1e-6 and result.mesh == "walls"
    assert np.allclose(result.aperture, b)


def test_the_wall_fitted_mesh_converges_at_second_order_on_a_wavy_channel():
    """Walls that rise and fall along the flow and across it, never touching: bilinear walls between exact corners
    and a second-order scheme make the error fall as h², so three refinements show an order near 2 (the observed
    order of :func:`~flowlearn.reference.convergence.observed_order`), and mass is conserved on the slanted cells."""
    from flowlearn.reference.convergence import observed_order

    results = [
        solve_walls(*_wavy_channel(), StokesSettings(cells_per_voxel=r, reservoir=2), progress=False)
        for r in (1, 2, 3)
    ]
    assert all(result.flux_imbalance < 1e-6 for result in results)
    order = observed_order(tuple(result.conductance for result in results), (1, 2, 3))
    assert 1.7 < order < 2.3


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


def test_the_wall_fitted_solve_of_a_fracture_with_contacts_is_a_valid_fracture_file(tmp_path):
    """`flowlearn stokes --mesh walls` on a test fracture whose walls touch: the file it writes passes the schema
    (aperture the walls' separation, boundary columns at 2 and 1), the contacts carry no flow, and mass is
    conserved between inlet and outlet."""
    output = tmp_path / "walls.h5"
    data = ROOT / "data" / "fractures.h5"
    argv = [
        "stokes",
        str(data),
        "--fracture",
        "fracture_041",
        "--mesh",
        "walls",
        "-o",
        str(output),
        "--quiet",
    ]
    assert main(argv) == 0
    stokes, lbm = read_fracture(output, "fracture_041"), read_fracture(data, "fracture_041")
    record = stokes.provenance["stokes"]
    assert record["mesh"] == "walls" and record["flux_imbalance"] < 1e-6
    touching = lbm.top <= lbm.bottom
    assert touching.any() and not stokes.active[touching].any()
    assert np.allclose(stokes.aperture, np.maximum(lbm.top - lbm.bottom, 0))


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


def _wavy_channel() -> tuple[np.ndarray, np.ndarray]:
    """Walls (voxels) that rise and fall along the flow and across it, never touching; slopes up to 0.6."""
    y, x = np.meshgrid(np.arange(4.0), np.arange(16.0), indexing="ij")
    bottom = 0.8 * np.sin(2 * np.pi * x / 8) + 0.3 * np.cos(2 * np.pi * y / 4)
    return bottom, 3.0 + 0.8 * np.sin(2 * np.pi * (x + 1) / 8)


@pytest.mark.parametrize(
    "solver",
    [
        lambda s: solve(_plates(4, solid=1), s, progress=False),
        lambda s: solve_walls(*_wavy_channel(), s, progress=False),
    ],
    ids=["voxels", "walls"],
)
def test_mpi_processes_give_the_serial_solution(solver):
    serial = solver(StokesSettings())
    parallel = solver(StokesSettings(processes=2))
    assert parallel.flow_rate == pytest.approx(serial.flow_rate, rel=1e-8)
    assert np.allclose(parallel.pressure, serial.pressure, atol=1e-8)


@pytest.mark.slow
def test_the_resolution_study_extrapolates_plates_to_the_cubic_law():
    """The convergence study with Stokes solves on plates 4 voxels apart, refined 1x, 2x, 3x: each solve carries the
    scheme's flux, the cubic law times 1 + 2/(r b)², so the three converge at order 2 to the cubic law itself. (The
    plates fill their voxels' depth, as the reservoirs do: no entry losses between the end columns.)"""
    from conftest import require_lbm

    from flowlearn.fractures.closure import ClosureParams, closed_fracture
    from flowlearn.reference.convergence import grid_convergence, smooth_wall_estimate
    from flowlearn.reference.lbm import LBMSettings

    require_lbm()
    h, w, b = 2, 12, 4.0
    plates = closed_fracture(ClosureParams((h, w), b, 0.7, 0.0, 0.0, 6.0, 2.0, 0.0, seed=0, kind="parallel"))
    runs = grid_convergence(plates, (1, 2, 3), LBMSettings(tolerance=1e-7), StokesSettings(tolerance=1e-10))
    cubic = h * b**3 / 12 / (w - 1)
    for run in runs:
        assert run.stokes_conductance == pytest.approx(cubic * (1 + 2 / (run.factor * b) ** 2), rel=1e-5)
    smooth, order = smooth_wall_estimate(runs)
    assert order == pytest.approx(2.0, abs=1e-3) and smooth == pytest.approx(cubic, rel=1e-5)
