"""A generated fracture, scanned (examples/synthetic_scan.py) and brought back by ``flowlearn import`` and
``flowlearn reference``: the truth is the generated file.

The imported aperture and walls are the generated ones within a voxel, and the reference of the imported volume is
the generator's within the reference's own error at this resolution: the box of a scan can differ from the
generator's by a layer of open reservoir (its depth spans the walls' extremes, and a scan gives no wall heights
where the walls touch), which moved the flow rate by 0.18% here, far below the 2.6% (median) that the embedded
dataset's flow rates move under 2x refinement (data/README.md, "Resolution"). ``flowlearn check``, ``departure``,
``predict`` and ``evaluate`` then read the output as they read a generated file (docs/scans.md runs the same on a
64x64 fracture).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require_lbm
from test_train import ROOT, make_dataset, run_train

from flowlearn.cli import main
from flowlearn.data.files import read_fracture, read_fractures
from flowlearn.fractures.recipes import Winding
from flowlearn.reference.generate import DatasetConfig, generate_dataset
from flowlearn.reference.lbm import LBMSettings

require_lbm()

_spec = importlib.util.spec_from_file_location("synthetic_scan", ROOT / "examples" / "synthetic_scan.py")
synthetic_scan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic_scan)

VOXEL = 1e-5  # metres: the generator's default


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> dict[str, Path]:
    """The generated truth (24x32, mean aperture 6 voxels, winding walls), its scans and their imports."""
    base = tmp_path_factory.mktemp("scan")
    config = DatasetConfig(
        count=1,
        shape=(24, 32),
        mean_aperture=6.0,
        recipe=Winding(wavelength_ratio=(1.0, 4.0)),
        seed=1000,
        lbm=LBMSettings(threads=1),
    )
    files = {"truth": base / "truth.h5"}
    generate_dataset(config, files["truth"], progress=False)
    scans = synthetic_scan.write_scan(read_fractures(files["truth"])[0], base / "scan")
    for kind, argv in {
        # The pore of this small, winding fracture runs 8.7 voxels along the rows, 6.3 across: too close to tell.
        "volume": ["volume", scans["volume"], "--voxel-size", VOXEL, "--normal", 2],
        "walls": ["walls", scans["top"], scans["bottom"], "--pixel-size", VOXEL, "--units", "um"],
        "aperture": [
            "aperture",
            scans["aperture"],
            "--pixel-size",
            VOXEL,
            "--scale",
            synthetic_scan.GREY_LEVEL,
        ],
    }.items():
        files[kind] = base / f"{kind}.h5"
        assert main(["import", *map(str, argv), "-o", str(files[kind])]) == 0
    return files


def _only(path: Path):
    (fracture,) = read_fractures(path)
    return fracture


def test_the_imports_are_the_generated_fracture_within_a_voxel(scanned, capsys):
    truth, volume, walls, aperture = (_only(scanned[k]) for k in ("truth", "volume", "walls", "aperture"))
    separation = np.maximum(truth.top - truth.bottom, 0)
    # The volume holds the voxels the generator's LBM ran on: their count per column is its stored aperture.
    np.testing.assert_array_equal(volume.aperture, truth.aperture)
    assert np.abs(volume.aperture - separation).max() <= VOXEL
    # Each wall within a voxel of the generated one where the gap is open, up to one shift of the mid-plane.
    open_ = volume.aperture > 0
    for imported, generated in ((volume.bottom, truth.bottom), (volume.top, truth.top)):
        offset = (imported - generated)[open_]
        assert offset.max() - offset.min() <= VOXEL
    # The height maps (micrometres to 4 decimals) give the smooth walls, up to one shift of the mid-plane; where the
    # generated walls overlap (contacts), the import puts both at their mean height.
    apart = truth.top >= truth.bottom
    shift = np.mean((walls.bottom - truth.bottom)[apart])
    for imported, generated in ((walls.bottom, truth.bottom), (walls.top, truth.top)):
        assert np.abs(imported - generated - shift)[apart].max() < 1e-10
    np.testing.assert_allclose(walls.top[~apart], walls.bottom[~apart])
    np.testing.assert_allclose(walls.aperture, separation, atol=2e-10)
    np.testing.assert_allclose(aperture.aperture, separation, atol=synthetic_scan.GREY_LEVEL / 2)
    assert aperture.bottom is None and all(f.pressure is None for f in (volume, walls, aperture))


def test_the_reference_of_the_imported_volume_is_the_generators(scanned, tmp_path, capsys):
    output = tmp_path / "referenced.h5"
    argv = ["reference", str(scanned["volume"]), "-o", str(output), "--threads", "1", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "volume           walls        24x32x20" in out and "(1 computed now, 0 kept" in out
    truth, referenced = _only(scanned["truth"]), _only(output)
    assert referenced.flow_rate == pytest.approx(truth.flow_rate, rel=0.01)
    active = truth.active
    np.testing.assert_array_equal(referenced.active, active)
    assert np.sqrt(np.mean((referenced.pressure - truth.pressure)[active] ** 2)) < 0.005
    assert referenced.provenance["reference"]["gap"] == "between its stored walls"
    assert referenced.provenance["scan"]["function"] == "import_volume"
    # Continued: the fracture computed before is kept, and the file is what it was.
    before = output.read_bytes()
    assert main(argv) == 0
    assert "(0 computed now, 1 kept from an earlier run)" in capsys.readouterr().out
    assert read_fracture(output, "volume").flow_rate == referenced.flow_rate
    assert len(output.read_bytes()) == len(before)
    # flowlearn check and departure read it as a generated file: the same column flux and Q/Q_LCL as the truth's.
    assert main(["check", str(output), str(scanned["truth"])]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:3]]
    assert rows[0][2] == rows[1][2]  # the LCL's variation, to the percent shown
    assert main(["departure", str(output), "--table"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[0] == "volume" and float(row[4]) == pytest.approx(
        truth.provenance["departure"]["ratio"], abs=0.01
    )


def test_predict_and_evaluate_read_the_reference_of_a_scan(scanned, tmp_path):
    output = tmp_path / "referenced.h5"
    assert main(["reference", str(scanned["walls"]), "-o", str(output), "--threads", "1", "--quiet"]) == 0
    data = make_dataset(tmp_path / "data.h5", count=4, shape=(12, 16))
    run = tmp_path / "run"
    run_train(
        f"data.path={data}", "trainer.max_epochs=1", "model.channels=4", "~callbacks.figures", run_dir=run
    )
    predicted = tmp_path / "predicted.h5"
    for argv in (
        ["predict", str(run), str(output), "-o", str(predicted)],
        ["evaluate", str(predicted), "--split", "predict"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "flowlearn.cli", *argv], capture_output=True, text=True, cwd=ROOT
        )
        assert result.returncode == 0, result.stderr
    # The held-out verdict of the one fracture, its reference the scan's: the model's row and the closed forms'.
    assert result.stdout.startswith("1 fractures; medians over fractures"), result.stdout
    assert "| model |" in result.stdout and "| lcl |" in result.stdout, result.stdout
