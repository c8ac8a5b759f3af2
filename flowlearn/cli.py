"""The ``flowlearn`` command.

Each subcommand is one :class:`Command` in :data:`COMMANDS`: its name and help, a function that declares its
arguments on its parser, and the function that runs it. A new subcommand is one more entry. Optional dependencies
(lbmpy) are imported only when a subcommand that needs them runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from flowlearn import __version__
from flowlearn.checks import (
    FIGURE_DPI,
    VOXEL_SIZE,
    check_cores,
    check_distinct_files,
    check_distinct_names,
    check_dpi,
    check_setting,
    check_voxel_size,
)
from flowlearn.errors import (
    USER_ERROR_STATUS,
    USER_ERRORS,
    ConfigError,
    DataValidationError,
    ReferenceConvergenceError,
    RunDirectoryError,
    SettingError,
)
from flowlearn.outputs import check_new_output
from flowlearn.runtime import quick_exit


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2), like every other mistake.

    argparse takes a word that starts with '-' for an option unless it looks like a plain negative number
    (``-2``, ``-0.5``, not ``-1e-5``), so ``--voxel-size -1e-5`` reads as an option without its value: the error
    then says how to attach the value, after which the option's own range check answers."""

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # Kept for error(); a subcommand's parser sees its own part of the command line.
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(
            USER_ERROR_STATUS,
            f"{self.prog}: error: {message}{self._hint(message)} (see {self.prog} --help)\n",
        )

    def _hint(self, message: str) -> str:
        """How to write the value that argparse took for an option, where a missing value was one."""
        if not message.endswith(": expected one argument"):
            return ""
        options = message.removeprefix("argument ").removesuffix(": expected one argument").split("/")
        words = getattr(self, "_words", [])
        for option, value in itertools.pairwise(words):
            if option in options and value.startswith("-") and _is_number(value):
                return f"; a value that starts with '-' is written attached: {option}={value}"
        return ""


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


class _HelpFormatter(argparse.HelpFormatter):
    """Each option's default said once, as it is typed (``64 64`` for two values): appended to its help unless the
    help says it already, and left out for an option without one (None, or a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "(default:" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or (not action.option_strings and action.nargs not in ("?", "*"))
        ):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else default
        return f"{text} (default: {shown})"


def _run_convert(args: argparse.Namespace) -> int:
    from flowlearn.data.schema import check_writable, convert

    check_new_output(args.dst, "fractures", [args.src], "the input SRC", option="DST")
    check_writable(args.dst)
    count = convert(args.src, args.dst, layout=args.layout, note=_note("convert"))
    print(f"wrote {count} fracture(s) to {args.dst} in the {args.layout} layout")
    return 0


def _note(command: str) -> Callable[[str], None]:
    """A line for stderr that is no error: what a command did that its user may not expect."""
    return lambda line: print(f"flowlearn {command}: note: {line}", file=sys.stderr)


def _convert_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", type=_path, help="input HDF5 file (flowlearn or original layout)")
    p.add_argument("dst", type=_path, help="output HDF5 file: new, or a fracture file to replace (not SRC)")
    p.add_argument("--layout", choices=("flowlearn", "original"), default="flowlearn", help="layout of DST")


def _from_options(cls: type, args: argparse.Namespace, **given: object) -> object:
    """An instance of the dataclass ``cls`` from the command-line options named like its fields, and ``given``."""
    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return cls(**{**options, **given})


def _run_generate(args: argparse.Namespace) -> int:
    from flowlearn.data.generate import DatasetConfig, generate_dataset
    from flowlearn.data.lbm import LBMSettings
    from flowlearn.data.recipes import RECIPES
    from flowlearn.data.schema import check_writable

    try:
        recipe_class = RECIPES[args.recipe]
        own = {f.name for f in dataclasses.fields(recipe_class)}
        foreign = sorted(
            name for name in _RECIPE_OPTIONS if getattr(args, name) is not None and name not in own
        )
        if foreign:
            raise SettingError(
                foreign[0],
                f"is not a setting of --recipe {args.recipe} (its settings: {', '.join(sorted(own))})",
            )
        given = {
            name: _one_or_pair(name, getattr(args, name))
            if name in recipe_class.ranged()
            else getattr(args, name)
            for name in own
            if getattr(args, name) is not None
        }
        recipe = recipe_class(**given)
        lbm = _from_options(LBMSettings, args)
        config = _from_options(DatasetConfig, args, shape=tuple(args.shape), lbm=lbm, recipe=recipe)
        check_setting(args.processes >= 1, "processes", "must be an integer >= 1", args.processes)
    except SettingError as err:
        # The settings name their fields; on the command line they are options.
        raise SettingError(f"--{err.field.replace('_', '-')}", err.problem) from err
    slurm = _slurm_settings(args)
    if slurm is None:
        # On this machine's cores (with --slurm, the threads run on the cluster's nodes).
        check_cores("--threads", args.threads)
        check_cores("--processes", args.processes)
    check_writable(args.output)
    if slurm is None:
        try:
            summary = generate_dataset(config, args.output, processes=args.processes, progress=not args.quiet)
        except ReferenceConvergenceError as err:
            raise ReferenceConvergenceError(
                f"{err}: raise --max-steps (now {args.max_steps}), or --tolerance (now {args.tolerance:g}); the "
                "finished fractures are kept, and the same command continues"
            ) from err
    else:
        from flowlearn.data.cluster import generate_on_slurm

        summary = generate_on_slurm(
            config, args.output, slurm, wait=not args.no_wait, progress=not args.quiet
        )
    print(json.dumps(summary, indent=2))
    return 0


# The recipes' settings as options of ``flowlearn generate``: name -> what it sets. Ranged settings take one value or
# LOW HIGH; the others one value. Each belongs to the recipes whose dataclass has a field of its name.
_RECIPE_OPTIONS = {
    "hurst": "Hurst exponent of the walls",
    "aperture_std": "sigma/<b> of the open gap, before closure",
    "contact_fraction": "share of the map where the walls touch (by closure)",
    "mismatch_ratio": "mismatch length over the mean aperture (log-uniform draw)",
    "mid_slope": "rms slope of the mid-surface smoothed over the mean aperture",
    "special_every": "of every this many fractures, five are exact cases (0: none)",
    "rms_ratio": "rms height of each wall over the mean aperture",
    "mismatch_length": "the walls match above this wavelength (voxels)",
    "wavelength_ratio": "shortest roughness wavelength over the mean aperture",
    "shear": "shift of the top wall along the flow (voxels)",
}


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.data.generate import MAX_COUNT, DatasetConfig
    from flowlearn.data.lbm import MAX_DENSITY_DROP, LBMSettings
    from flowlearn.data.recipes import RECIPES

    d, s = DatasetConfig(), LBMSettings()
    p.add_argument("output", type=_path, help="HDF5 file to write (flowlearn layout)")
    g = p.add_argument_group("fractures")
    g.add_argument("--count", type=int, default=d.count, help=f"number of fractures, at most {MAX_COUNT}")
    g.add_argument("--shape", type=int, nargs=2, default=list(d.shape), metavar=("H", "W"), help="map size")
    g.add_argument(
        "--mean-aperture", type=float, default=d.mean_aperture, help="mean wall separation (voxels)"
    )
    g.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default=d.recipe.name,
        help="what the fractures draw: published (walls in contact, published ranges) or winding (sheared, "
        "winding walls: the recipe of earlier datasets)",
    )
    g = p.add_argument_group("recipe settings (default: the recipe's own; see docs/data.md)")
    for name, text in _RECIPE_OPTIONS.items():
        owners = {r: cls() for r, cls in RECIPES.items() if name in {f.name for f in dataclasses.fields(cls)}}
        defaults = "; ".join(f"{r}: {_shown(getattr(recipe, name))}" for r, recipe in owners.items())
        ranged = any(name in type(recipe).ranged() for recipe in owners.values())
        g.add_argument(
            f"--{name.replace('_', '-')}",
            type=float if ranged else int,
            nargs="+" if ranged else None,
            default=None,
            metavar="V",
            help=f"{text}{': one value, or LOW HIGH to draw one per fracture' if ranged else ''} ({defaults})",
        )
    g = p.add_argument_group("dataset")
    g.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="seed of the first fracture (then +1 each); files trained on together need ranges that do not overlap",
    )
    g.add_argument(
        "--voxel-size", type=float, default=d.voxel_size, help=f"metres per voxel, in {_voxel_range()}"
    )
    g.add_argument(
        "--refine-every",
        type=int,
        default=d.refine_every,
        metavar="N",
        help="every N-th fracture also runs on the 2x grid and records its flow rate's change (0: none; each costs "
        "about 17x)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes, each with its share of the cores: at most the cores (more than the fractures to "
        "make are not started)",
    )
    g = p.add_argument_group("LBM")
    g.add_argument("--omega", type=float, default=s.omega, help="TRT symmetric relaxation rate")
    g.add_argument(
        "--density-drop",
        type=float,
        default=s.density_drop,
        help=f"inlet minus outlet density, in (0, {MAX_DENSITY_DROP:g}] (the LBM is Stokes flow only while the "
        "density stays near its mean of 1)",
    )
    g.add_argument("--tolerance", type=float, default=s.tolerance, help="steady-state relative change")
    g.add_argument("--check-interval", type=int, default=s.check_interval, help="steps between checks")
    g.add_argument(
        "--max-steps", type=int, default=s.max_steps, help="fail when not steady by then (raise it if so)"
    )
    g.add_argument("--target", choices=("auto", "cpu", "gpu"), default=s.target, help="where lbmpy runs")
    g.add_argument(
        "--threads",
        type=int,
        default=s.threads,
        help="OpenMP threads of each process, at most the cores (default: the cores shared among the processes)",
    )
    g.add_argument(
        "--reservoir", type=int, default=s.reservoir, help="open columns before/after the fracture"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _slurm_arguments(p)


def _shown(value: object) -> str:
    """A recipe setting as the help shows its default: '0.5 0.9' for a range."""
    return " ".join(f"{v:g}" for v in value) if isinstance(value, tuple) else f"{value:g}"


def _one_or_pair(name: str, values: list[float]) -> float | tuple[float, ...]:
    """The option ``name`` of one value (a fixed setting) or two (a range to draw from)."""
    if len(values) > 2:
        raise SettingError(name, f"takes one value or two (LOW HIGH), got {len(values)}: {values}")
    return values[0] if len(values) == 1 else tuple(values)


def _positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _slurm_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``flowlearn generate --slurm``. Their defaults are None (the help states SlurmSettings'), so
    that one given without --slurm can be refused."""
    from flowlearn.data.cluster import MAX_DEFAULT_TASKS, SlurmSettings

    d = SlurmSettings()
    g = p.add_argument_group(
        "SLURM",
        "with --slurm, the fractures are made by a job array; the command waits for it and merges the parts",
    )
    g.add_argument("--slurm", action="store_true", help="submit the missing fractures as a SLURM job array")
    g.add_argument(
        "--tasks",
        type=int,
        metavar="N",
        help=f"array tasks sharing the missing fractures (default: one per fracture, at most {MAX_DEFAULT_TASKS})",
    )
    g.add_argument("--partition", metavar="NAME", help="SLURM partition (default: the cluster's)")
    g.add_argument("--account", metavar="NAME", help="SLURM account charged (default: yours)")
    g.add_argument(
        "--timeout-min",
        type=int,
        metavar="MIN",
        help=f"time limit of each task, minutes (default: {d.timeout_min})",
    )
    g.add_argument(
        "--cpus-per-task",
        type=int,
        metavar="N",
        help=f"CPUs (LBM threads) of each task (default: {d.cpus_per_task})",
    )
    g.add_argument(
        "--mem-gb", type=float, metavar="GB", help=f"memory of each task, GB (default: {d.mem_gb:g})"
    )
    g.add_argument(
        "--array-parallelism",
        type=int,
        metavar="N",
        help=f"tasks running at once, at most (default: {d.array_parallelism})",
    )
    g.add_argument(
        "--slurm-setup",
        action="append",
        metavar="LINE",
        help="shell line each task runs first, e.g. 'module load gcc' (repeatable)",
    )
    g.add_argument(
        "--no-wait",
        action="store_true",
        help="submit and return; the same command run again waits for the array and merges",
    )


# The options of _slurm_arguments, less --slurm, as SlurmSettings' fields (slurm_setup is its ``setup``).
_SLURM_OPTIONS = (
    "tasks", "partition", "account", "timeout_min", "cpus_per_task", "mem_gb", "array_parallelism", "slurm_setup",
    "no_wait",
)  # fmt: skip


def _slurm_settings(args: argparse.Namespace) -> object | None:
    """The :class:`~flowlearn.data.cluster.SlurmSettings` of ``flowlearn generate --slurm``; None without --slurm.

    Raises:
        SettingError: naming the option: one out of its range, a SLURM option without --slurm, or --processes
            with --slurm.
    """
    given = [
        name
        for name in _SLURM_OPTIONS
        if getattr(args, name) is not None and getattr(args, name) is not False
    ]
    if not args.slurm:
        for name in given:
            raise SettingError(f"--{name.replace('_', '-')}", "applies only with --slurm")
        return None
    if args.processes != 1:
        raise SettingError(
            "--processes",
            "applies only to a local generation: with --slurm each array task is one process on its "
            "--cpus-per-task CPUs (ask for more tasks with --tasks)",
        )
    from flowlearn.data.cluster import SlurmSettings

    fields = {name: getattr(args, name) for name in given if name not in ("slurm_setup", "no_wait")}
    try:
        return SlurmSettings(**fields, setup=tuple(args.slurm_setup or ()))
    except SettingError as err:
        raise SettingError(f"--{err.field.replace('_', '-')}", err.problem) from err


def _run_report(args: argparse.Namespace) -> int:
    from flowlearn.data.schema import check_writable
    from flowlearn.reporting.report import report_run, report_sweep
    from flowlearn.reporting.runs import looks_like_run, sweep_runs

    run_dir = Path(args.run_dir)
    check_writable(Path(args.output if args.output is not None else run_dir) / "report.md")
    # A directory with no run outputs of its own but run subdirectories is a sweep.
    if run_dir.is_dir() and not looks_like_run(run_dir) and sweep_runs(run_dir):
        table, incomplete = report_sweep(run_dir, args.output, dpi=args.dpi)
        print(f"wrote {table}")
        for line in incomplete:
            print(f"flowlearn report: incomplete run: {line}", file=sys.stderr)
        return 1 if incomplete else 0
    print(f"wrote {report_run(run_dir, args.output, dpi=args.dpi)}")
    return 0


def _report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=_path, help="run directory, or sweep directory holding run directories")
    p.add_argument("-o", "--output", type=_path, help="where to write the report (default: RUN_DIR itself)")
    p.add_argument(
        "--dpi",
        type=_dpi,
        default=120,
        help=f"resolution of the figures, an integer in [{FIGURE_DPI[0]}, {FIGURE_DPI[1]}]",
    )


def _run_predict(args: argparse.Namespace) -> int:
    from flowlearn.data.schema import check_writable
    from flowlearn.training.predict import predict

    check_distinct_names("INPUTS", args.inputs)
    check_new_output(args.output, "predictions", args.inputs, "one of the inputs", run_dir=args.run_dir)
    check_writable(args.output)
    _check_run_directory(args.run_dir)
    _check_distinct_keys(args.inputs)
    count = predict(args.run_dir, args.inputs, args.output, checkpoint=args.checkpoint)
    print(
        f"wrote predicted W, log k, pressure and flow rate, and the baselines', of {count} fracture(s) to {args.output}"
    )
    return 0


def _predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=_path, help="run directory written by `python train.py`")
    p.add_argument(
        "inputs",
        type=_path,
        nargs="+",
        help="HDF5 file(s) with the fractures to predict, of different file names (a fracture is named by its "
        "file's name and its group)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=_path,
        required=True,
        help="HDF5 file to write: new, or a predictions file to replace (not one of INPUTS, nor a run's predictions.h5)",
    )
    p.add_argument(
        "--checkpoint", type=_path, help="checkpoint to load (default: RUN_DIR/checkpoints/last.ckpt)"
    )


def _check_run_directory(run_dir: str) -> None:
    """Raise :class:`RunDirectoryError` where ``RUN_DIR`` names a file (a run's predictions.h5, say)."""
    path = Path(run_dir)
    if path.is_file():
        parent = path.absolute().parent
        hint = f" ({parent}?)" if (parent / ".hydra" / "config.yaml").is_file() else ""
        raise RunDirectoryError(
            f"RUN_DIR {run_dir} is a file, not a run directory: give the folder that python train.py wrote{hint}"
        )


def _check_distinct_keys(inputs: Sequence[str]) -> None:
    """Raise :class:`ConfigError` where two fractures of ``inputs`` would get one group in the output: a fracture's
    group is its file's stem and its group joined by '__' (``x.h5``'s ``y__z`` and ``x__y.h5``'s ``z`` are both
    ``x__y__z``). A file that cannot be listed is left to ``predict``, which says what is wrong with it."""
    from flowlearn.data.datamodule import find_fractures
    from flowlearn.training.predictions import group_name

    owners: dict[str, tuple[str, str]] = {}
    for path in inputs:
        try:
            refs = find_fractures(path)
        except (*USER_ERRORS, OSError):
            return
        for ref in refs:
            key = group_name(ref.key)
            if key in owners:
                other, group = owners[key]
                raise ConfigError(
                    f"INPUTS: {other} group '{group}' and {path} group '{ref.name}' both become '{key}' in the "
                    "output: rename one"
                )
            owners[key] = (path, ref.name)


def _run_departure(args: argparse.Namespace) -> int:
    from flowlearn.data.departure import departures, range_summary, summarize
    from flowlearn.data.schema import check_writable

    if args.figure is not None:
        check_new_output(args.figure, "png", [args.data], "the input DATA", option="--figure")
        if Path(args.figure).suffix.lower() != ".png":
            # A PDF or SVG would need another writer than write_png's (a cropped render of the figure's pixels).
            raise SettingError(
                "--figure", f"{args.figure}: only PNG is written: give a file name ending in .png"
            )
        check_writable(args.figure)  # before the solves
    rows = departures(args.data)
    if not rows:
        raise DataValidationError(
            f"{args.data}: no fracture stores a flow_rate (made by an older flowlearn?)"
        )
    if args.table:
        print(
            f"{'fracture':<16} {'σ/⟨b⟩':>7} {'contact':>8} {'b_h/⟨b⟩':>8} {'Q/Q_LCL':>8} {'slope':>6} {'ΔQ(2x)':>7}"
        )
        for row in rows:
            print(
                f"{row.name:<16} {row.relative_std:7.3f} {row.contact_fraction:8.3f} {row.hydraulic_ratio:8.3f} "
                f"{row.ratio:8.3f} {row.mid_slope:6.3f} {_percent(row.convergence):>7}"
                + ("*" if row.convergence_inferred else "")
            )
        if any(row.convergence_inferred for row in rows):
            print("* inferred from the rms wall slope (flowlearn refine --infer); the others measured")
    summary = summarize(rows)
    low, high = summary["quartiles_departure"]
    print(
        f"{summary['fractures']} fractures: Q/Q_LCL from {summary['ratio_min']:.3f} to {summary['ratio_max']:.3f} "
        f"(median {summary['ratio_median']:.3f}); the LCL overestimates the flow of "
        f"{summary['share_lcl_overestimates']:.0%} of them"
    )
    print(
        f"departure |Q/Q_LCL - 1|: median {summary['median_departure']:.1%} (quartiles {low:.1%}, {high:.1%}); "
        f"{summary['share_departing_20pct']:.0%} of the fractures depart by 20% or more"
    )
    print("\n".join(range_summary(rows)))
    if args.figure is not None:
        from flowlearn.data.schema import atomic_path
        from flowlearn.reporting.figures import plot_departure, write_png

        with atomic_path(args.figure) as tmp:
            write_png(plot_departure(rows), tmp, dpi=120)
        print(f"wrote {args.figure}")
    return 0


def _percent(value: float) -> str:
    """A share as a percentage with two decimals, '-' where it is not recorded (NaN)."""
    return f"{value:.2%}" if math.isfinite(value) else "-"


def _departure_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data", type=_path, help="HDF5 fracture file whose fractures store a flow_rate (flowlearn generate)"
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="one line per fracture: σ/⟨b⟩, contact fraction, b_h/⟨b⟩ of the reference flow rate, Q/Q_LCL, rms "
        "mid-surface slope (smoothed over ⟨b⟩) and the flow rate's change under 2x refinement",
    )
    p.add_argument(
        "--figure",
        type=_path,
        help="PNG of Q/Q_LCL against σ/⟨a⟩ and the wall slope to write: a new .png file, or a PNG to replace",
    )


def _named_fractures(data: str, wanted: list[str] | None, every: int = 1) -> list[str]:
    """The fractures of ``data`` that ``--fracture`` names (in the file's order), or, without it, every
    ``every``-th of them.

    Raises:
        SettingError: a name that is no fracture of ``data``.
    """
    from flowlearn.data.schema import list_fractures

    names = [info.name for info in list_fractures(data)]
    unknown = sorted(set(wanted or ()) - set(names))
    if unknown:
        raise SettingError(
            "--fracture", f"names no fracture of {data}: {unknown[0]!r} (it has {', '.join(names)})"
        )
    return [name for name in names if name in wanted] if wanted else names[::every]


def _run_refine(args: argparse.Namespace) -> int:
    from flowlearn.data.refinement import check_convergence_records, infer_file, refine_file
    from flowlearn.data.schema import check_writable

    if args.fracture and args.every is not None:
        raise SettingError("--every", "applies only without --fracture, which names the fractures to measure")
    if args.infer_only:
        for option, value in (("--fracture", args.fracture), ("--every", args.every)):
            if value is not None:
                raise SettingError(option, "chooses fractures to measure, and --infer-only measures none")
    check_cores("--threads", args.threads)
    check_writable(args.data)
    chosen = _named_fractures(args.data, args.fracture, every=args.every or 1)
    if args.infer and not args.infer_only:
        check_convergence_records(args.data)  # a bad record found after minutes of LBM runs would waste them
    if not args.infer_only:
        rows: list[str] = []

        def report(name: str, change: float, seconds: float) -> None:
            if not rows:  # the header once a fracture is measured: after every check, not before an error
                print(f"{'fracture':<16} {'Q(2x)/Q(1x) - 1':>16} {'seconds':>8}")
            rows.append(name)
            print(f"{name:<16} {change:>16.2%} {seconds:>8.0f}", flush=True)

        count = refine_file(args.data, chosen, args.threads, report)
        print(f"measured {count} fracture(s) of {args.data} (those measured before were kept)")
    if args.infer or args.infer_only:
        rule = infer_file(args.data)
        print(
            f"recorded in the other fractures: Q(2x)/Q(1x) - 1 = {rule.intercept:.4f} + {rule.slope_coefficient:.4f} "
            f"x rms wall slope, fitted on {rule.fitted_on} measured fractures (rms residual {rule.residual:.2%})"
        )
    return 0


def _refine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data", type=_path, help="HDF5 fracture file in flowlearn's layout with walls (flowlearn generate)"
    )
    p.add_argument(
        "--fracture",
        action="append",
        metavar="NAME",
        help="measure this fracture (repeatable; default: --every)",
    )
    p.add_argument(
        "--every",
        type=_positive_int,
        metavar="N",
        help="without --fracture, measure fractures 0, N, 2N, ... in group order (default: 1, every fracture)",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        help="OpenMP threads of the LBM, at most the cores (default: every core)",
    )
    p.add_argument(
        "--infer-only",
        action="store_true",
        help="run no LBM: only fit the rule to the fractures measured before and record it (as --infer)",
    )
    p.add_argument(
        "--infer",
        action="store_true",
        help="then record in every unmeasured fracture the change a straight line in the rms wall slope, fitted to "
        "the measured ones, gives it",
    )


def _run_smooth_walls(args: argparse.Namespace) -> int:
    from flowlearn.data.reference_error import infer_file, record_file
    from flowlearn.data.schema import check_writable

    if not args.stokes and not args.infer:
        raise SettingError("FILE", "missing: give the wall-fitted Stokes solves (FILE...), --infer, or both")
    check_writable(args.data)
    if args.stokes:
        recorded = record_file(args.data, args.stokes)
        print(
            f"recorded the reference error of {len(recorded)} fracture(s) of {args.data} against their smooth walls"
        )
    if args.infer:
        median, count = infer_file(args.data)
        print(
            f"recorded in the other fractures the median of {count} measured: flow-rate error "
            f"{median['flow_rate_error']:+.2%}, departure error {median['departure_error']:.3g} (marked inferred)"
        )
    return 0


def _smooth_walls_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data",
        type=_path,
        help="HDF5 fracture file in flowlearn's layout, with reference flow rates and pressures",
    )
    p.add_argument(
        "stokes",
        type=_path,
        nargs="*",
        metavar="FILE",
        help="what flowlearn stokes DATA --mesh walls --cells-per-voxel R -o FILE wrote, at two R (several files per "
        "R allowed)",
    )
    p.add_argument(
        "--infer",
        action="store_true",
        help="then record in every unmeasured fracture the median of the measured ones, marked as inferred",
    )


def _run_check(args: argparse.Namespace) -> int:
    from flowlearn.data.conservation import check_files, summary, table

    check_distinct_files("DATA", args.data, "give each file once (its fractures would be counted twice)")
    try:
        checks = check_files(args.data, margin=args.margin)
    except SettingError as err:
        raise SettingError(f"--{err.field}", err.problem) from err
    print(table(checks))
    print(summary(checks, tolerance=args.tolerance))
    return 0


def _check_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.data.conservation import MARGIN, TOLERANCE

    p.add_argument("data", type=_path, nargs="+", help="HDF5 fracture file(s), either layout")
    p.add_argument(
        "--margin",
        type=_non_negative_int,
        default=MARGIN,
        help="columns left out at each end (the boundary layers of an LBM reference's inlet and outlet); at most "
        "(W - 3) / 2 on maps W columns wide, which leaves 2 column pairs to compare",
    )
    p.add_argument(
        "--tolerance",
        type=_checked(float, _check_tolerance, "float"),
        default=TOLERANCE,
        help="variation (a fraction, in (0, 1]: 0.01 is 1 %%) above which no law counts as reproducing a reference",
    )


def _non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def _check_tolerance(value: float) -> float:
    """``value`` if it is a ``flowlearn check --tolerance``: a variation of the column flux as a fraction of its
    mean, in (0, 1] (up to 100 %); else :class:`SettingError`."""
    check_setting(0 < value <= 1, "tolerance", "must be a number in (0, 1] (a fraction: 0.01 is 1 %)", value)
    return value


def _path(text: str) -> str:
    """An argparse type: a file or folder name, not empty (an unset shell variable, say), which the commands would
    otherwise take for the current directory or for no value."""
    if not text:
        raise argparse.ArgumentTypeError("must be a path, got ''")
    return text


def _checked(convert: Callable[[str], Any], check: Callable[[Any], Any], kind: str) -> Callable[[str], Any]:
    """An argparse type: ``check(convert(text))``, refused with the check's problem (a
    :class:`~flowlearn.errors.SettingError`'s) or, for text ``convert`` cannot read, argparse's own wording."""

    def parse(text: str) -> Any:
        try:
            return check(convert(text))
        except ValueError as err:  # SettingError is one
            problem = err.problem if isinstance(err, SettingError) else f"invalid {kind} value: {text!r}"
            raise argparse.ArgumentTypeError(problem) from None

    return parse


# A figure resolution (check_dpi) and metres per voxel (check_voxel_size).
_dpi = _checked(int, check_dpi, "int")
_voxel_size = _checked(float, check_voxel_size, "float")


def _voxel_range() -> str:
    """The voxel sizes a command takes, as its help says them."""
    low, high = VOXEL_SIZE
    return f"[{low:g}, {high:g}]"


# The arguments of flowlearn.reporting.ensemble's functions as the options of ``flowlearn ensemble``.
_ENSEMBLE_OPTIONS = {
    "paths": "PREDICTIONS",
    "output": "--output",
    "level": "--level",
    "calibrate": "--calibrate",
}


def _run_ensemble(args: argparse.Namespace) -> int:
    from flowlearn.data.schema import check_writable
    from flowlearn.reporting.ensemble import check_ensemble, write_ensemble

    # The default calibration split (val) gives way to the members' spread where it holds no reference flow rate, as
    # the ensemble's docstring says; a split asked for by name is refused there.
    calibrate = {"none": None, None: "val"}.get(args.calibrate, args.calibrate)
    try:
        check_ensemble(args.predictions, args.level, calibrate, args.output)
    except SettingError as err:
        raise SettingError(_ENSEMBLE_OPTIONS[err.field], err.problem) from err
    check_new_output(args.output, "predictions")
    _check_predictions_files("PREDICTIONS", args.predictions)
    check_writable(args.output)
    _check_runs_once(args.predictions)
    if calibrate is not None:
        _check_calibration(args.predictions, calibrate, args.level, explicit=args.calibrate is not None)
    count = write_ensemble(args.predictions, args.output, args.level, calibrate)
    print(
        f"wrote the ensemble of {len(args.predictions)} members' predictions of {count} fracture(s) to {args.output}"
    )
    return 0


def _level(value: float) -> float:
    """An ensemble's ``--level``, checked where the ensemble checks it (imported once the option is given)."""
    from flowlearn.reporting.ensemble import check_level

    return check_level(value)


def _ensemble_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.training.metrics import STAGES

    p.add_argument(
        "predictions",
        type=_path,
        nargs="+",
        help="the members' predictions files (two or more, all different)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=_path,
        required=True,
        help="predictions file to write: new, or one to replace (not one of PREDICTIONS, nor a run's predictions.h5)",
    )
    p.add_argument(
        "--level",
        type=_checked(float, _level, "float"),
        default=0.9,
        help="level of each flow rate's interval, in (0, 1); split conformal needs at least level / (1 - level) "
        "calibration fractures (9 at 0.9)",
    )
    p.add_argument(
        "--calibrate",
        choices=(*STAGES, "none"),
        default=None,
        help="the split whose reference flow rates calibrate the intervals (split conformal; default val, or the "
        "members' spread where no val fracture has one; a split named here must have them); none: the members' own "
        "spread (Student-t)",
    )


def _check_predictions_files(option: str, paths: Sequence[str]) -> None:
    """Raise :class:`DataValidationError` for a folder among ``paths``, which ``option`` takes predictions files for:
    for a run directory, naming its predictions.h5."""
    for path in paths:
        if Path(path).is_dir():
            inside = Path(path) / "predictions.h5"
            if inside.is_file():
                raise DataValidationError(f"{option} {path} is a run directory: give {inside}")
            raise DataValidationError(f"{option} {path} is a directory, not a predictions file")


def _recorded_members(path: Path) -> list[Path]:
    """The member files that the ensemble's predictions file ``path`` records, resolved; [] for a single model's
    file, or one that cannot be read (the ensemble then says why). A member is recorded as its command line named
    it: a relative name is taken from here, or, where nothing is here, from beside ``path``."""
    import numpy as np

    from flowlearn.data.schema import open_file
    from flowlearn.reporting.ensemble import MEMBERS

    try:
        with open_file(path) as f:
            recorded = f.attrs.get(MEMBERS)
    except (*USER_ERRORS, OSError):
        return []
    members = []
    for name in np.atleast_1d(recorded if recorded is not None else []):
        member = Path(name.decode(errors="replace") if isinstance(name, bytes) else str(name))
        if not member.is_absolute() and not member.exists() and (path.parent / member).exists():
            member = path.parent / member
        members.append(member.resolve())
    return members


def _runs_of(path: Path, within: tuple[Path, ...] = ()) -> list[Path]:
    """The single models' predictions files that the predictions file ``path`` stands for: itself, or for an
    ensemble its members', down to the single models."""
    members = [] if path in within else _recorded_members(path)
    return [run for member in members for run in _runs_of(member, (*within, path))] if members else [path]


def _check_runs_once(paths: Sequence[str]) -> None:
    """Raise :class:`SettingError` where a member is an ensemble whose own members the other members count again
    (by the members its file records)."""
    runs = [_runs_of(Path(path).resolve()) for path in paths]
    for i, path in enumerate(paths):
        if runs[i] == [Path(path).resolve()]:
            continue  # a single model's file
        others = {run for j, theirs in enumerate(runs) if j != i for run in theirs}
        again = [str(run) for run in runs[i] if run in others]
        if again:
            counted = "which" if len(again) == len(runs[i]) else f"of which {', '.join(again)}"
            raise SettingError(
                "PREDICTIONS",
                f"{path} is itself an ensemble of {', '.join(map(str, runs[i]))}, {counted} the other members "
                "count again: give each run once",
            )


def _prediction_records(path: str) -> dict[str, tuple[str, float, float]] | None:
    """Per group of the predictions file ``path``: its split, flow rate and reference flow rate, from the
    attributes alone; None for a file that cannot be read so (the ensemble then says why)."""
    from flowlearn.data.schema import open_file

    try:
        with open_file(path) as f:
            return {
                name: (
                    str(group.attrs["split"]),
                    float(group.attrs.get("flow_rate", math.nan)),
                    float(group.attrs.get("flow_rate_reference", math.nan)),
                )
                for name, group in f.items()
            }
    except (*USER_ERRORS, OSError, KeyError, TypeError, AttributeError):
        return None


def _conformal_rank(count: int, level: float) -> int:
    """The rank of the calibration score that split conformal prediction takes from ``count`` scores at ``level``,
    as :func:`~flowlearn.reporting.ensemble.combine` computes it: beyond ``count``, the interval is infinite."""
    return math.ceil((count + 1) * level)


def _check_calibration(paths: Sequence[str], split: str, level: float, explicit: bool) -> None:
    """Raise :class:`SettingError` where the split-conformal interval cannot be made as asked: ``--calibrate
    split`` named (``explicit``) where no fracture of the split has a reference flow rate (the interval would be the
    members' Student-t one), or a ``--level`` whose rank lies beyond the calibration fractures (it would be
    infinite, and left out)."""
    records = [_prediction_records(path) for path in paths]
    if any(record is None for record in records):
        return
    first = records[0]

    def positive(value: float) -> bool:
        return math.isfinite(value) and value > 0

    in_split = [name for name, (group_split, _, _) in first.items() if group_split == split]
    usable = [
        name
        for name in in_split
        if positive(first[name][2]) and all(positive(record.get(name, first[name])[1]) for record in records)
    ]
    if explicit and not usable:
        if not in_split:
            held = ", ".join(sorted({group_split for group_split, _, _ in first.values()}))
            problem = f"no member fracture is in split {split} (the members hold split {held})"
        else:
            problem = f"none of the members' {len(in_split)} {split} fractures has a reference flow rate"
        raise SettingError("--calibrate", f"{split}: {problem}; use --calibrate none")
    count = len(usable)
    if count and _conformal_rank(count, level) > count:
        # The fewest scores whose rank at ``level`` lies within them, n >= level / (1 - level), and the highest level
        # of three decimals that the scores at hand allow, n / (n + 1) rounded down; each checked against round-off.
        needed = max(1, math.ceil(level / (1 - level)))
        for _ in range(3):
            if needed > 1 and _conformal_rank(needed - 1, level) <= needed - 1:
                needed -= 1
            elif _conformal_rank(needed, level) > needed:
                needed += 1
        best = math.floor(count / (count + 1) * 1000) / 1000
        if _conformal_rank(count, best) > count:
            best -= 0.001
        raise SettingError(
            "--level",
            f"{level} needs at least {needed} {split} fractures with a reference flow rate for a finite "
            f"split-conformal interval, and the members have {count}: use --level at most {best:.3f}, or "
            "--calibrate none",
        )


def _run_evaluate(args: argparse.Namespace) -> int:
    from flowlearn.reporting.ensemble import ensemble_coverage
    from flowlearn.reporting.heldout import held_out, outside_training, verdict_table
    from flowlearn.training.predictions import read_predictions

    _check_predictions_files("PREDICTIONS", [args.predictions])
    fields = read_predictions(args.predictions)  # read once: the verdict, the intervals, the statistics
    try:
        result = held_out(args.predictions, args.split, fields)
    except ValueError as err:
        raise DataValidationError(str(err)) from err
    print(verdict_table(result))
    in_split = [f for f in fields if f.split == args.split]
    interval = ensemble_coverage(args.predictions, in_split, args.split)
    if interval:
        print(interval)
    for line in outside_training(args.predictions, in_split):
        print(f"flowlearn evaluate: warning: {line}", file=sys.stderr)
    return 0


def _evaluate_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.training.metrics import STAGES

    p.add_argument(
        "predictions", type=_path, help="predictions.h5 of a run, or a file written by flowlearn predict"
    )
    p.add_argument(
        "--split",
        choices=(*STAGES, "predict"),
        default="test",
        help="which fractures: those of a training run's split, or those flowlearn predict was given",
    )


def _run_stokes(args: argparse.Namespace) -> int:
    from flowlearn.data.reference_error import agreement
    from flowlearn.data.schema import check_writable, read_fracture, write_fractures
    from flowlearn.data.stokes import (
        StokesSettings,
        check_box,
        check_case_dir,
        check_openfoam,
        check_walls,
        fracture_walls,
        stokes_fracture,
    )
    from flowlearn.data.voxels import fracture_voxels

    try:
        settings = _from_options(StokesSettings, args)
    except SettingError as err:
        raise SettingError(f"--{err.field.replace('_', '-')}", err.problem) from err
    check_cores("--processes", settings.processes)
    if args.output is not None:
        check_new_output(args.output, "fractures", [args.data], "the input DATA")
        check_writable(args.output)
    names = _named_fractures(args.data, args.fracture)
    sources = [read_fracture(args.data, name) for name in names]
    # Every fracture is checked (a fluid path, a mesh that fits in memory) before the first solve.
    for fracture in sources:
        try:
            if args.mesh == "walls":
                check_walls(*fracture_walls(fracture, args.voxel_size), settings)
            else:
                check_box(fracture_voxels(fracture, args.voxel_size), settings)
        except ValueError as err:
            raise type(err)(f"{args.data}, {fracture.name}: {err}") from err
        if args.case_dir:
            check_case_dir(Path(args.case_dir) / fracture.name)
    check_openfoam(settings.processes)
    print(
        f"{'fracture':<16} {'cells':>9} {'iterations':>10} {'seconds':>8} {'Q/Q_ref':>8} {'1-R²':>9} {'departure err':>13}"
    )
    solved = []
    for fracture in sources:
        case_dir = Path(args.case_dir) / fracture.name if args.case_dir else None
        stokes = stokes_fracture(
            fracture, settings, args.voxel_size, case_dir, progress=not args.quiet, mesh=args.mesh
        )
        solved.append(stokes)
        record = stokes.provenance["stokes"]
        ratio = stokes.flow_rate / fracture.flow_rate if fracture.flow_rate else math.nan
        unexplained, departure = agreement(fracture, stokes)
        print(
            f"{fracture.name:<16} {record['cells']:>9} {record['iterations']:>10} {record['seconds']:>8.1f} "
            f"{ratio:>8.4f} {unexplained:>9.2e} {departure:>13.2e}"
        )
    if args.output is not None:
        write_fractures(args.output, solved)
        print(f"wrote the Stokes pressure and flow rate of {len(solved)} fracture(s) to {args.output}")
    return 0


def _stokes_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.data.stokes import MAX_ITERATIONS, StokesSettings

    d = StokesSettings()
    p.add_argument(
        "data", type=_path, help="HDF5 fracture file, either layout (the walls are used where it stores them)"
    )
    p.add_argument(
        "--fracture", action="append", metavar="NAME", help="solve this fracture (repeatable; default: all)"
    )
    p.add_argument(
        "-o",
        "--output",
        type=_path,
        help="HDF5 file to write the Stokes pressure and flow rate to (flowlearn layout): new, or a fracture file to "
        "replace (not DATA)",
    )
    p.add_argument(
        "--voxel-size",
        type=_voxel_size,
        metavar="M",
        help=f"metres per voxel, in {_voxel_range()}, for files that do not store it (default: each fracture's own)",
    )
    p.add_argument(
        "--mesh",
        choices=("voxels", "walls"),
        default="voxels",
        help="mesh the fluid voxels the LBM ran on (default), or the smooth walls the file stores (a wall-fitted "
        "mesh, converging at second order as it is refined)",
    )
    p.add_argument(
        "--cells-per-voxel",
        type=int,
        metavar="R",
        default=d.cells_per_voxel,
        help="finite-volume cells along each side of a voxel (cost grows as its fourth power)",
    )
    p.add_argument(
        "--reservoir",
        type=int,
        metavar="N",
        default=d.reservoir,
        help="open columns before/after the fracture",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        metavar="T",
        default=d.tolerance,
        help="steady when the pressure's residual is below",
    )
    p.add_argument(
        "--max-iterations",
        type=int,
        metavar="N",
        default=d.max_iterations,
        help=f"fail when not steady by then, at most {MAX_ITERATIONS}",
    )
    p.add_argument(
        "--processes",
        type=int,
        metavar="N",
        default=d.processes,
        help="MPI processes of each solve, at most the cores",
    )
    p.add_argument(
        "--relaxation",
        type=float,
        metavar="F",
        default=d.relaxation,
        help="the velocity's under-relaxation, in (0, 1]: lower it (0.7) where a solve diverges",
    )
    p.add_argument(
        "--case-dir",
        type=_path,
        metavar="DIR",
        help="keep each fracture's OpenFOAM case in DIR/NAME (for ParaView)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, one-line help, description, argument declarations and what runs it."""

    name: str
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS = (
    Command(
        "convert",
        "convert a fracture file between the flowlearn and the original HDF5 layouts",
        "Read every fracture of SRC (either layout), validate it, and write DST atomically.",
        _convert_arguments,
        _run_convert,
    ),
    Command(
        "check",
        "how far each fracture's reference pressure is from any local conductivity law",
        "For every fracture of DATA with a reference pressure: the variation over the columns of the flow rate "
        "that the pressure implies under the local cubic law T = Ap^3/12, and under the power law T ~ Ap^a that "
        "makes it smallest. A Darcy solution of a local law passes the same flow through every column, so a "
        "variation well above round-off means the reference is no such solution. Prints a table and a summary "
        "line saying whether a per-pixel W is the only model that can fit.",
        _check_arguments,
        _run_check,
    ),
    Command(
        "generate",
        "generate rough fractures and their LBM reference pressure (needs flowlearn[lbm])",
        "Synthesise self-affine rough fractures, run lbmpy to steady state on each, and write the "
        "aperture-averaged pressure (inlet 2, outlet 1) with provenance to OUTPUT. Lengths are in voxels.",
        _generate_arguments,
        _run_generate,
    ),
    Command(
        "refine",
        "measure how far each fracture's LBM flow rate moves on a grid twice as fine, and record it",
        "For each chosen fracture of DATA, run the LBM between its walls Fourier-interpolated onto a grid twice as "
        "fine (about 16x the cost of the fracture), with the settings its reference ran with, and record Q(2x)/Q(1x) "
        "- 1 in its provenance ('convergence'), where flowlearn departure --table shows it. The file is rewritten "
        "atomically after each fracture; fractures measured before are skipped, so a killed run continues where it "
        "stopped. --infer then fits a straight line in the rms wall slope to the measured fractures and records its "
        "estimate, marked as inferred, in the others.",
        _refine_arguments,
        _run_refine,
    ),
    Command(
        "smooth-walls",
        "record each fracture's reference error against the Stokes flow of its smooth walls",
        "From wall-fitted Stokes solves of DATA's fractures at two resolutions (flowlearn stokes DATA --mesh walls "
        "--cells-per-voxel R -o FILE), record in each solved fracture's provenance ('reference_error') how far its "
        "reference lies from its smooth walls: the flow rate against theirs extrapolated at second order, "
        "Q_ref/Q_smooth - 1, and the pressure's departure error against the finer solve. flowlearn evaluate then "
        "calls a gain over a closed form a gain only where it is larger than this error. --infer records the measured "
        "fractures' median in the others. The file is rewritten atomically.",
        _smooth_walls_arguments,
        _run_smooth_walls,
    ),
    Command(
        "departure",
        "how far each fracture's flow rate departs from the local cubic law",
        "For every fracture of DATA that stores its reference flow rate Q, solve the Darcy problem with the local "
        "cubic law T = Ap³/12 on its aperture map and compare: Q/Q_LCL, its spread over the file, and the "
        "geometry that goes with it.",
        _departure_arguments,
        _run_departure,
    ),
    Command(
        "evaluate",
        "the held-out verdict: the model against every baseline, medians over fractures",
        "For the fractures of one split of PREDICTIONS, compute the MSE, the departure error and the flow-rate "
        "error of the model and of each baseline per fracture, print their medians, the model's reduction of the "
        "LCL's, and on how many fractures the model beats the LCL in both departure and flow rate.",
        _evaluate_arguments,
        _run_evaluate,
    ),
    Command(
        "stokes",
        "an independent Stokes solve (OpenFOAM) of each fracture, against its reference",
        "Mesh the fluid voxels of each fracture of DATA exactly as the LBM saw them (the same reservoirs, symmetry "
        "planes and no-slip walls), or with --mesh walls the smooth walls the file stores, solve steady Stokes flow "
        "with OpenFOAM's simpleFoam, and print its flow rate "
        "and its flux-weighted gap-averaged pressure against the file's reference: Q/Q_ref, and the pressure's 1 - R² "
        "and departure error. Needs OpenFOAM (apt-get install openfoam).",
        _stokes_arguments,
        _run_stokes,
    ),
    Command(
        "report",
        "figures and a markdown summary of a finished run, or a comparison table of a sweep",
        "For a run directory (what `python train.py` writes): write figures/*.png and report.md (metrics of the "
        "model and of every baseline, improvement over the local cubic law, config). For a sweep directory "
        "(`python train.py -m`): write report.md "
        "with one row per run, and each complete run's report. Exits 1 when a run of a sweep is incomplete, "
        "2 on an error.",
        _report_arguments,
        _run_report,
    ),
    Command(
        "predict",
        "apply a trained run to new aperture maps",
        "Rebuild the model of RUN_DIR (its .hydra/config.yaml and a checkpoint), apply it to every fracture of "
        "INPUTS (HDF5, either layout) and write the correction W, log k, the predicted pressure and flow rate, the "
        "baselines' (the local cubic law and the others, with the power-law exponent fitted in training), and the "
        "input's reference pressure and flow rate to OUTPUT (HDF5, written atomically). Files lacking an input "
        "channel the model reads (the walls) are refused; each aperture statistic of an input fracture outside its "
        "range over the training split is one warning line on stderr.",
        _predict_arguments,
        _run_predict,
    ),
    Command(
        "ensemble",
        "combine the predictions of K trained runs into one, with an interval for each flow rate",
        "Combine PREDICTIONS (the predictions.h5 of K runs of one configuration, e.g. a sweep seed=0,1,2,3,4 with "
        "data.seed fixed, or the files flowlearn predict wrote with each) into OUTPUT: per fracture the geometric "
        "mean of the members' flow rates with its interval at --level, calibrated on the validation split (split "
        "conformal), and the mean pressure. "
        "flowlearn evaluate OUTPUT then says how often the interval holds the reference flow rate.",
        _ensemble_arguments,
        _run_ensemble,
    ),
)


def build_parser(declared: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``flowlearn`` parser with one subparser per entry of :data:`COMMANDS`, whose arguments are declared for
    the commands named in ``declared`` (all where None). Declaring a command's arguments imports what its defaults
    and ranges come from, Lightning and torch for some: ``flowlearn --help`` took 3.4 s with every command's
    declared, and ``flowlearn check`` paid for Lightning, which it never uses."""
    parser = _Parser(
        prog="flowlearn", description="flowlearn: fracture data, LBM references and permeability corrections."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = subparsers.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            formatter_class=_HelpFormatter,
        )
        if declared is None or command.name in declared:
            command.arguments(p)
        p.set_defaults(run=command.run)
    return parser


def _named_command(argv: Sequence[str]) -> list[str]:
    """The command that ``argv`` names, as a list of one name; empty where it names none (``flowlearn --help``).
    The top-level options take no values, so the command is the first word that is not an option."""
    return [word for word in argv if not word.startswith("-")][:1]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowlearn`` console script; returns the process exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_named_command(argv)).parse_args(argv)
    try:
        return args.run(args)
    except USER_ERRORS as err:
        print(f"flowlearn {args.command}: error: {err}", file=sys.stderr)
        return USER_ERROR_STATUS


def console() -> None:
    """The ``flowlearn`` console script: :func:`main` on the command line, then a quick exit."""
    quick_exit()
    sys.exit(main())


if __name__ == "__main__":
    console()
