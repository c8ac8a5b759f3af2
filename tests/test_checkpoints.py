"""Checkpoints a user can trust, through `python train.py` and the installed Lightning (nothing of it mocked).

last.ckpt every epoch, replaced atomically (a kill or a full disk mid-write leaves the previous one), output
folders and ckpt_path checked before training, metrics.csv continued on resume, each log line once.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from test_train import ROOT, make_dataset, run_train
from test_user_errors import _mounted

from flowlearn.errors import CheckpointError, OutputError
from flowlearn.training import checkpoints
from flowlearn.training.checkpoints import (
    AtomicCheckpointIO,
    append_rows,
    checkpoint_epoch,
    read_rows,
    write_rows,
)
from flowlearn.training.predictions import read_predictions

EPOCHS = 4


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "fractures.h5", count=4, shape=(16, 16))


def overrides(dataset: Path, *extra: str) -> list[str]:
    return [f"data.path={dataset}", "model.channels=4", f"trainer.max_epochs={EPOCHS}", *extra]


@pytest.fixture(scope="module")
def flat_run(dataset, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    # lr = 1e-300: Adam's steps (about lr) vanish against float64 weights of order 1e-2, so the weights and
    # val/mse never change and val/mse improves only at epoch 0.
    # A long folder name: the run's closing line stays as short all the same.
    run_dir = tmp_path_factory.mktemp("flat-run-in-a-folder-of-a-long-name-" + "x" * 120)
    return run_dir, run_train(*overrides(dataset, "optimizer.lr=1e-300"), run_dir=run_dir)


def stored_epoch(path: Path) -> int:
    return torch.load(path, weights_only=False, map_location="cpu")["epoch"]


def epoch_counts(run_dir: Path, column: str) -> dict[int, int]:
    """How many rows of metrics.csv carry ``column``, per epoch."""
    counts: dict[int, int] = {}
    for row in read_rows(run_dir / "metrics.csv")[1]:
        if row.get(column):
            counts[int(row["epoch"])] = counts.get(int(row["epoch"]), 0) + 1
    return counts


def test_last_checkpoint_is_the_last_epoch_when_val_does_not_improve(flat_run):
    run_dir, _ = flat_run
    checkpoints = run_dir / "checkpoints"
    # Only epoch 0 improved val/mse: the best checkpoint is epoch 0, last.ckpt the final epoch all the same.
    assert [p.name for p in checkpoints.glob("best-*.ckpt")] == ["best-epoch=000.ckpt"]
    assert stored_epoch(checkpoints / "last.ckpt") == EPOCHS - 1
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best-epoch=000.ckpt", "last.ckpt"]


def test_fresh_run_prints_each_line_once_and_no_spurious_warning(flat_run):
    _, result = flat_run
    output = result.stdout + result.stderr
    # The seed is in the run's .hydra/config.yaml; Lightning's line for it came before every error's line.
    assert "Seed set to" not in output
    assert output.count("`Trainer.fit` stopped") == 1
    for warning in ("will be deleted", "exists and is not empty", "LeafSpec"):
        assert warning not in result.stderr


def test_run_ends_with_the_verdict_on_the_test_fractures_then_the_run_directory(flat_run):
    run_dir, result = flat_run
    lines = result.stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "done:" in line]
    # Hydra's log prefix, then the line itself: at most 160 characters, the (long) run directory on the next line.
    done = lines[at].partition("] - ")[2]
    assert len(done) <= 160, done
    assert lines[at + 1].partition("] - ")[2] == f"outputs in {run_dir}"
    match = re.fullmatch(
        r"done: test, (\d+) fractures?: beats (\S+) beyond the reference's error\? (.+) \(departure (\S+) vs (\S+)\)",
        done,
    )
    assert match, done
    # The medians over the test fractures of each one's departure error, Σ(p̂ − p)²/Σ(p − line)² over its active
    # pixels less the inlet and outlet columns (whose heads are fixed): computed here from predictions.h5 with
    # numpy alone, for the model and each closed form there (these fractures have no walls: the LCL and wedge).
    test = [f for f in read_predictions(run_dir / "predictions.h5") if f.split == "test"]

    def median_departure(pressures: list[np.ndarray]) -> float:
        errors = []
        for p, f in zip(pressures, test):
            columns = f.active.shape[1]
            compared = f.active & ~np.isin(np.arange(columns), [0, columns - 1])
            line = 2.0 + (1.0 - 2.0) * np.arange(columns) / (columns - 1)  # the heads, inlet 2 and outlet 1
            departure = (f.pressure_reference - line)[compared]
            errors.append(((p - f.pressure_reference)[compared] ** 2).sum() / (departure**2).sum())
        return float(np.median(errors))

    closed = {name: median_departure([f.baseline_pressures[name] for f in test]) for name in ("lcl", "wedge")}
    best = min(closed, key=closed.get)
    model = median_departure([f.pressure for f in test])
    assert int(match.group(1)) == len(test)
    assert match.group(2) == best
    assert float(match.group(4)) == pytest.approx(model, rel=0.05)  # two significant digits
    assert float(match.group(5)) == pytest.approx(closed[best], rel=0.05)
    # No flow rates: judged on the departure; no record of the reference's error: no gain can be called clear.
    assert match.group(3) == ("lower, no error recorded" if model < closed[best] else "no")


def test_full_disk_mid_write_keeps_the_previous_checkpoint(tmp_path):
    io_plugin = AtomicCheckpointIO()
    with _mounted(tmp_path / "checkpoints", "size=100k") as full:
        target = full / "last.ckpt"
        io_plugin.save_checkpoint({"epoch": 1, "weights": torch.arange(1000.0)}, target)
        # 800 kB of weights do not fit: the write fails part-way, as a plain OSError that says so.
        with pytest.raises(
            OutputError, match=rf"{re.escape(str(target))}: cannot write: No space left on device"
        ):
            io_plugin.save_checkpoint({"epoch": 2, "weights": torch.zeros(100_000)}, target)
        assert list(full.iterdir()) == [target]  # no temporary file left behind
        checkpoint = torch.load(target, weights_only=False)
        assert checkpoint["epoch"] == 1 and torch.equal(checkpoint["weights"], torch.arange(1000.0))


def test_metrics_csv_appends_each_save_and_rewrites_it_only_for_a_new_column(tmp_path):
    (tmp_path / "metrics.csv").write_text("an earlier run's file in the same folder\n")
    writer = checkpoints._RunWriter(str(tmp_path), [], [])
    path = tmp_path / "metrics.csv"
    assert not path.exists()  # a fresh run never appends to an earlier run's rows
    inodes = []
    logged = [{"epoch": 0, "train/loss": 0.5}, {"epoch": 1, "train/loss": 0.25}]
    logged += [{"epoch": 1, "val/mse": 0.125}, {"epoch": 2, "train/loss": 0.0625}]
    for step, row in enumerate(logged):
        writer.log_metrics(row, step=step)
        writer.save()
        inodes.append(path.stat().st_ino)
    # The second and the last saves appended to the file they found; the third brought a column: a new file.
    assert inodes[1] == inodes[0] and inodes[2] != inodes[1] and inodes[3] == inodes[2]
    header, rows = read_rows(path)
    assert header == ["epoch", "step", "train/loss", "val/mse"]
    assert rows == [
        {"epoch": "0", "step": "0", "train/loss": "0.5", "val/mse": ""},
        {"epoch": "1", "step": "1", "train/loss": "0.25", "val/mse": ""},
        {"epoch": "1", "step": "2", "train/loss": "", "val/mse": "0.125"},
        {"epoch": "2", "step": "3", "train/loss": "0.0625", "val/mse": ""},
    ]


def test_rows_that_do_not_fit_on_the_disk_leave_metrics_csv_as_it_was(tmp_path):
    with _mounted(tmp_path / "full", "size=8k") as full:
        path = full / "metrics.csv"
        write_rows(path, ["epoch", "note"], [{"epoch": 0, "note": "kept"}])
        before = path.read_bytes()
        rows = [{"epoch": epoch, "note": "x" * 4000} for epoch in range(1, 5)]  # 16 kB: part of it fits
        with pytest.raises(OutputError, match=f"{path}: cannot write here: No space left on device"):
            append_rows(path, ["epoch", "note"], rows)
        assert path.read_bytes() == before


@pytest.mark.parametrize(
    "override, why",
    [
        ("data.fractions=[1,0,0]", "no validation fractures (data.fractions=[1, 0, 0])"),
        ("+trainer.limit_val_batches=0", "trainer.limit_val_batches=0"),
        (
            "trainer.check_val_every_n_epoch=1000",
            f"trainer.check_val_every_n_epoch=1000 is more than trainer.max_epochs={EPOCHS}",
        ),
    ],
)
def test_a_run_without_validation_keeps_the_epoch_of_the_lowest_training_loss(
    dataset, tmp_path, override, why
):
    result = run_train(*overrides(dataset, override), run_dir=tmp_path)
    assert (
        f"{why}: the best checkpoint keeps the epoch of the lowest training loss (train/loss) instead of the lowest "
        "val/mse"
    ) in result.stdout
    # Lightning's warnings of a monitor never logged and of an empty validation loader, every epoch, are gone.
    assert "could not find the monitored key" not in result.stderr and "DataLoader" not in result.stderr
    (best,) = (tmp_path / "checkpoints").glob("best-*.ckpt")
    _, rows = read_rows(tmp_path / "metrics.csv")
    losses = {int(row["epoch"]): float(row["train/loss"]) for row in rows if row.get("train/loss")}
    assert len(losses) == EPOCHS
    assert torch.load(best, weights_only=False)["epoch"] == min(losses, key=losses.get)


def test_unwritable_checkpoint_folder_fails_before_training(dataset, tmp_path):
    # Root writes anywhere regardless of permissions; a file where the folder should be cannot be written by
    # anyone.
    (tmp_path / "checkpoints").write_text("not a folder")
    result = run_train(*overrides(dataset), run_dir=tmp_path, check=False)
    assert result.returncode != 0
    # One line: the option that named the folder, the folder and why (before the trainer prints anything).
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: callbacks.model_checkpoint.dirpath: cannot write to the output folder {tmp_path / 'checkpoints'}: a "
        "file of that name is in the way"
    ]
    assert "Traceback" not in result.stderr
    assert "Epoch" not in result.stdout + result.stderr


@pytest.mark.parametrize("damage", ["empty", "truncated", "text"])
def test_damaged_checkpoint_is_one_clear_error(flat_run, tmp_path, damage):
    data = (flat_run[0] / "checkpoints" / "last.ckpt").read_bytes()
    path = tmp_path / "last.ckpt"
    path.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "text": b"epoch: 3\n"}[damage])
    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        checkpoint_epoch(path)


def test_truncated_ckpt_path_stops_the_run_with_one_line(flat_run, dataset, tmp_path):
    data = (flat_run[0] / "checkpoints" / "last.ckpt").read_bytes()
    path = tmp_path / "truncated.ckpt"
    path.write_bytes(data[: len(data) // 3])
    result = run_train(*overrides(dataset, f"ckpt_path={path}"), run_dir=tmp_path / "run", check=False)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "EOFError" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: ckpt_path: {path} ")
    assert "Epoch" not in result.stdout + result.stderr


# Runs train.py paused at one point of epoch PAUSE_EPOCH until killed: "checkpoint" stops half-way through
# writing its last.ckpt (torch.save writes half the bytes, records the file); "train_row" stops after that
# checkpoint is written, before its train row reaches metrics.csv.
PAUSE_EPOCH = 2
PAUSING_TRAIN = """
import io, runpy, sys, time
from pathlib import Path
import torch
from flowlearn.training import checkpoints

marker, point, epoch, script = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
real_save, real_write = torch.save, checkpoints._RunWriter.save

def pause(what):
    marker.write_text(what)
    time.sleep(600)

def half_save(obj, fh, *args, **kwargs):
    name = Path(getattr(fh, "name", str(fh)))
    if point == "checkpoint" and name.name.startswith(".last.ckpt.") and obj.get("epoch") == epoch:
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        fh.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        fh.flush()
        pause(str(name))
    return real_save(obj, fh, *args, **kwargs)

def held_write(writer):
    if point == "train_row" and any(m.get("epoch") == epoch and "train/loss" in m for m in writer.metrics):
        pause("train row")
    return real_write(writer)

torch.save = half_save
checkpoints._RunWriter.save = held_write
sys.argv = sys.argv[4:]
runpy.run_path(script, run_name="__main__")
"""


def kill_at(point: str, run_dir: Path, marker: Path, *extra: str) -> str:
    """Run train.py until it pauses at ``point`` of epoch PAUSE_EPOCH, SIGKILL it; what it was writing."""
    command = [
        sys.executable, "-c", PAUSING_TRAIN, str(marker), point, str(PAUSE_EPOCH), str(ROOT / "train.py"),
        f"hydra.run.dir={run_dir}", *extra,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 300
    while not marker.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate()
    assert marker.exists(), f"the run never reached the pause at {point}:\n{stderr[-3000:]}"
    return marker.read_text()


# Slow (~1 min): a run killed inside a checkpoint write; test_train.py's SIGKILL-and-resume runs in CI.
@pytest.mark.slow
def test_kill_while_writing_a_checkpoint_then_resume_continues_the_run(dataset, tmp_path):
    run_dir = tmp_path / "run"
    partial = Path(kill_at("checkpoint", run_dir, tmp_path / "writing", *overrides(dataset)))

    # Killed mid-write: the partial file is a temporary beside last.ckpt; last.ckpt is epoch PAUSE_EPOCH - 1.
    last = run_dir / "checkpoints" / "last.ckpt"
    assert partial.parent == last.parent and 0 < partial.stat().st_size
    assert stored_epoch(last) == PAUSE_EPOCH - 1
    # The killed process logged its validation of epoch PAUSE_EPOCH, which the resumed run repeats.
    assert epoch_counts(run_dir, "val/mse") == {e: 1 for e in range(PAUSE_EPOCH + 1)}

    # Resuming into a new folder starts its metrics.csv with the checkpoint run's rows up to the checkpoint.
    elsewhere = tmp_path / "elsewhere"
    run_train(*overrides(dataset, f"ckpt_path={last}"), run_dir=elsewhere)

    # Resume into the same folder, killed again just after last.ckpt of epoch PAUSE_EPOCH is written: that
    # epoch's train row is not in metrics.csv; the checkpoint carries it.
    kill_at("train_row", run_dir, tmp_path / "logging", *overrides(dataset, f"ckpt_path={last}"))
    assert stored_epoch(last) == PAUSE_EPOCH
    assert epoch_counts(run_dir, "train/loss") == {e: 1 for e in range(PAUSE_EPOCH)}
    # Resuming into the same folder continues its metrics.csv and its checkpoints.
    run_train(*overrides(dataset, f"ckpt_path={last}"), run_dir=run_dir)

    every_epoch_once = {e: 1 for e in range(EPOCHS)}
    for folder in (elsewhere, run_dir):
        assert epoch_counts(folder, "val/mse") == every_epoch_once
        assert epoch_counts(folder, "train/loss") == every_epoch_once
        assert sum(epoch_counts(folder, "test/mse").values()) == 1
        steps = [int(row["step"]) for row in read_rows(folder / "metrics.csv")[1]]
        assert steps == sorted(steps)
        assert stored_epoch(folder / "checkpoints" / "last.ckpt") == EPOCHS - 1
    # Both folders hold the same rows (epoch, step), whatever the interruptions.
    assert [(r["epoch"], r["step"]) for r in read_rows(elsewhere / "metrics.csv")[1]] == [
        (r["epoch"], r["step"]) for r in read_rows(run_dir / "metrics.csv")[1]
    ]
    # Same folder: the same last.ckpt carried on (no last-v1.ckpt), the partial temporary file cleared away.
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names[-1] == "last.ckpt" and len(names) == 2 and names[0].startswith("best-epoch=")
