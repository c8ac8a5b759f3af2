"""The environment of the fresh processes that the benchmarks start and time (train.py, a benchmark's own cases)."""

from __future__ import annotations

import compileall
import os
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
PACKAGE = BENCHMARKS.parent / "flowlearn"


def process_env() -> dict[str, str]:
    """This process's environment with the benchmarks' folder on ``PYTHONPATH``, so that train.py imports their
    callbacks by module name, and with Python's default bytecode cache, flowlearn's compiled here where missing.

    Where the environment sets ``PYTHONDONTWRITEBYTECODE`` (as the machine of the published figures does), every
    process would compile flowlearn's modules from source again (0.4-1.2 s of an ``experiment=paper`` run), which a
    user's Python does once, at the first run after installing. The timings are those of every later run."""
    compileall.compile_dir(PACKAGE, quiet=1)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCHMARKS), os.environ.get("PYTHONPATH")]))
    return env
