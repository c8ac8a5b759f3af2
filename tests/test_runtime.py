"""The process-wide settings importing flowlearn makes (flowlearn/runtime.py), observed in fresh interpreters."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Allocates, fills and frees a 64 MB array six times after importing flowlearn (and running PRELUDE); prints the
# page faults of the last five, and the OpenMP wait policy the process ended up with.
_REALLOCATE = """
import os
import resource
import numpy as np
import flowlearn
import flowlearn.runtime as runtime
PRELUDE

def fill():
    block = np.empty(8_000_000)
    block[:] = 1.0

fill()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    fill()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, os.environ["OMP_WAIT_POLICY"])
"""


def _run(prelude: str = "", **environment: str) -> tuple[int, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "OMP_WAIT_POLICY")
    }
    result = subprocess.run(
        [sys.executable, "-c", _REALLOCATE.replace("PRELUDE", prelude)],
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


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc's settings are glibc's")
def test_freed_memory_goes_back_to_the_system_once_keeping_it_stops():
    # Stopped once (True: flowlearn had made the settings), a second call has nothing left to stop.
    stop = "assert runtime.stop_keeping_freed_memory() and not runtime.stop_keeping_freed_memory()"
    faults, _ = _run(stop + "; assert not runtime.keeps_freed_memory()")
    assert faults >= 5 * 32  # each 64 MB block mapped afresh, as under glibc's own settings (above)
    # Where the user configured malloc, flowlearn changed nothing and has nothing to give back.
    _run(
        "assert not runtime.keeps_freed_memory() and not runtime.stop_keeping_freed_memory()",
        MALLOC_MMAP_MAX_="1",
    )


def test_openmp_threads_sleep_unless_the_user_chose_a_policy():
    assert _run()[1] == "PASSIVE"
    assert _run(OMP_WAIT_POLICY="ACTIVE")[1] == "ACTIVE"


# Fills and frees a 256 MB array (which stays on the heap, resident, under flowlearn's settings), then counts solves
# up to a trim; prints the RSS (MiB) after the free, one solve before the trim and after it.
_TRIM = """
import os
import numpy as np
import flowlearn.runtime as runtime

def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

block = np.empty(32_000_000)
block[:] = 1.0
del block
freed = resident_mib()
for _ in range(runtime.SOLVES_PER_TRIM - 1 - runtime._solves):
    runtime.solve_done()
before = resident_mib()
runtime.solve_done()
print(freed, before, resident_mib())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc's settings are glibc's")
def test_freed_heap_pages_go_back_to_the_system_every_few_hundred_solves():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", _TRIM], env=env, capture_output=True, text=True, check=True)
    freed, before, after = map(float, out.stdout.split())
    assert before > freed - 16  # kept resident until the trim...
    assert after < before - 200  # ...and then most of the 244 MiB block is handed back


def test_every_engine_solve_counts_towards_the_next_trim():
    import torch

    import flowlearn.runtime as runtime
    from flowlearn import DarcyProblem, solve_pressure

    problem = DarcyProblem.fracture((8, 8))
    start = runtime._solves
    log_k = torch.zeros(8, 8, dtype=torch.float64, requires_grad=True)
    solve_pressure(log_k, problem).sum().backward()  # a forward and an adjoint solve
    assert runtime._solves - start == 2


# Registered first, so run last: whether the objects alive at exit were frozen by then, and whether the exit
# handlers registered after quick_exit still ran. ``{call}`` is what the process does after importing flowlearn.
_EXIT = """
import atexit
import gc

atexit.register(lambda: print("frozen" if gc.get_freeze_count() > 10_000 else "not frozen", flush=True))

import flowlearn.runtime
{call}
atexit.register(lambda: print("later handler", flush=True))
"""


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ("flowlearn.runtime.quick_exit()", "frozen"),
        # A library import leaves the interpreter's exit as it is.
        ("", "not frozen"),
    ],
)
def test_quick_exit_freezes_the_objects_alive_after_the_other_exit_handlers(call, expected):
    code = _EXIT.format(call=call)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["later", "handler", *expected.split()]


_PROBE = (
    "import atexit, gc, runpy, sys\n"
    "atexit.register(lambda: print('frozen' if gc.get_freeze_count() > 10_000 else 'not frozen'))\n"
)


@pytest.mark.parametrize(
    "run",
    [
        "sys.argv = ['train.py', '--help']; runpy.run_path('train.py', run_name='__main__')",
        "sys.argv = ['flowlearn', '--version']; import flowlearn.cli; flowlearn.cli.console()",
    ],
    ids=["train.py", "flowlearn"],
)
def test_the_entry_points_exit_quickly_with_their_output_and_status(run):
    out = subprocess.run([sys.executable, "-c", _PROBE + run], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().split("\n")
    assert lines[-1] == "frozen"
    assert "flowlearn" in " ".join(lines[:-1])  # the command's own output came first


@pytest.mark.parametrize(
    ("package", "full_passes"),
    [
        ("flowlearn", 1),
        # flowlearn.training's package imports no Lightning: the predictions file's readers need none.
        ("flowlearn.training", 1),
        ("flowlearn.data.datamodule", 2),
        ("flowlearn.training.module", 2),
        ("flowlearn.training.build", 2),
    ],
)
def test_importing_flowlearn_runs_one_full_collection_and_leaves_the_collector_on(package, full_passes):
    # One at the end of flowlearn's imports, and one at the end of Lightning's where a module brings it in. Without
    # the pauses, importing torch and scipy under flowlearn ran 3 full passes over every live object, and Lightning's
    # import 2-4 more.
    code = (
        "import gc\n"
        "before = gc.get_stats()[2]['collections']\n"
        f"import {package}\n"
        "print(gc.get_stats()[2]['collections'] - before, gc.isenabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(full_passes), "True"]


@pytest.mark.parametrize(("then", "full_passes"), [("collect", 1), ("resume", 0)])
def test_a_paused_collection_ends_in_one_full_pass_or_none(then, full_passes):
    import gc

    from flowlearn.runtime import collection_paused

    before = gc.get_stats()[2]["collections"]
    with collection_paused(then=then):
        assert not gc.isenabled()
        with collection_paused(then="collect"):  # inside another: only pauses
            garbage = [[] for _ in range(100_000)]
        del garbage
    assert gc.get_stats()[2]["collections"] - before == full_passes
    with pytest.raises(ValueError, match="then must be 'collect', 'freeze' or 'resume', got 'later'"):
        with collection_paused(then="later"):
            pass


@pytest.mark.parametrize("enabled", [True, False])
def test_a_paused_collection_restores_the_collector_as_it_was(enabled):
    import gc

    from flowlearn.runtime import collection_paused

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert gc.isenabled() == enabled
        with pytest.raises(KeyError), collection_paused():
            raise KeyError("the block's error passes through")
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_frozen_start_up_keeps_its_objects_out_of_later_passes():
    code = (
        "import gc\n"
        "from flowlearn.runtime import collection_paused\n"
        "with collection_paused(then='freeze'):\n"
        "    import lightning\n"
        "print(gc.get_freeze_count() > 100_000, gc.isenabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
