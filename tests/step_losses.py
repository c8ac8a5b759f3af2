"""A Lightning callback for tests that records every training step's loss, for runs compared step by step.

``train.py`` loads it through Hydra when ``tests/`` is on ``PYTHONPATH``:
``+callbacks.step_losses._target_=step_losses.StepLosses +callbacks.step_losses.path=<file>``.
"""

from pathlib import Path

import lightning as L
import numpy as np
import torch


class StepLosses(L.Callback):
    """Appends each training step's loss (float64, full precision) to ``path``, one line per step."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.path.write_text("")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        with self.path.open("a") as file:
            file.write(f"{float(torch.as_tensor(loss).detach().cpu()):.17e}\n")


def read_step_losses(path: Path) -> np.ndarray:
    return np.loadtxt(path, ndmin=1)
