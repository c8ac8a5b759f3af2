"""``flowlearn generate --slurm`` on a real one-node SLURM cluster (tests/slurm_cluster.py).

One cluster serves the module. Each generation is 4 fractures of the smallest settings of tests/test_data_cli.py
(8x24 maps, mean aperture 4 voxels, about a second of LBM each), submitted by ``python -m flowlearn.cli`` as users do;
the tasks import flowlearn from the same place as the tests (sbatch exports the environment, PYTHONPATH included).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ARRAY
from slurm_cluster import SlurmCluster

from flowlearn.cli import main
from flowlearn.data.files import read_fractures

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]

# tests/test_data_cli.py's smallest generation, with 4 fractures.
TINY = [
    "--count", "4", "--shape", "8", "24", "--mean-aperture", "4", "--recipe", "winding", "--rms-ratio", "0.2", "0.3",
    "--wavelength-ratio", "1", "2", "--mismatch-length", "8", "12", "--seed", "3", "--tolerance", "1e-5", "--quiet",
]  # fmt: skip


def command(output: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "flowlearn.cli", "generate", str(output), *TINY, *options]


def generate(cluster: SlurmCluster, output: Path, *options: str) -> subprocess.CompletedProcess:
    """``flowlearn generate OUTPUT <TINY> <options>`` against the test cluster, to its end."""
    env = cluster.env(PYTHONPATH=str(ROOT))
    return subprocess.run(
        command(output, *options), env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def start(cluster: SlurmCluster, output: Path, *options: str) -> subprocess.Popen:
    env = cluster.env(PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        command(output, *options),
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def task_jobs(output: Path) -> list[str]:
    """The SLURM job ids of the array's tasks, as the command recorded them."""
    record = Path(f"{output}.parts") / "slurm" / "array.json"
    deadline = time.monotonic() + 60
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return json.loads(record.read_text())["jobs"]


def states(cluster: SlurmCluster, array_id: str) -> dict[str, str]:
    """State of each task of ``array_id`` once all have ended (the controller keeps ended jobs for a few minutes;
    a task writes its result before its processes exit)."""
    command = ["squeue", "--noheader", "--array", "--states=all", f"--jobs={array_id}", "--format=%i %T"]
    deadline = time.monotonic() + 60
    while True:
        found = dict(line.split() for line in cluster.run(*command).stdout.splitlines())
        if not {"RUNNING", "COMPLETING"} & set(found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def wait_for(path: Path, job: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.exists(), f"{path} never appeared" + (
        job.communicate()[1][-3000:] if job.poll() is not None else ""
    )


def same_fractures(a: Path, b: Path) -> None:
    """The same fractures, to the bit: each fracture's LBM is one deterministic computation wherever it runs, and
    its OpenMP threads (2 locally, 1 in a task here) update disjoint cells, so their count changes no value."""
    one, two = read_fractures(a), read_fractures(b)
    assert [f.name for f in one] == [f.name for f in two] == [f"fracture_{i:03d}" for i in range(4)]
    for x, y in zip(one, two, strict=True):
        for field in ("aperture", "pressure", "mask", "bottom", "top"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=f"{x.name} {field}")
        assert x.flow_rate == y.flow_rate, x.name


def test_an_array_of_two_tasks_makes_the_fractures_of_a_local_run(cluster, tmp_path):
    job = start(cluster, tmp_path / "slurm.h5", *ARRAY)
    jobs = task_jobs(tmp_path / "slurm.h5")
    assert main(["generate", str(tmp_path / "local.h5"), *TINY]) == 0  # meanwhile, on the same cores
    out, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["fractures"] == summary["computed_now"] == 4
    same_fractures(tmp_path / "slurm.h5", tmp_path / "local.h5")
    assert not (tmp_path / "slurm.h5.parts").exists()
    # Two tasks of one array, both run to completion.
    array_id = jobs[0].split("_")[0]
    assert jobs == [f"{array_id}_0", f"{array_id}_1"]
    assert states(cluster, array_id) == dict.fromkeys(jobs, "COMPLETED")


def kill_task(cluster: SlurmCluster, job_id: str) -> None:
    """SIGKILL every process of a running task at once, as a node failure or the kernel's OOM killer would (scancel
    sends SIGTERM first, which a task ignores for SLURM's KillWait: time enough to finish a small fracture)."""
    (raw_id,) = cluster.run("squeue", "--noheader", f"--jobs={job_id}", "--format=%A").stdout.split()
    listed = cluster.run("scontrol", "listpids", raw_id).stdout.split("\n")[1:]
    pids = [int(line.split()[0]) for line in listed if line.strip()]
    assert pids, f"no process of {job_id}"
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_killed_task_keeps_its_parts_and_the_same_command_makes_only_the_missing_ones(cluster, tmp_path):
    out = tmp_path / "gen.h5"
    parts = tmp_path / "gen.h5.parts"
    job = start(cluster, out, *ARRAY)
    jobs = task_jobs(out)
    # Task 1 makes fractures 1 and 3: killed once fracture 1 is written, it is making fracture 3.
    wait_for(parts / "fracture_001.h5", job)
    kill_task(cluster, jobs[1])
    _, err = job.communicate(timeout=300)
    assert job.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    failed, error = err.strip().splitlines()
    assert failed.startswith(f"array task 1 (SLURM job {jobs[1]}) ended ")
    assert failed.endswith(
        f"without a result, with 1 of its 2 fractures made; log: {parts}/slurm/{jobs[1]}_0_log.err"
    )
    assert Path(failed.rpartition("log: ")[2]).is_file()
    assert error == (
        f"flowlearn generate: error: {parts}: 1 of 4 fractures are not finished (fracture_003); rerun the same "
        "command to make them"
    )
    assert sorted(p.name for p in parts.glob("fracture_*.h5")) == [f"fracture_00{i}.h5" for i in range(3)]
    kept = (parts / "fracture_001.h5").read_bytes()

    rerun = generate(cluster, out, *ARRAY)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    summary = json.loads(rerun.stdout)
    assert summary["fractures"] == 4 and summary["computed_now"] == 1
    # The kept fracture was read back, not made again (its LBM's timing would differ).
    (tmp_path / "kept.h5").write_bytes(kept)
    (before,) = read_fractures(tmp_path / "kept.h5")
    after = read_fractures(out)[1]
    assert after.provenance["lbm"]["seconds"] == before.provenance["lbm"]["seconds"]
    np.testing.assert_array_equal(after.pressure, before.pressure)
    assert not parts.exists()


def test_a_rerun_while_the_array_runs_waits_for_it_instead_of_submitting_again(cluster, tmp_path):
    out = tmp_path / "gen.h5"
    submitted = generate(cluster, out, *ARRAY, "--no-wait")
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    record = json.loads(submitted.stdout)
    assert record["tasks"] == 2 and record["fractures_to_make"] == 4
    assert not out.exists()
    finished = generate(cluster, out, *ARRAY)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert json.loads(finished.stdout)["fractures"] == 4
    # No second array: the newest job the cluster knows is the one submitted first.
    known = cluster.run("squeue", "--noheader", "--states=all", "--format=%F").stdout.split()
    assert max(map(int, known)) == int(record["array"])


@pytest.mark.parametrize(
    "options, message",
    [
        (["--partition", "nowhere"], "sbatch: error: invalid partition specified: nowhere"),
        (["--mem-gb", "64"], "Requested node configuration is not available"),
        (["--cpus-per-task", "64"], "Requested node configuration is not available"),
    ],
)
def test_what_the_cluster_refuses_is_one_line_and_writes_nothing(cluster, tmp_path, options, message):
    result = generate(cluster, tmp_path / "gen.h5", *ARRAY, *options)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert (
        line.startswith("flowlearn generate: error: --slurm: sbatch refuses the job array (")
        and message in line
    )
    assert os.listdir(tmp_path) == []


# Slow (~1 min): a real requeue waits for the scheduler and a second start of the task.
@pytest.mark.slow
def test_a_task_warned_of_its_time_limit_requeues_itself_and_skips_its_finished_parts(cluster, tmp_path):
    out = tmp_path / "gen.h5"
    parts = tmp_path / "gen.h5.parts"
    job = start(cluster, out, *ARRAY)
    jobs = task_jobs(out)
    wait_for(parts / "fracture_001.h5", job)
    # What SLURM sends signal_delay_s before the time limit (and on preemption), sent now.
    cluster.run("scancel", "--signal=USR2", jobs[1])
    kept = (parts / "fracture_001.h5").read_bytes()
    out_text, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]
    assert json.loads(out_text)["computed_now"] == 4
    # Task 1 ran twice; its second run read fracture 1 back and made fracture 3 only.
    record = cluster.run("scontrol", "--oneliner", "show", "job", jobs[1]).stdout
    assert "Restarts=1" in record.split(), record
    (tmp_path / "kept.h5").write_bytes(kept)
    (before,) = read_fractures(tmp_path / "kept.h5")
    after = read_fractures(out)
    assert after[1].provenance["lbm"]["seconds"] == before.provenance["lbm"]["seconds"]
    assert [f.name for f in after] == [f"fracture_{i:03d}" for i in range(4)]
