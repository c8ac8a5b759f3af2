"""A generation's fractures as one SLURM job array: ``flowlearn generate OUT.h5 --slurm``; and, the same way, the
references of a file's fractures: ``flowlearn reference IN.h5 -o OUT.h5 --slurm``.

The steps are those of a local generation (:mod:`flowlearn.reference.generate`), for any :class:`ArrayJob`: the job
finds the fractures still to make (for a generation, :func:`~flowlearn.reference.generate.prepare_parts`), each
array task makes its share (:func:`~flowlearn.reference.generate.make_parts`), so that each finished fracture is its
own part file in ``OUT.h5.parts/``, written atomically, and the submitting command waits for the array, with a
progress bar counting finished parts, then writes OUT.h5 from them
(:func:`~flowlearn.reference.generate.merge_parts`). :func:`run_array` runs a job; :class:`Generation` is a
generation's, :class:`References` the references' (whose tasks run
:func:`~flowlearn.reference.references.reference_fracture`, and whose merge keeps the fractures of an earlier output
as :func:`~flowlearn.reference.references.reference_file` does).

A task that is killed, preempted or runs out of time loses at most the fracture it was making:

- Each task is a :class:`submitit.helpers.Checkpointable`. SLURM sends ``SIGUSR2`` ``signal_delay_s`` seconds before
  the time limit (and on preemption); the task then requeues itself (at most :data:`REQUEUES` times for time limits),
  and the requeued task skips the parts already there.
- A task that ends otherwise (``scancel``, a node failure, a time limit past its requeues) is named on one line with
  its log file; the command then stops with the merge's one-line error naming the missing fractures (exit status 2).
  Rerunning the same command submits a new array for the missing fractures only.

The array is recorded in ``OUT.h5.parts/slurm/array.json``, beside submitit's files and the tasks' logs
(``<job id>_0_log.out`` and ``.err``), which the merge removes with the parts. A rerun while that array still runs
waits for it instead of submitting the same fractures again: how a command interrupted on the login node, or one run
with ``wait=False`` (``--no-wait``), is continued.

Nothing is written before the cluster has been checked: SLURM's client commands on ``PATH``, a controller that
answers ``scontrol ping``, and ``sbatch --test-only`` accepting the array's partition, time limit, CPUs and memory.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

import submitit
from submitit.core.utils import JobPaths, pickle_load
from tqdm.auto import tqdm

from flowlearn.checks import check_not_input, check_setting, is_integer, is_number
from flowlearn.data.files import atomic_path, list_fractures, read_fractures, write_fractures
from flowlearn.errors import ProblemError, UnavailableError
from flowlearn.reference.generate import (
    DatasetConfig,
    fracture_name,
    make_parts,
    merge_parts,
    part_path,
    parts_folder,
    prepare_parts,
    summarize_generation,
)
from flowlearn.reference.lbm import LBMSettings
from flowlearn.reference.references import checked_fractures, done_before, file_attributes, reference_fracture

# What submitting, watching and cancelling an array takes.
CLIENTS = ("sbatch", "srun", "squeue", "scontrol")
# Without a task count, one task per missing fracture, at most this many.
MAX_DEFAULT_TASKS = 64
# How many times a task that reaches its time limit requeues itself (preemptions do not count).
REQUEUES = 3
# States of a job that has ended (squeue --states=all shows them for a few minutes, then forgets the job).
ENDED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
ARRAY_RECORD = "array.json"


@dataclass(frozen=True)
class SlurmSettings:
    """How a generation's job array is submitted. The names are those of ``hydra/launcher=slurm``
    (``configs/hydra/launcher/slurm.yaml``), and of the ``flowlearn generate`` options.

    Attributes:
        tasks: array tasks sharing the missing fractures; None: one per missing fracture, at most
            :data:`MAX_DEFAULT_TASKS`. Never more than the missing fractures.
        partition: SLURM partition; None: the cluster's default.
        account: account charged; None: the user's default.
        timeout_min: time limit of each task, minutes.
        cpus_per_task: CPUs of each task: the OpenMP threads of its LBM (unless the LBM settings fix ``threads``).
        mem_gb: memory of each task, GB.
        array_parallelism: tasks running at once, at most.
        signal_delay_s: seconds before the time limit at which a task is warned (``SIGUSR2``) and requeues itself;
            at most half the time limit is used.
        setup: shell lines each task runs first (``module load ...``); ``sbatch`` already exports the submitting
            shell's environment (an activated virtual environment, ``PYTHONPATH``).
    """

    tasks: int | None = None
    partition: str | None = None
    account: str | None = None
    timeout_min: int = 240
    cpus_per_task: int = 2
    mem_gb: float = 4.0
    array_parallelism: int = 64
    signal_delay_s: int = 120
    setup: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_setting(
            self.tasks is None or (is_integer(self.tasks) and self.tasks >= 1),
            "tasks",
            "must be an integer >= 1",
            self.tasks,
        )
        for name in ("timeout_min", "cpus_per_task", "array_parallelism"):
            value = getattr(self, name)
            check_setting(is_integer(value) and value >= 1, name, "must be an integer >= 1", value)
        check_setting(is_number(self.mem_gb) and self.mem_gb > 0, "mem_gb", "must be > 0", self.mem_gb)
        check_setting(
            is_integer(self.signal_delay_s) and self.signal_delay_s >= 0,
            "signal_delay_s",
            "must be an integer >= 0",
            self.signal_delay_s,
        )
        for name in ("partition", "account"):
            value = getattr(self, name)
            check_setting(
                value is None or (isinstance(value, str) and value.strip()), name, "must be a name", value
            )

    def task_count(self, fractures: int) -> int:
        """Array tasks for ``fractures`` missing fractures."""
        return max(1, min(self.tasks or MAX_DEFAULT_TASKS, fractures))

    @property
    def memory(self) -> str:
        """``mem_gb`` as sbatch's ``--mem`` (whole megabytes)."""
        return f"{max(1, math.ceil(self.mem_gb * 1024))}M"

    def sbatch_options(self, tasks: int) -> list[str]:
        """The options of the array's ``sbatch`` that the cluster may refuse: partition, account, time, CPUs,
        memory and the array's size."""
        options = [
            f"--time={self.timeout_min}",
            f"--cpus-per-task={self.cpus_per_task}",
            f"--mem={self.memory}",
            f"--array=0-{tasks - 1}%{min(tasks, self.array_parallelism)}",
        ]
        options += [
            f"--{name}={getattr(self, name)}" for name in ("partition", "account") if getattr(self, name)
        ]
        return options


class GenerationTask(submitit.helpers.Checkpointable):
    """One array task: makes the fractures ``indices`` of ``config`` that have no part yet, each written as its part
    as soon as it is done (:func:`~flowlearn.reference.generate.make_parts`), with ``threads`` OpenMP threads.

    Checkpointable: warned of its time limit or preempted, it requeues itself as it is, and the requeued task skips
    the parts written meanwhile. Returns the indices it made in its last run.
    """

    def __init__(self, config: DatasetConfig, path: str, indices: list[int], threads: int) -> None:
        self.config = config
        self.path = path
        self.indices = list(indices)
        self.threads = threads

    def missing(self) -> list[int]:
        """This task's fractures that have no part yet."""
        parts = parts_folder(self.path)
        return [i for i in self.indices if not part_path(parts, i).exists()]

    def __call__(self) -> list[int]:
        todo = self.missing()
        names = ", ".join(fracture_name(i) for i in todo)
        print(
            f"making {len(todo)} of this task's {len(self.indices)} fractures: {names or 'none'}", flush=True
        )
        config = self.config
        if config.lbm.threads is None:
            # The machine's core count is the node's, not this task's share of it.
            config = replace(config, lbm=replace(config.lbm, threads=self.threads))
        start = time.perf_counter()
        make_parts(config, self.path, todo, processes=1, progress=False)
        print(f"made {len(todo)} fractures in {time.perf_counter() - start:.1f} s", flush=True)
        return todo


class ArrayJob(Protocol):
    """What a job array makes: fractures by index, each written by a task as its part file
    (:func:`~flowlearn.reference.generate.part_path` of the parts folder of ``path``), then merged into ``path``.

    Attributes:
        name: the array's SLURM job name.
        path: the file the job writes.
        count: the fractures in all (no more tasks are submitted than there are).
    """

    name: str
    path: str

    @property
    def count(self) -> int: ...

    def prepare(self) -> list[int]:
        """Check the inputs and make the parts folder, with what a continuation must match; the indices of the
        fractures still to make."""

    def task(self, indices: list[int], threads: int) -> submitit.helpers.Checkpointable:
        """The array task that makes the fractures ``indices`` missing from the parts folder, on ``threads`` cores
        (its CPUs), unless the job's settings fix its threads."""

    def merge(self, computed: int, seconds: float) -> dict:
        """Write ``path`` from the parts and remove the folder; the summary printed. ``computed``: the fractures
        missing when the command started; ``seconds``: its time so far.

        Raises:
            ProblemError: naming the fractures that have no part yet.
        """


@dataclass(frozen=True)
class Generation:
    """The :class:`ArrayJob` of ``flowlearn generate --slurm``: the fractures of ``config`` into ``path``."""

    config: DatasetConfig
    path: str
    name: str = "flowlearn-generate"

    @property
    def count(self) -> int:
        return self.config.count

    def prepare(self) -> list[int]:
        return prepare_parts(self.config, self.path)

    def task(self, indices: list[int], threads: int) -> GenerationTask:
        return GenerationTask(self.config, os.fspath(Path(self.path).absolute()), indices, threads)

    def merge(self, computed: int, seconds: float) -> dict:
        fractures = merge_parts(self.config, self.path)
        return summarize_generation(self.path, fractures, computed, seconds)


class ReferenceTask(submitit.helpers.Checkpointable):
    """One array task of :class:`References`: the references of the fractures ``indices`` (in ``source``'s order)
    that have no part yet, each written as its part as soon as it is done (checkpointable as
    :class:`GenerationTask` is). Returns the indices it computed in its last run."""

    def __init__(self, source: str, path: str, indices: list[int], settings: LBMSettings) -> None:
        self.source = source
        self.path = path
        self.indices = list(indices)
        self.settings = settings

    def __call__(self) -> list[int]:
        parts = parts_folder(self.path)
        todo = [i for i in self.indices if not part_path(parts, i).exists()]
        print(f"computing {len(todo)} of this task's {len(self.indices)} references", flush=True)
        fractures = read_fractures(self.source)
        for index in todo:
            referenced = reference_fracture(fractures[index], self.settings, progress=False)
            write_fractures(part_path(parts, index), [referenced])
        return todo


@dataclass(frozen=True)
class References:
    """The :class:`ArrayJob` of ``flowlearn reference --slurm``: the references of the fractures of ``source`` into
    ``path``, with ``settings``. A fracture of an earlier ``path`` computed from the same geometry and settings is
    kept, not submitted, as :func:`~flowlearn.reference.references.reference_file` keeps it; a part of another
    geometry or settings (a changed input) is removed and computed again."""

    source: str
    path: str
    settings: LBMSettings
    name: str = "flowlearn-reference"

    @property
    def count(self) -> int:
        return len(list_fractures(self.source))

    def prepare(self) -> list[int]:
        check_not_input(self.path, [self.source], "the input", "output")
        fractures = checked_fractures(self.source, self.settings)
        kept = done_before(self.path, fractures, self.settings)
        parts = parts_folder(self.path)
        parts.mkdir(parents=True, exist_ok=True)
        todo = []
        for index, fracture in enumerate(fractures):
            part = part_path(parts, index)
            if part.exists() and not done_before(part, [fracture], self.settings):
                part.unlink()
            if fracture.name not in kept and not part.exists():
                todo.append(index)
        return todo

    def task(self, indices: list[int], threads: int) -> ReferenceTask:
        # The machine's core count is the node's, not this task's share of it.
        settings = replace(self.settings, threads=self.settings.threads or threads)
        absolute = os.fspath(Path(self.path).absolute())
        return ReferenceTask(os.fspath(Path(self.source).absolute()), absolute, indices, settings)

    def merge(self, computed: int, seconds: float) -> dict:
        fractures = read_fractures(self.source)
        kept = done_before(self.path, fractures, self.settings)
        parts = parts_folder(self.path)
        done, missing = [], []
        for index, fracture in enumerate(fractures):
            part = part_path(parts, index)
            if fracture.name in kept:
                done.append(kept[fracture.name])
            elif part.exists():
                done += read_fractures(part)
            else:
                missing.append(fracture.name)
        if missing:
            raise ProblemError(
                f"{parts}: the references of {len(missing)} of {len(fractures)} fractures are not finished "
                f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); rerun the same command to "
                "compute them"
            )
        write_fractures(self.path, done, attrs=file_attributes(self.source, self.settings))
        shutil.rmtree(parts)
        return {
            "path": self.path,
            "fractures": len(fractures),
            "computed_now": computed,
            "kept": len(kept),
            "seconds": seconds,
        }


@dataclass(frozen=True)
class ArrayRecord:
    """A submitted array, as ``array.json`` keeps it: the SLURM job id of each task and the fractures it makes.

    Attributes:
        jobs: SLURM job id of each task (``<array id>_<task>``, or the job id of a lone task).
        indices: the fractures of each task.
        folder: submitit's folder: the tasks' pickles, results and logs.
    """

    jobs: tuple[str, ...]
    indices: tuple[tuple[int, ...], ...]
    folder: str

    @property
    def array_id(self) -> str:
        return self.jobs[0].split("_")[0]

    def paths(self, task: int) -> JobPaths:
        return JobPaths(self.folder, job_id=self.jobs[task], task_id=0)

    def log(self, task: int) -> Path:
        return self.paths(task).stderr

    def write(self, path: Path) -> None:
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls, path: Path) -> ArrayRecord | None:
        """The record at ``path``; None when there is none (or one that cannot be read)."""
        try:
            data = json.loads(path.read_text())
            return cls(tuple(data["jobs"]), tuple(tuple(i) for i in data["indices"]), data["folder"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


def check_cluster(option: str = "--slurm") -> None:
    """Refuse (:class:`~flowlearn.errors.UnavailableError`, one line that starts with ``option``, what asked for
    SLURM) a machine from which no job can be submitted: SLURM's client commands are not on ``PATH``,
    ``SLURM_CONF`` names no file, or no controller answers ``scontrol ping``."""
    missing = [name for name in CLIENTS if shutil.which(name) is None]
    if missing:
        raise UnavailableError(
            f"{option} needs SLURM's client commands on PATH, and {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not there: run on a login node of the cluster, or install "
            "them (apt-get install slurm-client, with the cluster's slurm.conf and munge key)"
        )
    conf = os.environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():
        raise UnavailableError(
            f"{option}: SLURM_CONF={conf} is no file; point it at the cluster's slurm.conf"
        )
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        answer = "no answer within 60 s"
    else:
        if ping.returncode == 0:
            return
        lines = [line.strip() for line in (ping.stderr + ping.stdout).splitlines() if line.strip()]
        fatal = [line for line in lines if "fatal" in line]
        answer = (fatal or lines or [f"exit status {ping.returncode}"])[0]
    raise UnavailableError(
        f"{option}: no SLURM controller answers `scontrol ping` ({answer}): set SLURM_CONF to the cluster's "
        f"slurm.conf{f' (now {conf})' if conf else ''}, or check that slurmctld is running"
    )


def check_submission(settings: SlurmSettings, tasks: int, name: str) -> None:
    """Refuse (:class:`~flowlearn.errors.UnavailableError`, one line) an array of ``tasks`` tasks named ``name`` that the
    cluster would not accept, asking it with ``sbatch --test-only``: an unknown partition or account, a time limit,
    CPUs or memory beyond what its nodes or partition allow."""
    options = settings.sbatch_options(tasks)
    command = ["sbatch", "--test-only", f"--job-name={name}", *options, "--wrap=true"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise UnavailableError("--slurm: sbatch --test-only did not answer within 120 s") from None
    if result.returncode:
        errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
        reason = (errors or result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        raise UnavailableError(
            f"--slurm: sbatch refuses the job array ({' '.join(options)}): {reason.strip()}"
        )


def generate_on_slurm(
    config: DatasetConfig,
    path: str | os.PathLike,
    settings: SlurmSettings,
    wait: bool = True,
    progress: bool = True,
) -> dict:
    """Generate ``config`` into ``path`` as a SLURM job array (see the module's description).

    Returns :func:`~flowlearn.reference.generate.summarize_generation`'s summary (``computed_now``: the fractures missing
    when this call started); with ``wait=False``, what :func:`run_array` returns.
    """
    return run_array(Generation(config, os.fspath(path)), settings, wait, progress)


def run_array(job: ArrayJob, settings: SlurmSettings, wait: bool = True, progress: bool = True) -> dict:
    """Make the fractures of ``job`` as a SLURM job array and merge them (see the module's description).

    Returns the job's merge summary; with ``wait=False``, once the array is submitted (or found running), what it
    makes: ``{"path", "array", "tasks", "fractures_to_make", "logs"}``.

    Raises:
        UnavailableError: the cluster cannot take the array (see :func:`check_cluster`, :func:`check_submission`);
            nothing is written.
        ProblemError: fractures are missing after the array ended (the tasks that failed are named on stderr, one
            line each, with their log files); rerunning the same command makes them.
    """
    start = time.perf_counter()
    check_cluster()
    parts = parts_folder(job.path)
    folder = parts.absolute() / "slurm"  # absolute: the tasks and a rerun may start elsewhere
    record = ArrayRecord.read(folder / ARRAY_RECORD)
    if record is not None and _running(record):
        # A rerun while the array still runs: wait for it, not submit its fractures again.
        todo = job.prepare()
        _say(
            progress,
            f"waiting for the job array {record.array_id} submitted before ({len(record.jobs)} tasks)",
        )
    else:
        record = None
        # Nothing is written before the cluster accepts the array (at most one task per fracture).
        check_submission(settings, settings.task_count(job.count), job.name)
        todo = job.prepare()
        if todo:
            record = _submit(job, todo, settings, folder)
            _say(
                progress,
                f"submitted the job array {record.array_id}: {len(record.jobs)} tasks for {len(todo)} fractures; "
                f"logs in {folder}",
            )
    if record is not None and not wait:
        return {
            "path": job.path,
            "array": record.array_id,
            "tasks": len(record.jobs),
            "fractures_to_make": len(todo),
            "logs": record.folder,
        }
    if record is not None:
        try:
            failures = _wait(record, parts, todo, progress)
        except KeyboardInterrupt:
            print(
                f"the job array {record.array_id} runs on: rerun the same command to wait for it again, or "
                f"`scancel {record.array_id}`",
                file=sys.stderr,
            )
            raise
        for line in failures:
            print(line, file=sys.stderr)
    return job.merge(len(todo), time.perf_counter() - start)


def _submit(job: ArrayJob, todo: list[int], settings: SlurmSettings, folder: Path) -> ArrayRecord:
    """Submit the fractures ``todo`` of ``job`` as one array (tasks take every n-th fracture) and record it."""
    tasks = settings.task_count(len(todo))
    shares = [todo[t::tasks] for t in range(tasks)]
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=REQUEUES)
    executor.update_parameters(
        name=job.name,
        timeout_min=settings.timeout_min,
        cpus_per_task=settings.cpus_per_task,
        tasks_per_node=1,
        slurm_additional_parameters={"mem": settings.memory},
        slurm_partition=settings.partition,
        slurm_account=settings.account,
        slurm_array_parallelism=settings.array_parallelism,
        slurm_signal_delay_s=min(settings.signal_delay_s, settings.timeout_min * 30),
        slurm_setup=list(settings.setup),
    )
    calls = [job.task(share, settings.cpus_per_task) for share in shares]
    try:
        jobs = executor.submit_array(calls)
    except Exception as error:  # sbatch's own refusal, after --test-only accepted the array
        raise UnavailableError(
            f"--slurm: submitting the job array failed: {_first_line(str(error))}"
        ) from error
    record = ArrayRecord(
        tuple(job.job_id for job in jobs), tuple(tuple(s) for s in shares), os.fspath(folder)
    )
    record.write(folder / ARRAY_RECORD)
    return record


def _wait(record: ArrayRecord, parts: Path, todo: list[int], progress: bool) -> list[str]:
    """Wait until every task of ``record`` has ended; a bar counts the parts of ``todo`` written meanwhile.
    Returns one line per task that failed or ended without a result, naming its log file."""
    running = set(range(len(record.jobs)))
    failures: dict[int, str] = {}
    unseen = dict.fromkeys(running, 0)
    started = time.monotonic()
    next_look = started
    shown = -1  # tasks running, as the bar shows them
    bar = tqdm(total=len(todo), desc="fractures", disable=not progress)
    with bar:
        while running:
            bar.update(sum(part_path(parts, i).exists() for i in todo) - bar.n)
            for task in sorted(running):
                result = record.paths(task).result_pickle
                if result.exists():
                    running.discard(task)
                    outcome, value = _read_result(result)
                    if outcome != "success":
                        failures[task] = f"failed: {_last_line(str(value))}"
            now = time.monotonic()
            if running and now >= next_look:
                # Ask the controller less often as the wait grows: every 2 s at first, every 30 s after 10 minutes.
                next_look = now + min(30.0, 2.0 + (now - started) / 20)
                states = _queued(record.array_id)
                for task in sorted(running) if states is not None else ():
                    state = states.get(record.jobs[task])
                    unseen[task] = 0 if state is not None and state not in ENDED_STATES else unseen[task] + 1
                    # Twice in a row, and still no result: its result would have been written before it ended.
                    if unseen[task] >= 2 and not record.paths(task).result_pickle.exists():
                        running.discard(task)
                        made = sum(part_path(parts, i).exists() for i in record.indices[task])
                        failures[task] = (
                            f"ended {state or 'early'} without a result, with {made} of its "
                            f"{len(record.indices[task])} fractures made"
                        )
            if len(running) != shown:
                shown = len(running)
                bar.set_postfix_str(f"{len(record.jobs) - shown}/{len(record.jobs)} tasks ended")
            if running:
                time.sleep(1.0)
        bar.update(sum(part_path(parts, i).exists() for i in todo) - bar.n)
    return [
        f"array task {task} (SLURM job {record.jobs[task]}) {what}; log: {record.log(task)}"
        for task, what in sorted(failures.items())
    ]


def _running(record: ArrayRecord) -> bool:
    """Whether a task of ``record`` is still queued or running."""
    states = _queued(record.array_id) or {}
    return any(states.get(job) not in (None, *ENDED_STATES) for job in record.jobs)


def _say(progress: bool, line: str) -> None:
    if progress:
        print(line, file=sys.stderr, flush=True)


def _queued(array_id: str) -> dict[str, str] | None:
    """The state of every task of the job (array) ``array_id`` that the controller still knows (``squeue``; it
    forgets ended jobs after a few minutes); None when it cannot be asked now."""
    command = ["squeue", "--noheader", "--array", "--states=all", f"--jobs={array_id}", "--format=%i %T"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None
    if result.returncode:
        # A job the controller has forgotten: ended long ago.
        return {} if "Invalid job id" in result.stderr else None
    return dict(line.split(maxsplit=1) for line in result.stdout.splitlines() if len(line.split()) == 2)


def _read_result(path: Path) -> tuple[str, object]:
    """submitit's (outcome, value) of a task that has ended: ("success", indices) or ("error", traceback)."""
    for _ in range(5):
        try:
            return pickle_load(path)
        except EOFError:  # written elsewhere, not all here yet
            time.sleep(1.0)
    return "error", f"{path}: unreadable result"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _last_line(text: str) -> str:
    """The exception of a traceback, as ``Name: message`` (its module left out)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "unknown error"
    name, colon, message = last.partition(":")
    return f"{name.rpartition('.')[2]}{colon}{message}" if colon and " " not in name else last
