"""The ``flowlearn convert`` and ``flowlearn generate`` subcommands."""

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import parallel_plates, plates_refinement_change, require_lbm

from flowlearn.cli import main
from flowlearn.data.files import read_fractures, write_fractures
from flowlearn.data.schema import Fracture

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
    require_lbm()
    out = tmp_path / "gen.h5"
    argv = ["generate", str(out), "--count", "2", "--shape", "8", "24", "--mean-aperture", "4"]
    ranges = [
        "--recipe",
        "winding",
        "--rms-ratio",
        "0.2",
        "0.3",
        "--wavelength-ratio",
        "1",
        "2",
        "--mismatch-length",
        "8",
        "12",
    ]
    assert main([*argv, *ranges, "--seed", "3", "--tolerance", "1e-5", "--quiet"]) == 0
    assert '"fractures": 2' in capsys.readouterr().out
    frs = read_fractures(out)
    assert [f.name for f in frs] == ["fracture_000", "fracture_001"]
    assert [f.provenance["roughness"]["seed"] for f in frs] == [3, 4]
    assert all(f.provenance["lbm"]["convergence"]["converged"] for f in frs)
    drawn = [f.provenance["dataset"]["drawn"]["rms_ratio"] for f in frs]
    assert all(0.2 <= d <= 0.3 for d in drawn) and drawn[0] != drawn[1]
    # Each fracture stores its walls, its flow rate and its departure from the local cubic law.
    for f in frs:
        assert f.bottom.shape == f.top.shape == f.aperture.shape and f.flow_rate > 0
        assert f.provenance["departure"]["ratio"] == pytest.approx(
            f.flow_rate / f.provenance["departure"]["flow_rate_lcl"]
        )
        assert set(f.provenance["geometry"]) >= {"relative_std", "wall_slope", "contact_fraction"}
    recipe = json.loads(h5py.File(out, "r").attrs["recipe"])
    assert recipe["config"]["count"] == 2 and recipe["versions"]["lbmpy"] != "not installed"
    assert not (tmp_path / "gen.h5.parts").exists()


def test_a_generation_continues_from_the_fractures_it_finished(tmp_path):
    """The parts a stopped generation leaves are kept: the next run with the same settings computes the rest."""
    require_lbm()
    from flowlearn.fractures.recipes import Winding
    from flowlearn.reference.generate import DatasetConfig, generate_dataset

    winding = Winding(rms_ratio=(0.1, 0.2), wavelength_ratio=(1.0, 2.0))
    config = DatasetConfig(count=1, shape=(8, 24), mean_aperture=4.0, recipe=winding, seed=5)
    first = generate_dataset(config, tmp_path / "one.h5", progress=False)
    # Put the finished fracture where a stopped two-fracture generation would have left it.
    parts = tmp_path / "two.h5.parts"
    parts.mkdir()
    kept = parts / "fracture_000.h5"
    kept.write_bytes((tmp_path / "one.h5").read_bytes())
    (parts / "recipe.json").write_text(json.dumps(config.to_dict()))
    summary = generate_dataset(replace(config, count=2), tmp_path / "two.h5", progress=False)
    assert first["computed_now"] == 1 and summary["computed_now"] == 1 and summary["fractures"] == 2
    one, two = read_fractures(tmp_path / "one.h5"), read_fractures(tmp_path / "two.h5")
    np.testing.assert_array_equal(two[0].pressure, one[0].pressure)
    assert two[1].provenance["roughness"]["seed"] == 6 and not parts.exists()


@pytest.mark.slow
def test_a_killed_generation_keeps_its_fractures_and_continues(tmp_path):
    """SIGKILL a real `flowlearn generate` once its first fracture is written; the rerun computes the rest only."""
    require_lbm()
    out = tmp_path / "gen.h5"
    argv = [sys.executable, "-m", "flowlearn.cli", "generate", str(out), "--count", "3", "--shape", "8", "24"]
    argv += [
        "--mean-aperture",
        "3",
        "--recipe",
        "winding",
        "--wavelength-ratio",
        "1",
        "2",
        "--tolerance",
        "1e-5",
        "--quiet",
    ]
    first = tmp_path / "gen.h5.parts" / "fracture_000.h5"
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not first.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    job.kill()
    job.wait()
    assert first.exists() and not out.exists(), "killed before the first fracture, or after the last"
    kept = first.read_bytes()
    finished = subprocess.run(argv, capture_output=True, text=True, check=True)
    summary = json.loads(finished.stdout)
    assert summary["fractures"] == 3 and summary["computed_now"] <= 2
    assert [f.name for f in read_fractures(out)] == ["fracture_000", "fracture_001", "fracture_002"]
    # The kept fracture was read back, not recomputed.
    fresh = tmp_path / "kept.h5"
    fresh.write_bytes(kept)
    np.testing.assert_array_equal(read_fractures(fresh)[0].pressure, read_fractures(out)[0].pressure)


def test_generation_with_other_settings_refuses_to_continue_a_stopped_one(tmp_path, capsys):
    parts = tmp_path / "gen.h5.parts"
    parts.mkdir()
    (parts / "recipe.json").write_text(json.dumps({"count": 3, "mean_aperture": 99.0}))
    assert main(["generate", str(tmp_path / "gen.h5"), "--count", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "holds fractures of a generation with other settings" in err and str(parts) in err


def test_a_refined_fracture_records_the_change_of_its_flow_rate_at_2x():
    """Parallel plates: the recorded change is the lattice's exact one (:func:`plates_refinement_change`)."""
    _, fracture = parallel_plates(refine_every=1)
    expected = plates_refinement_change()  # -2.27 %
    change = fracture.provenance["convergence"]["flow_rate_change"]
    assert change == pytest.approx(expected, abs=2e-3)


def test_a_small_count_says_which_fractures_are_exact_cases_and_records_only_what_shaped_them(
    tmp_path, capsys
):
    # The published recipe's first five of every 32 are exact cases: --count 1 makes one flat plate, which is said,
    # and whose provenance records none of the recipe's draws (a plate is its mean aperture alone).
    require_lbm()
    output = tmp_path / "one.h5"
    assert main(["generate", str(output), "--count", "1", "--threads", "1", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "note: 1 of the 1 fractures are exact cases (0 parallel), not rough; --special-every 0" in err
    (fracture,) = read_fractures(output)
    assert fracture.provenance["roughness"]["kind"] == "parallel"
    assert fracture.provenance["dataset"] == {"index": 0, "drawn": {}}


def test_what_shaped_each_kind_of_fracture():
    from flowlearn.fractures.recipes import Published

    recipe = Published()
    drawn = recipe.draws(0, 40)  # index 40 of a block of 32: a rough one
    assert recipe.shaping(1, drawn) == {"mid_slope": drawn["mid_slope"]}  # tilted along the flow
    assert "mid_slope" not in recipe.shaping(3, drawn)  # a flat mid-surface
    rough = recipe.shaping(40, drawn)
    # With contacts the closure rescales the open gap's spread away; without, it shapes the gap.
    assert ("aperture_std" in rough) == (drawn["contact_fraction"] == 0)
    assert recipe.shaping(40, {**drawn, "contact_fraction": 0.0})["aperture_std"] == drawn["aperture_std"]
    # Parallel plates once: the second block draws a rough fracture at 32.
    assert list(recipe.exact_cases(40)) == [0, 1, 2, 3, 4, 33, 34, 35, 36]
    assert Published(special_every=0).exact_cases(40) == {}
