"""The ``flowlearn`` command.

Each subcommand is one :class:`Command` in :data:`COMMANDS`: its name and help, a function that declares its
arguments on its parser, and the function that runs it, from the module of its family (``data``, ``generate``,
``reference``, ``runs``, ``ensemble``, ``scans``), each a thin layer over library functions. A new subcommand is one more
entry. Optional dependencies (lbmpy) are imported only when a subcommand that needs them runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from flowlearn.cli.arguments import HelpFormatter, Parser
from flowlearn.cli.data import (
    check_arguments,
    convert_arguments,
    departure_arguments,
    run_check,
    run_convert,
    run_departure,
)
from flowlearn.cli.ensemble import ensemble_arguments, run_ensemble
from flowlearn.cli.generate import generate_arguments, run_generate
from flowlearn.cli.reference import (
    reference_arguments,
    refine_arguments,
    run_reference,
    run_refine,
    run_smooth_walls,
    run_stokes,
    smooth_walls_arguments,
    stokes_arguments,
)
from flowlearn.cli.runs import (
    evaluate_arguments,
    predict_arguments,
    report_arguments,
    run_evaluate,
    run_predict,
    run_report,
)
from flowlearn.cli.scans import import_arguments, run_import
from flowlearn.errors import USER_ERROR_STATUS, USER_ERRORS
from flowlearn.runtime import quick_exit
from flowlearn.version import __version__


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
        convert_arguments,
        run_convert,
    ),
    Command(
        "import",
        "import a fracture from a scan: a segmented volume, the walls' height maps or an aperture map",
        "Import one fracture from a measurement, KIND volume (a segmented 3D scan), walls (two height maps) or "
        "aperture (a map of the aperture), print what the import found (dropped pore voxels, columns of several pore "
        "runs, the contact fraction, the detected normal) and write it, without a reference pressure, to OUTPUT "
        "(flowlearn layout, atomically). flowlearn import KIND --help lists each kind's options.",
        import_arguments,
        run_import,
    ),
    Command(
        "reference",
        "compute the LBM reference pressure and flow rate of every fracture of a file (needs flowlearn[lbm])",
        "For every fracture of DATA, run the LBM as flowlearn generate does (its settings, its conventions: "
        "pressure averaged over the gap, inlet 2 and outlet 1, the flow rate in m³) between the walls it stores, or "
        "on its aperture centred on a flat mid-plane where it stores none, and write it with its reference to "
        "OUTPUT. OUTPUT is rewritten atomically after each fracture; a rerun keeps the fractures computed before "
        "from the same geometry and settings, so a killed run continues where it stopped. With --slurm the "
        "fractures are computed by a SLURM job array, as flowlearn generate --slurm makes its own.",
        reference_arguments,
        run_reference,
    ),
    Command(
        "check",
        "how far each fracture's reference pressure is from any local conductivity law",
        "For every fracture of DATA with a reference pressure: the variation over the columns of the flow rate "
        "that the pressure implies under the local cubic law T = Ap^3/12, and under the power law T ~ Ap^a that "
        "makes it smallest. A Darcy solution of a local law passes the same flow through every column, so a "
        "variation well above round-off means the reference is no such solution. Prints a table and a summary "
        "line saying whether a per-pixel W is the only model that can fit.",
        check_arguments,
        run_check,
    ),
    Command(
        "generate",
        "generate rough fractures and their LBM reference pressure (needs flowlearn[lbm])",
        "Synthesise self-affine rough fractures, run lbmpy to steady state on each, and write the "
        "aperture-averaged pressure (inlet 2, outlet 1) with provenance to OUTPUT. Lengths are in voxels.",
        generate_arguments,
        run_generate,
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
        refine_arguments,
        run_refine,
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
        smooth_walls_arguments,
        run_smooth_walls,
    ),
    Command(
        "departure",
        "how far each fracture's flow rate departs from the local cubic law",
        "For every fracture of DATA that stores its reference flow rate Q, solve the Darcy problem with the local "
        "cubic law T = Ap³/12 on its aperture map and compare: Q/Q_LCL, its spread over the file, and the "
        "geometry that goes with it; then a table of the file's statistics against the ranges of rock joints "
        "(σ/⟨b⟩, contact area, b_h/⟨b⟩, mid-surface and wall slopes), a recipe's exact cases left out.",
        departure_arguments,
        run_departure,
    ),
    Command(
        "evaluate",
        "the held-out verdict: the model against every baseline, medians over fractures",
        "For the fractures of one split of PREDICTIONS, compute the MSE, the departure error and the flow-rate "
        "error of the model and of each baseline per fracture, print their medians, the model's reduction of the "
        "LCL's, and on how many fractures the model beats the LCL in both departure and flow rate.",
        evaluate_arguments,
        run_evaluate,
    ),
    Command(
        "stokes",
        "an independent Stokes solve (OpenFOAM) of each fracture, against its reference",
        "Mesh the fluid voxels of each fracture of DATA exactly as the LBM saw them (the same reservoirs, symmetry "
        "planes and no-slip walls), or with --mesh walls the smooth walls the file stores, solve steady Stokes flow "
        "with OpenFOAM's simpleFoam, and print its flow rate "
        "and its flux-weighted gap-averaged pressure against the file's reference: Q/Q_ref, and the pressure's 1 - R² "
        "and departure error. Needs OpenFOAM (apt-get install openfoam).",
        stokes_arguments,
        run_stokes,
    ),
    Command(
        "report",
        "figures and a markdown summary of a finished run, or a comparison table of a sweep",
        "For a run directory (what `python train.py` writes): write figures/*.png and report.md (metrics of the "
        "model and of every baseline, improvement over the local cubic law, config). For a sweep directory "
        "(`python train.py -m`): write report.md "
        "with one row per run, and each complete run's report. Exits 1 when a run of a sweep is incomplete, "
        "2 on an error.",
        report_arguments,
        run_report,
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
        predict_arguments,
        run_predict,
    ),
    Command(
        "ensemble",
        "combine the predictions of K trained runs into one, with an interval for each flow rate",
        "Combine PREDICTIONS (the predictions.h5 of K runs of one configuration, e.g. a sweep seed=0,1,2,3,4 with "
        "data.seed fixed, or the files flowlearn predict wrote with each) into OUTPUT: per fracture the geometric "
        "mean of the members' flow rates with its interval at --level, calibrated on the validation split (split "
        "conformal), and the mean pressure. "
        "flowlearn evaluate OUTPUT then says how often the interval holds the reference flow rate.",
        ensemble_arguments,
        run_ensemble,
    ),
)


def build_parser(declared: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``flowlearn`` parser with one subparser per entry of :data:`COMMANDS`, whose arguments are declared for
    the commands named in ``declared`` (all where None). Declaring a command's arguments imports what its defaults
    and ranges come from, Lightning and torch for some: ``flowlearn --help`` took 3.4 s with every command's
    declared, and ``flowlearn check`` paid for Lightning, which it never uses."""
    parser = Parser(
        prog="flowlearn", description="flowlearn: fracture data, LBM references and permeability corrections."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = subparsers.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            formatter_class=HelpFormatter,
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
