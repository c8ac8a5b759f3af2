"""Checks of input values shared by the data reader, the Darcy problem and the pressure solve.

One wording for one fault, whoever finds it: the caller prefixes what and where (file and field, or argument
name), :func:`nonfinite` says how many values are bad, of which kind, and where the first one is.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from flowlearn.errors import ConfigError, SettingError


def nonfinite(
    values: np.ndarray | torch.Tensor,
    where: np.ndarray | torch.Tensor | None = None,
    shape: tuple[int, ...] | None = None,
    batched: bool = False,
) -> str | None:
    """None when ``values`` is finite wherever ``where`` is set, else a description of its NaN and inf entries.

    Args:
        values: Any float array or tensor (on any device).
        where: Optional bool mask broadcastable to ``values``: only these entries count.
        shape: The image shape that the trailing dimension of ``values`` flattens (node vectors), so that the first
            bad entry is named by its pixel; None names it by its index in ``values``.
        batched: Whether the leading dimension of ``values`` is a batch, named as "batch item i".

    Returns:
        For example ``"2 non-finite value(s) (1 NaN, 1 inf); the first is in batch item 1 at pixel (3, 5)"``.
    """
    if isinstance(values, torch.Tensor):
        bad = ~torch.isfinite(values)
        if where is not None:
            bad &= torch.as_tensor(where, device=values.device)
        if not bool(bad.any()):
            return None
        values, bad = values.detach().cpu().numpy(), bad.cpu().numpy()
    else:
        bad = ~np.isfinite(values)
        if where is not None:
            bad &= np.asarray(where, dtype=bool)
        if not bad.any():
            return None
    first = np.argwhere(bad)[0]
    nan = int(np.isnan(values[bad]).sum())
    place = ""
    if batched:
        place, first = f"in batch item {int(first[0])} ", first[1:]
    if shape is not None:
        first = np.unravel_index(int(first[-1]), shape)
    pixel = tuple(int(i) for i in first)
    return (
        f"{int(bad.sum())} non-finite value(s) ({nan} NaN, {int(bad.sum()) - nan} inf); the first is "
        f"{place}at pixel {pixel}"
    )


def is_number(value: object) -> bool:
    """Whether ``value`` is a finite real number (an int or float, not a bool): what a setting may be, which is
    written into JSON provenance and YAML configs as given (a numpy scalar would not serialise)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_real(value: object) -> bool:
    """Whether ``value`` is a finite real number, numpy scalars included (an element of an array, a grid's
    coordinate), not a bool."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool | np.bool_):
        return False
    return isinstance(value, numbers.Integral) or math.isfinite(value)  # an int beyond float64 is finite too


def is_integer(value: object) -> bool:
    """Whether ``value`` is an int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_setting(ok: bool, field: str, problem: str, value: object) -> None:
    """Raise :class:`SettingError` for ``field`` (``"<field> <problem>, got <value>"``) unless ``ok``."""
    if not ok:
        raise SettingError(field, f"{finite_problem(problem, value)}, got {value!r}")


def shown(value: object, limit: int = 80) -> str:
    """A value as an error message shows it: its repr on one line, cut to ``limit`` characters; text stored as bytes
    decoded, numpy scalars as numbers, and arrays as lists (or their shape and dtype where they are long)."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, np.ndarray):
        value = value.tolist() if value.size <= 8 else f"array of shape {value.shape}, dtype {value.dtype}"
    elif isinstance(value, np.generic):
        value = value.item()
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def finite_problem(problem: str, value: object) -> str:
    """``problem`` as it reads for the refused ``value``: a bound on one side only (``"must be > 0"``, ``"must be a
    number > 0"``) that an infinite value meets (inf > 0) was failed on the finiteness the check also asks, which the
    text then says (``"must be a finite number > 0"``), instead of a range that the value seems to lie in."""
    bound = problem.removeprefix("must be ").removeprefix("a number ")
    if (
        problem.startswith("must be ")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isinf(value)
        and bound[:1] == (">" if value > 0 else "<")
    ):
        return f"must be a finite number {bound}"
    return problem


def check_cores(field: str, value: object) -> None:
    """Raise :class:`SettingError` for ``field`` unless ``value`` is None (every core) or an integer in [1, the cores
    this process may use] (:func:`~flowlearn.threads.usable_cores`).

    For the threads and processes of a local computation: more of them than cores only queue for the same cores,
    and far more crash (100,000 OpenMP threads segfaulted the LBM) or hang (as many MPI subdomains as cells)."""
    from flowlearn.threads import usable_cores  # numba: only where a count is checked

    cores = usable_cores()
    check_setting(
        value is None or (is_integer(value) and 1 <= value <= cores),
        field,
        f"must be an integer in [1, {cores}] (the cores this process may use)",
        value,
    )


# The resolutions (dots per inch) a figure may be written at. At the upper bound a 9 x 3.8 inch figure renders in
# about 2 s (49 megapixels); at 3000 dpi figures took minutes and 454 megapixels, at 100,000 matplotlib's renderer
# ran out of memory.
FIGURE_DPI = (10, 1200)


def check_dpi(value: object, field: str = "dpi") -> int:
    """``value`` if it is an integer in :data:`FIGURE_DPI`, else :class:`SettingError` for ``field``."""
    low, high = FIGURE_DPI
    check_setting(
        is_integer(value) and low <= value <= high, field, f"must be an integer in [{low}, {high}]", value
    )
    return value


# The voxel sizes a simulation may be set up with, metres per voxel: a nanometre to a metre. Below a nanometre a
# voxel is smaller than the molecules of the fluid, where no continuum (LBM, Stokes) flow exists; above a metre a
# voxel is wider than any fracture aperture, so that no gap is even one voxel wide. Outside the range a run failed
# late and elsewhere (1e-300 m: a log K beyond float64 after the LBM; 1e10 m: "no fluid path").
VOXEL_SIZE = (1e-9, 1.0)


def check_voxel_size(value: object, field: str = "voxel_size") -> float:
    """``value`` if it is a number in :data:`VOXEL_SIZE` (metres per voxel), else :class:`SettingError` for
    ``field``."""
    low, high = VOXEL_SIZE
    check_setting(
        is_number(value) and low <= value <= high,
        field,
        f"must be a number in [{low:g}, {high:g}] (metres per voxel: a nanometre to a metre)",
        value,
    )
    return value


def check_map_shape(value: object) -> tuple[int, int]:
    """The (H, W) of a 2D map setting as a tuple; :class:`SettingError` for ``shape`` unless two integers >= 2."""
    shape = tuple(value) if isinstance(value, tuple | list) else ()
    check_setting(
        len(shape) == 2 and all(is_integer(n) and n >= 2 for n in shape),
        "shape",
        "must be two integers >= 2 (H W)",
        value,
    )
    return shape


def available_memory() -> int:
    """The memory this process can have now without swapping or being killed, in bytes: the bound of checks that
    refuse sizes before allocating them. The machine's (Linux's MemAvailable; the physical memory where the kernel
    does not say), or less where a cgroup limits the process (:func:`cgroup_room`): a SLURM job's ``--mem``, a
    container's limit."""
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError), open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                machine = int(line.split()[1]) * 1024
                break
    room = cgroup_room()
    return machine if room is None else min(machine, room)


# Limits at or above this many bytes mean none: cgroup v1 writes "no limit" as the largest page-aligned int64.
_NO_CGROUP_LIMIT = 2**60
# Per cgroup version: the files of the limit and of the usage, and memory.stat's key for the page cache that the
# kernel reclaims before it kills (the usage counts it).
_CGROUP_FILES = {
    "cgroup2": ("memory.max", "memory.current", "inactive_file"),
    "cgroup": ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
}


def cgroup_room(proc: str | os.PathLike = "/proc/self") -> int | None:
    """Bytes the memory limits of the cgroups of the process ``proc`` still leave it, the least over its cgroup and
    the cgroup's ancestors (each one's limit less its usage, its inactive page cache not counted as used), in cgroup
    v2 and in v1's memory controller alike; None where no limit is set or none can be read (no cgroup, another
    system than Linux)."""
    proc = Path(proc)
    try:
        mounts = (proc / "mountinfo").read_text().splitlines()
        memberships = (proc / "cgroup").read_text().splitlines()
    except OSError:
        return None
    rooms = []
    # A mount: "<id> <parent> <dev> <root> <mount point> <options> ... - <type> <source> <options>".
    for mount in mounts:
        fields = mount.split()
        if "-" not in fields:
            continue
        kind, options = fields[fields.index("-") + 1], fields[fields.index("-") + 3]
        if kind not in _CGROUP_FILES or not _holds_memory(kind, options):
            continue
        mount_root, mount_point = fields[3], Path(fields[4])
        for membership in memberships:  # "0::<path>" (v2), "<id>:<controllers>:<path>" (v1)
            _, controllers, path = membership.split(":", 2)
            if (kind == "cgroup2") != (controllers == "") or not _holds_memory(kind, controllers):
                continue
            if not Path(path).is_relative_to(mount_root):  # a cgroup outside what this mount shows
                continue
            parts = Path(path).relative_to(mount_root).parts
            for depth in range(len(parts), -1, -1):  # the cgroup, then each ancestor up to the mount's root
                room = _room(mount_point.joinpath(*parts[:depth]), *_CGROUP_FILES[kind])
                if room is not None:
                    rooms.append(room)
    return min(rooms) if rooms else None


def _holds_memory(kind: str, controllers: str) -> bool:
    """Whether a cgroup mount or membership of ``kind`` with these comma-separated controllers (or mount options)
    limits memory: every v2 one, v1's memory controller."""
    return kind == "cgroup2" or "memory" in controllers.split(",")


def _room(directory: Path, limit_file: str, usage_file: str, cache_key: str) -> int | None:
    """A cgroup's limit less its usage (inactive page cache not counted), 0 at least; None without a limit."""
    try:
        limit_text = (directory / limit_file).read_text().strip()
        if limit_text == "max" or int(limit_text) >= _NO_CGROUP_LIMIT:
            return None
        usage = int((directory / usage_file).read_text())
        for line in (directory / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == cache_key:
                usage -= int(value)
                break
    except (OSError, ValueError):
        return None
    return max(int(limit_text) - usage, 0)


def check_distinct_names(option: str, paths: Sequence[object]) -> None:
    """Raise :class:`ConfigError` naming ``option`` where two of ``paths`` (or one given twice) share a file name:
    a fracture's key is its file's stem and its group, so two files of one stem would give two fractures one key."""
    stems: dict[str, object] = {}
    for path in paths:
        stem = Path(str(path)).stem
        if stem in stems:
            raise ConfigError(
                f"{option}: {stems[stem]} and {path} share the file name {stem!r}, which names their fractures "
                f"({stem}/<group>): give each file once, and rename one of two files of one name"
            )
        stems[stem] = path


def same_file(one: str | os.PathLike, other: str | os.PathLike) -> bool:
    """Whether the paths ``one`` and ``other`` name one file, however named (``./a.h5``, a symbolic link, a hard
    link): where writing one would replace the other."""
    try:
        return Path(one).resolve() == Path(other).resolve() or os.path.samefile(one, other)
    except OSError:  # one of them absent: not the same existing file
        return False


def check_not_input(
    output: str | os.PathLike, inputs: Sequence[str | os.PathLike], inputs_are: str, option: str
) -> None:
    """Raise :class:`SettingError` naming ``option`` where the file ``output`` is one of ``inputs`` (:func:`same_file`),
    which writing it would replace; ``inputs_are`` says what they are ("one of the inputs")."""
    for path in inputs:
        if same_file(output, path):
            link = "a link to " if Path(output).is_symlink() else ""
            raise SettingError(option, f"{output} is {link}{inputs_are}: give a new file")


def check_distinct_files(option: str, paths: Sequence[object], why: str) -> None:
    """Raise :class:`SettingError` naming ``option`` where one file is among ``paths`` twice, however named
    (``a.h5`` and ``./a.h5``, or a link to it); ``why`` says what giving it twice would do."""
    seen: dict[Path, object] = {}
    for path in paths:
        key = Path(str(path)).resolve()
        if key in seen:
            earlier = seen[key]
            also = "" if str(earlier) == str(path) else f" (also as {earlier})"
            raise SettingError(option, f"gives {path} twice{also}: {why}")
        seen[key] = path
