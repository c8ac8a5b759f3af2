"""A callback for ``soak.py``: appends ``step,rss_bytes,peak_rss_bytes`` to ``path`` every ``every`` training
steps: the resident set size then, and the largest it has been so far (which no sampling phase can miss)."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L


def resident_bytes() -> int:
    """This process's resident set size, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_resident_bytes() -> int:
    """The largest resident set size this process has had (VmHWM), from /proc (Linux)."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


class RSSLog(L.Callback):
    def __init__(self, path: str, every: int = 100) -> None:
        self.path, self.every = Path(path), every
        self.path.write_text("step,rss_bytes,peak_rss_bytes\n")

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step % self.every == 0:
            with self.path.open("a") as f:
                f.write(f"{trainer.global_step},{resident_bytes()},{peak_resident_bytes()}\n")
