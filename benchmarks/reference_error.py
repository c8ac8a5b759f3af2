"""A run's held-out flow-rate errors against the reference as it is, as the LBM on a grid twice as fine gives it, and
as the Stokes flow of the smooth walls gives it.

    python benchmarks/reference_error.py outputs/<date>/<time>/predictions.h5 data/fractures.h5 [--split test] \
        [--smooth-walls walls1.h5 walls2.h5 ...]

The fractures of DATA that record a *measured* 2× change c = Q(2×)/Q(1×) - 1 in their provenance (``flowlearn
refine``) are judged three times, with each flow-rate error taken against:

- ``1x``: the stored reference Q(1×), which the model was trained on;
- ``2x``: Q(1×)(1 + c), the LBM on the grid twice as fine;
- ``extrapolated``: Q(1×)(1 + 2c), where a first-order error (h¹) would put the converged value.

and a fourth, where the smooth walls' flow is known:

- ``smooth walls``: the wall-fitted Stokes flow rates extrapolated at the mesh's second order, the flow that every
  solver converges to as its grid is refined (docs/data.md, "Checking the reference"): from the files that
  ``flowlearn stokes DATA --mesh walls --cells-per-voxel R -o FILE`` wrote at two R with ``--smooth-walls`` (several
  files per R where the fractures were split between runs), or else from the reference errors DATA's provenance
  records as measured (``flowlearn smooth-walls``), Q_smooth = Q_ref / (1 + flow_rate_error).

A gain over a closed form that holds against all of them is clear of the reference's grid error; one that shrinks
from 1x to 2x was partly learned from the coarse grid's bias. Prints a markdown table of medians over fractures
(model, the best closed form on the 1x reference, the LCL), on how many fractures the model's flow rate is closer
than the best closed form's, and the distribution of c.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from flowlearn.data.files import read_fractures
from flowlearn.data.provenance import RECORD
from flowlearn.metrics import FLOW_RATE_ERR
from flowlearn.models.baselines import COMPARED
from flowlearn.reference.reference_error import is_measured as is_smooth_wall_measured
from flowlearn.reference.reference_error import smooth_walls
from flowlearn.reference.refinement import is_measured
from flowlearn.reporting.heldout import MODEL, split_metrics
from flowlearn.training.predictions import group_name, read_predictions

# How far each judged reference lies from Q(1x), in units of the measured 2x change c.
REFERENCES = {"1x": 0.0, "2x": 1.0, "extrapolated": 2.0}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("predictions", help="predictions.h5 of a run on DATA")
    parser.add_argument("data", help="the fracture file the run was trained on, with measured 2x changes")
    parser.add_argument("--split", default="test", help="which fractures of the predictions")
    parser.add_argument(
        "--smooth-walls",
        nargs="+",
        metavar="FILE",
        help="the wall-fitted Stokes solves of DATA's fractures at two cells per voxel (flowlearn stokes --mesh walls)",
    )
    args = parser.parse_args()

    # By the name a run's predictions give each fracture.
    stem = Path(args.data).stem
    data = read_fractures(args.data)
    changes = {
        group_name(f"{stem}/{fracture.name}"): fracture.provenance["convergence"]["flow_rate_change"]
        for fracture in data
        if is_measured(fracture)
    }
    fields = [f for f in read_predictions(args.predictions) if f.split == args.split]
    measured = [f for f in fields if f.name in changes]
    if not measured:
        raise SystemExit(f"no fracture of split {args.split!r} records a measured 2x change in {args.data}")
    c = np.array([changes[f.name] for f in measured])

    # Each judged reference over Q(1x), per fracture.
    factors = {label: 1 + k * c for label, k in REFERENCES.items()}
    if args.smooth_walls:
        smooth = {
            group_name(f"{stem}/{name}"): walls.flow_rate
            for name, walls in smooth_walls(args.smooth_walls).items()
        }
        missing = [f.name for f in measured if f.name not in smooth]
        if missing:
            raise SystemExit(f"{args.smooth_walls[0]}: no Stokes solve of {', '.join(missing)}")
        factors["smooth walls"] = np.array([smooth[f.name] / f.flow_rate_reference for f in measured])
    else:
        # Q_smooth / Q_ref from the measured records: the ratio, free of the units the solves counted in.
        recorded = {
            group_name(f"{stem}/{fracture.name}"): 1 / (1 + fracture.provenance[RECORD]["flow_rate_error"])
            for fracture in data
            if is_smooth_wall_measured(fracture)
        }
        if all(f.name in recorded for f in measured):
            factors["smooth walls"] = np.array([recorded[f.name] for f in measured])
    held = {
        label: split_metrics(
            [replace(f, flow_rate_reference=f.flow_rate_reference * k) for f, k in zip(measured, factor)],
            args.split,
        )
        for label, factor in factors.items()
    }
    best = held["1x"].best(FLOW_RATE_ERR)
    print(
        f"{len(measured)} fractures of the {args.split} split with a measured 2x change: c from {c.min():+.2%} to "
        f"{c.max():+.2%}, median {np.median(c):+.2%}\n"
    )
    if "smooth walls" in factors:
        s = factors["smooth walls"] - 1
        print(
            f"smooth walls (Stokes, wall-fitted, extrapolated) against the stored reference: {s.min():+.2%} to "
            f"{s.max():+.2%}, median {np.median(s):+.2%}\n"
        )
    print(
        f"| flow-rate error, medians against | model | best closed form ({best}) | LCL | model closer than {best} |"
    )
    print("|---|---|---|---|---|")
    for label, result in held.items():
        model, closed = result.metrics[MODEL][FLOW_RATE_ERR], result.metrics[best][FLOW_RATE_ERR]
        print(
            f"| {label} | {result.median(MODEL, FLOW_RATE_ERR):.2f} % | {result.median(best, FLOW_RATE_ERR):.2f} % | "
            f"{result.median(COMPARED, FLOW_RATE_ERR):.1f} % | {int((model < closed).sum())} of {len(model)} |"
        )


if __name__ == "__main__":
    main()
