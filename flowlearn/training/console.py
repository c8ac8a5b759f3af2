"""What a training run prints: each log line once, no warnings about Lightning internals, and a closing summary."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from pathlib import Path

from flowlearn.training.metrics import MSE, REL_ERR_MEAN, column


def quiet_lightning() -> None:
    """Route Lightning's log lines through the root logger only, and drop a warning users cannot act on.

    Importing ``lightning`` adds a console handler to the ``lightning`` logger, which also propagates to the root
    logger; under Hydra the root logger has its own handlers (console and ``train.log``), so every Lightning
    line printed twice. Where the root logger has handlers, Lightning's are removed.
    """
    if logging.getLogger().hasHandlers():
        lightning_logger = logging.getLogger("lightning")
        for handler in list(lightning_logger.handlers):
            lightning_logger.removeHandler(handler)
    # Lightning's own pytree helper calls an API that newer torch deprecates; nothing in a run can change that.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # Lightning hints at srun whenever SLURM is installed, even for a run on a login node or a laptop that is meant
    # to run outside the scheduler; jobs that the SLURM launcher submits never print it (they run under srun).
    warnings.filterwarnings(
        "ignore", message=r"The `srun` command is available on your system but is not used"
    )


def summary(metrics: Mapping[str, float], run_dir: Path) -> str:
    """One line on what a run achieved: MSE and mean relative error (%) of the model and of the baseline the
    metrics compare it with, k = Ap^2/12 (W = 1). That is T proportional to Ap^2, the original work's model, not the
    local cubic law T = Ap^3/12, and the line says so.

    Uses the test split when the run had one, else validation; e.g.
    ``done: test MSE 1.2e-04 (Ap^2 law 3.4e-04), mean error 0.71 % (Ap^2 law 1.52 %); outputs in <run_dir>``.
    """
    for stage in ("test", "val"):
        names = [column(stage, MSE), column(stage, MSE, True), column(stage, REL_ERR_MEAN)]
        names.append(column(stage, REL_ERR_MEAN, True))
        if all(name in metrics for name in names):
            mse, cubic_mse, err, cubic_err = (metrics[name] for name in names)
            return (
                f"done: {stage} MSE {mse:.3g} (Ap^2 law {cubic_mse:.3g}), "
                f"mean error {err:.3g} % (Ap^2 law {cubic_err:.3g} %); outputs in {run_dir}"
            )
    return f"done: outputs in {run_dir}"
