"""The comparison and the figures of docs/scans.md ("From a scan to a prediction"): the references computed from
the scans of a generated fracture (examples/synthetic_scan.py) against the generated truth, and what a user looks
at after ``flowlearn predict``.

    python examples/scan_figures.py truth.h5 scan/volume.tif volume_ref.h5 walls_ref.h5 aperture_ref.h5 \\
        --predictions predicted.h5 -o docs/img

prints one row per reference (``flowlearn reference`` of each import): its flow rate over the truth's less 1, the
rms difference of its pressure from the truth's over the cells where both carry flow, and its flow rate over the
local cubic law's; and writes, as small PNGs,

* ``scan_aperture.png``: a page of the segmented volume (one map row's columns by the depth across the gap), the
  aperture imported from the volume, and the separation of the imported walls minus it (the voxelisation);
* ``scan_pressure.png``: the pressure of the volume's reference, the local cubic law's and the trained model's
  (flowlearn predict), on one scale.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import tifffile
from matplotlib.figure import Figure

from flowlearn.data.files import read_fractures
from flowlearn.reporting.figures import plot_pressure, write_png
from flowlearn.training.predictions import read_predictions

DPI = 80  # small PNGs for the documentation site


def compare(truth_path: str, references: list[str]) -> list[str]:
    """The rows of the comparison of each file of ``references`` (one fracture each) with the truth's fracture."""
    (truth,) = read_fractures(truth_path)
    rows = [f"{'reference':<18} {'Q/Q_truth - 1':>13} {'rms Δp':>9} {'Q/Q_LCL':>8}"]
    for path in references:
        (fracture,) = read_fractures(path)
        both = truth.active & fracture.active
        rms = float(np.sqrt(np.mean((fracture.pressure - truth.pressure)[both] ** 2)))
        ratio = fracture.provenance["departure"]["ratio"]
        change = fracture.flow_rate / truth.flow_rate - 1
        rows.append(f"{Path(path).name:<18} {change:>+13.2e} {rms:>9.2e} {ratio:>8.3f}")
    return rows


def aperture_figure(volume_path: str, volume: str, walls: str) -> Figure:
    """A page of the scan, the aperture imported from it (µm), and the imported walls' separation minus it."""
    page = tifffile.imread(volume_path, key=0)  # map row 0: columns x depth
    (from_volume,), (from_walls,) = read_fractures(volume), read_fractures(walls)
    size = from_volume.voxel_size
    # A Figure without pyplot, as flowlearn's figures are: write_png renders it with Agg, whatever the backend.
    fig = Figure(figsize=(11, 3.4), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[0.8, 1, 1])
    axes[0].imshow(page.T, origin="lower", cmap="gray", interpolation="nearest", aspect="equal")
    axes[0].set(title="volume.tif, page 0 (map row 0)", xlabel="column", ylabel="voxel across the gap")
    extent = (0, from_volume.shape[1] * size * 1e3, from_volume.shape[0] * size * 1e3, 0)
    image = axes[1].imshow(from_volume.aperture * 1e6, cmap="YlGnBu", extent=extent)
    axes[1].set(title="aperture from the volume", xlabel="x (mm), the flow", ylabel="y (mm)")
    fig.colorbar(image, ax=axes[1], label="µm")
    difference = (np.maximum(from_walls.top - from_walls.bottom, 0) - from_volume.aperture) / size
    image = axes[2].imshow(difference, cmap="RdBu_r", vmin=-1, vmax=1, extent=extent)
    axes[2].set(title="walls' separation − volume's aperture", xlabel="x (mm), the flow")
    fig.colorbar(image, ax=axes[2], label="voxels")
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("truth", help="the generated fracture file")
    parser.add_argument("scan", help="the segmented volume written from it (volume.tif)")
    parser.add_argument("references", nargs="+", help="flowlearn reference's output for each import")
    parser.add_argument("--predictions", required=True, help="flowlearn predict's output on the references")
    parser.add_argument("-o", "--output", required=True, help="folder of the PNGs")
    args = parser.parse_args()
    print("\n".join(compare(args.truth, args.references)))
    output = Path(args.output)
    volume = next(path for path in args.references if Path(path).name.startswith("volume"))
    walls = next(path for path in args.references if Path(path).name.startswith("walls"))
    figures = {"scan_aperture": aperture_figure(args.scan, volume, walls)}
    predicted = {fields.name: fields for fields in read_predictions(args.predictions)}
    figures["scan_pressure"] = plot_pressure(predicted[f"{Path(volume).stem}__volume"])
    for name, figure in figures.items():
        write_png(figure, output / f"{name}.png", dpi=DPI)
        print(f"wrote {output / name}.png")


if __name__ == "__main__":
    main()
