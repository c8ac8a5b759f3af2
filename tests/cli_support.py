"""A ``flowlearn`` command line run in a fresh interpreter, for the tests of what the command imports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

# Runs the command line, then prints its exit status and how many of Lightning's modules it loaded.
_SCRIPT = """
import sys
from flowlearn.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:  # --help
    status = exit.code
print(status, sum(name.split(".")[0] == "lightning" for name in sys.modules))
"""


def run_counting_lightning(argv: Sequence[str]) -> tuple[str, str, int, int]:
    """(stdout before the count, stderr, exit status, Lightning modules loaded) of ``flowlearn argv`` in a fresh
    process."""
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *argv], capture_output=True, text=True, check=True
    )
    output, _, last = result.stdout.rstrip("\n").rpartition("\n")
    status, count = last.split()
    return output, result.stderr, int(status), int(count)
