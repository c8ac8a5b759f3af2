"""Training end to end through `python train.py`: outputs, the paper's numbers, resume, sweeps, DDP, bad config.

The synthetic datasets here are rough fractures whose "reference" pressure comes from a Darcy solve with T ∝ Ap^2.5,
i.e. the local cubic law (LCL, T = Ap³/12) times a hidden correction W* ∝ (Ap / mean Ap)^-0.5, a smooth function of
the local aperture: a model that learns it beats the LCL on fractures it has not seen, and the LCL itself is
measurably wrong. They carry no reference flow rate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import EXAMPLE_FRACTURE

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.data.files import read_fracture, write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.fractures.inclination import aperture_slope, inclination_tensor
from flowlearn.fractures.roughness import RoughnessParams, rough_fracture
from flowlearn.models.baselines import BASELINE_NAMES
from flowlearn.runs import metric_series, read_metrics
from flowlearn.training.build import load_run

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED = ROOT / "data" / "fractures.h5"


def make_dataset(path: Path, count: int, shape: tuple[int, int], seed: int = 0) -> Path:
    fractures = []
    for i in range(count):
        params = RoughnessParams(
            shape, hurst=0.8, rms=1.0, mean_aperture=4.0, mismatch_length=16.0, seed=seed + i
        )
        aperture = rough_fracture(params).aperture * 1e-5
        problem = DarcyProblem.fracture(shape, active=aperture > 0, drop_unconnected=True)
        mean = aperture[problem.active].mean()
        log_k = np.where(problem.active, 2.5 * np.log(np.maximum(aperture, 1e-300)) - 0.5 * np.log(mean), 0.0)
        pressure = solve_pressure(torch.from_numpy(log_k), problem).numpy()
        pressure = np.where(problem.active, pressure, 1.5)
        fractures.append(
            Fracture(
                f"fracture_{i:02d}",
                aperture,
                pressure,
                mask=problem.active | (aperture == 0),
                voxel_size=1e-5,
            )
        )
    write_fractures(path, fractures)
    return path


def run_train(*overrides: str, run_dir: Path, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *overrides]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"train.py failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "fractures.h5", count=8, shape=(24, 32))


def final_correction(run_dir: Path) -> dict[str, np.ndarray]:
    with h5py.File(run_dir / "predictions.h5") as f:
        return {name: f[name]["correction"][()] for name in f}


def test_readme_run_command_trains_on_the_embedded_dataset(tmp_path):
    # `python train.py` with a short override: the default config, the embedded LBM dataset.
    run_train("trainer.max_epochs=2", run_dir=tmp_path)
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    assert list((tmp_path / "checkpoints").glob("best-*.ckpt"))
    assert (tmp_path / ".hydra" / "config.yaml").is_file()
    metrics = read_metrics(tmp_path)
    logged = [
        "train/loss",
        "val/mse",
        "val/rel_err_mean",
        "val/departure_err",
        "val/flow_rate_err",
        "val/improvement",
    ]
    metrics_of_baselines = ("mse", "departure_err", "flow_rate_err")
    baselines = [f"val/{name}_{metric}" for name in BASELINE_NAMES for metric in metrics_of_baselines]
    for column in logged:
        assert len(metric_series(metrics, column)[1]) == 2, column
    # The baselines do not learn: each metric is logged at the first validation, not again with the same value.
    for column in baselines:
        assert metric_series(metrics, column)[0].tolist() == [0], column
    assert len(metric_series(metrics, "test/rel_err_mean")[1]) == 1
    with h5py.File(tmp_path / "predictions.h5") as f:
        assert len(f) == 96
        # The embedded dataset stores the LBM flow rate of every fracture: the model's is written beside it.
        assert all(
            np.isfinite(g.attrs["flow_rate_reference"]) and np.isfinite(g.attrs["flow_rate"])
            for g in f.values()
        )
        group = next(iter(f.values()))
        fields = {"aperture", "correction", "log_k", "pressure", "pressure_reference"}
        assert fields | {f"pressure_{name}" for name in BASELINE_NAMES} <= set(group)
        # The power law's exponent was fitted on the training split, once, and every fracture records it.
        assert len({float(g.attrs["power_exponent"]) for g in f.values()}) == 1
        assert 0 < group.attrs["power_exponent"] < 6
        active = group["active"][()]
        # T = Ap^3/12 * I * C * W, the default law with the inclination tensor I of the fracture's walls and the
        # wedge factor C of its aperture map's slope along each axis, in the solve's form (log T_xx, log T_yy, rho):
        # the written fields agree with it. (groups are named "<file stem>__<group>")
        fracture = read_fracture(ROOT / "data" / "fractures.h5", group.name.split("__", 1)[1])
        log_xx, log_yy, rho = inclination_tensor(fracture)
        slope_x, slope_y = aperture_slope(fracture)
        # C(g) = 3(g - arctan g)/g^3, by its Taylor series 1 - 3g^2/5 + 3g^4/7 where the closed form cancels.
        wedge_x, wedge_y = (
            np.where(
                g < 1e-2, 1 - 3 * g**2 / 5 + 3 * g**4 / 7, 3 * (g - np.arctan(g)) / np.maximum(g, 1e-2) ** 3
            )
            for g in (np.abs(slope_x), np.abs(slope_y))
        )
        log_lcl = np.log(group["aperture"][()] ** 3 / 12 * group["correction"][()])
        written = group["log_k"][()]
        expected_channels = (log_lcl + log_xx + np.log(wedge_x), log_lcl + log_yy + np.log(wedge_y), rho)
        for channel, expected in enumerate(expected_channels):
            np.testing.assert_allclose(written[channel][active], expected[active], rtol=1e-12, atol=1e-15)

    # `flowlearn predict` rebuilds the model from the run directory alone and reproduces the run's predictions.
    predicted = tmp_path / "predicted.h5"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "flowlearn.cli",
            "predict",
            str(tmp_path),
            str(EMBEDDED),
            "-o",
            str(predicted),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    with h5py.File(tmp_path / "predictions.h5") as run, h5py.File(predicted) as new:
        assert set(new) == set(run)
        for name in run:
            # The same weights give the same W. The pressures agree to the solves' tolerance: predict factorises
            # afresh, while the run may have solved by CG on a reused factor, to a relative error of 1e-11 (which
            # path depends on timings).
            np.testing.assert_allclose(new[name]["correction"][()], run[name]["correction"][()], rtol=1e-12)
            np.testing.assert_allclose(
                new[name]["pressure"][()], run[name]["pressure"][()], rtol=1e-9, equal_nan=True
            )


@pytest.mark.skipif(not EXAMPLE_FRACTURE.exists(), reason="the shared example fracture is absent")
def test_paper_experiment_reproduces_the_notebook(tmp_path):
    # The original notebook logged a loss of 9.14e-5 after 43 epochs (index 42), decreasing all the way.
    run_train("experiment=paper", f"data.path={EXAMPLE_FRACTURE}", "trainer.max_epochs=44", run_dir=tmp_path)
    _, loss = metric_series(read_metrics(tmp_path), "train/loss")
    assert loss[42] == pytest.approx(9.14e-5, rel=0.01)
    assert np.all(np.diff(loss[:43]) < 0)


def test_resume_after_sigkill_matches_an_uninterrupted_run(dataset, tmp_path):
    overrides = [f"data.path={dataset}", "trainer.max_epochs=8", "model.channels=8"]
    run_train(*overrides, run_dir=tmp_path / "straight")
    killed_dir = tmp_path / "killed"
    command = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={killed_dir}", *overrides]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = killed_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if last.exists() and torch.load(last, weights_only=False)["epoch"] >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    saved_epoch = torch.load(last, weights_only=False)["epoch"]
    assert 2 <= saved_epoch < 7, "the run was not killed mid-training"
    resumed = tmp_path / "resumed"
    run_train(*overrides, f"ckpt_path={last}", run_dir=resumed)
    epochs, _ = metric_series(read_metrics(resumed), "train/loss")
    # The new folder's metrics.csv starts with the killed run's rows up to the checkpoint, and resuming continues
    # with the epoch after it: each epoch once, none redone.
    assert sorted(epochs) == list(range(8))
    straight, again = final_correction(tmp_path / "straight"), final_correction(resumed)
    for name in straight:
        np.testing.assert_allclose(again[name], straight[name], rtol=0, atol=1e-6)


def test_a_float32_network_trains_as_the_float64_one_and_predict_rebuilds_it_in_float32(dataset, tmp_path):
    # trainer.precision sets the network's dtype alone: the law, the solve and the loss stay float64.
    common = [f"data.path={dataset}", "trainer.max_epochs=4", "model.channels=8", "~callbacks.figures"]
    runs = {precision: tmp_path / precision for precision in ("64-true", "32-true")}
    for precision, run in runs.items():
        run_train(*common, f"trainer.precision={precision}", run_dir=run)
    module, _ = load_run(runs["32-true"])
    assert {p.dtype for p in module.correction.parameters()} == {torch.float32}
    assert {p.dtype for p in load_run(runs["64-true"])[0].correction.parameters()} == {torch.float64}
    # The network starts at zero output in both, and each step moves the float32 weights as the float64 ones but
    # for float32's rounding (2^-24 relative per operation, a few hundred operations deep): the losses agree to
    # about 1e-8 after 4 epochs here, well within 1e-5.
    (_, loss64), (_, loss32) = (metric_series(read_metrics(run), "train/loss") for run in runs.values())
    np.testing.assert_allclose(loss32, loss64, rtol=1e-5)
    assert loss32[-1] < loss32[0]
    assert not np.array_equal(loss32, loss64)  # the float32 run is not the float64 one under another name


def test_a_callback_set_to_null_is_left_out(dataset, tmp_path):
    # lightning-hydra-template's convention; Lightning would otherwise add its own checkpointing and progress bar.
    nulls = ["callbacks.model_checkpoint=null", "callbacks.progress_bar=null", "callbacks.figures=null"]
    result = run_train(
        f"data.path={dataset}", "trainer.max_epochs=1", "model.channels=8", *nulls, run_dir=tmp_path
    )
    assert (tmp_path / "predictions.h5").is_file() and (tmp_path / "metrics.csv").is_file()
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "figures").exists()
    assert not list(tmp_path.rglob("*.ckpt"))
    assert "Epoch 0" not in result.stderr  # the progress bar's line
    # A run without checkpoints is a choice, said once: predict and report need a checkpoint.
    assert (
        "callbacks.model_checkpoint is left out: this run keeps no checkpoint"
        in (tmp_path / "train.log").read_text()
    )


# Slow (~30 s): submitit's local executor; tests/test_slurm.py submits sweeps through the same launcher code.
@pytest.mark.slow
def test_submitit_local_multirun(dataset, tmp_path):
    command = [
        sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=local",
        f"hydra.sweep.dir={tmp_path}", f"data.path={dataset}", "trainer.max_epochs=1", "optimizer.lr=1e-3,3e-3",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-5000:]
    runs = sorted(p.parent for p in tmp_path.glob("*/metrics.csv"))
    assert len(runs) == 2
    lrs = {
        float(line.split(":")[1])
        for run in runs
        for line in (run / ".hydra" / "config.yaml").read_text().splitlines()
        if line.strip().startswith("lr:")
    }
    assert lrs == {1e-3, 3e-3}


# Slow (~45 s): two processes joined by gloo, each paying the imports and start-up of a run.
@pytest.mark.slow
def test_ddp_on_two_cpu_processes_matches_one_process(dataset, tmp_path):
    # Full-batch steps: one process with batch 6, or two with batch 3 each -- the same mean gradient.
    common = [
        f"data.path={dataset}",
        "trainer.max_epochs=3",
        "model.channels=8",
        "data.fractions=[0.75,0.25,0.0]",
    ]
    run_train(*common, "data.batch_size=6", run_dir=tmp_path / "single")
    run_train(*common, "data.batch_size=3", "trainer=ddp", run_dir=tmp_path / "ddp")
    single, ddp = final_correction(tmp_path / "single"), final_correction(tmp_path / "ddp")
    assert single.keys() == ddp.keys()
    for name in single:
        np.testing.assert_allclose(ddp[name], single[name], rtol=1e-9, atol=1e-12)
    # Each process saw one of the two validation fractures: the logged means and maxima are those of both.
    single_metrics, ddp_metrics = read_metrics(tmp_path / "single"), read_metrics(tmp_path / "ddp")
    for column in ("val/mse", "val/rel_err_max", "val/departure_err", "val/lcl_mse", "val/lcl_rel_err_max"):
        np.testing.assert_allclose(
            metric_series(ddp_metrics, column)[1], metric_series(single_metrics, column)[1], rtol=1e-9
        )


# Slow (~30 s): two processes joined by gloo.
@pytest.mark.slow
def test_ddp_on_two_cpu_processes_stops_on_sigterm(dataset, tmp_path):
    # Lightning's handler had hung both processes for good (`trainer.devices=2`, or `trainer=ddp`).
    run_dir = tmp_path / "run"
    command = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", f"data.path={dataset}"]
    command += ["trainer.devices=2", "trainer.max_epochs=10000", "model.channels=4", "~callbacks.figures"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None and not last.exists():
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    try:
        status = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("the run did not stop within 60 s of SIGTERM") from None
    assert status == 0  # as a run of one process, which Lightning ends with SystemExit
    assert "SIGTERM: the 2 training processes stop at epoch" in (run_dir / "train.log").read_text()
    assert torch.load(last, weights_only=False)["epoch"] < 9999


def test_julia_solver_without_julia_fails_at_start_up(dataset, tmp_path):
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    result = run_train(f"data.path={dataset}", "solver=julia", run_dir=tmp_path, check=False, env=env)
    assert result.returncode != 0
    assert "error: solver=julia needs Julia" in result.stderr
    assert "Epoch" not in result.stdout + result.stderr


def test_3d_volume_trains_a_per_voxel_correction(tmp_path):
    # A 3D conductivity volume whose reference pressure hides a per-voxel W*; the pixel model must find it.
    shape = (6, 8, 10)
    rng = np.random.default_rng(3)
    aperture = 1e-5 * np.exp(0.3 * rng.normal(size=shape))
    hidden = np.exp(0.5 * rng.normal(size=shape))
    problem = DarcyProblem.fracture(shape)
    log_k = torch.from_numpy(np.log(aperture**2 / 12 * hidden))
    pressure = solve_pressure(log_k, problem).numpy()
    path = tmp_path / "volume.h5"
    write_fractures(path, [Fracture("volume", aperture, pressure, voxel_size=1e-5)])
    run_train(
        f"data.path={path}", "model=pixel", "data.fractions=[1,0,0]", "data.batch_size=1",
        "callbacks.model_checkpoint.monitor=train/loss", "trainer.max_epochs=60", "optimizer.lr=0.05",
        run_dir=tmp_path / "run",
    )  # fmt: skip
    _, loss = metric_series(read_metrics(tmp_path / "run"), "train/loss")
    assert loss[-1] < 0.05 * loss[0]
    with h5py.File(tmp_path / "run" / "predictions.h5") as f:
        group = next(iter(f.values()))
        assert group["correction"].shape == shape
        assert (
            np.abs(group["pressure"][()] - pressure).max()
            < 0.3 * np.abs(group["pressure_lcl"][()] - pressure).max()
        )
