"""Checkpoints and metrics a run can be resumed from: written every epoch, atomically, and checked before training.

- :class:`EpochCheckpoint`: Lightning's ``ModelCheckpoint`` writes ``last.ckpt`` only when it also wrote a
  top-k checkpoint, i.e. when the monitored metric improved; this one writes it at the end of every epoch, and
  each checkpoint carries its epoch's ``train/*`` row, which Lightning logs only after the checkpoint.
- :class:`AtomicCheckpointIO`: every checkpoint goes to a temporary file beside its target (same directory, so
  same filesystem), is flushed and fsynced, renamed onto the target and the directory fsynced. A kill or a full
  disk part-way leaves the previous checkpoint whole. (Lightning's own writer goes through a temporary file in
  the system temp directory and *copies* it over when that is another filesystem, e.g. a tmpfs ``/tmp``.)
- :class:`RunCSVLogger`: ``metrics.csv`` written after every logged row (appended in one write, or rewritten
  atomically when a column appears), and continued on resume instead of deleted (Lightning's ``CSVLogger``
  deletes an existing ``metrics.csv`` when it starts).
- :func:`prepare_outputs`: before any training, the output folders are writable and a ``ckpt_path`` is a
  readable checkpoint; files a killed run left behind are removed, and a resumed run's logger starts from the
  earlier rows.
"""

from __future__ import annotations

import csv
import errno
import io
import os
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.plugins.io import TorchCheckpointIO

from flowlearn.data.files import atomic_path
from flowlearn.errors import CheckpointError, OutputError
from flowlearn.metrics import STAGES

Row = dict[str, Any]  # a metrics.csv row, column -> value (strings as read back, numbers as logged)
EPOCH_ROW = "epoch_row"


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that replaces a checkpoint atomically (temporary file beside it, fsync, rename)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            try:
                torch.save(checkpoint, fh)
            except RuntimeError as error:
                # torch's zip writer reports a failed write (a full disk) as a RuntimeError raised while handling
                # the OSError: that one is what atomic_path reports, as an OutputError.
                if isinstance(error.__context__, OSError):
                    raise error.__context__ from None
                raise


class EpochCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that also writes ``last.ckpt`` at the end of every ``every_n_epochs``-th epoch (and of the
    last), improved or not.

    Each checkpoint also carries the epoch's ``train/*`` row of ``metrics.csv`` (state key ``epoch_row``):
    Lightning logs that row only after the epoch's checkpoints are written, so a run killed in between would
    otherwise lose it for good (the resumed run starts with the next epoch).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_saved_step = -1
        self._epoch_row: dict[str, float] = {}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), EPOCH_ROW: self._epoch_row}

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The row Lightning logs after this hook: the epoch-level train metrics, at the epoch's last step.
        train = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(f"{STAGES[0]}/")}
        self._epoch_row = {**train, "epoch": trainer.current_epoch, "step": trainer.global_step - 1}
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._ensure_last(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._ensure_last(trainer)

    def _ensure_last(self, trainer: L.Trainer) -> None:
        fitting = trainer.state.fn == "fit" and not trainer.sanity_checking and not trainer.fast_dev_run
        # Every ``every_n_epochs`` epochs, as Lightning's own saves, and after the last epoch.
        epochs = trainer.current_epoch + 1
        due = epochs % max(self._every_n_epochs, 1) == 0 or epochs == trainer.max_epochs
        if self.save_last and fitting and due and self._last_saved_step != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict[str, torch.Tensor]) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self._last_saved_step = trainer.global_step


def read_rows(path: Path) -> tuple[list[str], list[Row]]:
    """The header and rows of a ``metrics.csv`` (values as written); empty when the file does not exist."""
    if not path.is_file():
        return [], []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def write_rows(path: Path, header: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Write ``rows`` under ``header`` to ``path`` atomically: a kill leaves the previous file or the new one."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(header))
        writer.writeheader()
        writer.writerows(rows)


def append_rows(path: Path, header: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Append ``rows`` to the CSV file ``path`` whose header is ``header``, in one write: a kill leaves the file
    without them or with all of them, and a write that fails part-way (a full disk) is cut back off before
    :class:`OutputError` is raised."""
    text = io.StringIO(newline="")
    csv.DictWriter(text, fieldnames=list(header)).writerows(rows)
    data = text.getvalue().encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as err:
        raise OutputError(f"{path}: cannot write here: {err.strerror or err}") from err
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as err:
            os.ftruncate(fd, size)
            raise OutputError(f"{path}: cannot write here: {err.strerror or err}") from err
    finally:
        os.close(fd)


def rows_up_to(rows: Iterable[Row], epoch: int) -> list[Row]:
    """The rows of epochs ``<= epoch``; rows without an epoch are dropped."""
    return [row for row in rows if row.get("epoch") and int(float(row["epoch"])) <= epoch]


class _RunWriter(ExperimentWriter):
    """Lightning's CSV writer over a history of earlier rows. Each save appends its rows in one write; a row that
    brings a new column rewrites the whole file, atomically, under the wider header. Appending keeps a save's cost
    that of its own rows: rewriting the file at every save would cost the whole history each time (31 ms at 5,000
    rows), and so grow with the square of the run's length."""

    def __init__(self, log_dir: str, header: list[str], history: list[Row]) -> None:
        super().__init__(log_dir)
        self.restore(header, history)

    def _check_log_dir_exists(self) -> None:
        # Lightning warns and deletes an existing metrics.csv here; the file is instead rewritten from the
        # history, which is empty for a fresh run and the kept earlier rows for a resumed one.
        pass

    def restore(self, header: Sequence[str], rows: Iterable[Row]) -> None:
        """Continue from ``rows`` under ``header``, written now in place of the file."""
        self.metrics_keys = sorted(header)
        rows = list(rows)
        path = Path(self.metrics_file_path)
        if rows:
            write_rows(path, self.metrics_keys, rows)
        else:  # a fresh run: an earlier run's file in the same folder must not be appended to
            path.unlink(missing_ok=True)

    def save(self) -> None:
        if not self.metrics:
            return
        new_column = bool(self._record_new_keys())
        rows, self.metrics = self.metrics, []
        path = Path(self.metrics_file_path)
        if new_column or not path.is_file():
            write_rows(path, self.metrics_keys, [*read_rows(path)[1], *rows])
        else:
            append_rows(path, self.metrics_keys, rows)


class RunCSVLogger(CSVLogger):
    """``CSVLogger`` writing ``<save_dir>/metrics.csv`` after every logged row, and continuing it on resume.

    Each save appends its rows in one write, or rewrites the file atomically when a new column appears, so a kill
    never leaves a partial ``metrics.csv``, and it holds every row logged before the kill.
    """

    def __init__(
        self,
        save_dir: str | os.PathLike,
        name: str = "",
        version: str = "",
        prefix: str = "",
        flush_logs_every_n_steps: int = 1,
    ) -> None:
        super().__init__(save_dir, name, version, prefix, flush_logs_every_n_steps)
        self._header: list[str] = []
        self._history: list[Row] = []

    def resume(self, metrics_csv: Path, epoch: int, epoch_rows: Sequence[dict[str, float]] = ()) -> None:
        """Start from the rows of ``metrics_csv`` of epochs ``<= epoch`` (the checkpoint's last completed epoch).

        Rows of later epochs were logged by the process that was stopped after that checkpoint, and the
        resumed run logs those epochs again. ``epoch_rows`` (carried by the checkpoint) are added where
        ``metrics.csv`` has no row of the same epoch with any of their columns, i.e. where the run was stopped
        before logging them. (A logged row may hold fewer columns: a baseline's metrics are logged only when they
        change.)
        """
        if self._experiment is not None:
            raise RuntimeError("resume() must be called before anything is logged")
        self._header, rows = read_rows(metrics_csv)
        self._history = rows_up_to(rows, epoch)
        for extra in epoch_rows:
            names = set(extra) - {"epoch", "step"}
            same_epoch = [row for row in self._history if int(float(row["epoch"])) == extra["epoch"]]
            if not any(row.get(name) for row in same_epoch for name in names):
                self._history.append({name: str(value) for name, value in extra.items()})
                self._header = sorted(set(self._header) | set(extra))

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _RunWriter(self.log_dir, self._header, self._history)
        return self._experiment


def check_writable(folder: Path, key: str) -> None:
    """Raise :class:`CheckpointError`, naming ``folder`` and the config key that set it, unless it is, or could be
    made as, a folder this process may write into. Creates nothing: a check that fails after it leaves no folder."""
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    if existing == folder.absolute() and not existing.is_dir():
        raise CheckpointError(
            f"{key}: cannot write to the output folder {folder}: a file of that name is in the way"
        )
    if not existing.is_dir():
        raise CheckpointError(
            f"{key}: cannot write to the output folder {folder}: {existing} is not a directory"
        )
    # access() also reports a read-only file system, which permission bits do not show.
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CheckpointError(
            f"{key}: cannot write to the output folder {folder}: {existing} is not writable"
        )


def checkpoint_epoch(path: Path) -> int:
    """The last completed epoch stored in the Lightning checkpoint ``path``; :class:`CheckpointError` if unusable."""
    return int(read_checkpoint(path)["epoch"])


def read_checkpoint(
    path: Path, option: str | None = "ckpt_path", weights_only: bool = False
) -> dict[str, Any]:
    """The Lightning checkpoint ``path``, loaded on the CPU; :class:`CheckpointError` if unusable, naming the file
    (after ``option``, the setting that gave it, where there is one).

    Reads the whole file, so a truncated, empty or foreign file fails here, before any training or prediction,
    with one line naming it. ``weights_only`` loads tensors and plain containers alone (torch's safe unpickler):
    for a command that only reads the weights.
    """
    name = f"{option}: {path}" if option else str(path)
    if not path.is_file():
        raise CheckpointError(f"{option or 'checkpoint'}: no such checkpoint file: {path}")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"{name} is empty (0 bytes), not a checkpoint")
    # torch.save writes a zip archive, whose directory comes last: a truncated one has none. (torch's own error
    # for it, under weights_only, advises loading the file as unsafe pickle instead.)
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{name} ({size} bytes) is not a checkpoint: no complete torch archive (truncated, or another kind of "
            "file)"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(
            f"{name} ({size} bytes) is not a readable checkpoint, truncated or corrupt: {reason}"
        ) from None
    if not isinstance(checkpoint, dict) or not {"epoch", "global_step", "state_dict"} <= set(checkpoint):
        raise CheckpointError(f"{name} is not a Lightning training checkpoint")
    return checkpoint


def prepare_outputs(
    run_dir: Path, callbacks: Sequence[L.Callback], logger: Any, ckpt_path: str | None
) -> dict[str, Any] | None:
    """Before training: check the output folders and ``ckpt_path``, remove partial checkpoint files left by a
    killed run, and continue the resumed run's metrics; returns the checkpoint of ``ckpt_path`` (None without).

    ``metrics.csv`` continues from the rows of the checkpoint's own run (``<run>/checkpoints/<file>.ckpt``) up
    to the checkpoint's epoch, whether the resumed run writes into that folder or a new one.
    """
    folders = [("hydra.run.dir", run_dir)]
    folders += [
        ("callbacks.model_checkpoint.dirpath", Path(c.dirpath))
        for c in callbacks
        if isinstance(c, ModelCheckpoint) and c.dirpath
    ]
    if isinstance(logger, CSVLogger):
        folders.append(("logger.save_dir", Path(logger.log_dir)))
    for key, folder in folders:
        check_writable(folder, key)
    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            # A process killed while writing a checkpoint leaves its partial temporary file (named by
            # atomic_path); the checkpoint it was replacing is whole.
            for stale in Path(callback.dirpath).glob(".*.ckpt.*.tmp"):
                stale.unlink(missing_ok=True)
    if ckpt_path is None:
        return None
    checkpoint = read_checkpoint(Path(ckpt_path))
    resumed = Path(ckpt_path).resolve()
    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath == str(resumed.parent):
            # Checkpoints newer than the resumed one (e.g. a best-*.ckpt written just before a kill) belong to
            # epochs this run does again; left there, they would outlive the callback's own bookkeeping.
            for later in resumed.parent.glob("*.ckpt"):
                if later.stat().st_mtime_ns > resumed.stat().st_mtime_ns:
                    later.unlink()
    if isinstance(logger, RunCSVLogger):
        states = checkpoint.get("callbacks", {}).values()
        epoch_rows = [state[EPOCH_ROW] for state in states if state.get(EPOCH_ROW)]
        metrics_csv = resumed.parent.parent / ExperimentWriter.NAME_METRICS_FILE
        logger.resume(metrics_csv, int(checkpoint["epoch"]), epoch_rows)
    return checkpoint
