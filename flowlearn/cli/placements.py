"""``python -m flowlearn.cli.placements DATA [--figure PNG]``: the wall-placement study of
:mod:`flowlearn.reference.placements` on one fracture of a file, its report printed as JSON and its pressure
departures drawn."""

from __future__ import annotations

import argparse
import json

from flowlearn.data.files import atomic_path, read_fractures
from flowlearn.reference.placements import placement_study
from flowlearn.reporting.figures import plot_departure_maps, write_png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flowlearn.cli.placements",
        description="What an aperture map alone cannot say: the LBM flow under each way of placing walls around it.",
    )
    parser.add_argument("data", help="HDF5 fracture file (either layout) with a reference pressure")
    parser.add_argument("--fracture", help="group name (default: the first)")
    parser.add_argument(
        "--voxels-per-unit",
        type=float,
        default=256.0,
        help="voxels per unit of the stored aperture (the original file stores apertures over a 256-voxel depth)",
    )
    parser.add_argument("--coarsen", type=int, default=4, help="block size of the averaging before the LBM")
    parser.add_argument("--figure", help="PNG of the pressure departures from the straight line")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads")
    args = parser.parse_args(argv)

    fractures = read_fractures(args.data)
    fracture = (
        next((f for f in fractures if f.name == args.fracture), fractures[0])
        if args.fracture
        else fractures[0]
    )
    report, departures = placement_study(fracture, args.voxels_per_unit, args.coarsen, args.threads)
    print(json.dumps(report, indent=2))
    if args.figure:
        with atomic_path(args.figure) as tmp:
            write_png(plot_departure_maps(departures), tmp, dpi=120)
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
