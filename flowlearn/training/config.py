"""Checks of a training config that Hydra's own schema cannot express: value ranges and files that must exist.

Each problem is reported as one line that names the option, e.g. ``optimizer.lr must be a finite number > 0, got -0.001``.
Misspelt keys, unknown group options and malformed overrides are caught by Hydra itself, which lists the valid
choices; :func:`hydra_errors_as_one_line` turns its message into one line too, and :class:`OutputDirCheck` stops a
run whose output directory cannot be written before Hydra tries to write there. Every such mistake exits with
:data:`flowlearn.errors.USER_ERROR_STATUS` (2).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from hydra.errors import (
    CompactHydraException,
    ConfigCompositionException,
    OverrideParseException,
    SearchPathException,
)
from hydra.experimental.callback import Callback
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from flowlearn.checks import check_distinct_names, is_integer, is_number
from flowlearn.data.inputs import check_input_names
from flowlearn.errors import ConfigError, UserErrorExit
from flowlearn.metrics import PRESSURE_LOSSES, monitorable_columns
from flowlearn.threads import usable_cores


def exit_with_user_error(error: BaseException) -> None:
    """Print ``error`` as one ``error: ...`` line on stderr and exit with status 2 (:class:`UserErrorExit`)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = f"error: {' '.join(lines)}"
    print(message, file=sys.stderr)
    raise UserErrorExit(message)


@contextlib.contextmanager
def hydra_errors_as_one_line() -> Iterator[None]:
    """Around a ``@hydra.main`` function: Hydra's own config errors become one line and exit status 2.

    Hydra prints these itself, over several lines, and exits 1; with ``HYDRA_FULL_ERROR=1`` it raises them
    instead, so that they can be reported here. Other failures then keep their full traceback.
    """
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        yield
    except OverrideParseException as error:
        exit_with_user_error(ConfigError(f"override {error.override!r}: {error.message}"))
    except (ConfigCompositionException, SearchPathException) as error:
        # The search path Hydra appends to an unknown option names its own folders, not the user's mistake.
        exit_with_user_error(ConfigError(str(error).split("Config search path:")[0]))
    except ValueError as error:
        # Hydra's defaults list takes no null for a group (logger=null); its message names neither the group nor
        # the way out. Other ValueErrors are bugs and keep their traceback.
        if not str(error).startswith("Config group override must be a string or a list"):
            raise
        exit_with_user_error(
            ConfigError(
                f"a config group set to null ({error}): every group of a run needs one of its options "
                f"({', '.join(RUN_GROUPS)}); see configs/<group>/"
            )
        )
    except CompactHydraException as error:
        # Raised without a traceback by design, e.g. by the SLURM launcher for a sweep whose runs failed on a user
        # error (each run's own line is in its log and error.txt).
        exit_with_user_error(ConfigError(str(error)))


class OutputDirCheck(Callback):
    """Hydra callback: stop with one line when the run (or sweep) directory cannot be created or written.

    Hydra creates the directory and writes ``.hydra/`` into it before the job starts, and a failure there would
    be a traceback.
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _writable_dir("hydra.run.dir", config.hydra.run.dir)
        if OmegaConf.select(config, "ckpt_path") is None:
            _no_earlier_run("hydra.run.dir", Path(config.hydra.run.dir), "*")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _writable_dir("hydra.sweep.dir", config.hydra.sweep.dir)
        _no_earlier_run("hydra.sweep.dir", Path(config.hydra.sweep.dir), "*/*")
        try:
            _check_launcher(config)
        except ConfigError as error:
            exit_with_user_error(error)


def _check_launcher(config: DictConfig) -> None:
    """The sizes a submitit launcher (hydra/launcher=local or slurm) asks for, before any job is submitted: submitit
    took ``timeout_min=0`` with a 41-line traceback, and a local sweep's ``cpus_per_task`` above the cores."""
    for key in ("timeout_min", "tasks_per_node", "nodes", "array_parallelism"):
        _positive(config, f"hydra.launcher.{key}", integer=True)
    _integer(config, "hydra.launcher.gpus_per_node", low=0)
    _integer(config, "hydra.launcher.signal_delay_s", low=0)
    _number(config, "hydra.launcher.mem_gb", 0)
    local = str(OmegaConf.select(config, "hydra.launcher._target_")).endswith(".LocalLauncher")
    _integer(config, "hydra.launcher.cpus_per_task", high=usable_cores() if local else math.inf)


# What a run leaves in its folder once it has trained: its metrics, checkpoints and predictions.
RUN_OUTPUTS = ("metrics.csv", "checkpoints/*.ckpt", "predictions.h5")


def _no_earlier_run(key: str, folder: Path, runs: str) -> None:
    """Stop with one line where ``folder`` already holds the outputs of a run (``runs``: ``*`` for the folder
    itself, ``*/*`` for a sweep's run folders), before Hydra writes the new run's ``.hydra/`` over the old one's: a
    new run would overwrite some files and keep others (its checkpoints named ``last-v1.ckpt`` beside the old
    ``last.ckpt``), one run's files mixed with another's. A requeued SLURM job, which runs its run again, passes."""
    if os.environ.get("SLURM_RESTART_COUNT", "0") != "0":
        return
    found = sorted(path for pattern in RUN_OUTPUTS for path in folder.glob(f"{runs[:-1]}{pattern}"))
    if found:
        last = folder / "checkpoints" / "last.ckpt"
        resume = f", or resume it with ckpt_path={last}" if runs == "*" and last.is_file() else ""
        exit_with_user_error(
            ConfigError(
                f"{key}: {folder} already holds a run's outputs ({found[0].relative_to(folder)}"
                f"{f' and {len(found) - 1} more' if len(found) > 1 else ''}): give a new folder{resume}"
            )
        )


def _writable_dir(key: str, directory: str | None) -> None:
    if directory is None or not str(directory).strip():
        # An unset shell variable (hydra.run.dir=$OUT): the outputs would land in the current directory.
        exit_with_user_error(ConfigError(f"{key} is empty: give a folder for the outputs"))
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        exit_with_user_error(ConfigError(f"{key}: cannot create {path}: {err.strerror or err}"))
    # access() also reports a read-only file system, which permission bits do not show.
    if not os.access(path, os.W_OK | os.X_OK):
        exit_with_user_error(ConfigError(f"{key}: cannot write into {path}"))


# The loosest solver tolerance a training run accepts: the relative accuracy of the reference pressures themselves
# (an LBM run stops when the velocity changes by less than 1e-6 over its check interval).
LOOSEST_SOLVER_TOLERANCE = 1e-6
# The widest smoothing of the mid-surface, in mean apertures: beyond it every map is flat, and the Gaussian's
# weights (4 standard deviations each side) grow with it.
MAX_SLOPE_SMOOTHING = 100.0
# The largest initial w of law=exponent, K = Ap^(2w): Ap^20 already spans 20 decades for apertures a decade apart,
# where the cubic law's exponent is 3 (1e300 overflowed log K with a message that named no key).
MAX_INITIAL_EXPONENT = 10.0
# The largest seed numpy's generators take.
MAX_SEED = 2**32 - 1
# Gauss–Newton's inner CG: each iteration costs about two solves (one JVP, one VJP), so 1,000 are minutes a step at
# 256x260; and its relative residual cannot go below float64's round-off.
MAX_CG_ITERATIONS = 1000
MIN_CG_TOLERANCE = 1e-15
# Beyond these the loss's terms overflow or underflow float64 (an exponent of 1e300 gives NaN sources): the
# Levenberg–Marquardt damping relative to the curvature, the flow-rate term's weight against the pressure term's
# (both of order 1e-4..1), and the heads (any unit: Pa and metres of water alike stay far below).
MAX_DAMPING = 1e10
MAX_FLOW_RATE_WEIGHT = 1e6
MAX_HEAD = 1e12


# ``trainer.precision``, Lightning's option (with its aliases 64 and 32), sets the dtype of the correction model: its
# weights and its arithmetic. The law, the pressure solve, the loss and the metrics stay float64 whatever it says:
# the solve's conditioning and its exact adjoint need it. Lightning's mixed and 16-bit precisions are refused.
MODEL_PRECISIONS = {"64-true": "float64", "32-true": "float32"}


def model_precision(cfg: DictConfig) -> str:
    """The correction model's dtype name (a key of ``torch``) for the run config's ``trainer.precision`` (float64
    where it is unset); raises :class:`ConfigError` for a value outside :data:`MODEL_PRECISIONS`."""
    precision = OmegaConf.select(cfg, "trainer.precision", default="64-true")
    name = f"{precision}-true" if str(precision) in ("64", "32") else str(precision)
    if name not in MODEL_PRECISIONS:
        raise ConfigError(
            f"trainer.precision must be one of {list(MODEL_PRECISIONS)} (the correction model in float64 or "
            f"float32; the law, the solve and the loss are float64 either way), got {precision!r}"
        )
    return MODEL_PRECISIONS[name]


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _number(cfg: DictConfig, key: str, low: float, strict: bool = True, high: float = math.inf) -> None:
    """``key``, when set, is a finite number above ``low`` (or equal, unless ``strict``) and below ``high``."""
    value = OmegaConf.select(cfg, key)
    if value is None:
        return
    above = (value > low if strict else value >= low) if is_number(value) else False
    bound = f"a finite number > {low:g}" if strict else f"a finite number >= {low:g}"
    if high < math.inf:
        bound = f"a number in ({low:g}, {high:g})" if strict else f"a number in [{low:g}, {high:g})"
    _check(above and value < high, f"{key} must be {bound}, got {value!r}")


def _integer(cfg: DictConfig, key: str, low: int = 1, high: float = math.inf) -> None:
    """``key``, when set, is an integer in [``low``, ``high``]."""
    value = OmegaConf.select(cfg, key)
    if value is None:
        return
    what = "a positive integer" if low == 1 else f"an integer >= {low}"
    if high < math.inf:
        what = f"an integer in [{low}, {high:.0f}]"
    _check(is_integer(value) and low <= value <= high, f"{key} must be {what}, got {value!r}")


def _boolean(cfg: DictConfig, key: str, *others: str) -> None:
    """``key``, when set, is true or false (or one of ``others``)."""
    value = OmegaConf.select(cfg, key)
    allowed = " or ".join(["true", "false", *others])
    _check(
        value is None or isinstance(value, bool) or value in others, f"{key} must be {allowed}, got {value!r}"
    )


def _batches_or_fraction(cfg: DictConfig, key: str, least: int, why: str = "") -> None:
    """``key``, when set, counts batches (an integer >= ``least``) or is a fraction of them in (0, 1], as
    Lightning's limits and intervals do."""
    value = OmegaConf.select(cfg, key)
    count = "a positive integer" if least == 1 else f"an integer >= {least}"
    _check(
        value is None
        or (is_integer(value) and value >= least)
        or (is_number(value) and not is_integer(value) and 0 < value <= 1),
        f"{key} must be {count} (batches) or a fraction in (0, 1]{why}, got {value!r}",
    )


def _positive(cfg: DictConfig, key: str, integer: bool = False) -> None:
    if integer:
        _integer(cfg, key)
    else:
        value = OmegaConf.select(cfg, key)
        _check(
            value is None or (is_number(value) and value > 0),
            f"{key} must be a finite number > 0, got {value!r}",
        )


def _duration_seconds(value: object) -> float:
    """Seconds of a Lightning ``max_time``: "DD:HH:MM:SS" or a mapping of timedelta's units; 0 where it is
    neither."""
    if isinstance(value, DictConfig):
        units = {
            "weeks": 604800,
            "days": 86400,
            "hours": 3600,
            "minutes": 60,
            "seconds": 1,
            "milliseconds": 1e-3,
        }
        items = OmegaConf.to_container(value).items()
        if not items or any(unit not in units or not is_number(amount) for unit, amount in items):
            return 0.0
        return sum(units[unit] * amount for unit, amount in items)
    match = re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", str(value))
    if match is None:
        return 0.0
    days, hours, minutes, seconds = map(int, match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _file(key: str, value: object, what: str) -> None:
    """``value`` names an existing file (relative paths from where ``train.py`` was started)."""
    _check(bool(str(value).strip()), f"{key} is empty: give a {what}")
    path = Path(to_absolute_path(str(value)))
    _check(not path.is_dir(), f"{key}: {value} is a directory, not a {what}")
    _check(path.is_file(), f"{key}: {what} not found: {value}")


# The switches (true or false) of torch's optimizers, of configs/optimizer/adam.yaml and sgd.yaml; foreach and
# fused also take null (torch's choice).
OPTIMIZER_SWITCHES = (
    "amsgrad",
    "nesterov",
    "maximize",
    "foreach",
    "capturable",
    "differentiable",
    "fused",
    "decoupled_weight_decay",
)


def _check_checkpoint_files(cfg: DictConfig) -> None:
    """The checkpoint callback keeps a checkpoint, and writes it into its ``dirpath``.

    With ``save_top_k=0`` and no ``save_last`` a run ended without any checkpoint, so that it could be neither
    predicted nor resumed. A ``filename`` is a template such as ``best-{epoch:03d}``: a '/' outside its
    fields, or in a field's metric name while Lightning writes the names in (``auto_insert_metric_name``, true
    unless set), is a folder of the path, and '../../name' wrote the best checkpoint outside the run."""
    prefix = "callbacks.model_checkpoint"
    if OmegaConf.select(cfg, prefix) is None:
        return
    top_k = OmegaConf.select(cfg, f"{prefix}.save_top_k", default=1)
    last = OmegaConf.select(cfg, f"{prefix}.save_last")
    _check(
        top_k != 0 or last not in (None, False),
        f"{prefix}.save_top_k=0 with save_last={last} keeps no checkpoint: the run could be neither predicted "
        f"nor resumed; set {prefix}.save_top_k=1 or {prefix}.save_last=true",
    )
    name = OmegaConf.select(cfg, f"{prefix}.filename")
    if name is None:
        return
    named = OmegaConf.select(cfg, f"{prefix}.auto_insert_metric_name", default=True)
    # What Lightning writes besides the values: the text outside the {fields}, and their metric names if it adds
    # them.
    written = re.sub(r"\{([^}:]*)[^}]*\}", lambda field: field[1] if named else "", str(name))
    _check(
        isinstance(name, str) and bool(name.strip()) and "/" not in written and ".." not in written,
        f"{prefix}.filename must be a file name without '/' or '..' (the checkpoints stay in "
        f"{prefix}.dirpath; a metric field such as {{val/mse:.3g}} needs {prefix}.auto_insert_metric_name=false), "
        f"got {name!r}",
    )


# The config groups a run is built from: each must be chosen (configs/<group>/), not removed or set to null.
RUN_GROUPS = ("data", "model", "law", "solver", "optimizer", "trainer", "logger", "callbacks")
# Keys whose default is a value, for which null means nothing (the checks below take an absent key as unset).
NOT_NULL = (
    "seed",
    "data.seed",
    "data.batch_size",
    "data.fractions",
    "data.num_workers",
    "model.inputs",
    "model.exact_on_plates",
    "loss.pressure",
    "solver.reuse",
    "trainer.max_epochs",
    "trainer.accelerator",
    "trainer.devices",
    "law.initial_exponent",
)
# The keys of the loss section (configs/train.yaml): a misspelt one would be ignored.
LOSS_KEYS = ("flow_rate_weight", "pressure")
_ABSENT = object()


def check_run_groups(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` where a run's config lacks one of :data:`RUN_GROUPS`."""
    for group in RUN_GROUPS:
        _check(
            OmegaConf.select(cfg, group) is not None,
            f"{group}: a run needs one (it was removed or set to null); choose one of configs/{group}/",
        )


def validate_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` for the first impossible value in ``cfg`` (a whole run's config, or a part)."""
    for key in NOT_NULL:
        _check(
            OmegaConf.select(cfg, key, default=_ABSENT) is not None,
            f"{key} is null: give it a value (configs/ has its default)",
        )
    unknown = sorted(set(OmegaConf.select(cfg, "loss", default={}) or {}) - set(LOSS_KEYS))
    _check(
        not unknown, f"loss.{unknown[0] if unknown else ''} is not a loss setting: use {', '.join(LOSS_KEYS)}"
    )
    _integer(cfg, "seed", low=0, high=MAX_SEED)
    _integer(cfg, "data.seed", low=0, high=MAX_SEED)
    # data
    _positive(cfg, "data.batch_size", integer=True)
    _positive(cfg, "data.max_fractures", integer=True)
    # Each worker is a process: more than the cores only wait on each other (1,000 hung the machine).
    _integer(cfg, "data.num_workers", low=0, high=usable_cores())
    _number(cfg, "data.slope_smoothing", 0, strict=False, high=MAX_SLOPE_SMOOTHING)
    fractions = OmegaConf.select(cfg, "data.fractions")
    if fractions is not None:
        values = list(fractions) if OmegaConf.is_list(fractions) else [fractions]
        _check(
            len(values) == 3 and all(is_number(v) and v >= 0 for v in values) and values[0] > 0,
            f"data.fractions must be three non-negative numbers (train, val, test) with train > 0, got {values}",
        )
        _check(abs(sum(values) - 1) < 1e-9, f"data.fractions must sum to 1, got {values} (sum {sum(values)})")
    heads = OmegaConf.select(cfg, "data.heads")
    if heads is not None:
        values = list(heads) if OmegaConf.is_list(heads) else [heads]
        _check(
            len(values) == 2
            and all(is_number(v) and abs(v) <= MAX_HEAD for v in values)
            and values[0] != values[1],
            f"data.heads must be two different numbers (inlet, outlet) in [-{MAX_HEAD:g}, {MAX_HEAD:g}] or null, "
            f"got {values}",
        )
    path = OmegaConf.select(cfg, "data.path")
    _check(path is not None, "data.path is not set: give an HDF5 file, e.g. data.path=path/to/fractures.h5")
    paths = list(path) if OmegaConf.is_list(path) else [path]
    _check(bool(paths), "data.path is an empty list: give at least one HDF5 file")
    for p in paths:
        _file("data.path", p, "file")
    check_distinct_names("data.path", paths)
    # model and law
    _positive(cfg, "model.channels", integer=True)
    _positive(cfg, "model.depth", integer=True)
    _positive(cfg, "model.levels", integer=True)
    inputs = OmegaConf.select(cfg, "model.inputs")
    if inputs is not None:
        try:
            check_input_names(list(inputs) if OmegaConf.is_list(inputs) else inputs)
        except ValueError as error:
            raise ConfigError(f"model.inputs {error}") from None
    exact = OmegaConf.select(cfg, "model.exact_on_plates")
    _check(
        exact is None or isinstance(exact, bool),
        f"model.exact_on_plates must be true or false, got {exact!r}",
    )
    kernel = OmegaConf.select(cfg, "model.kernel_size")
    _check(
        kernel is None or (is_integer(kernel) and kernel > 0 and kernel % 2 == 1),
        f"model.kernel_size must be a positive odd integer, got {kernel!r}",
    )
    exponent = OmegaConf.select(cfg, "law.initial_exponent")
    _check(
        exponent is None or (is_number(exponent) and 0 < exponent <= MAX_INITIAL_EXPONENT),
        f"law.initial_exponent must be a number in (0, {MAX_INITIAL_EXPONENT:g}] (the law's exponent is 2·relu(w), "
        f"which has no gradient at w <= 0: training could never move it), got {exponent!r}",
    )
    _number(cfg, "loss.flow_rate_weight", 0, strict=False, high=MAX_FLOW_RATE_WEIGHT)
    pressure = OmegaConf.select(cfg, "loss.pressure")
    _check(
        pressure is None or pressure in PRESSURE_LOSSES,
        f"loss.pressure must be one of {list(PRESSURE_LOSSES)}, got {pressure!r}",
    )
    # solver
    for key in ("solver.rtol", "solver.reltol"):
        _positive(cfg, key)
        tolerance = OmegaConf.select(cfg, key)
        _check(
            tolerance is None or tolerance <= LOOSEST_SOLVER_TOLERANCE,
            f"{key}={tolerance!r} is looser than the reference pressures are accurate (their LBM runs converge to "
            f"{LOOSEST_SOLVER_TOLERANCE:g}): the loss and its gradient would follow the solver's error, not the "
            f"data; use {key} <= {LOOSEST_SOLVER_TOLERANCE:g} (the default is 1e-11)",
        )
    _positive(cfg, "solver.maxiter", integer=True)
    _positive(cfg, "solver.max_iter", integer=True)
    _positive(cfg, "solver.refactor_iterations", integer=True)
    _number(cfg, "solver.max_change", 0, high=1)
    _integer(cfg, "solver.reuse_budget", low=0)
    _boolean(cfg, "solver.reuse")
    _integer(cfg, "solver.multigrid_unknowns", low=0)
    fraction = OmegaConf.select(cfg, "solver.memory_fraction")
    _check(
        fraction is None or (is_number(fraction) and 0 < fraction <= 1),
        f"solver.memory_fraction must be a number in (0, 1], got {fraction!r}",
    )
    # optimizer
    _positive(cfg, "optimizer.lr")
    _number(cfg, "optimizer.momentum", 0, strict=False, high=1)
    _number(cfg, "optimizer.weight_decay", 0, strict=False)
    _number(cfg, "optimizer.damping", 0, high=MAX_DAMPING)
    _integer(cfg, "optimizer.cg_iterations", high=MAX_CG_ITERATIONS)
    _number(cfg, "optimizer.cg_tolerance", MIN_CG_TOLERANCE, strict=False, high=1)
    _positive(cfg, "optimizer.max_trials", integer=True)
    # 1 would leave the gradient out of SGD's momentum buffer after the first step; below 0 scales it up (-5: by
    # 6).
    _number(cfg, "optimizer.dampening", 0, strict=False, high=1)
    # torch takes any value for its switches, and a string such as "no" switches one on.
    for key in OPTIMIZER_SWITCHES:
        _boolean(cfg, f"optimizer.{key}")
    # trainer
    _positive(cfg, "trainer.max_epochs", integer=True)
    _positive(cfg, "trainer.log_every_n_steps", integer=True)
    _positive(cfg, "trainer.check_val_every_n_epoch", integer=True)
    _positive(cfg, "trainer.accumulate_grad_batches", integer=True)
    _integer(cfg, "trainer.min_epochs", low=0)
    least, most = (OmegaConf.select(cfg, f"trainer.{key}") for key in ("min_epochs", "max_epochs"))
    _check(
        not (is_integer(least) and is_integer(most) and least > most),
        f"trainer.min_epochs={least} is more than trainer.max_epochs={most}: the run would stop at "
        f"trainer.max_epochs; raise it, or lower trainer.min_epochs",
    )
    fast = OmegaConf.select(cfg, "trainer.fast_dev_run")
    _check(
        fast in (None, False),
        f"trainer.fast_dev_run={fast} is Lightning's smoke test: it logs nothing and checkpoints nothing, so "
        "the run could be neither reported nor predicted; use trainer.max_epochs=1 "
        "+trainer.limit_train_batches=1",
    )
    _integer(cfg, "trainer.num_sanity_val_steps", low=-1)
    _number(cfg, "trainer.gradient_clip_val", 0, strict=False)
    _boolean(cfg, "trainer.deterministic", "warn")
    steps = OmegaConf.select(cfg, "trainer.max_steps")
    _check(
        steps is None or (is_integer(steps) and (steps == -1 or steps >= 1)),
        f"trainer.max_steps must be -1 (no limit) or a positive integer (0 would train nothing), got {steps!r}",
    )
    _batches_or_fraction(cfg, "trainer.limit_train_batches", 1, " (0 would train nothing)")
    _batches_or_fraction(cfg, "trainer.limit_val_batches", 0)
    _batches_or_fraction(cfg, "trainer.limit_test_batches", 0)
    _batches_or_fraction(cfg, "trainer.val_check_interval", 1)
    max_time = OmegaConf.select(cfg, "trainer.max_time")
    _check(
        max_time is None or _duration_seconds(max_time) > 0,
        f"trainer.max_time must be a time longer than 0, as DD:HH:MM:SS (e.g. 00:12:00:00) or a mapping of days, "
        f"hours, minutes, seconds; got {max_time!r}",
    )
    accelerator = OmegaConf.select(cfg, "trainer.accelerator")
    _check(
        accelerator in (None, "cpu", "auto")
        or (accelerator in ("gpu", "cuda") and torch.cuda.is_available()),
        "trainer.accelerator must be cpu or auto"
        + (
            ", or gpu (a CUDA GPU is present)"
            if torch.cuda.is_available()
            else " (this machine has no CUDA GPU)"
        )
        + f", got {accelerator!r}",
    )
    model_precision(cfg)
    devices = OmegaConf.select(cfg, "trainer.devices")
    _check(
        devices is None or devices == "auto" or (is_integer(devices) and devices >= 1),
        f"trainer.devices must be a positive integer or auto, got {devices!r}",
    )
    _check(
        not str(OmegaConf.select(cfg, "optimizer._target_")).endswith(".GaussNewton")
        or not (is_integer(devices) and devices > 1),
        "optimizer=gauss_newton runs in one process: its steps need the residuals of the whole batch, which "
        f"trainer.devices={devices} processes would split; use trainer=default",
    )
    # Lightning's auto takes the GPUs where CUDA has one, else the CPU.
    on_gpus = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if on_gpus and is_integer(devices):
        _check(
            devices <= torch.cuda.device_count(),
            f"trainer.devices={devices} asks for {devices} GPUs; this machine has {torch.cuda.device_count()}",
        )
    if not on_gpus and is_integer(devices):
        # Each CPU device is a process of its own: more than the cores share them, and each step waits on all.
        _check(
            devices <= usable_cores(),
            f"trainer.devices={devices} starts {devices} training processes on the CPU, more than the "
            f"{usable_cores()} cores this machine has: use at most {usable_cores()}",
        )
    # logger
    _positive(cfg, "logger.flush_logs_every_n_steps", integer=True)
    # Lightning joins the name into the log folder's path (a number was a traceback there); a version may be either.
    name = OmegaConf.select(cfg, "logger.name")
    _check(name is None or isinstance(name, str), f"logger.name must be text (a folder name), got {name!r}")
    # callbacks
    for key, entry in (OmegaConf.select(cfg, "callbacks") or {}).items():
        _check(
            entry is None or (isinstance(entry, DictConfig) and "_target_" in entry),
            f"callbacks.{key} must be a callback's settings with a _target_, or null to leave it out, got {entry!r}",
        )
    _integer(cfg, "callbacks.model_checkpoint.save_top_k", low=-1)
    _check_checkpoint_files(cfg)
    monitor = OmegaConf.select(cfg, "callbacks.model_checkpoint.monitor")
    _check(
        monitor is None or monitor in monitorable_columns(),
        f"callbacks.model_checkpoint.monitor must be one of {monitorable_columns()}, got {monitor!r}",
    )
    mode = OmegaConf.select(cfg, "callbacks.model_checkpoint.mode")
    _check(
        mode is None or mode in ("min", "max"),
        f"callbacks.model_checkpoint.mode must be min or max, got {mode!r}",
    )
    _positive(cfg, "callbacks.model_checkpoint.every_n_epochs", integer=True)
    _boolean(cfg, "callbacks.model_checkpoint.save_last", "link")
    _boolean(cfg, "callbacks.model_checkpoint.save_on_train_epoch_end")
    betas = OmegaConf.select(cfg, "optimizer.betas")
    _check(
        betas is None
        or (OmegaConf.is_list(betas) and len(betas) == 2 and all(is_number(b) and 0 <= b < 1 for b in betas)),
        f"optimizer.betas must be two numbers in [0, 1), got {betas!r}",
    )
    _integer(cfg, "callbacks.progress_bar.refresh_rate", low=0)
    dirpath = OmegaConf.select(cfg, "callbacks.model_checkpoint.dirpath")
    _check(
        dirpath is None or bool(str(dirpath).strip()),
        "callbacks.model_checkpoint.dirpath is empty: give a folder for the checkpoints (the default is the run's "
        "checkpoints/)",
    )
    _integer(cfg, "callbacks.figures.every_n_epochs", low=0)
    _number(cfg, "callbacks.figures.max_overhead", 0, strict=False)
    checkpoint = OmegaConf.select(cfg, "ckpt_path")
    if checkpoint is not None:
        _file("ckpt_path", checkpoint, "checkpoint")
