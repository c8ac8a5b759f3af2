"""``flowlearn reference``: the LBM reference of a file's fractures (:mod:`flowlearn.reference.references`);
``flowlearn refine``, ``smooth-walls`` and ``stokes``: how far a fracture's reference lies from the converged flow
(:mod:`flowlearn.reference.refinement`, :mod:`flowlearn.reference.reference_error`,
:mod:`flowlearn.reference.stokes`)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from flowlearn.checks import (
    check_cores,
)
from flowlearn.cli.arguments import (
    from_options,
    named_fractures,
    path_text,
    positive_int,
    voxel_range,
    voxel_size,
)
from flowlearn.cli.generate import lbm_arguments, slurm_arguments, slurm_settings
from flowlearn.cli.outputs import check_new_output
from flowlearn.errors import (
    ReferenceConvergenceError,
    SettingError,
)

if TYPE_CHECKING:
    from flowlearn.data.schema import Fracture


def run_reference(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable
    from flowlearn.reference.lbm import LBMSettings
    from flowlearn.reference.references import reference_file, walled

    try:
        settings = from_options(LBMSettings, args)
    except SettingError as err:
        raise SettingError(f"--{err.field.replace('_', '-')}", err.problem) from err
    slurm = slurm_settings(args)
    if slurm is None:
        check_cores("--threads", args.threads)  # this machine's cores; with --slurm, the nodes'
    check_new_output(args.output, "fractures", [args.data], "the input DATA")
    check_writable(args.output)
    if slurm is not None:
        from flowlearn.reference.cluster import References, run_array

        job = References(args.data, args.output, settings)
        print(json.dumps(run_array(job, slurm, wait=not args.no_wait, progress=not args.quiet), indent=2))
        return 0
    rows: list[str] = []

    def report(fracture: Fracture, seconds: float) -> None:
        if not rows:  # the header once a fracture is done: after every check, not before an error
            print(f"{'fracture':<16} {'gap':<6} {'voxel box':>14} {'steps':>7} {'seconds':>8} {'Q/Q_LCL':>8}")
        rows.append(fracture.name)
        box = "x".join(map(str, fracture.provenance["voxel_box"]))
        steps = fracture.provenance["lbm"]["convergence"]["steps"]
        ratio = fracture.provenance["departure"]["ratio"]
        gap = "walls" if walled(fracture) else "flat"
        print(f"{fracture.name:<16} {gap:<6} {box:>14} {steps:>7} {seconds:>8.1f} {ratio:>8.3f}", flush=True)

    try:
        done = reference_file(args.data, args.output, settings, progress=not args.quiet, report=report)
    except ReferenceConvergenceError as err:
        raise ReferenceConvergenceError(
            f"{err}: raise --max-steps (now {args.max_steps}), or --tolerance (now {args.tolerance:g}); the "
            "finished fractures are kept, and the same command continues"
        ) from err
    print(
        f"wrote the LBM references of {done.computed + done.kept} fracture(s) to {args.output} ({done.computed} "
        f"computed now, {done.kept} kept from an earlier run)"
    )
    return 0


def reference_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data",
        type=path_text,
        help="HDF5 fracture file, either layout, whose fractures know their voxel size (flowlearn import)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=path_text,
        required=True,
        help="HDF5 file to write (flowlearn layout): new, the output of an earlier run to continue, or a fracture "
        "file to replace (not DATA)",
    )
    lbm_arguments(p, threads="OpenMP threads of the LBM, at most the cores (default: every core)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    slurm_arguments(p)


def run_refine(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable
    from flowlearn.reference.refinement import check_convergence_records, infer_file, refine_file

    if args.fracture and args.every is not None:
        raise SettingError("--every", "applies only without --fracture, which names the fractures to measure")
    if args.infer_only:
        for option, value in (("--fracture", args.fracture), ("--every", args.every)):
            if value is not None:
                raise SettingError(option, "chooses fractures to measure, and --infer-only measures none")
    check_cores("--threads", args.threads)
    check_writable(args.data)
    chosen = named_fractures(args.data, args.fracture, every=args.every or 1)
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


def refine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data",
        type=path_text,
        help="HDF5 fracture file in flowlearn's layout with walls (flowlearn generate)",
    )
    p.add_argument(
        "--fracture",
        action="append",
        metavar="NAME",
        help="measure this fracture (repeatable; default: --every)",
    )
    p.add_argument(
        "--every",
        type=positive_int,
        metavar="N",
        help="without --fracture, measure fractures 0, N, 2N, ... in group order (default: 1, every fracture)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
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


def run_smooth_walls(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable
    from flowlearn.reference.reference_error import infer_file, record_file

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


def smooth_walls_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data",
        type=path_text,
        help="HDF5 fracture file in flowlearn's layout, with reference flow rates and pressures",
    )
    p.add_argument(
        "stokes",
        type=path_text,
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


def run_stokes(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable, read_fracture, write_fractures
    from flowlearn.reference.reference_error import agreement
    from flowlearn.reference.stokes import (
        StokesSettings,
        check_box,
        check_case_dir,
        check_openfoam,
        check_walls,
        fracture_walls,
        fracture_window,
        stokes_fracture,
    )
    from flowlearn.reference.voxels import fracture_voxels

    try:
        settings = from_options(StokesSettings, args)
    except SettingError as err:
        raise SettingError(f"--{err.field.replace('_', '-')}", err.problem) from err
    check_cores("--processes", settings.processes)
    if args.output is not None:
        check_new_output(args.output, "fractures", [args.data], "the input DATA")
        check_writable(args.output)
    names = named_fractures(args.data, args.fracture)
    sources = [read_fracture(args.data, name) for name in names]
    # Every fracture is checked (a fluid path, a mesh that fits in memory) before the first solve.
    for fracture in sources:
        try:
            if args.mesh == "walls":
                walls = fracture_walls(fracture, args.voxel_size)
                check_walls(*walls, settings, window=fracture_window(fracture, *walls))
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


def stokes_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.reference.stokes import MAX_ITERATIONS, StokesSettings

    d = StokesSettings()
    p.add_argument(
        "data",
        type=path_text,
        help="HDF5 fracture file, either layout (the walls are used where it stores them)",
    )
    p.add_argument(
        "--fracture", action="append", metavar="NAME", help="solve this fracture (repeatable; default: all)"
    )
    p.add_argument(
        "-o",
        "--output",
        type=path_text,
        help="HDF5 file to write the Stokes pressure and flow rate to (flowlearn layout): new, or a fracture file to "
        "replace (not DATA)",
    )
    p.add_argument(
        "--voxel-size",
        type=voxel_size,
        metavar="M",
        help=f"metres per voxel, in {voxel_range()}, for files that do not store it (default: each fracture's own)",
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
        type=path_text,
        metavar="DIR",
        help="keep each fracture's OpenFOAM case in DIR/NAME (for ParaView)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
