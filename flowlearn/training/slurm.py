"""Sweeps on a SLURM cluster: the ``hydra/launcher=slurm`` launcher, failed runs, and runs requeued mid-training.

:class:`SlurmLauncher` is hydra-submitit-launcher's SLURM launcher (one job, or job array task, per run) with two
changes:

- A run that fails leaves ``error.txt`` in its run directory (its one-line error and the job's log file), which
  ``flowlearn report`` shows, and its job still ends with a result, so the sweep's other runs finish and are
  collected; the sweep then names every failed run and exits with the first one's error.
- In a job with several tasks (DDP, ``tasks_per_node`` > 1) only rank 0 writes Hydra's files (``.hydra/``, the
  job's log file); the other ranks write nothing.

Local sweeps record failed runs the same way: :class:`LocalLauncher` (``hydra/launcher=local``, one subprocess per
run through submitit) and :class:`SequentialLauncher` (``hydra/launcher=sequential``, every run in this process one
after the other: the default of ``python train.py -m``), where Hydra's own launchers had let a user error end the
sweep (``UncompletedJobError``, or the exit of the whole process) without a record of which run failed.

A job that SLURM warns before its time limit (``SIGUSR2``) checkpoints at the next epoch boundary, requeues itself
and resumes in the same run directory: see :mod:`flowlearn.training.requeue`.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from omegaconf import DictConfig, OmegaConf

from flowlearn.errors import UnavailableError, UserErrorExit
from flowlearn.reference.cluster import check_cluster
from flowlearn.training.failures import record_error

log = logging.getLogger(__name__)


class _RecordFailure:
    """The task function of a job, which writes ``error.txt`` into the run directory when the run fails.

    flowlearn exits with :class:`~flowlearn.errors.UserErrorExit` on a user error; that exit becomes Hydra's
    ``CompactHydraException`` (printed as one line, without a traceback), so Hydra returns a failed result instead of
    the job dying without one (submitit then knows the job ended even on a cluster without accounting, where
    ``sacct`` cannot tell it; the sequential launcher goes on with the next run).
    """

    def __init__(self, task_function: TaskFunction) -> None:
        self.task_function = task_function

    def __call__(self, cfg: DictConfig) -> Any:
        run_dir = Path(HydraConfig.get().runtime.output_dir)  # the run clears an earlier attempt's record
        try:
            return self.task_function(cfg)
        except SystemExit as stop:
            # No code: Lightning's SIGTERMException (SLURM stops a job it requeues or cancels) or flowlearn.training.requeue
            # after requeueing the job; -1: submitit's preemption handler, after requeueing. No result: it runs again.
            if stop.code in (None, 0, -1):
                raise
            if isinstance(stop, UserErrorExit):
                message = stop.message  # already printed, into the job's log, and recorded by the run
            else:
                message = stop.code if isinstance(stop.code, str) else f"exited with status {stop.code}"
                print(message, file=sys.stderr)
                record_error(run_dir, message)
            # The sweep reports it as a user error of its own, "error: " and all.
            raise CompactHydraException(message.removeprefix("error: ")) from None
        except Exception as error:
            traceback.print_exc()  # into the job's log; the sweep gets the exception itself
            record_error(run_dir, f"{type(error).__name__}: {error}")
            raise


class _RecordsFailures:
    """A Hydra launcher (mixed in before it) whose runs record their failures (:class:`_RecordFailure`) and whose
    sweep logs one line per failed run."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=_RecordFailure(task_function), config=config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run every job and log one line per failed run; Hydra then raises the first failed run's error."""
        results = super().launch(job_overrides, initial_job_idx)
        failed = [r for r in results if r.status is JobStatus.FAILED]
        for result in failed:
            log.error("failed run %s: %s", " ".join(result.overrides or []), result._return_value)
        if failed:
            log.error("%d of %d run(s) failed; the other runs finished", len(failed), len(results))
        return [_FailedRun.of(r) if r.status is JobStatus.FAILED else r for r in results]


@dataclass
class _FailedRun(JobReturn):
    """A failed run's result whose error the sweep raises without Hydra's own line ("Error executing job with
    overrides: [...]") before it: the launcher has already named every failed run, and the error says the rest."""

    @classmethod
    def of(cls, result: JobReturn) -> _FailedRun:
        return cls(**{f.name: getattr(result, f.name) for f in fields(result)})

    @property
    def return_value(self) -> Any:
        raise self._return_value


class SequentialLauncher(_RecordsFailures, BasicLauncher):
    """Hydra's basic launcher (every run in this process, one after the other), with failed runs recorded.
    Configured by ``configs/hydra/launcher/sequential.yaml``, the default of ``python train.py -m``."""


class LocalLauncher(_RecordsFailures, submitit_launcher.LocalLauncher):
    """hydra-submitit-launcher's local launcher (one subprocess per run), with failed runs recorded. Configured by
    ``configs/hydra/launcher/local.yaml``."""


class SlurmLauncher(_RecordsFailures, submitit_launcher.SlurmLauncher):
    """hydra-submitit-launcher's SLURM launcher, with failed runs recorded and rank-0 outputs (see the module
    docstring). Configured by ``configs/hydra/launcher/slurm.yaml``."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Refuse, in one line and before the sweep writes anything, a machine from which no job can be submitted
        (:func:`~flowlearn.reference.cluster.check_cluster`)."""
        try:
            check_cluster("hydra/launcher=slurm")
        except UnavailableError as error:
            raise CompactHydraException(f"{error}. Nothing was submitted.") from None
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def __call__(
        self,
        sweep_overrides: list[str],
        job_dir_key: str,
        job_num: int,
        job_id: str,
        singleton_state: dict,
    ) -> JobReturn:
        import submitit

        if submitit.JobEnvironment().global_rank > 0:
            # Rank 0 writes the run's config and log; the other ranks of a multi-task job would only repeat it.
            sweep_overrides = [*sweep_overrides, "hydra.output_subdir=null", "hydra/job_logging=stdout"]
        return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit one job per run and wait for all of them; log one line per failed run.

        Raises:
            CompactHydraException: before anything is submitted, when a run's Lightning processes would not match the
                job's SLURM tasks (Lightning would fail in every task of that job).
        """
        self._check_tasks(job_overrides, initial_job_idx)
        return super().launch(job_overrides, initial_job_idx)

    def _check_tasks(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> None:
        """Lightning under SLURM runs one process per SLURM task: ``trainer.devices`` must equal ``tasks_per_node``
        and ``trainer.num_nodes`` must equal ``nodes``."""
        assert self.hydra_context is not None and self.config is not None
        problems = []
        for idx, overrides in enumerate(job_overrides, initial_job_idx):
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            for key, option in (("trainer.devices", "tasks_per_node"), ("trainer.num_nodes", "nodes")):
                value, tasks = OmegaConf.select(cfg, key, default=1), self.params[option]
                # "auto" or a list of device indices: Lightning resolves them; only a count can be checked here.
                if isinstance(value, int) and value != tasks:
                    problems.append(f"run #{idx} has {key}={value} but hydra.launcher.{option}={tasks}")
        if problems:
            raise CompactHydraException(
                "under SLURM Lightning runs one process per task (tasks_per_node per node, one per device): "
                + "; ".join(problems)
                + ". Nothing was submitted."
            )
