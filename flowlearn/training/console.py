"""What a training run prints: each log line once, no warnings about Lightning internals, and a closing summary."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from pathlib import Path

from flowlearn.models.baselines import CLOSED_FORMS, COMPARED, best_closed_form
from flowlearn.training.metrics import DEPARTURE_ERR, FLOW_RATE_ERR, MSE, column


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
    """One line on what a run achieved beside the physics it must beat: per metric (departure error, flow-rate error
    in %, MSE; those the run logged), the model's value, then the best closed form's (the baseline of
    :data:`~flowlearn.models.baselines.CLOSED_FORMS` with the lowest value, named) and the local cubic law's (LCL).

    Uses the test split when the run had one, else validation; e.g. ``done: test departure error 0.0104 (best
    closed form mlcl 0.011, LCL 0.0711), flow-rate error 0.93 % (best closed form inclined 1.41 %, LCL 44.3 %), MSE
    1.2e-05 (best closed form mlcl 1.3e-05, LCL 0.000758); outputs in <run_dir>``.
    """
    for stage in ("test", "val"):
        if column(stage, MSE) not in metrics:
            continue
        parts = []
        for name, label, unit in (
            (DEPARTURE_ERR, "departure error", ""),
            (FLOW_RATE_ERR, "flow-rate error", " %"),
            (MSE, "MSE", ""),
        ):
            if column(stage, name) not in metrics:
                continue
            beside = []
            values = {
                b: metrics[column(stage, name, b)] for b in CLOSED_FORMS if column(stage, name, b) in metrics
            }
            best = best_closed_form(values)
            if best is not None and best[0] != COMPARED:
                beside.append(f"best closed form {best[0]} {best[1]:.3g}{unit}")
            if COMPARED in values:
                beside.append(f"LCL {values[COMPARED]:.3g}{unit}")
            parts.append(
                f"{label} {metrics[column(stage, name)]:.3g}{unit}"
                + (f" ({', '.join(beside)})" if beside else "")
            )
        return f"done: {stage} {', '.join(parts)}; outputs in {run_dir}"
    return f"done: outputs in {run_dir}"
