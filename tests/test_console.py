"""What a run prints through Lightning (flowlearn.training.console)."""

from __future__ import annotations

import logging

import lightning as L

from flowlearn.training.console import quiet_lightning


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_trainer_logs_its_hardware_once_and_no_advertising_tip(tmp_path) -> None:
    root, lines = logging.getLogger(), _Lines()
    level = root.level
    root.addHandler(lines)
    root.setLevel(logging.INFO)
    try:
        quiet_lightning()
        quiet_lightning()  # a second run in the same process (a sweep) adds nothing
        L.Trainer(default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False)
    finally:
        root.removeHandler(lines)
        root.setLevel(level)
    assert sum(line.startswith("GPU available") for line in lines.lines) == 1
    assert not [line for line in lines.lines if "Tip" in line or "litlogger" in line]
