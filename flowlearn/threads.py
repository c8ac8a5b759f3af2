"""How many cores the compiled kernels use.

numba's parallel loops run on OpenMP threads, which sleep between loops: importing flowlearn sets
``OMP_WAIT_POLICY=PASSIVE`` (:mod:`flowlearn.runtime`) so that idle threads leave the cores to CHOLMOD and BLAS.
Waking them costs about 80 microseconds a loop on 2 cores, against 1.6 on one thread: more than a pass over 100,000
values takes. So a kernel shares its loops among the cores only where it has that much to do, and runs on the
calling thread below (a multigrid V-cycle at 256x260 took 3.9 ms on 2 cores, 0.9 on one).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import numba
from threadpoolctl import ThreadpoolController

# Fewest items (grid nodes, matrix entries) over which a compiled kernel's loops run on all usable cores.
PARALLEL_ITEMS = 100_000


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@cache
def _all_threads() -> int:
    """Every usable core that numba may use (read once: a multigrid cycle asks at every level)."""
    return max(1, min(usable_cores(), numba.config.NUMBA_NUM_THREADS))


def kernel_threads_for(items: int) -> int:
    """Threads worth waking for a kernel over ``items`` items: every usable core numba may use, or 1."""
    return 1 if items < PARALLEL_ITEMS else _all_threads()


@contextmanager
def kernel_threads(items: int) -> Iterator[None]:
    """numba's thread count, for the kernels called within, fit for work over ``items`` items (numba keeps the
    count per calling thread, so this touches no other thread). Setting it costs about 2 microseconds, so an
    unchanged count is left alone."""
    previous, wanted = numba.get_num_threads(), kernel_threads_for(items)
    if wanted == previous:
        yield
        return
    numba.set_num_threads(wanted)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


@cache
def _blas_controller() -> ThreadpoolController:
    return ThreadpoolController()


def single_threaded_blas():
    """A context in which BLAS runs on one thread. Solve phases are memory-bound chains of small BLAS calls
    (triangular solves, dot products), where BLAS threads only add synchronisation: one thread is 2-10x faster, most
    of all on a busy machine. Factorisations keep all threads."""
    return _blas_controller().limit(limits=1, user_api="blas")
