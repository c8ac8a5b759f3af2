"""The ``flowlearn convert`` and ``flowlearn generate`` subcommands."""

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from flowlearn.cli import main
from flowlearn.data.schema import Fracture, read_fractures, write_fractures

SHARED = Path(__file__).resolve().parents[2] / "shared/data/example_fracture.mat"
REPO = Path(__file__).resolve().parents[1]


def test_help_lists_the_subcommands():
    out = subprocess.run(
        [sys.executable, "-m", "flowlearn.cli", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "convert" in out and "generate" in out


@pytest.mark.skipif(not SHARED.exists(), reason="shared example_fracture.mat not present")
def test_convert_shared_file_to_flowlearn_layout(tmp_path, capsys):
    assert main(["convert", str(SHARED), str(tmp_path / "f.h5")]) == 0
    assert "wrote 1 fracture(s)" in capsys.readouterr().out
    (fr,) = read_fractures(tmp_path / "f.h5")
    with h5py.File(tmp_path / "f.h5") as f:
        assert f.attrs["schema"] == "flowlearn-fractures" and set(f["fracture_1"]) == {"aperture", "pressure"}
    assert fr.pressure.shape == (256, 260) and fr.inlet_pressure == 2.0


def test_convert_to_original_layout_and_back(tmp_path):
    pressure = np.tile(2 - np.arange(5) / 4, (3, 1))
    write_fractures(tmp_path / "a.h5", [Fracture("g", np.full((3, 5), 0.5), pressure)])
    assert main(["convert", str(tmp_path / "a.h5"), str(tmp_path / "b.mat"), "--layout", "original"]) == 0
    with h5py.File(tmp_path / "b.mat") as f:
        assert f["g/aperture_field"].shape == (1, 1, 3, 5) and f["g/pressure_field"].dtype == np.float32
    assert main(["convert", str(tmp_path / "b.mat"), str(tmp_path / "c.h5")]) == 0
    np.testing.assert_array_equal(read_fractures(tmp_path / "c.h5")[0].pressure, pressure)


def test_convert_reports_bad_input_and_fails(tmp_path, capsys):
    bad = tmp_path / "bad.h5"
    bad.write_text("not hdf5")
    assert main(["convert", str(bad), str(tmp_path / "out.h5")]) == 2
    assert "flowlearn convert: error:" in capsys.readouterr().err
    assert not (tmp_path / "out.h5").exists()


def test_generate_writes_a_valid_dataset_with_provenance(tmp_path, capsys):
    pytest.importorskip("lbmpy")
    out = tmp_path / "gen.h5"
    argv = ["generate", str(out), "--count", "2", "--shape", "10", "12", "--mean-aperture", "4", "--rms", "1"]
    assert main([*argv, "--seed", "3", "--tolerance", "1e-5", "--quiet"]) == 0
    assert '"fractures": 2' in capsys.readouterr().out
    frs = read_fractures(out)
    assert [f.name for f in frs] == ["fracture_000", "fracture_001"]
    assert [f.provenance["roughness"]["seed"] for f in frs] == [3, 4]
    assert all(f.provenance["lbm"]["convergence"]["converged"] for f in frs)
    assert frs[0].provenance["dataset"]["count"] == 2 and frs[0].voxel_size == 1e-5
