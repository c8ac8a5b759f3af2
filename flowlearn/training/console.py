"""What a training run prints: each log line once, and no warnings about Lightning internals. (Its closing line is
:func:`flowlearn.reporting.heldout.closing_line`.)"""

from __future__ import annotations

import logging
import sys
import warnings

import lightning as L

# The logger of Lightning's rank-zero messages (the hardware lines, its tips).
_RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"


def _not_a_tip(record: logging.LogRecord) -> bool:
    """False for Lightning's advertising tips (a cloud logger to install): nothing about the run."""
    return not str(record.msg).startswith("💡 Tip")


def quiet_lightning() -> None:
    """Route Lightning's log lines through the root logger only, and drop the warnings and tips users cannot act
    on.

    Importing ``lightning`` adds a console handler to the ``lightning`` logger, which also propagates to the root
    logger; under Hydra the root logger has its own handlers (console and ``train.log``), so every Lightning
    line printed twice. Where the root logger has handlers, Lightning's are removed.
    """
    if logging.getLogger().hasHandlers():
        lightning_logger = logging.getLogger("lightning")
        for handler in list(lightning_logger.handlers):
            lightning_logger.removeHandler(handler)
    logging.getLogger(_RANK_ZERO_LOGGER).addFilter(_not_a_tip)  # added once however often this is called
    # Lightning's own pytree helper calls an API that newer torch deprecates; nothing in a run can change that.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # Lightning hints at srun whenever SLURM is installed, even for a run on a login node or a laptop that is meant
    # to run outside the scheduler; jobs that the SLURM launcher submits never print it (they run under srun).
    warnings.filterwarnings(
        "ignore", message=r"The `srun` command is available on your system but is not used"
    )


class FreshLineOnError(L.Callback):
    """End the progress bar's line when training or the test stops on an error: the bar (on stdout) leaves the
    cursor at its end, and the error's one line (on stderr) had been printed on it, after the bar's last
    numbers."""

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        bar = trainer.progress_bar_callback
        if bar is not None and bar.is_enabled and trainer.is_global_zero:
            print(file=sys.stdout, flush=True)
