"""A callback for ``bench_paper.py``: writes the wall-clock time (epoch seconds) at which training's first batch
starts to ``path``."""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L


class FirstStep(L.Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_batch_start(self, trainer: L.Trainer, *args: object) -> None:
        if not self.path.exists():
            self.path.write_text(repr(time.time()))
