"""A SIGTERM to a training run of several processes that Lightning started itself (``trainer=ddp``, or
``trainer.devices=2`` on one machine): every process stops at the same training batch.

Lightning's own handler hung such runs for good: in the handler of each process it broadcasts a tensor, a
collective that meets whatever collective the other process is in at that moment (a gradient's all-reduce, the
next batch's broadcast), and the processes then stop at different places of the loop, each waiting on the other.
:class:`StopOnSigterm` puts a handler in its place that only forwards the signal to the child processes and sets a
flag; before each training batch the processes agree on the flags in one all-reduce, and where any was set all of
them end the fit there with Lightning's ``SIGTERMException``, as a run of one process does (exit status 0; the last
checkpoint is that of the last finished epoch). A SIGTERM during validation or the test takes effect at the next
training batch, or, where none follows, ends each process by the signal itself once the stage is over.

Processes started by a scheduler (SLURM's tasks, each signalled by it) keep Lightning's and submitit's handling.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType
from typing import Any

import lightning as L
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)


def _own_processes(trainer: L.Trainer) -> bool:
    """Whether ``trainer`` runs in several processes that Lightning launched on this machine: its plain
    environment, not a scheduler's (SLURM, torchrun), which would have started them."""
    environment = getattr(trainer.strategy, "cluster_environment", None)
    return trainer.world_size > 1 and type(environment) is LightningEnvironment


class StopOnSigterm(L.Callback):
    """Stop every process of a multi-process run at the same training batch on SIGTERM (see the module
    docstring); does nothing in a run of one process."""

    def __init__(self) -> None:
        self._requested = False
        self._armed = False
        self._trainer: L.Trainer | None = None

    def _arm(self, trainer: L.Trainer) -> None:
        # Lightning registers its handler as each stage starts (after the setup hooks): replace it there.
        if _own_processes(trainer):
            self._trainer = trainer
            signal.signal(signal.SIGTERM, self._request)
            self._armed = True

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._arm(trainer)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._arm(trainer)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._arm(trainer)

    def _request(self, signum: int, frame: FrameType | None) -> None:
        # No collective here: the handler interrupts whatever the process is in. The children get the signal too
        # (rank 0 started them), so that each of them can end its stage should no training batch follow.
        if not self._requested and self._trainer is not None:
            self._trainer.strategy.launcher.kill(signum)
        self._requested = True

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Every process runs the same number of training batches (their gradients are averaged at each), so that
        # this all-reduce meets its counterpart on every process.
        if self._armed and trainer.strategy.reduce_boolean_decision(self._requested, all=False):
            if trainer.is_global_zero:
                log.info(
                    f"SIGTERM: the {trainer.world_size} training processes stop at epoch {trainer.current_epoch}, "
                    f"batch {batch_idx}"
                )
            raise SIGTERMException

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Lightning has put the handlers of before the stage back by now.
        if self._armed and self._requested:
            signal.raise_signal(signal.SIGTERM)
        self._armed = False
        self._trainer = None
