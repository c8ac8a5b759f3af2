"""A trained run on fractures unlike its training data: small sets outside the training recipe; prints a markdown table.

    python benchmarks/generalisation.py outputs/<date>/<time>                 # 3 fractures per generated set
    python benchmarks/generalisation.py outputs/<date>/<time> --count 8 --refine --cache gen/   # and 2x changes

The default run trains on the embedded dataset (the ``winding`` recipe: no contact, the shortest roughness
wavelength 1-6 mean apertures, Hurst exponents 0.5-0.9, winding mid-surfaces). Each set below leaves that recipe in
one direction; its fractures are generated with ``flowlearn generate`` (the LBM reference, 64x64 maps at 8 voxels
per mean aperture, as the embedded set) into ``--cache`` and reused by later runs:

- ``flat mid-surface``: the ``published`` recipe with a flat mid-surface (``--mid-slope 0``): aperture variance and
  contacts without inclination;
- ``shorter roughness``: ``winding`` walls with roughness down to half the mean aperture (``--wavelength-ratio 0.5
  0.9``);
- ``other Hurst exponents``: ``winding`` walls with H = 0.3-0.45;
- ``more closure``: the ``published`` recipe with 10-30 % of the map in contact;
- ``plates``: parallel plates, flat, tilted along and across the flow at slope 0.3, whose exact pressure and flow
  rate are known (no LBM).

Per set: the medians over its fractures of the departure error and the flow-rate error of the model (``flowlearn
predict`` with the run), the LCL and the best closed form (per metric), and the median change of the LBM flow rate
on the grid 2x finer where it is recorded (``--refine`` measures it on the winding sets with ``flowlearn refine``,
about 16 times the cost of a fracture), and the reference's error against the Stokes flow of its smooth walls where
the set's file records it (``flowlearn smooth-walls``, from wall-fitted solves of the cached files): the reference's
own error, beside the gains, and whether the model's flow-rate gain over the best closed form is clear of it
(:meth:`~flowlearn.reporting.heldout.HeldOut.clear_of_reference`). Nothing is chosen or tuned on these sets.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

from flowlearn.data.files import read_fractures, write_fractures
from flowlearn.data.schema import Fracture
from flowlearn.metrics import DEPARTURE_ERR, FLOW_RATE_ERR
from flowlearn.models.baselines import COMPARED
from flowlearn.reference.refinement import is_measured
from flowlearn.reporting.heldout import held_out

VOXEL = 1e-5  # metres, the embedded dataset's
GAP = 8  # voxels across the mean gap, the embedded dataset's
SHAPE = (64, 64)

# name -> the options of `flowlearn generate` that leave the training recipe.
SETS = {
    "flat mid-surface": ["--recipe", "published", "--mid-slope", "0", "--special-every", "0"],
    "shorter roughness": ["--recipe", "winding", "--wavelength-ratio", "0.5", "0.9"],
    "other Hurst exponents": ["--recipe", "winding", "--hurst", "0.3", "0.45"],
    "more closure": ["--recipe", "published", "--contact-fraction", "0.1", "0.3", "--special-every", "0"],
}
PLATES_SLOPE = 0.3
# The sets whose 2x runs take minutes per fracture on 2 cores: the published recipe's contacts and steep walls take
# thousands to tens of thousands of steps at 1x already (hours at 2x).
CHEAP_TO_REFINE = ("shorter roughness", "other Hurst exponents")


def plates() -> list[Fracture]:
    """Flat plates and plates tilted along and across the flow, with their exact pressure (the line from 2 to 1)
    and flow rate H (b cos θ)³/12 · g / (W - 1) per unit head drop and viscosity (g = cos θ along the flow, 1/cos θ
    across it: the longer path, the wider section; tests/test_exact_on_plates.py derives it)."""
    height, width = SHAPE
    gap = GAP * VOXEL
    rows, columns = np.indices(SHAPE) * VOXEL
    line = np.broadcast_to(np.linspace(2.0, 1.0, width), SHAPE).copy()
    fractures = []
    for name, slope_x, slope_y in (
        ("flat", 0.0, 0.0),
        ("along", PLATES_SLOPE, 0.0),
        ("across", 0.0, PLATES_SLOPE),
    ):
        norm2 = 1 + slope_x**2 + slope_y**2
        metric = (1 + slope_y**2) / math.sqrt(norm2)
        exact = height * (gap / math.sqrt(norm2)) ** 3 / 12 * metric / (width - 1)
        bottom = slope_x * columns + slope_y * rows
        walls = {"bottom": bottom, "top": bottom + gap}
        fractures.append(
            Fracture(f"plates_{name}", np.full(SHAPE, gap), line, voxel_size=VOXEL, flow_rate=exact, **walls)
        )
    return fractures


def generate(name: str, options: list[str], count: int, cache: Path) -> Path:
    """The set's fractures, generated once into ``cache`` (resumed from its parts if a run was cut short)."""
    path = cache / f"{name.replace(' ', '_').replace('-', '_')}.h5"
    if not path.exists():
        command = [sys.executable, "-m", "flowlearn.cli", "generate", str(path), "--count", str(count)]
        command += ["--shape", *map(str, SHAPE), "--mean-aperture", str(GAP), "--voxel-size", str(VOXEL)]
        subprocess.run([*command, *options, "--quiet"], check=True)
    return path


def refinement_changes(path: Path, refine: bool) -> list[float]:
    """The measured 2x flow-rate changes of ``path``'s fractures; with ``refine``, those not yet measured are
    measured first (``flowlearn refine``, which records them in the file)."""
    if refine:
        subprocess.run([sys.executable, "-m", "flowlearn.cli", "refine", str(path)], check=True)
    return [
        fracture.provenance["convergence"]["flow_rate_change"]
        for fracture in read_fractures(path)
        if is_measured(fracture)
    ]


def row(name: str, run: Path, data: Path, reference_error: str, exact: bool = False) -> str:
    """The set's line of the table; ``exact`` for the plates, whose reference is exact and has no departure from
    the line (its departure error is undefined, 0/0: their pressure is judged by the flow rate alone)."""
    predicted = data.with_name(f"{data.stem}_predicted.h5")
    subprocess.run(
        [sys.executable, "-m", "flowlearn.cli", "predict", str(run), str(data), "-o", str(predicted)],
        check=True, capture_output=True,
    )  # fmt: skip
    result = held_out(predicted, "predict")
    cells = [name, str(len(result.names))]
    for metric, fmt in ((DEPARTURE_ERR, ".3g"), (FLOW_RATE_ERR, ".3g")):
        if metric == DEPARTURE_ERR and exact:
            cells += ["–"] * 3
            continue
        best = result.best(metric)
        cells += [
            f"{result.median('model', metric):{fmt}}",
            "n/a" if best is None else f"{result.median(best, metric):{fmt}} ({best})",
            f"{result.median(COMPARED, metric):{fmt}}",
        ]
    cells.append(reference_error)
    # The reference's own error against its smooth walls, where the set's file records it (flowlearn smooth-walls),
    # and whether the flow-rate gain over the best closed form is larger.
    smooth = result.reference_median(FLOW_RATE_ERR)
    best = result.best(FLOW_RATE_ERR)
    clear = None if best is None else result.clear_of_reference(best, FLOW_RATE_ERR)
    cells.append("none (exact)" if exact else "not measured" if math.isnan(smooth) else f"{smooth:.1f} %")
    cells.append({None: "–", True: "clear", False: "within"}[clear])
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", type=Path, help="a run directory of python train.py")
    parser.add_argument("--count", type=int, default=3, help="fractures per generated set (default 3)")
    parser.add_argument("--cache", type=Path, default=Path("generalisation"), help="where the sets are kept")
    parser.add_argument(
        "--refine",
        action="store_true",
        help=f"also run the fractures of {', '.join(CHEAP_TO_REFINE)} 2x finer (about 16x their cost)",
    )
    args = parser.parse_args()
    if args.count < 1:
        parser.error(f"--count must be an integer >= 1, got {args.count}")
    args.cache.mkdir(parents=True, exist_ok=True)
    print(
        "| set | fractures | departure: model | best closed form | LCL | flow rate (%): model | best closed form "
        "| LCL | LBM 2x change | vs smooth walls | flow-rate gain over best |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, options in SETS.items():
        data = generate(name, options, args.count, args.cache)
        changes = refinement_changes(data, args.refine and name in CHEAP_TO_REFINE)
        error = f"{100 * float(np.median(np.abs(changes))):.1f} %" if changes else "not measured"
        print(row(name, args.run, data, error), flush=True)
    exact = args.cache / "plates.h5"
    write_fractures(exact, plates())
    print(row("plates (exact reference)", args.run, exact, "none (exact)", exact=True))


if __name__ == "__main__":
    main()
