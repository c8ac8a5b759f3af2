"""The memory that checks refuse sizes against counts a cgroup's limit (a SLURM job's --mem, a container's): read
from cgroup file systems laid out here as the kernel lays them out, and in a real cgroup where this process may
make one."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_train import ROOT

from flowlearn.checks import available_memory, cgroup_room

GIB = 2**30


def _proc(tmp_path: Path, mounts: list[str], memberships: list[str]) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text("".join(f"{line}\n" for line in mounts))
    (proc / "cgroup").write_text("".join(f"{line}\n" for line in memberships))
    return proc


def _cgroup(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text + "\n")


def test_v2_takes_the_tightest_ancestor_and_counts_inactive_cache_as_free(tmp_path):
    root = tmp_path / "cgroup2"
    # job 8 GiB, 3 GiB used of which 1 GiB inactive cache: 6 GiB left; its step unlimited; the user's slice 16 GiB
    # with 12 used: 4 GiB left, the tightest.
    _cgroup(root / "user", {"memory.max": str(16 * GIB), "memory.current": str(12 * GIB), "memory.stat": ""})
    _cgroup(
        root / "user" / "job",
        {
            "memory.max": str(8 * GIB),
            "memory.current": str(3 * GIB),
            "memory.stat": f"anon {2 * GIB}\ninactive_file {GIB}\nactive_file 0",
        },
    )
    _cgroup(root / "user" / "job" / "step", {"memory.max": "max", "memory.current": str(GIB)})
    proc = _proc(
        tmp_path,
        [f"35 24 0:30 / {root} rw,nosuid - cgroup2 cgroup2 rw"],
        ["0::/user/job/step"],
    )
    assert cgroup_room(proc) == 4 * GIB
    (root / "user" / "memory.max").write_text("max\n")
    assert cgroup_room(proc) == 6 * GIB


def test_v1_reads_the_memory_controller_below_a_container_root(tmp_path):
    """A container sees its own cgroup as the mount's root ("/docker/abc" in mountinfo): the path in
    /proc/self/cgroup is under it. v1's 'no limit' is the largest page-aligned int64."""
    mount = tmp_path / "memory"
    _cgroup(mount, {"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": str(5 * GIB)})
    _cgroup(
        mount / "slurm",
        {
            "memory.limit_in_bytes": str(2 * GIB),
            "memory.usage_in_bytes": str(GIB),
            "memory.stat": f"cache {GIB}\ntotal_inactive_file {GIB // 2}",
        },
    )
    proc = _proc(
        tmp_path,
        [
            f"30 24 0:26 /docker/abc {mount} rw - cgroup cgroup rw,memory",
            f"31 24 0:27 /docker/abc {tmp_path / 'cpu'} rw - cgroup cgroup rw,cpu,cpuacct",
        ],
        ["4:memory:/docker/abc/slurm", "3:cpu,cpuacct:/docker/abc/slurm", "0::/"],
    )
    assert cgroup_room(proc) == GIB + GIB // 2


def test_no_limit_and_no_cgroup_leave_the_machines_memory(tmp_path):
    mount = tmp_path / "memory"
    _cgroup(mount, {"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": str(GIB)})
    proc = _proc(tmp_path, [f"30 24 0:26 / {mount} rw - cgroup cgroup rw,memory"], ["4:memory:/"])
    assert cgroup_room(proc) is None
    assert cgroup_room(tmp_path / "absent") is None


def _memory_cgroup() -> Path | None:
    """The v1 memory controller's mount point where this process may make a cgroup in it, else None."""
    mount = Path("/sys/fs/cgroup/memory")
    return mount if os.geteuid() == 0 and os.access(mount, os.W_OK) else None


@contextlib.contextmanager
def _limited(limit: int) -> Iterator[list[str]]:
    """The start of a command line that runs the rest in a new v1 memory cgroup of ``limit`` bytes: ``[*start,
    program, *arguments]``."""
    directory = _memory_cgroup() / f"flowlearn-test-{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    try:
        (directory / "memory.limit_in_bytes").write_text(str(limit))
        yield ["sh", "-c", f'echo $$ > {directory}/cgroup.procs && exec "$@"', "sh"]
    finally:
        directory.rmdir()


needs_cgroups = pytest.mark.skipif(
    _memory_cgroup() is None, reason="needs root and a writable cgroup v1 memory controller"
)


@needs_cgroups
def test_a_process_in_a_limited_cgroup_sees_the_limit():
    script = "from flowlearn.checks import available_memory; print(available_memory())"
    with _limited(3 * GIB) as start:
        out = subprocess.run(
            [*start, sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
    # The limit less what the interpreter and flowlearn's imports hold.
    assert 2 * GIB < int(out.stdout) < 3 * GIB < available_memory()


@needs_cgroups
def test_train_py_refuses_a_network_beyond_its_jobs_limit(tmp_path):
    """As in a SLURM job of --mem=3G on a node with more: a kernel of 31 on the embedded 64x64 maps needs about
    7 GiB (tests/test_user_errors.py), refused before anything is built."""
    with _limited(3 * GIB) as start:
        out = subprocess.run(
            [
                *start,
                sys.executable,
                str(ROOT / "train.py"),
                "model.kernel_size=31",
                f"hydra.run.dir={tmp_path}",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    available = float(re.search(r"within the ([0-9.]+) GiB this process has available", line)[1])
    assert 2 < available < 3
