"""``flowlearn predict`` on aperture maps without a reference pressure: the purpose of predicting new maps."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys

import h5py
import numpy as np
from test_train import ROOT, make_dataset, run_train

from flowlearn.data.schema import read_fractures, write_fractures
from flowlearn.models.baselines import BASELINE_NAMES
from flowlearn.reporting.figures import figure_set
from flowlearn.training.predictions import read_predictions


def _aperture_only(source, path):
    fractures = [dataclasses.replace(fr, pressure=None) for fr in read_fractures(source)]
    write_fractures(path, fractures)
    return path


def test_an_aperture_only_file_round_trips_through_the_schema(tmp_path):
    dataset = make_dataset(tmp_path / "data.h5", count=2, shape=(10, 12))
    maps = _aperture_only(dataset, tmp_path / "maps.h5")
    with h5py.File(maps) as f:
        assert all("pressure" not in group for group in f.values())
    for original, copy in zip(read_fractures(dataset), read_fractures(maps)):
        assert copy.pressure is None
        np.testing.assert_array_equal(copy.aperture, original.aperture)


def test_predict_writes_aperture_maps_without_a_reference_and_training_refuses_them(tmp_path):
    dataset = make_dataset(tmp_path / "data.h5", count=4, shape=(12, 16))
    run = tmp_path / "run"
    run_train(
        f"data.path={dataset}", "trainer.max_epochs=2", "model.channels=4", "~callbacks.figures", run_dir=run
    )
    maps = _aperture_only(dataset, tmp_path / "maps.h5")
    outputs = {}
    for name, source in (("with", dataset), ("without", maps)):
        outputs[name] = tmp_path / f"predicted_{name}.h5"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "flowlearn.cli",
                "predict",
                str(run),
                str(source),
                "-o",
                str(outputs[name]),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr
    with_reference, without = (read_predictions(outputs[n]) for n in ("with", "without"))
    fitted = read_predictions(run / "predictions.h5")[0].power_exponent
    for a, b in zip(with_reference, without):
        assert a.pressure_reference is not None and b.pressure_reference is None
        # The same model on the same aperture: the same prediction, reference or not.
        np.testing.assert_allclose(b.pressure, a.pressure, rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(b.correction, a.correction, rtol=1e-12)
        # The baselines come along, the power law with the exponent fitted in training (stored in the checkpoint).
        assert set(b.baseline_pressures) == set(BASELINE_NAMES) and b.power_exponent == fitted
        np.testing.assert_allclose(
            b.baseline_pressures["power"], a.baseline_pressures["power"], equal_nan=True
        )
    figures = figure_set(without)
    assert "error" not in figures
    titles = [ax.get_title() for ax in figures["pressure"].axes]
    assert len(titles) == 2 and not any("reference" in title for title in titles)
    # A run of a law that was renamed since (law=cubic, the old name of T ∝ Ap²) says so in one line.
    old = tmp_path / "old_run"
    shutil.copytree(run, old)
    config = old / ".hydra" / "config.yaml"
    config.write_text(
        config.read_text().replace("flowlearn.models.LocalCubicLaw", "flowlearn.models.CubicLaw")
    )
    command = [
        sys.executable,
        "-m",
        "flowlearn.cli",
        "predict",
        str(old),
        str(maps),
        "-o",
        str(tmp_path / "o.h5"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "the run's law (flowlearn.models.CubicLaw) does not exist in this flowlearn" in result.stderr
    result = run_train(f"data.path={maps}", "trainer.max_epochs=1", run_dir=tmp_path / "bad", check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "field 'pressure': missing; training needs the reference pressure" in result.stderr
