"""What a training run prints: each log line once, no warnings about Lightning internals, and a closing summary."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from pathlib import Path

from flowlearn.models.baselines import COMPARED
from flowlearn.training.metrics import FLOW_RATE_ERR, MSE, REL_ERR_MEAN, column


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
    """One line on what a run achieved: the MSE and mean relative error (%) of the model and of the local cubic law
    (LCL, T = Ap³/12), and their flow-rate errors (%) where the run logged them.

    Uses the test split when the run had one, else validation; e.g.
    ``done: test MSE 1.2e-04 (LCL 3.4e-04), mean error 0.71 % (LCL 1.52 %), flow-rate error 4.1 % (LCL 21 %);
    outputs in <run_dir>``.
    """
    for stage in ("test", "val"):
        pairs = [(column(stage, name), column(stage, name, COMPARED)) for name in (MSE, REL_ERR_MEAN)]
        if all(model in metrics and baseline in metrics for model, baseline in pairs):
            (mse, lcl_mse), (err, lcl_err) = ((metrics[m], metrics[b]) for m, b in pairs)
            line = f"done: {stage} MSE {mse:.3g} (LCL {lcl_mse:.3g}), mean error {err:.3g} % (LCL {lcl_err:.3g} %)"
            flow, lcl_flow = column(stage, FLOW_RATE_ERR), column(stage, FLOW_RATE_ERR, COMPARED)
            if flow in metrics and lcl_flow in metrics:
                line += f", flow-rate error {metrics[flow]:.3g} % (LCL {metrics[lcl_flow]:.3g} %)"
            return f"{line}; outputs in {run_dir}"
    return f"done: outputs in {run_dir}"
