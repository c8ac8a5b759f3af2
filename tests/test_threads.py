"""The compiled kernels' thread counts (flowlearn/threads.py): all cores for large work, one for small, the same
answers either way, and a user's NUMBA_NUM_THREADS respected."""

import os
import subprocess
import sys

import numba
import numpy as np
import pytest
import torch

from flowlearn import DarcyProblem, solve_pressure, threads
from flowlearn.engines import make_engine

# A one-off multigrid solve of a rough fracture with every kernel made to share its loops (PARALLEL_ITEMS = 0);
# prints the pressure's sum.
_PARALLEL_SOLVE = """
import numpy as np, torch
import flowlearn.threads
from flowlearn import DarcyProblem, solve_pressure
from flowlearn.engines import make_engine

flowlearn.threads.PARALLEL_ITEMS = 0
log_k = torch.from_numpy(np.random.default_rng(0).normal(size=(40, 50)))
pressure = solve_pressure(log_k, DarcyProblem.fracture((40, 50)), solver=make_engine(multigrid_unknowns=0))
print(float(pressure.sum()))
"""


def test_small_work_runs_on_the_calling_thread_and_the_count_is_restored():
    before = numba.get_num_threads()
    with threads.kernel_threads(threads.PARALLEL_ITEMS - 1):
        assert numba.get_num_threads() == 1
    with threads.kernel_threads(threads.PARALLEL_ITEMS):
        assert numba.get_num_threads() == min(threads.usable_cores(), numba.config.NUMBA_NUM_THREADS)
    assert numba.get_num_threads() == before


def _one_off(monkeypatch, parallel_items: int) -> np.ndarray:
    monkeypatch.setattr(threads, "PARALLEL_ITEMS", parallel_items)
    rng = np.random.default_rng(3)
    active = rng.random((61, 80)) > 0.08
    active[:, [0, -1]] = True
    problem = DarcyProblem.fracture((61, 80), active=active, drop_unconnected=True)
    log_k = torch.from_numpy(rng.normal(size=(61, 80)) * 1.5)
    solver = make_engine(multigrid_unknowns=0)
    pressure = solve_pressure(log_k, problem, solver=solver).numpy()
    assert solver.stats.pcg_solves == 1  # the multigrid path, whose kernels share their loops
    return pressure


@pytest.mark.skipif(threads.usable_cores() < 2, reason="one core: every kernel runs on it")
def test_kernels_on_all_cores_and_on_one_solve_alike(monkeypatch):
    # The multicolour smoother updates uncoupled nodes, the restriction writes each coarse entry from one block
    # row: sharing the loops changes no operation, so the answers agree to round-off.
    serial = _one_off(monkeypatch, 10**12)
    parallel = _one_off(monkeypatch, 0)
    finite = np.isfinite(serial)
    assert np.array_equal(finite, np.isfinite(parallel))
    assert np.abs(parallel[finite] - serial[finite]).max() <= 1e-12 * np.abs(serial[finite]).max()


def test_a_user_limit_on_numba_threads_is_respected():
    # numba refuses a thread count above NUMBA_NUM_THREADS: the kernels must ask for no more.
    environment = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _PARALLEL_SOLVE], env=environment, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert np.isfinite(float(result.stdout))


# A fresh process's first layout, numba not yet loaded: which threads it started, how many compiled versions of
# the pattern kernel exist after it, and whether any of its threads still runs.
_FIRST_LAYOUT = """
import sys, threading
from flowlearn import DarcyProblem

assert "numba" not in sys.modules
started, start = [], threading.Thread.start
threading.Thread.start = lambda thread: (started.append(thread.name), start(thread))[1]
DarcyProblem.fracture((30, 40)).layout
from flowlearn.darcy.kernels import csc_pattern

running = [t.name for t in threading.enumerate() if t.name in started]
print(started, len(csc_pattern.signatures), running)
"""


def test_the_first_layout_loads_its_kernel_in_a_thread_with_the_types_of_its_own_call():
    out = subprocess.run([sys.executable, "-c", _FIRST_LAYOUT], capture_output=True, text=True, check=True)
    # Loaded in the background; one compiled version (a warm-up of other argument types would leave two); the
    # thread joined before the layout returned.
    assert out.stdout.split("\n")[0] == "['flowlearn-kernels'] 1 []"
