"""Process-wide settings made when flowlearn is imported (by importing this module).

Both serve the training loop's solves, each left alone where the user made it already, and both must come before
the libraries they tune are busy: OpenMP's wait policy, read when torch is first imported, and malloc's settings,
which apply to the allocations made after them. So ``flowlearn/__init__.py`` imports this module first, and it
imports nothing heavy. :func:`quick_exit`, for the entry points, shortens the interpreter's exit.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import os
from collections.abc import Iterator
from typing import Literal

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
# mallopt takes an int: the largest free top of the heap kept, 2 GiB.
_KEEP_BYTES = 2**31 - 1
# glibc's own values (malloc.h): blocks mapped on their own, and the free top handed back beyond 128 KiB.
_GLIBC_MMAP_MAX = 65536
_GLIBC_TRIM_THRESHOLD = 128 * 1024
_MALLOC_VARIABLES = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def _keep_freed_memory() -> ctypes.CDLL | None:
    """Let glibc's malloc keep the memory a solve frees, for the next solve to reuse.

    By default glibc maps the blocks above a threshold (128 KiB, raised to at most 32 MiB as such blocks are freed)
    afresh at every allocation, and hands the heap's free top back to the system once it exceeds twice that
    threshold. Each training step's vectors and matrix entries then come back as new pages, which the kernel
    zeroes again at first touch: 5,000 to 21,000 page faults and 80-110 ms of system time per steady step at
    1024x1024, about a tenth of the step. With every block on the heap and its free top kept (up to 2 GiB),
    steady steps fault almost no page.

    The price is fragmentation: with nothing handed back, free chunks that no later request fits pile up inside
    the heap, and the resident set grew by 10-14 % over 5,000 training steps. :func:`solve_done` therefore hands
    the heap's free pages back (``malloc_trim``) every :data:`SOLVES_PER_TRIM` solves: the steps after it fault
    their pages in once more, a cost spread over those solves. A network's training holds more:
    :func:`stop_keeping_freed_memory` gives glibc its own settings back where memory is short for it.

    Skipped where the user configured malloc (``MALLOC_*_`` variables, ``GLIBC_TUNABLES`` with ``glibc.malloc``)
    and off glibc (macOS, musl, Windows). Returns the C library where it made the settings, else None."""
    if any(name in os.environ for name in _MALLOC_VARIABLES) or "glibc.malloc" in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return None
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):  # "glibc 2.36" on glibc
            return None
    except (AttributeError, ValueError, OSError):  # no confstr, or no such name
        return None
    libc = ctypes.CDLL(None)
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(_M_MMAP_MAX, 0)
    mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES)
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


# Solves between two returns of the heap's free pages (:func:`solve_done`). A training-like loop at 256x260 (2,000
# steps, a trim every 100) spent 0.28 s in its 20 trims, 14 ms each, and ran 65-68 s against 63-66 s without.
SOLVES_PER_TRIM = 200
_solves = 0


def solve_done() -> None:
    """Count one solve; every :data:`SOLVES_PER_TRIM` solves, hand the heap's free pages back to the system where
    flowlearn keeps freed memory (:func:`_keep_freed_memory`). Engines call it after each solve. Unlocked: a count
    lost to a race only delays a trim."""
    global _solves
    _solves += 1
    if _libc is not None and _solves % SOLVES_PER_TRIM == 0:
        _libc.malloc_trim(0)


def keeps_freed_memory() -> bool:
    """Whether malloc keeps freed memory for reuse now (:func:`_keep_freed_memory`)."""
    return _libc is not None


def stop_keeping_freed_memory() -> bool:
    """Give malloc glibc's own settings back (large blocks mapped on their own and unmapped when freed, the heap's
    free top handed back) and hand back the free pages held now; returns whether flowlearn had changed them.

    For work whose peak the kept heap multiplies: a convolutional network's training on the CPU frees blocks of
    many sizes (each layer's unfolded input and its gradient), which the kept heap holds side by side. Training
    the CNN in float64 on the embedded dataset (depth 4-8, 32-64 channels, batches of 4) peaked at 2.9-5.1 GB
    against 1.3-1.6 GB under glibc's settings, and ran 1.5-1.7x faster (2026-11-28). glibc's dynamic threshold
    stays off: it grows only while no setting was made, so blocks above 128 KiB are mapped afresh each time."""
    global _libc
    if _libc is None:
        return False
    _libc.mallopt(_M_MMAP_MAX, _GLIBC_MMAP_MAX)
    _libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_TRIM_THRESHOLD)
    _libc.malloc_trim(0)
    _libc = None
    return True


# torch's OpenMP threads spin after every parallel region by default, taking the cores that CHOLMOD's and OpenBLAS's
# threads need a moment later (a training step at 256x260 ran 2-3x slower on a 2-core machine when this was set;
# docs/solve.md, "Threads", has the current figures). Sleeping idle threads avoid that.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The C library where flowlearn set malloc up (and keeps freed memory), else None.
_libc = _keep_freed_memory()


def quick_exit() -> None:
    """Make this process's exit skip the garbage collections of the interpreter's teardown: for the entry points
    (``train.py``, the ``flowlearn`` command), never on import, since it changes what is finalised at exit.

    At exit the interpreter collects garbage several times over every object still alive while it tears its
    modules down: with torch and Lightning loaded, 420,000 objects in 3,600 modules, 0.8-0.9 s after importing what
    train.py imports and 1.45 s after an ``experiment=paper`` run (``gc_collect_main``, sampled with py-spy). Freezing
    the objects once the other exit handlers have run (this handler is registered before theirs, so it runs after
    them) leaves the collections nothing to traverse: 0.2 s. The exit handlers run and threads are joined as before;
    what the entry points write is closed before they return. What is skipped are the finalisers of objects that
    only the teardown's collections would free, such as those held by module globals.
    """
    atexit.register(gc.freeze)


@contextlib.contextmanager
def collection_paused(then: Literal["collect", "freeze", "resume"] = "collect") -> Iterator[None]:
    """No garbage collection inside the block: for imports and the first call of compiled kernels, which create
    hundreds of thousands of objects that all stay alive.

    The collector's full passes traverse every live object, and it starts one each time the long-lived objects have
    grown by a quarter: importing what train.py imports ran 7 of them, 0.8-0.9 s of its 3.0 s, and numba's first
    compiled call after torch's import spent half of its 0.21 s in one. ``then`` says how the block ends:

    - ``"collect"``: one full pass, which moves the block's objects to the oldest generation at once. Left in the
      youngest, the many objects of an import would be traversed once per generation as they age, the last time
      in a full pass anyway;
    - ``"freeze"`` (for the entry points, as in :func:`quick_exit`): the objects alive move to the permanent
      generation, which no pass traverses: right for a process's start-up, whose modules live as long as it does;
    - ``"resume"``: nothing, for a block that makes few objects against those alive (a full pass at its end would
      traverse them all).

    A block inside another only pauses; the outer one ends them all.
    """
    if then not in ("collect", "freeze", "resume"):
        raise ValueError(f"then must be 'collect', 'freeze' or 'resume', got {then!r}")
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if then == "freeze":
                gc.freeze()
            elif then == "collect":
                gc.collect()
            gc.enable()
