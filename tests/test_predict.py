"""``flowlearn predict``: on aperture maps without a reference pressure (the purpose of predicting new maps), on maps
that lack what the model reads, and on maps unlike the training split (a warning per statistic)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from test_inputs import make_walled_dataset, walled_fracture
from test_train import ROOT, make_dataset, run_train

from flowlearn.data.files import read_fractures, write_fractures
from flowlearn.data.inputs import INPUTS, NO_WALLS
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
        # The default law reads the walls, which these fractures lack: predict says what it assumes, per fracture.
        flat = [
            line for line in result.stderr.splitlines() if NO_WALLS in line and f"{source}: group '" in line
        ]
        assert len(flat) == 4, result.stderr
    with_reference, without = (read_predictions(outputs[n]) for n in ("with", "without"))
    fitted = read_predictions(run / "predictions.h5")[0].power_exponent
    for a, b in zip(with_reference, without):
        assert a.pressure_reference is not None and b.pressure_reference is None
        # The same model on the same aperture: the same prediction, reference or not.
        np.testing.assert_allclose(b.pressure, a.pressure, rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(b.correction, a.correction, rtol=1e-12)
        # The baselines come along, the power law with the exponent fitted in training (stored in the checkpoint).
        # (all but the inclined LCL: these fractures have no walls)
        assert (
            set(b.baseline_pressures) == set(BASELINE_NAMES) - {"inclined", "mlcl"}
            and b.power_exponent == fitted
        )
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
        config.read_text().replace("flowlearn.models.ClosedFormLaw", "flowlearn.models.CubicLaw")
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


@pytest.fixture(scope="module")
def walled_run(tmp_path_factory) -> tuple[Path, Path]:
    """(run directory, its data): a 2-epoch U-Net that reads every input, walls included."""
    base = tmp_path_factory.mktemp("walled")
    data = make_walled_dataset(base / "walled.h5", count=6, shape=(12, 16))
    run = base / "run"
    run_train(
        f"data.path={data}",
        "model=unet",
        f"model.inputs=[{','.join(INPUTS)}]",
        "model.channels=4",
        "trainer.max_epochs=2",
        "~callbacks.figures",
        run_dir=run,
    )
    return run, data


def _predict(run: Path, source: Path, output: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "flowlearn.cli", "predict", str(run), str(source), "-o", str(output)]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT)


def _training_fractures(run: Path, data: Path) -> list:
    with h5py.File(run / "predictions.h5") as f:
        train = {name.split("__")[1] for name, group in f.items() if group.attrs["split"] == "train"}
    return [fracture for fracture in read_fractures(data) if fracture.name in train]


def test_the_checkpoint_keeps_the_inputs_and_the_training_range_of_each_statistic(walled_run):
    run, data = walled_run
    record = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["training_data"]
    assert record["inputs"] == list(INPUTS)
    training = _training_fractures(run, data)
    assert len(training) == 4
    apertures = [fracture.aperture for fracture in training]
    means = [a.mean() / fracture.voxel_size for a, fracture in zip(apertures, training)]  # in voxels
    expected = {
        "relative_std": [a.std() / a.mean() for a in apertures],
        "contact_fraction": [(a == 0).sum() / a.size for a in apertures],
        "aperture_voxels": means,
        "length": [16.0 / m for m in means],
        "breadth": [12.0 / m for m in means],
    }
    assert set(record["statistics"]) == set(expected)
    for name, values in expected.items():
        np.testing.assert_allclose(record["statistics"][name], [min(values), max(values)], rtol=1e-12)


def test_predict_warns_for_each_statistic_outside_the_training_range(walled_run, tmp_path):
    run, data = walled_run
    training = _training_fractures(run, data)
    inside = tmp_path / "inside.h5"
    write_fractures(inside, training)
    result = _predict(run, inside, tmp_path / "inside_predicted.h5")
    assert result.returncode == 0 and result.stderr == ""
    # The same fractures 16 times larger with their voxels: the same statistics, no warning.
    scaled = [
        dataclasses.replace(
            fr,
            aperture=16 * fr.aperture,
            bottom=16 * fr.bottom,
            top=16 * fr.top,
            voxel_size=16 * fr.voxel_size,
        )
        for fr in training
    ]
    # Twice the gap on the same voxels (a finer resolution of the gap, a map fewer gaps long), and a larger map.
    wider = [
        dataclasses.replace(fr, name=f"wider_{fr.name}", aperture=2 * fr.aperture, top=fr.top + fr.aperture)
        for fr in training
    ]
    larger = walled_fracture("larger", (24, 40), seed=99)
    outside = tmp_path / "outside.h5"
    write_fractures(outside, [*scaled, *wider, larger])
    result = _predict(run, outside, tmp_path / "outside_predicted.h5")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert not [line for line in lines if any(f"group '{fr.name}'" in line for fr in scaled)]
    low, high = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["training_data"][
        "statistics"
    ]["aperture_voxels"]
    for fracture in wider:
        mean = fracture.aperture.mean() / fracture.voxel_size
        if mean <= high:
            continue
        assert (
            f"flowlearn predict: warning: {outside}: group '{fracture.name}': mean aperture {mean:.4g} pixels is "
            f"outside the training range [{low:.4g}, {high:.4g}] pixels: {mean / high:.3g} times the highest"
        ) in lines
    assert any("group 'wider_" in line and "mean aperture" in line for line in lines)
    larger_lines = [line for line in lines if "group 'larger'" in line]
    assert any("map length along the flow" in line and "times the highest" in line for line in larger_lines)
    assert any("map breadth across the flow" in line for line in larger_lines)
    # evaluate says the same of the fractures it evaluates, from what the predictions file records.
    evaluated = subprocess.run(
        [sys.executable, "-m", "flowlearn.cli", "evaluate", str(tmp_path / "outside_predicted.h5"), "--split", "predict"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr

    def said(stderr: str) -> set[tuple[str, str]]:
        """(fracture, statistic line) of each warning line, the fracture's group name without its file prefix."""
        pairs = set()
        for line in stderr.splitlines():
            group, what = line.split(": group '", 1)[1].split("': ", 1)
            pairs.add((group.split("__")[-1], what))
        return pairs

    assert said(evaluated.stderr) == said(result.stderr) != set()
    assert len(read_predictions(tmp_path / "outside_predicted.h5")) == 2 * len(scaled) + 1


def test_predict_refuses_maps_without_the_walls_its_model_reads(walled_run, tmp_path):
    run, data = walled_run
    bare = tmp_path / "bare.h5"
    write_fractures(bare, [dataclasses.replace(fr, bottom=None, top=None) for fr in read_fractures(data)])
    result = _predict(run, bare, tmp_path / "predicted.h5")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(
        f"flowlearn predict: error: {bare}: group 'fracture_00': the model of {run} reads ['walls', 'mid_surface'], which "
        "need the walls (fields 'bottom' and 'top'), and this fracture has none"
    )
    assert not (tmp_path / "predicted.h5").exists()
