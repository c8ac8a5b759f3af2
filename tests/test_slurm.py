"""Sweeps through ``hydra/launcher=slurm`` on a real one-node SLURM cluster (tests/slurm_cluster.py).

One cluster serves the module. Jobs are submitted by ``python train.py -m`` as users do; they import flowlearn from
the same place as the tests (sbatch exports the environment, PYTHONPATH included). Each job's fractures are tiny,
so a job costs mostly Python's start-up.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from slurm_cluster import SlurmCluster, slurm_cluster, unavailable_reason
from test_train import make_dataset, run_train

from flowlearn.runs import metric_series, read_metrics

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster() -> SlurmCluster:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with slurm_cluster(cpus=4) as running:
        yield running


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "fractures.h5", count=8, shape=(16, 20))


def sweep_command(cluster: SlurmCluster, sweep_dir: Path, *overrides: str) -> list[str]:
    """``python train.py -m`` on the test cluster; each job asks for one CPU and 1 GB."""
    return [
        sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=slurm", f"hydra.sweep.dir={sweep_dir}",
        f"hydra.launcher.partition={cluster.partition}", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
        *overrides,
    ]  # fmt: skip


def sweep(cluster: SlurmCluster, sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = sweep_command(cluster, sweep_dir, *overrides)
    return subprocess.run(command, env=cluster.env(), cwd=ROOT, capture_output=True, text=True, timeout=300)


def job_logs(sweep_dir: Path) -> str:
    """The tails of every job's logs, for a failing assertion's message."""
    return "\n".join(
        f"--- {path.name}\n{path.read_text()[-2000:]}"
        for path in sorted(sweep_dir.glob(".submitit/*/*_log.*"))
    )


def slurm_job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """What the scheduler recorded of a job (``scontrol show job``), once it has ended: a job writes its result
    before its processes exit."""
    deadline = time.monotonic() + 60
    while True:
        record = cluster.run("scontrol", "--oneliner", "show", "job", job_id).stdout
        fields = dict(field.split("=", 1) for field in record.split() if "=" in field)
        if fields["JobState"] not in ("RUNNING", "COMPLETING") or time.monotonic() > deadline:
            return fields
        time.sleep(0.5)


def run_report(path: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "flowlearn.cli", "report", str(path)]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)


def table_row(report: str, run: str) -> str:
    """The sweep table's row of one run (its name is a link for a complete run)."""
    rows = [line for line in report.splitlines() if re.match(rf"\| (\[{run}\]\([^)]*\)|{run}) \|", line)]
    assert len(rows) == 1, report
    return rows[0]


# Slow (~1 min): a two-run sweep through SLURM; the failed-run test below submits a sweep and reports it in CI.
@pytest.mark.slow
def test_sweep_runs_one_slurm_job_per_run_and_the_report_shows_both(cluster, dataset, tmp_path):
    result = sweep(
        cluster, tmp_path, f"data.path={dataset}", "model.channels=4", "seed=1,2", "trainer.max_epochs=2"
    )
    assert result.returncode == 0, result.stderr[-3000:] + job_logs(tmp_path)
    job_ids = []
    for run, seed in (("0", 1), ("1", 2)):
        run_dir = tmp_path / run
        assert (run_dir / "predictions.h5").is_file(), job_logs(tmp_path)
        assert OmegaConf.load(run_dir / ".hydra" / "config.yaml").seed == seed
        epochs, _ = metric_series(read_metrics(run_dir), "val/mse")
        np.testing.assert_array_equal(epochs, [0, 1])
        job_ids.append(str(OmegaConf.load(run_dir / ".hydra" / "hydra.yaml").hydra.job.id))
    # Both runs are tasks 0 and 1 of one job array, which the scheduler ran to completion.
    array = job_ids[0].split("_")[0]
    assert job_ids == [f"{array}_0", f"{array}_1"]
    for job_id in job_ids:
        assert slurm_job(cluster, job_id)["JobState"] == "COMPLETED"

    report = run_report(tmp_path)
    assert report.returncode == 0, report.stderr
    table = (tmp_path / "report.md").read_text()
    for run, seed in (("0", 1), ("1", 2)):
        row = table_row(table, run)
        assert f"`seed={seed}`" in row and "| complete | 2 |" in row, row


def test_a_failed_run_is_reported_with_its_error_and_the_other_run_finishes(cluster, dataset, tmp_path):
    result = sweep(
        cluster,
        tmp_path,
        f"data.path={dataset}",
        "model.channels=4",
        "optimizer.lr=3e-3,-1",
        "trainer.max_epochs=2",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]  # a run failed on a user's mistake
    assert "error: optimizer.lr must be a finite number > 0, got -1" in result.stderr
    assert "1 of 2 run(s) failed" in output
    assert "Traceback" not in output
    assert (tmp_path / "0" / "predictions.h5").is_file(), job_logs(tmp_path)
    assert not (tmp_path / "0" / "error.txt").exists()
    error, log = (tmp_path / "1" / "error.txt").read_text().splitlines()
    assert error == "error: optimizer.lr must be a finite number > 0, got -1"
    # The log it points to is the failed job's own stderr, which holds the error too.
    assert error in Path(log.removeprefix("log: ")).read_text()

    report = run_report(tmp_path)
    assert report.returncode == 1
    assert "1 failed: error: optimizer.lr must be a finite number > 0, got -1" in report.stderr
    table = (tmp_path / "report.md").read_text()
    assert "| complete | 2 |" in table_row(table, "0")
    assert "| failed: error: optimizer.lr must be a finite number > 0, got -1; log: " in table_row(table, "1")


# Slow (~1 min): two SLURM tasks joining a process group (test_train.py's DDP test runs without SLURM).
@pytest.mark.slow
def test_ddp_over_two_slurm_tasks_matches_one_process(cluster, dataset, tmp_path):
    # Full-batch steps: one process with batch 6, or two with batch 3 each -- the same mean gradient, and the
    # epoch metrics (torchmetrics, reduced over the ranks) cover the same fractures.
    common = [
        f"data.path={dataset}",
        "trainer.max_epochs=3",
        "model.channels=4",
        "data.fractions=[0.75,0.25,0.0]",
    ]
    command = sweep_command(
        cluster, tmp_path / "sweep", *common, "hydra.launcher.tasks_per_node=2", "trainer=ddp",
        "trainer.devices=2", "data.batch_size=3",
    )  # fmt: skip
    ddp = subprocess.Popen(
        command, env=cluster.env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    run_train(*common, "data.batch_size=6", run_dir=tmp_path / "single")
    output = ddp.communicate(timeout=300)[0].decode()
    sweep_dir = tmp_path / "sweep"
    assert ddp.returncode == 0, output[-3000:] + job_logs(sweep_dir)

    # One job with two SLURM tasks, which Lightning joined into one process group.
    # Rank 0 logs through Hydra's console handler (stdout), the quiet ranks through Lightning's own (stderr).
    rank0, rank1 = (
        "".join(log.read_text() for log in sorted(sweep_dir.glob(f".submitit/*/*_{rank}_log.*")))
        for rank in (0, 1)
    )
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in rank0
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in rank1

    run_dir = sweep_dir / "0"
    single, parallel = read_metrics(tmp_path / "single"), read_metrics(run_dir)
    for name in ("train/mse", "val/mse", "val/rel_err_mean"):
        epochs, values = metric_series(parallel, name)
        expected_epochs, expected = metric_series(single, name)
        np.testing.assert_array_equal(epochs, expected_epochs)
        np.testing.assert_allclose(values, expected, rtol=1e-9, err_msg=name)
    with h5py.File(run_dir / "predictions.h5") as a, h5py.File(tmp_path / "single" / "predictions.h5") as b:
        assert set(a) == set(b)
        for name in a:
            np.testing.assert_allclose(a[name]["correction"][()], b[name]["correction"][()], rtol=1e-9)

    # Only rank 0 wrote into the run directory: rank 1's log lines go to its task log alone.
    assert "[rank: 0] Seed set to" in (run_dir / "train.log").read_text()
    assert "rank: 1" not in (run_dir / "train.log").read_text()
    assert "[rank: 1] Seed set to" in rank1
    assert sorted(p.name for p in run_dir.iterdir()) == [
        ".hydra", "checkpoints", "figures", "metrics.csv", "predictions.h5", "train.log",
    ]  # fmt: skip


def test_tasks_that_do_not_match_the_devices_are_refused_before_submission(cluster, tmp_path):
    # A controller answers (the launcher checks that first), and the launcher checks every run's config before it
    # calls sbatch.
    result = sweep(cluster, tmp_path, "hydra.launcher.tasks_per_node=2", "trainer=ddp", "trainer.devices=2,1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "run #1 has trainer.devices=1 but hydra.launcher.tasks_per_node=2. Nothing was submitted."
        in result.stderr
    )
    assert "run #0" not in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".submitit").exists()


# Slow (2-3 min): a real SLURM requeue waits for the scheduler's signal and a second job start.
@pytest.mark.slow
def test_a_job_requeued_mid_training_resumes_with_every_epoch_once(cluster, dataset, tmp_path):
    epochs = 150
    overrides = [f"data.path={dataset}", "model.channels=4", f"trainer.max_epochs={epochs}"]
    command = sweep_command(cluster, tmp_path / "sweep", *overrides)
    driver = subprocess.Popen(
        command, env=cluster.env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    run_dir = tmp_path / "sweep" / "0"
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.poll() is None:
        if last.exists() and torch.load(last, weights_only=False)["epoch"] >= 2:
            break
        time.sleep(0.05)
    (job_id,) = cluster.run("squeue", "--noheader", "--format=%i").stdout.split()
    # What SLURM sends before the time limit (submitit's --signal=USR2@<signal_delay_s>), sent now.
    cluster.run("scancel", "--signal=USR2", job_id)
    straight = tmp_path / "straight"
    run_train(*overrides, run_dir=straight)
    output = driver.communicate(timeout=300)[0].decode()
    assert driver.returncode == 0, output[-3000:] + job_logs(tmp_path / "sweep")

    # The job checkpointed before an epoch mid-training, was requeued, ran again and resumed there.
    resumed_at = torch.load(run_dir / "hpc_ckpt_1.ckpt", weights_only=False)["epoch"]
    assert 3 <= resumed_at < epochs - 1
    assert slurm_job(cluster, job_id)["Restarts"] == "1"
    log = "".join(path.read_text() for path in (tmp_path / "sweep").glob(".submitit/*/*_log.*"))
    assert f"requeued SLURM job {job_id} at epoch {resumed_at}" in log
    assert f"Restored all states from the checkpoint at {run_dir / 'hpc_ckpt_1.ckpt'}" in log

    # metrics.csv holds every epoch exactly once, with an uninterrupted run's values.
    requeued, reference = read_metrics(run_dir), read_metrics(straight)
    for name in ("train/loss", "val/mse"):
        logged, values = metric_series(requeued, name)
        np.testing.assert_array_equal(logged, np.arange(epochs))
        np.testing.assert_allclose(values, metric_series(reference, name)[1], rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(metric_series(requeued, "test/mse")[0], [epochs])
    # The predictions are the trained model's, not the checkpoint's the job resumed from.
    with h5py.File(run_dir / "predictions.h5") as a, h5py.File(straight / "predictions.h5") as b:
        for name in a:
            np.testing.assert_allclose(
                a[name]["correction"][()], b[name]["correction"][()], rtol=0, atol=1e-6
            )
