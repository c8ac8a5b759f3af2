"""The process-wide settings importing flowlearn makes (flowlearn/runtime.py), observed in fresh interpreters."""

import os
import platform
import subprocess
import sys

import pytest

# Allocates, fills and frees a 64 MB array six times after importing flowlearn; prints the page faults of the
# last five, and the OpenMP wait policy the process ended up with.
_REALLOCATE = """
import os
import resource
import numpy as np
import flowlearn

def fill():
    block = np.empty(8_000_000)
    block[:] = 1.0

fill()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    fill()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, os.environ["OMP_WAIT_POLICY"])
"""


def _run(**environment: str) -> tuple[int, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "OMP_WAIT_POLICY")
    }
    result = subprocess.run(
        [sys.executable, "-c", _REALLOCATE],
        env={**env, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    faults, policy = result.stdout.split()
    return int(faults), policy


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc's settings are glibc's")
def test_freed_memory_is_reused_without_page_faults_unless_the_user_configured_malloc():
    faults, _ = _run()
    # glibc's own settings (here made explicit, so flowlearn leaves them alone) map each 64 MB block afresh: at
    # least one fault per 2 MiB huge page, 32 per block, 16,384 with 4 KiB pages.
    user_faults, _ = _run(MALLOC_MMAP_MAX_="65536")
    assert user_faults >= 5 * 32
    assert faults < 20


def test_openmp_threads_sleep_unless_the_user_chose_a_policy():
    assert _run()[1] == "PASSIVE"
    assert _run(OMP_WAIT_POLICY="ACTIVE")[1] == "ACTIVE"
