"""Write the scans of a generated fracture, whose truth is known: what a micro-CT or a profilometer would give.

    flowlearn generate truth.h5 --count 1 --recipe winding --seed 1000
    python examples/synthetic_scan.py truth.h5 scan/

writes into ``scan/``, from the walls that ``flowlearn generate`` stored with the fracture (metres, its voxel size):

* ``volume.tif``: a segmented volume, uint8, 255 for pore and 0 for solid, a multi-page TIFF whose pages are the
  map's rows (each page one row's columns by the depth across the gap): the pore voxels are those the generator's
  LBM ran on (:func:`~flowlearn.reference.voxels.voxelize`, a voxel is pore where its centre lies between the
  walls), with :data:`PADDING` voxels of solid below the lowest wall and above the highest;
* ``walls_top.csv`` and ``walls_bottom.csv``: the walls' heights in micrometres, upwards from the volume's lowest
  face, as a profilometer measures each surface from one datum;
* ``aperture.tif``: the walls' separation as 16-bit grey levels of :data:`GREY_LEVEL` metres.

``flowlearn import volume|walls|aperture`` then reads them back (docs/scans.md, tests/test_scan_roundtrip.py): the
truth to compare with is the generated file's aperture, walls and LBM reference.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import tifffile

from flowlearn.data.files import read_fracture, read_fractures
from flowlearn.data.schema import Fracture
from flowlearn.reference.voxels import voxelize

# Solid voxels below the lowest wall and above the highest: a scan holds rock on both sides of the gap.
PADDING = 3
# Metres per grey level of the aperture image: 10 nm, so that 16 bits hold apertures up to 0.65 mm.
GREY_LEVEL = 1e-8
PORE, SOLID = 255, 0


def write_scan(fracture: Fracture, folder: str | Path) -> dict[str, Path]:
    """Write the scans of ``fracture`` (which stores its walls and voxel size) into ``folder`` (made if absent);
    returns their paths by name: ``volume``, ``top``, ``bottom``, ``aperture``. Imported, they are the fractures
    ``volume``, ``walls`` and ``aperture``."""
    if fracture.bottom is None or not math.isfinite(fracture.voxel_size):
        raise ValueError(
            f"{fracture.name}: a scan is written from the walls and the voxel size, which it lacks"
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    size = fracture.voxel_size
    bottom, top = fracture.bottom / size, fracture.top / size  # voxels
    pore = np.pad(voxelize(bottom, top), ((0, 0), (0, 0), (PADDING, PADDING)))
    paths = {
        name: folder / name for name in ("volume.tif", "walls_top.csv", "walls_bottom.csv", "aperture.tif")
    }
    tifffile.imwrite(
        paths["volume.tif"], np.where(pore, PORE, SOLID).astype(np.uint8), photometric="minisblack"
    )
    # voxelize's box starts at the voxel face below the lowest wall; the volume's lowest face lies PADDING below.
    datum = math.floor(float(bottom.min())) - PADDING
    for name, wall in (("walls_top.csv", top), ("walls_bottom.csv", bottom)):
        np.savetxt(paths[name], (wall - datum) * size * 1e6, fmt="%.4f", delimiter=",")
    separation = np.maximum(fracture.top - fracture.bottom, 0.0)
    tifffile.imwrite(
        paths["aperture.tif"], np.round(separation / GREY_LEVEL).astype(np.uint16), photometric="minisblack"
    )
    return {name.split(".")[0].removeprefix("walls_"): path for name, path in paths.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("truth", help="a fracture file with walls (flowlearn generate)")
    parser.add_argument("folder", help="where to write the scans")
    parser.add_argument("--fracture", metavar="NAME", help="the fracture to scan (default: the file's first)")
    args = parser.parse_args()
    fracture = read_fracture(args.truth, args.fracture) if args.fracture else read_fractures(args.truth)[0]
    for name, path in write_scan(fracture, args.folder).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
