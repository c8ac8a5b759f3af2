"""``flowlearn convert``, ``check`` and ``departure``: fracture files converted, and their references checked
against local laws (:mod:`flowlearn.data.schema`, :mod:`flowlearn.reference.conservation`,
:mod:`flowlearn.reference.departure`)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from flowlearn.checks import (
    check_distinct_files,
    check_setting,
)
from flowlearn.cli.arguments import checked, non_negative_int, note, path_text
from flowlearn.cli.outputs import check_new_output
from flowlearn.errors import (
    DataValidationError,
    SettingError,
)


def run_convert(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable, convert

    check_new_output(args.dst, "fractures", [args.src], "the input SRC", option="DST")
    check_writable(args.dst)
    count = convert(args.src, args.dst, layout=args.layout, note=note("convert"))
    print(f"wrote {count} fracture(s) to {args.dst} in the {args.layout} layout")
    return 0


def convert_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", type=path_text, help="input HDF5 file (flowlearn or original layout)")
    p.add_argument(
        "dst", type=path_text, help="output HDF5 file: new, or a fracture file to replace (not SRC)"
    )
    p.add_argument("--layout", choices=("flowlearn", "original"), default="flowlearn", help="layout of DST")


def run_departure(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable
    from flowlearn.reference.departure import departures, range_summary, summarize

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
        from flowlearn.data.files import atomic_path
        from flowlearn.reporting.figures import plot_departure, write_png

        with atomic_path(args.figure) as tmp:
            write_png(plot_departure(rows), tmp, dpi=120)
        print(f"wrote {args.figure}")
    return 0


def _percent(value: float) -> str:
    """A share as a percentage with two decimals, '-' where it is not recorded (NaN)."""
    return f"{value:.2%}" if math.isfinite(value) else "-"


def departure_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data",
        type=path_text,
        help="HDF5 fracture file whose fractures store a flow_rate (flowlearn generate)",
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="one line per fracture: σ/⟨b⟩, contact fraction, b_h/⟨b⟩ of the reference flow rate, Q/Q_LCL, rms "
        "mid-surface slope (smoothed over ⟨b⟩) and the flow rate's change under 2x refinement",
    )
    p.add_argument(
        "--figure",
        type=path_text,
        help="PNG of Q/Q_LCL against σ/⟨a⟩ and the wall slope to write: a new .png file, or a PNG to replace",
    )


def run_check(args: argparse.Namespace) -> int:
    from flowlearn.reference.conservation import check_files, summary, table

    check_distinct_files("DATA", args.data, "give each file once (its fractures would be counted twice)")
    try:
        checks = check_files(args.data, margin=args.margin)
    except SettingError as err:
        raise SettingError(f"--{err.field}", err.problem) from err
    print(table(checks))
    print(summary(checks, tolerance=args.tolerance))
    return 0


def check_arguments(p: argparse.ArgumentParser) -> None:
    from flowlearn.reference.conservation import MARGIN, TOLERANCE

    p.add_argument("data", type=path_text, nargs="+", help="HDF5 fracture file(s), either layout")
    p.add_argument(
        "--margin",
        type=non_negative_int,
        default=MARGIN,
        help="columns left out at each end (the boundary layers of an LBM reference's inlet and outlet); at most "
        "(W - 3) / 2 on maps W columns wide, which leaves 2 column pairs to compare",
    )
    p.add_argument(
        "--tolerance",
        type=checked(float, _check_tolerance, "float"),
        default=TOLERANCE,
        help="variation (a fraction, in (0, 1]: 0.01 is 1 %%) above which no law counts as reproducing a reference",
    )


def _check_tolerance(value: float) -> float:
    """``value`` if it is a ``flowlearn check --tolerance``: a variation of the column flux as a fraction of its
    mean, in (0, 1] (up to 100 %); else :class:`SettingError`."""
    check_setting(0 < value <= 1, "tolerance", "must be a number in (0, 1] (a fraction: 0.01 is 1 %)", value)
    return value
