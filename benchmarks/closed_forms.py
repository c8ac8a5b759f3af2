"""The closed-form laws on the embedded dataset's validation and test splits, side by side; prints markdown tables.

    python benchmarks/closed_forms.py                     # data/fractures.h5, the default run's split (seed 0)
    python benchmarks/closed_forms.py --data my.h5 --seed 3

No training: each law is a fixed transmissivity of the aperture map and the walls, solved with the project's Darcy
solve on unit pixels, and scored with the metrics of every run (:mod:`flowlearn.metrics`), medians over
the fractures of a split. The rows:

- ``lcl``: T = Ap³/12;
- ``inclined, T_xx on every edge``: the scalar inclination factor an earlier version applied to every edge;
- ``inclined, diagonal tensor``: T_xx on x-edges, T_yy on y-edges, no cross term;
- ``inclined`` (the baseline): the full projected tensor, cross term included;
- ``wedge``: the wedge factor along each axis, without inclination;
- ``mlcl`` (the baseline): the full tensor times the wedge factor of the aperture map's slope; and, for the record,
  the same with the slope of the smooth walls' separation instead (what :func:`aperture_slope` chose against).

The inclination's mid-surface is smoothed over ``--smoothing`` mean apertures (default 0: pixel by pixel, the runs'
default).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from flowlearn import DarcyProblem, solve_pressure
from flowlearn.darcy.flux import outlet_flow_rate
from flowlearn.data.datamodule import find_fractures, split_fractures
from flowlearn.data.files import read_fracture
from flowlearn.data.schema import Fracture
from flowlearn.fractures.inclination import aperture_slope, inclination_tensor
from flowlearn.metrics import DEPARTURE_ERR, FLOW_RATE_ERR, MSE, fracture_metrics
from flowlearn.models.baselines import baseline_log_t
from flowlearn.models.laws import wedge_factor

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED = ROOT / "data" / "fractures.h5"
METRICS = (
    (MSE, "MSE", ".3g"),
    (DEPARTURE_ERR, "departure error", ".4f"),
    (FLOW_RATE_ERR, "flow-rate error (%)", ".3g"),
)

# A law: (log aperture (1, H, W), active, inclination (1, 3, H, W), fracture, smoothing) -> the solve's field.
Law = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Fracture, float], torch.Tensor]


def _lcl(log_aperture: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    return baseline_log_t("lcl", log_aperture, active, math.nan, *_unknown(log_aperture))


def _unknown(log_aperture: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    shape = log_aperture.shape[1:]
    return torch.full((1, 3, *shape), math.nan, dtype=torch.float64), torch.full((1, 2, *shape), math.nan)


def _walls_slope(fracture: Fracture) -> torch.Tensor:
    """(1, 2, H, W): the slope of the smooth walls' separation, where :func:`aperture_slope` takes the map's."""
    separation = np.maximum(fracture.top - fracture.bottom, 0.0)
    return torch.from_numpy(aperture_slope(dataclasses.replace(fracture, aperture=separation))).unsqueeze(0)


def _map_slope(fracture: Fracture) -> torch.Tensor:
    return torch.from_numpy(aperture_slope(fracture)).unsqueeze(0)


def _mlcl(slope: Callable[[Fracture], torch.Tensor]) -> Law:
    def law(log_aperture, active, inclination, fracture, _):
        return baseline_log_t("mlcl", log_aperture, active, math.nan, inclination, slope(fracture))

    return law


LAWS: dict[str, Law] = {
    "lcl": lambda log_aperture, active, *_: _lcl(log_aperture, active),
    "inclined, T_xx on every edge": lambda log_aperture, active, inclination, *_: (
        _lcl(log_aperture, active) + inclination[:, 0]
    ),
    "inclined, diagonal tensor": lambda log_aperture, active, inclination, *_: (
        _lcl(log_aperture, active).unsqueeze(1) + inclination[:, :2]
    ),
    "inclined (full tensor)": lambda log_aperture, active, inclination, *_: baseline_log_t(
        "inclined", log_aperture, active, math.nan, inclination, _unknown(log_aperture)[1]
    ),
    "wedge": lambda log_aperture, active, inclination, fracture, _: (
        _lcl(log_aperture, active).unsqueeze(1) + torch.log(wedge_factor(_map_slope(fracture)))
    ),
    "mlcl (the baseline: the map's slope)": _mlcl(_map_slope),
    "mlcl with the walls' slope": _mlcl(_walls_slope),
}


def score(fracture: Fracture, smoothing: float) -> dict[str, dict[str, float]]:
    """Every law's metrics on one fracture (heads 2 -> 1), by law and metric."""
    active = torch.from_numpy(fracture.active).unsqueeze(0)
    aperture = torch.from_numpy(fracture.aperture.astype(np.float64)).unsqueeze(0)
    log_aperture = torch.where(active, torch.log(aperture.clamp_min(1e-300)), 0.0)
    inclination = torch.from_numpy(inclination_tensor(fracture, smoothing)).unsqueeze(0)
    problem = DarcyProblem.fracture(
        fracture.shape, active=fracture.active, pixel_size=1.0, thickness=1.0, drop_unconnected=True
    )
    reference = torch.from_numpy(fracture.pressure.astype(np.float64)).unsqueeze(0)
    free = torch.from_numpy(problem.free).unsqueeze(0)
    heads = (torch.tensor([2.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64))
    reference_q = torch.tensor(
        [math.nan if fracture.flow_rate is None else fracture.flow_rate], dtype=torch.float64
    )
    scores = {}
    for name, law in LAWS.items():
        field = law(log_aperture, active, inclination, fracture, smoothing)
        pressure = solve_pressure(field, problem, solver="auto")
        flow = outlet_flow_rate(field, pressure, problem)
        values = fracture_metrics(pressure, reference, free, *heads, flow, reference_q)
        scores[name] = {metric: float(value[0]) for metric, value in values.items()}
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data", type=Path, default=EMBEDDED, help="HDF5 fracture file (default the embedded set)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the split's seed (the runs' seed; default 0)")
    parser.add_argument(
        "--smoothing",
        type=float,
        default=0.0,
        help="the inclination slope's, in mean apertures (0: pixel by pixel)",
    )
    args = parser.parse_args()
    fractions = tuple(OmegaConf.load(ROOT / "configs" / "data" / "embedded.yaml").fractions)
    _, val, test = split_fractures(find_fractures(args.data), fractions, args.seed)
    for split, refs in (("validation", val), ("test", test)):
        per_fracture = [score(read_fracture(r.path, r.name), args.smoothing) for r in refs]
        print(f"\n{split} split, medians over {len(refs)} fractures\n")
        print("| law (no training) | " + " | ".join(label for _, label, _ in METRICS) + " |")
        print("|---" * (len(METRICS) + 1) + "|")
        for name in LAWS:
            cells = []
            for metric, _, fmt in METRICS:
                values = [s[name][metric] for s in per_fracture if math.isfinite(s[name][metric])]
                cells.append(format(statistics.median(values), fmt) if values else "n/a")
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
