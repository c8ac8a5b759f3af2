"""A real one-node SLURM cluster for the tests: ``munged``, ``slurmctld`` and ``slurmd`` from Debian's ``munge`` and
``slurm-wlm`` packages, run as root and bound to the loopback interface.

Everything the daemons read or write (``slurm.conf``, the munge key and socket, state, spool, pid and log files)
lives in one temporary folder, so a cluster never collides with another one or with a system-wide SLURM. Clients
find the cluster through ``SLURM_CONF``, which :meth:`SlurmCluster.env` sets; ``sbatch`` exports the submitting
environment to the jobs (``--export=ALL`` by default), so jobs see the same ``PYTHONPATH`` and interpreter.

Use it as a context manager::

    with slurm_cluster() as cluster:
        subprocess.run(["sinfo"], env=cluster.env())
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# The daemons live in /usr/sbin, which is not on every PATH (e.g. a CI runner's).
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "sinfo", "squeue", "scontrol", "scancel")
PARTITION = "debug"
# The node's name is also the address Lightning's SLURMEnvironment gives DDP's rendezvous (from SLURM_NODELIST),
# so it must resolve without DNS.
NODE = "localhost"


def unavailable_reason() -> str | None:
    """Why a cluster cannot start on this machine, or None when it can."""
    if os.name != "posix" or os.geteuid() != 0:
        return "a test SLURM cluster runs its daemons as root (SlurmUser=root); not running as root"
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name, path=SEARCH_PATH) is None]
    if missing:
        return f"SLURM is not installed: no {', '.join(missing)} (apt-get install slurm-wlm munge)"
    return None


@dataclass(frozen=True)
class SlurmCluster:
    """A running one-node cluster.

    Attributes:
        root: the temporary folder holding its config, state and logs.
        partition: the only partition, holding the only node.
        cpus: CPUs the node offers to jobs (may exceed the machine's cores: jobs only share them).
    """

    root: Path
    partition: str
    cpus: int

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, **extra: str) -> dict[str, str]:
        """The current environment plus what SLURM clients need to find this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": SEARCH_PATH, **extra}

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        """A SLURM client command (``squeue``, ``scontrol``, ...) against this cluster; its output as text."""
        result = subprocess.run(command, env=self.env(), capture_output=True, text=True, timeout=60)
        if check and result.returncode:
            raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def logs(self) -> str:
        """The tails of the daemons' logs, for a failing test's message."""
        tails = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.root / name
            if path.is_file():
                tails.append(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-30:]))
        return "\n".join(tails)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slurm_conf(root: Path, cpus: int, memory_mb: int) -> str:
    return f"""\
ClusterName=flowlearn-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
# Bind every daemon to the address its host name resolves to (loopback here), not to all interfaces.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket={root / "munge" / "munge.socket"},cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root / "slurmd.pid"}
SlurmctldLogFile={root / "slurmctld.log"}
SlurmdLogFile={root / "slurmd.log"}
MailProg=/bin/true
# No cgroups: processes are tracked through /proc, tasks are not bound to cores.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
# A requeued or cancelled job's processes get SIGKILL this many seconds after SIGTERM.
KillWait=5
# The node's CPUs and memory are taken from here, not from the hardware.
SlurmdParameters=config_overrides
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def _wait(condition, what: str, cluster: SlurmCluster, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"test SLURM cluster: {what} after {timeout:.0f} s\n{cluster.logs()}")
        time.sleep(0.2)


def _stop(cluster: SlurmCluster) -> None:
    """Cancel every job, stop the daemons (slurmctld, slurmd, munged) and remove the cluster's folder."""
    root = cluster.root
    subprocess.run(["scancel", "--full", "--user=root"], env=cluster.env(), capture_output=True, timeout=60)
    for name in ("slurmd", "slurmctld", "munged"):
        pid_file = root / f"{name}.pid" if name != "munged" else root / "munge" / "munged.pid"
        try:
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGTERM)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            continue
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


@contextmanager
def slurm_cluster(cpus: int = 4, memory_mb: int = 4096) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd in a fresh temporary folder; stop them and remove it on exit.

    Args:
        cpus: CPUs the node offers (jobs with ``--cpus-per-task=1`` run this many at a time).
        memory_mb: memory the node offers, MB; a job asking for more is rejected at submission.

    Raises:
        RuntimeError: a daemon did not start or the node did not become idle within a minute; the message holds
            the tails of the daemons' logs.
    """
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    # munged refuses a socket in a folder that not everyone may traverse, hence not under pytest's private tmp.
    root = Path(tempfile.mkdtemp(prefix="flowlearn-slurm-"))
    root.chmod(0o711)
    cluster = SlurmCluster(root=root, partition=PARTITION, cpus=cpus)
    try:
        for sub in ("munge", "state", "spool"):
            (root / sub).mkdir(mode=0o755)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        cluster.conf.write_text(_slurm_conf(root, cpus, memory_mb))
        munge = root / "munge"
        daemons = [
            [
                "munged",
                f"--key-file={key}",
                f"--socket={munge / 'munge.socket'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={root / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
            ["slurmctld", "-f", str(cluster.conf)],
            ["slurmd", "-f", str(cluster.conf), "-N", NODE],
        ]
        for command in daemons:
            # Each daemon forks into the background once it is up; a non-zero status means it did not start.
            result = subprocess.run(command, env=cluster.env(), capture_output=True, text=True, timeout=60)
            if result.returncode:
                raise RuntimeError(
                    f"test SLURM cluster: {command[0]} did not start: {result.stderr.strip()}\n{cluster.logs()}"
                )

        def idle() -> bool:
            result = cluster.run("sinfo", "--noheader", "--format=%T", check=False)
            return result.returncode == 0 and result.stdout.split() == ["idle"]

        _wait(idle, "the node is not idle", cluster)
        yield cluster
    finally:
        _stop(cluster)
