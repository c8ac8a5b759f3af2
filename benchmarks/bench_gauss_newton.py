"""Benchmark of optimizer=gauss_newton against Adam on the real fracture; prints markdown tables.

    python benchmarks/bench_gauss_newton.py                       # 60 s per method
    python benchmarks/bench_gauss_newton.py path/to/fracture.mat --budget 30

The setup of ``experiment=paper``: the pixel model (one w per pixel) through K = Ap^(2·relu(w)) from w = 0.5, on
the first fracture of the file, heads 2 → 1. Adam (lr 1e-3, the paper's) and Gauss–Newton (the defaults of
configs/optimizer/gauss_newton.yaml) each run for ``--budget`` seconds from the same start, with an engine of their
own, one after the other in this process. The loop calls :class:`~flowlearn.training.module.FractureFlowModule`'s
forward model and loss directly, not ``train.py``: it times the optimisation alone, without Lightning's loop, the
metrics, the baselines, checkpoints and figures, which cost both methods the same per epoch. The clock stops
whenever the loss of new parameters is known: after Adam's forward (before its backward), after a Gauss–Newton
step's accepted trial.

Tables:
1. the products Gauss–Newton is built from, against the exact ones: the loss gradient 2Jᵀr from the residuals' VJP
   against autograd's gradient of the training loss (the module's Adam path, through the adjoint solve) and
   against a central difference along a random direction; Jv from the VJP of the VJP against forward-mode
   ``torch.func.jvp``, and against a central difference of r;
2. time to reach the original run's epoch-43 loss (9.14e-5) and the loss after 10, 30 and 60 s (those within the
   budget), each method side by side with the ratio Adam / Gauss–Newton.

Timings use one torch thread (``--threads``) for both methods: on a machine shared with other work, two threads
that wait on each other make every small tensor operation several times slower, and the noise swamps the
comparison.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

from flowlearn.data.datamodule import FractureDataModule
from flowlearn.engines import make_engine
from flowlearn.metrics import training_loss
from flowlearn.models import ExponentLaw, PixelCorrection
from flowlearn.training.gauss_newton import GaussNewton, linearize
from flowlearn.training.module import FractureFlowModule

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATH = ROOT.parent / "shared" / "data" / "example_fracture.mat"
# The original run's loss after 43 epochs of Adam (lr 1e-3): tests/test_train.py checks that experiment=paper
# reproduces it.
TARGET_LOSS = 9.14e-5
CHECKPOINTS_S = (10, 30, 60)
ADAM_LR = 1e-3


def paper_batch(path: Path) -> dict:
    """The first fracture of ``path`` as a batch of one, as experiment=paper reads it."""
    datamodule = FractureDataModule(path=[str(path)], batch_size=1, fractions=[1.0, 0.0, 0.0], seed=0)
    datamodule.setup("fit")
    return next(iter(datamodule.train_dataloader()))


def paper_module(batch: dict) -> FractureFlowModule:
    """A fresh module of experiment=paper (pixel model, exponent law) with an engine of its own."""
    law = ExponentLaw(initial_exponent=0.5)
    correction = PixelCorrection(tuple(batch["aperture"].shape[1:]), initial=law.initial_raw)
    return FractureFlowModule(correction, law, solver=make_engine())


def loss_of(module: FractureFlowModule, batch: dict) -> torch.Tensor:
    """The training loss of the module's current parameters on ``batch`` (its ``train/loss``)."""
    fields = module(batch)
    name, active = batch["name"][0], batch["active"][0]
    heads = float(batch["inlet_pressure"][0]), float(batch["outlet_pressure"][0])
    mask = torch.from_numpy(module.problems.get(name, active, *heads).active).unsqueeze(0)
    return training_loss(
        fields["pressure"],
        batch["pressure"].to(torch.float64),
        mask,
        fields["flow_rate"],
        batch["flow_rate"].to(torch.float64),
        module.flow_rate_weight,
    )


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def derivative_checks(batch: dict) -> list[tuple[str, str, float]]:
    """(quantity, compared with, relative difference) of Gauss–Newton's products at the starting point."""
    module = paper_module(batch)
    (param,) = module.parameters()
    residuals = module.residuals_of(batch, [param])
    theta = (param.detach().clone(),)
    r, jacobian, transpose = linearize(residuals, theta)
    gradient = 2 * transpose(r)
    exact = torch.autograd.grad(loss_of(module, batch), param)[0].reshape(-1)
    direction = torch.randn(theta[0].numel(), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    step = 1e-6

    def shifted(sign: float) -> tuple[torch.Tensor, ...]:
        return (theta[0] + sign * step * direction.view_as(theta[0]),)

    with torch.no_grad():
        r_plus, r_minus = residuals(shifted(1)), residuals(shifted(-1))
    central_loss = (r_plus.square().sum() - r_minus.square().sum()) / (2 * step)
    central_r = (r_plus - r_minus) / (2 * step)
    j_direction = jacobian(direction)
    _, forward_mode = torch.func.jvp(residuals, (theta,), ((direction.view_as(theta[0]),),))
    return [
        ("gradient 2Jᵀr (VJP)", "autograd of the loss (adjoint)", relative_difference(gradient, exact)),
        (
            "directional derivative 2(Jᵀr)·v",
            "central difference of the loss, ε = 1e-6",
            abs(float(gradient.dot(direction) - central_loss)) / abs(float(central_loss)),
        ),
        (
            "Jv (VJP of the VJP)",
            "forward mode (torch.func.jvp)",
            relative_difference(j_direction, forward_mode),
        ),
        (
            "Jv (VJP of the VJP)",
            "central difference of r, ε = 1e-6",
            relative_difference(j_direction, central_r),
        ),
    ]


def run_adam(batch: dict, budget: float) -> list[tuple[float, float]]:
    """(seconds, loss) of every Adam step's parameters until ``budget`` seconds have passed."""
    module = paper_module(batch)
    optimizer = torch.optim.Adam(module.parameters(), lr=ADAM_LR)
    history = []
    start = time.perf_counter()
    while True:
        loss = loss_of(module, batch)
        history.append((time.perf_counter() - start, float(loss.detach())))
        if history[-1][0] > budget:
            return history
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def run_gauss_newton(batch: dict, budget: float) -> list[tuple[float, float]]:
    """(seconds, loss) of the start and of every Gauss–Newton step until ``budget`` seconds have passed."""
    module = paper_module(batch)
    optimizer = GaussNewton(module.parameters())
    residuals = module.residuals_of(batch, optimizer.params)
    start = time.perf_counter()
    with torch.no_grad():
        history = [(time.perf_counter() - start, float(loss_of(module, batch)))]
    while history[-1][0] <= budget:
        loss = optimizer.step(residuals)
        history.append((time.perf_counter() - start, float(loss)))
    return history


def time_to(history: list[tuple[float, float]], target: float) -> float:
    return next((seconds for seconds, loss in history if loss <= target), math.inf)


def loss_after(history: list[tuple[float, float]], seconds: float) -> float:
    """The loss of the newest parameters known ``seconds`` after the start."""
    return [loss for elapsed, loss in history if elapsed <= seconds][-1]


def table(columns: list[str], rows: list[list[str]]) -> None:
    print("\n| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)


def seconds_cell(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) else "not reached"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH, help="the real fracture's file")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per method (default 60)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    if not args.path.exists():
        print(f"skipped: {args.path} is not present (pass the fracture's file as the first argument)")
        return
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    batch = paper_batch(args.path)
    print(
        f"torch {torch.__version__}, solver {make_engine().name}, {torch.get_num_threads()} thread(s), "
        f"{args.path.name}: {tuple(batch['aperture'].shape[1:])}, {args.budget:g} s per method"
    )
    # Also the warm-up: the solver's compiled kernels and first-call costs are paid here, not by either method.
    table(
        ["quantity", "compared with", "relative difference"],
        [[name, exact, f"{difference:.1e}"] for name, exact, difference in derivative_checks(batch)],
    )
    adam = run_adam(batch, args.budget)
    gauss_newton = run_gauss_newton(batch, args.budget)
    rows = [
        [
            f"time to loss {TARGET_LOSS:g} (s)",
            seconds_cell(time_to(adam, TARGET_LOSS)),
            seconds_cell(time_to(gauss_newton, TARGET_LOSS)),
            f"{time_to(adam, TARGET_LOSS) / time_to(gauss_newton, TARGET_LOSS):.1f}x",
        ]
    ]
    for seconds in (s for s in CHECKPOINTS_S if s <= args.budget):
        adam_loss, gn_loss = loss_after(adam, seconds), loss_after(gauss_newton, seconds)
        rows.append(
            [f"loss after {seconds} s", f"{adam_loss:.3g}", f"{gn_loss:.3g}", f"{adam_loss / gn_loss:.1f}x"]
        )
    rows.append(["steps taken", str(len(adam) - 1), str(len(gauss_newton) - 1), ""])
    table(["", "Adam (lr 1e-3)", "Gauss–Newton", "Adam / Gauss–Newton"], rows)


if __name__ == "__main__":
    main()
