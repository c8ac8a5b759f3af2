"""A failed run's record, ``error.txt`` in its run directory: the one line that says why it stopped.

A run that stops on a user error, alone or in a sweep, writes its error line here; a run of a sweep that fails on
anything else writes the exception (:mod:`flowlearn.training.slurm`). ``flowlearn report`` shows the record, and
a run that starts again in the same directory (a requeued job, a run repeated there) removes the old one.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

ERROR_FILE = "error.txt"


def run_error(run_dir: str | Path) -> str | None:
    """The error a failed run recorded in ``<run_dir>/error.txt``, one line; None when it recorded none."""
    path = Path(run_dir) / ERROR_FILE
    return path.read_text().strip().replace("\n", "; ") if path.is_file() else None


def clear_error(run_dir: str | Path) -> None:
    """Remove the record of an earlier failure in ``run_dir``, as a run starts there."""
    (Path(run_dir) / ERROR_FILE).unlink(missing_ok=True)


def record_error(run_dir: str | Path, message: str) -> None:
    """Write a failed run's ``error.txt`` (from rank 0 only): ``message`` and, for a submitit job, the job's log
    file (a run in the sweep's own process, or alone, printed its error where the command prints).

    Only into an existing ``run_dir`` (a run composed in a script has none), and a record that cannot be written
    (a full disk) is skipped: the error it would repeat has been printed, and must not give way to another."""
    import submitit

    path = Path(run_dir) / ERROR_FILE
    try:
        env = submitit.JobEnvironment()
    except RuntimeError:  # not a submitit job
        text = f"{message}\n"
    else:
        if env.global_rank > 0:
            return
        text = f"{message}\nlog: {env.paths.stderr}\n"
    if path.parent.is_dir():
        with contextlib.suppress(OSError):
            path.write_text(text)
