"""``flowlearn import volume|walls|aperture``: a fracture file from a scan (:mod:`flowlearn.data.scans`), one
subcommand per importer, whose options are the importer's arguments one for one."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from flowlearn.cli.arguments import HelpFormatter, path_text, positive_int, voxel_range, voxel_size
from flowlearn.cli.outputs import check_new_output
from flowlearn.errors import DataValidationError, SettingError

if TYPE_CHECKING:  # the importers load numpy, scipy and tifffile: only when a command runs
    from flowlearn.data.scans import MapReport
    from flowlearn.data.schema import Fracture

# The importers' keywords as their messages name them (where the fault is the file's, not an option's: "is
# pore_label right?"), and the options or arguments that set them here.
_KEYWORDS = {
    r"\bpore_label\b": "--pore-label",
    r"\bnormal=": "--normal",
    r"\bflow_axis\b": "--flow-axis",
    r"\bflip=True\b": "--flip",
    r"\btop_path\b": "TOP",
    r"\bbottom_path\b": "BOTTOM",
}
LENGTH_UNITS = ("m", "mm", "um")


def run_import(args: argparse.Namespace) -> int:
    from flowlearn.data.files import check_writable, write_fractures
    from flowlearn.data.scans import import_aperture, import_volume, import_walls

    sources = [args.top, args.bottom] if args.kind == "walls" else [args.source]
    check_new_output(args.output, "fractures", sources, "the scan")
    check_writable(args.output)
    crop = None if args.crop is None else tuple(args.crop)
    try:
        if args.kind == "volume":
            fracture, report = import_volume(
                args.source,
                args.voxel_size,
                pore_label=args.pore_label,
                normal=args.normal,
                flow_axis=args.flow_axis,
                shape=None if args.shape is None else tuple(args.shape),
                dtype=args.dtype,
                crop=crop,
                coarsen=args.coarsen,
            )
        elif args.kind == "walls":
            fracture, report = import_walls(
                args.top,
                args.bottom,
                args.pixel_size,
                units=args.units,
                flip=args.flip,
                crop=crop,
                coarsen=args.coarsen,
            )
        else:
            fracture, report = import_aperture(
                args.source,
                args.pixel_size,
                scale=args.scale,
                units=args.units,
                crop=crop,
                coarsen=args.coarsen,
            )
    except SettingError as err:
        raise SettingError(f"--{err.field.replace('_', '-')}", err.problem) from err
    except (DataValidationError, FileNotFoundError) as err:
        # volume's and aperture's file is their argument "path"; walls' are top_path and bottom_path.
        keywords = {**_KEYWORDS, r"\(path\)": "(SCAN)" if args.kind == "volume" else "(MAP)"}
        raise type(err)(_in_options(str(err), sources, keywords)) from err
    write_fractures(args.output, [fracture])
    for line in _report_lines(args.kind, fracture, report, " and ".join(sources)):
        print(line)
    print(f"wrote fracture {fracture.name!r} to {args.output}")
    return 0


def _in_options(message: str, paths: Sequence[str], keywords: dict[str, str]) -> str:
    """An importer's ``message`` with its ``keywords`` (patterns: :data:`_KEYWORDS` and the like) as this command's
    options and arguments, outside the file names ``paths`` it quotes."""
    names = sorted({*paths, *(str(Path(path)) for path in paths)}, key=len, reverse=True)
    pieces = re.split(f"({'|'.join(map(re.escape, names))})", message)
    for index in range(0, len(pieces), 2):  # the pieces between the file names
        for keyword, option in keywords.items():
            pieces[index] = re.sub(keyword, option, pieces[index])
    return "".join(pieces)


def _report_lines(kind: str, fracture: Fracture, report: MapReport, sources: str) -> list[str]:
    """What an import found, in a few lines: the map, what the volume's pore held or the walls' overlap, the
    aperture and the contacts."""
    rows, cols = report.shape
    lines = [f"{sources}: a {rows}x{cols} map (flow along its columns, inlet at column 0)"]
    if kind == "volume":
        if report.thickness is None:
            normal = f"normal: axis {report.normal} (given)"
        else:
            along = ", ".join(f"{t:.3g}" for t in report.thickness)
            normal = (
                f"normal: axis {report.normal} (detected: pore runs {along} voxels thick along axes 0, 1, 2)"
            )
        lines += [
            normal,
            f"pore voxels: {report.pore_voxels}, of which {report.dropped_voxels} dropped (not connected to the "
            f"fracture); {report.multi_run_columns} map column(s) of several pore runs; {report.cut_columns} cut "
            "by the volume's faces (their aperture is a lower bound)",
        ]
    elif kind == "walls":
        lines.append(
            f"{report.overlap_pixels} pixel(s) where the top surface lay below the bottom one: set to touch there"
        )
    mean = float(fracture.aperture.mean())
    lines.append(
        f"aperture: mean {mean:.4g} m ({mean / fracture.voxel_size:.3g} voxels of {fracture.voxel_size:.4g} m), "
        f"contact fraction {report.contact_fraction:.2%}"
    )
    if any(report.trimmed):
        lines.append(
            f"coarsening left out the last {report.trimmed[0]} row(s) and {report.trimmed[1]} column(s), which "
            "fill no block"
        )
    return lines


def import_arguments(p: argparse.ArgumentParser) -> None:
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    volume = kinds.add_parser(
        "volume",
        help="a segmented 3D scan (micro-CT) of the gap's pore voxels",
        description="Import the pore voxels of a segmented 3D scan: along each line across the fracture, their count "
        "is the aperture and their first and last faces are the walls (the largest pore cluster joining the inlet "
        "face to the outlet face; isolated pores are dropped). Prints what it found and writes OUTPUT.",
        formatter_class=HelpFormatter,
    )
    volume.add_argument(
        "source",
        type=path_text,
        metavar="SCAN",
        help="multi-page TIFF (pages are axis 0), folder of single-page TIFF slices (axis 0, in natural order), "
        ".npy, or raw file (any other name; give --shape and --dtype)",
    )
    volume.add_argument(
        "--voxel-size",
        type=voxel_size,
        required=True,
        metavar="M",
        help=f"metres per voxel (cubic voxels), in {voxel_range()}",
    )
    volume.add_argument(
        "--pore-label",
        type=int,
        metavar="N",
        help="the value of pore voxels, an integer (default: every nonzero voxel is pore)",
    )
    volume.add_argument(
        "--normal",
        type=int,
        choices=(0, 1, 2),
        help="the volume's axis across the fracture (default: detected, the axis along which the pore is thinnest)",
    )
    volume.add_argument(
        "--flow-axis",
        choices=("columns", "rows"),
        default="columns",
        help="columns: the flow runs along the last of the two other axes; rows: along the first (the map is then "
        "transposed, so that the flow runs along its columns)",
    )
    volume.add_argument(
        "--shape",
        type=positive_int,
        nargs=3,
        metavar=("N0", "N1", "N2"),
        help="a raw file's axes, C order, integers >= 1 (raw files only)",
    )
    volume.add_argument(
        "--dtype",
        metavar="TYPE",
        help="a raw file's numpy dtype: uint8, <u2 (little-endian 16 bits), >u2, float32, ... (raw files only)",
    )
    _map_options(volume, "map (the two axes other than the normal, in their order)")
    walls = kinds.add_parser(
        "walls",
        help="the height maps of the two walls (profilometry)",
        description="Import a fracture from the surfaces of its two walls, measured one by one: the aperture is "
        "their separation, 0 where they touch or the top lies below the bottom (both are then set to their mean "
        "height). Prints what it found and writes OUTPUT.",
        formatter_class=HelpFormatter,
    )
    walls.add_argument(
        "top",
        type=path_text,
        metavar="TOP",
        help="the top wall's heights, upwards from a reference plane: CSV or text, TIFF, PNG or .npy",
    )
    walls.add_argument(
        "bottom",
        type=path_text,
        metavar="BOTTOM",
        help="the bottom wall's heights from the same plane, of TOP's shape, pixel for pixel the same point",
    )
    _pixel_size(walls)
    walls.add_argument(
        "--units",
        choices=LENGTH_UNITS,
        default="m",
        help="the unit of the heights: m, mm or um (micrometres)",
    )
    walls.add_argument(
        "--flip",
        action="store_true",
        help="TOP holds heights measured from the top wall's own side (a surface turned over to be scanned face up): "
        "they are negated (not mirrored)",
    )
    _map_options(walls, "maps")
    aperture = kinds.add_parser(
        "aperture",
        help="a map of the aperture (grey levels, or lengths)",
        description="Import a fracture from a map of its aperture, without walls (flowlearn reference then "
        "centres its gap on a flat mid-plane). Prints what it found and writes OUTPUT.",
        formatter_class=HelpFormatter,
    )
    aperture.add_argument(
        "source",
        type=path_text,
        metavar="MAP",
        help="values >= 0, 0 where the walls touch: CSV or text, TIFF, PNG or .npy",
    )
    _pixel_size(aperture)
    given = aperture.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--scale",
        type=float,
        metavar="M",
        help="metres per grey level of an image: aperture = value x M, a number > 0",
    )
    given.add_argument(
        "--units", choices=LENGTH_UNITS, help="the unit of values that are lengths: m, mm or um (micrometres)"
    )
    _map_options(aperture, "map")


def _pixel_size(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pixel-size",
        type=voxel_size,
        required=True,
        metavar="M",
        help=f"metres between pixels (square pixels), in {voxel_range()}: the voxel size of the fracture",
    )


def _map_options(p: argparse.ArgumentParser, what: str) -> None:
    """The options every importer takes: the output, the crop and the coarsening of the ``what``."""
    p.add_argument(
        "-o",
        "--output",
        type=path_text,
        required=True,
        help="HDF5 fracture file to write (flowlearn layout): new, or a fracture file to replace",
    )
    p.add_argument(
        "--crop",
        type=int,
        nargs=4,
        metavar=("R0", "R1", "C0", "C1"),
        help=f"import rows R0 to R1 and columns C0 to C1 of the {what}, ends excluded: 0 <= R0 < R1 <= rows, "
        "0 <= C0 < C1 <= columns",
    )
    p.add_argument(
        "--coarsen",
        type=positive_int,
        default=1,
        metavar="N",
        help="block means of N x N pixels, an integer >= 1 (the last rows and columns that fill no block are left "
        "out); the voxel size becomes N times larger",
    )
