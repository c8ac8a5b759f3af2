"""Requeueing a SLURM job mid-training and resuming it in its own run directory (see :mod:`flowlearn.training.slurm`).

Before a job's time limit (or when an administrator or a test sends it), SLURM signals the job's tasks with
``SIGUSR2``: the signal submitit asks for (``--signal=USR2@<signal_delay_s>``). While training,
:class:`RequeueResume` handles it at the next epoch boundary, so that the checkpoint holds whole epochs only:

1. every rank finishes the epoch it is in (the ranks agree on the boundary);
2. ``hpc_ckpt_<n>.ckpt`` is saved into the run directory (Lightning's name for the checkpoint it resumes from
   under SLURM), holding the rows of ``metrics.csv`` logged so far;
3. rank 0 requeues the job (``scontrol requeue``) and the job ends without a result.

The requeued job runs the same run again: Lightning finds the newest ``hpc_ckpt_*.ckpt`` in the run directory and
resumes from it, and this callback writes the checkpoint's rows back into ``metrics.csv``, which Lightning's CSV
logger would otherwise start afresh. Every epoch then appears once, and the weights equal an uninterrupted run's.

Outside training (start-up, the test, the predictions) submitit's own handler takes the signal: it requeues the job
without a checkpoint, so the run starts again from the newest checkpoint there is.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment

from flowlearn.training.checkpoints import RunCSVLogger


class RequeueResume(L.Callback):
    """On SLURM, requeue at an epoch boundary on the scheduler's signal, and resume with a continuous
    ``metrics.csv`` (see the module docstring).

    Args:
        signal_name: the signal SLURM sends before the time limit, as in ``--signal`` (submitit asks for ``USR2``).
    """

    KEY = "metrics_csv"

    def __init__(self, signal_name: str = "USR2") -> None:
        self.signum = signal.Signals[f"SIG{signal_name}"]
        self._armed = False
        self._requested = False
        self._previous: Any = None
        self._with_rows = False

    # -- the signal, handled at the next epoch boundary --------------------------------------------------------

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and SLURMEnvironment.detect():
            self._previous = signal.signal(self.signum, self._request)
            self._armed = True

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._armed:
            signal.signal(self.signum, self._previous)
            self._armed = False

    def _request(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag: the handler interrupts arbitrary code, and the ranks must agree on where to stop.
        self._requested = True

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Before an epoch's first batch the previous epoch is wholly logged, and Lightning resumes a checkpoint saved
        # here as an epoch of which no batch has run (a checkpoint saved in on_train_epoch_start would look like a
        # finished epoch to its training loop, which would skip it).
        if batch_idx or not self._armed:
            return
        # A collective on every rank every epoch: the epoch at which any rank saw the signal ends the job on all.
        if not trainer.strategy.reduce_boolean_decision(self._requested, all=False):
            return
        self._save_hpc_checkpoint(trainer)
        if trainer.is_global_zero:
            job = os.environ.get("SLURM_JOB_ID", "")
            if "SLURM_ARRAY_JOB_ID" in os.environ:
                job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
            subprocess.run(["scontrol", "requeue", job], check=True, timeout=60)
            print(f"requeued SLURM job {job} at epoch {trainer.current_epoch}", file=sys.stderr)
        # No exit status: the job ends without a result and runs again (see flowlearn.training.slurm).
        raise SystemExit

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Under SLURM, `trainer.test()` without ckpt_path loads the newest hpc checkpoint of the run directory;
        # after a requeue that one holds the weights of the requeue, so the trained ones become the newest.
        if any(Path(trainer.default_root_dir).glob("hpc_ckpt_*.ckpt")):
            self._save_hpc_checkpoint(trainer)

    def _save_hpc_checkpoint(self, trainer: L.Trainer) -> None:
        self._with_rows = True
        try:
            trainer.save_checkpoint(trainer._checkpoint_connector.hpc_save_path(trainer.default_root_dir))
        finally:
            self._with_rows = False

    # -- metrics.csv, carried in the checkpoints this callback saves -------------------------------------------

    @staticmethod
    def _csv_logger(trainer: L.Trainer) -> RunCSVLogger | None:
        return next((lg for lg in trainer.loggers if isinstance(lg, RunCSVLogger)), None)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        # Only at this callback's epoch boundaries is "the rows logged so far" exactly what the resumed run must not
        # log again; ModelCheckpoint saves before the epoch's training row is logged.
        logger = self._csv_logger(trainer)
        if not self._with_rows or logger is None or not trainer.is_global_zero:
            return
        logger.save()  # rows still buffered in memory go to the file first
        path = Path(logger.experiment.metrics_file_path)
        checkpoint[self.KEY] = path.read_text() if path.is_file() else ""

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        logger = self._csv_logger(trainer)
        if logger is None or not trainer.is_global_zero or self.KEY not in checkpoint:
            return
        # The rows belong to the run whose directory holds the checkpoint; a run resumed elsewhere starts afresh.
        if not Path(str(trainer.ckpt_path)).resolve().is_relative_to(Path(logger.log_dir).resolve()):
            return
        text = checkpoint[self.KEY]
        reader = csv.DictReader(io.StringIO(text))
        rows = list(reader)
        logger.experiment.restore(reader.fieldnames or [], rows)
