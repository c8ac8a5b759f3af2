"""``flowlearn generate``: rough fractures and their LBM references (:mod:`flowlearn.reference.generate`), here
or as a SLURM job array (:mod:`flowlearn.reference.cluster`)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from flowlearn.checks import (
    check_cores,
    check_setting,
)
from flowlearn.cli.arguments import as_typed, from_options, note, one_or_pair, path_text, voxel_range
from flowlearn.errors import (
    ReferenceConvergenceError,
    SettingError,
)


def run_generate(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable
    from flowlearn.fractures.recipes import RECIPES
    from flowlearn.reference.generate import DatasetConfig, generate_dataset
    from flowlearn.reference.lbm import LBMSettings

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
            name: one_or_pair(name, getattr(args, name))
            if name in recipe_class.ranged()
            else getattr(args, name)
            for name in own
            if getattr(args, name) is not None
        }
        recipe = recipe_class(**given)
        lbm = from_options(LBMSettings, args)
        config = from_options(
            DatasetConfig,
            args,
            shape=tuple(args.shape),
            lbm=lbm,
            recipe=recipe,
            stokes=_stokes_settings(args),
        )
        check_setting(args.processes >= 1, "processes", "must be an integer >= 1", args.processes)
    except SettingError as err:
        # The settings name their fields; on the command line they are options.
        raise SettingError(f"--{err.field.replace('_', '-')}", err.problem) from err
    slurm = slurm_settings(args)
    if slurm is not None and args.processes != 1:
        raise SettingError(
            "--processes",
            "applies only to a local generation: with --slurm each array task is one process on its "
            "--cpus-per-task CPUs (ask for more tasks with --tasks)",
        )
    if slurm is None:
        # On this machine's cores (with --slurm, the threads run on the cluster's nodes).
        check_cores("--threads", args.threads)
        check_cores("--processes", args.processes)
    check_writable(args.output)
    if slurm is None:
        try:
            summary = generate_dataset(config, args.output, processes=args.processes, progress=not args.quiet)
        except ReferenceConvergenceError as err:
            helps = (
                f"raise --max-steps (now {args.max_steps}), or --tolerance (now {args.tolerance:g})"
                if config.reference == "lbm"
                else f"lower --stokes-relaxation (now {args.stokes_relaxation:g})"
            )
            raise ReferenceConvergenceError(
                f"{err}: {helps}; the finished fractures are kept, and the same command continues"
            ) from err
    else:
        from flowlearn.reference.cluster import generate_on_slurm

        summary = generate_on_slurm(
            config, args.output, slurm, wait=not args.no_wait, progress=not args.quiet
        )
    print(json.dumps(summary, indent=2))
    # Said once the fractures are made, so that an error that stops the run stays its only line.
    exact = recipe.exact_cases(config.count)
    if exact:
        kinds = ", ".join(f"{index} {kind.replace('_', ' ')}" for index, kind in list(exact.items())[:5])
        more = f" and {len(exact) - 5} more" if len(exact) > 5 else ""
        note("generate")(
            f"{len(exact)} of the {config.count} fractures are exact cases ({kinds}{more}), not rough; "
            "--special-every 0 makes rough ones only"
        )
    return 0


def _stokes_settings(args: argparse.Namespace) -> object:
    """The ``stokes`` reference's settings from the ``--stokes-*`` options; a refused one named as its option."""
    from flowlearn.reference.wall_reference import WallReferenceSettings

    try:
        return WallReferenceSettings(
            cells_per_voxel=tuple(args.stokes_cells_per_voxel),
            tolerance=args.stokes_tolerance,
            relaxation=args.stokes_relaxation,
        )
    except SettingError as err:
        raise SettingError(f"stokes_{err.field}", err.problem) from err


# The recipes' settings as options of ``flowlearn generate``: name -> what it sets. Ranged settings take one value or
# LOW HIGH; the others one value. Each belongs to the recipes whose dataclass has a field of its name.
_RECIPE_OPTIONS = {
    "hurst": "Hurst exponent of the walls",
    "aperture_std": "sigma/<b> of the open gap, before closure",
    "contact_fraction": "share of the map where the walls touch (by closure)",
    "mismatch_ratio": "mismatch length over the mean aperture (log-uniform draw)",
    "mid_slope": "rms slope of the mid-surface smoothed over the mean aperture",
    "special_every": "of every this many fractures, the first five are exact cases (plates flat and tilted, two flat "
    "mid-surfaces; the flat plates in the first block only; a note says which of yours are; 0: none)",
    "rms_ratio": "rms height of each wall over the mean aperture",
    "mismatch_length": "the walls match above this wavelength (voxels)",
    "wavelength_ratio": "shortest roughness wavelength over the mean aperture",
    "shear": "shift of the top wall along the flow (voxels)",
    "extent": "the walls are drawn this many times the map along each axis; the map is a window of them",
}


def generate_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.fractures.recipes import RECIPES
    from flowlearn.reference.generate import MAX_COUNT, REFERENCES, DatasetConfig
    from flowlearn.reference.wall_reference import WallReferenceSettings

    d = DatasetConfig()
    p.add_argument("output", type=path_text, help="HDF5 file to write (flowlearn layout)")
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
        help="what the fractures draw: published (walls in contact, published ranges), rock (the same as windows "
        "of larger walls, with the slopes of rock joints; best at --mean-aperture 6 on 64x64 maps) or winding "
        "(sheared, winding walls: the recipe of earlier datasets)",
    )
    g = p.add_argument_group("recipe settings (default: the recipe's own; see docs/data.md)")
    for name, text in _RECIPE_OPTIONS.items():
        owners = {r: cls() for r, cls in RECIPES.items() if name in {f.name for f in dataclasses.fields(cls)}}
        defaults = "; ".join(f"{r}: {as_typed(getattr(recipe, name))}" for r, recipe in owners.items())
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
        "--voxel-size", type=float, default=d.voxel_size, help=f"metres per voxel, in {voxel_range()}"
    )
    g.add_argument(
        "--refine-every",
        type=int,
        default=d.refine_every,
        metavar="N",
        help="every N-th fracture also runs on the 2x grid and records its flow rate's change (0: none; each costs "
        "about 17x)",
    )
    w = WallReferenceSettings()
    g = p.add_argument_group("reference")
    g.add_argument(
        "--reference",
        choices=REFERENCES,
        default=d.reference,
        help="what solves each fracture's flow: lbm (the LBM on the voxelised walls; the --omega ... options) or "
        "stokes (OpenFOAM on meshes fitted to the smooth walls at two resolutions, the flow rate extrapolated; "
        "converged where the LBM is not, see docs/data.md)",
    )
    g.add_argument(
        "--stokes-cells-per-voxel",
        type=int,
        nargs=2,
        default=list(w.cells_per_voxel),
        metavar=("R1", "R2"),
        help="the stokes reference's coarser and finer mesh, cells along each voxel",
    )
    g.add_argument(
        "--stokes-tolerance",
        type=float,
        default=w.tolerance,
        help="each Stokes solve is steady when the pressure's normalised residual is below this (at most 1e-6)",
    )
    g.add_argument(
        "--stokes-relaxation",
        type=float,
        default=w.relaxation,
        help="under-relaxation of the velocity per iteration, in (0, 1] (0.7 steadies very steep walls)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes, each with its share of the cores: at most the cores (more than the fractures to "
        "make are not started)",
    )
    lbm_arguments(
        p,
        threads="OpenMP threads of each process, at most the cores (default: the cores shared among the processes)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    slurm_arguments(p)


def lbm_arguments(p: argparse.ArgumentParser, threads: str) -> None:
    """The LBM's options (:class:`~flowlearn.reference.lbm.LBMSettings`, less ``magic``), shared by the commands that
    run it; ``threads`` is the help of ``--threads``, which says how the command shares the cores."""
    from flowlearn.reference.lbm import MAX_DENSITY_DROP, LBMSettings

    s = LBMSettings()
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
    g.add_argument(
        "--target",
        choices=("auto", "cpu", "gpu"),
        default=s.target,
        help="where lbmpy runs: cpu, gpu (a CUDA device, with cupy), or auto (the GPU where cupy sees one)",
    )
    g.add_argument("--threads", type=int, default=s.threads, help=threads)
    g.add_argument(
        "--reservoir", type=int, default=s.reservoir, help="open columns before/after the fracture"
    )


def slurm_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``--slurm`` (``flowlearn generate``, ``flowlearn reference``). Their defaults are None (the help
    states SlurmSettings'), so that one given without --slurm can be refused."""
    from flowlearn.reference.cluster import MAX_DEFAULT_TASKS, SlurmSettings

    d = SlurmSettings()
    g = p.add_argument_group(
        "SLURM",
        "with --slurm, the fractures are computed by a job array; the command waits for it and merges the parts",
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


# The options of slurm_arguments, less --slurm, as SlurmSettings' fields (slurm_setup is its ``setup``).
_SLURM_OPTIONS = (
    "tasks", "partition", "account", "timeout_min", "cpus_per_task", "mem_gb", "array_parallelism", "slurm_setup",
    "no_wait",
)  # fmt: skip


def slurm_settings(args: argparse.Namespace) -> object | None:
    """The :class:`~flowlearn.reference.cluster.SlurmSettings` of a command's ``--slurm`` (:func:`slurm_arguments`);
    None without --slurm.

    Raises:
        SettingError: naming the option: one out of its range, or a SLURM option without --slurm.
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
    from flowlearn.reference.cluster import SlurmSettings

    fields = {name: getattr(args, name) for name in given if name not in ("slurm_setup", "no_wait")}
    try:
        return SlurmSettings(**fields, setup=tuple(args.slurm_setup or ()))
    except SettingError as err:
        raise SettingError(f"--{err.field.replace('_', '-')}", err.problem) from err
