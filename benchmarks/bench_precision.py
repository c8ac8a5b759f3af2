"""The correction network in float64 against float32 (``trainer.precision``), side by side.

    python benchmarks/bench_precision.py            # a training step of the default CNN, each dtype
    python benchmarks/bench_precision.py --runs     # and the whole default `python train.py` in each precision

Prints a markdown table: the median seconds of a forward and backward pass of the default CNN (``configs/model/
cnn.yaml``) on a batch of the embedded dataset's 64x64 maps, per dtype and device (CUDA where there is one, with
torch's default TF32 convolutions and without), and how far its float32 W lies from its float64 W; with
``--runs``, the wall time and the test split's median errors of the default run with ``trainer.precision=64-true`` and
``32-true``, each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from flowlearn.data.inputs import DEFAULT_INPUTS, channel_count
from flowlearn.metrics import DEPARTURE_ERR, FLOW_RATE_ERR
from flowlearn.models.correction import CNNCorrection
from flowlearn.reporting.heldout import MODEL, held_out

REPO = Path(__file__).resolve().parent.parent
PRECISIONS = {"64-true": torch.float64, "32-true": torch.float32}


def _default_cnn(dtype: torch.dtype, device: str) -> CNNCorrection:
    """The default CNN, its head made non-zero (as in training), the same weights for every dtype and device."""
    torch.manual_seed(0)
    network = CNNCorrection()
    torch.nn.init.normal_(network.head.weight, std=0.1)
    return network.to(device=device, dtype=dtype)


def step_seconds(
    dtype: torch.dtype, device: str, batch: int, shape: tuple[int, int], repeats: int = 20
) -> float:
    """Median seconds of a forward and backward pass of the default CNN."""
    network = _default_cnn(dtype, device)
    inputs = torch.randn(batch, channel_count(DEFAULT_INPUTS, 2), *shape, dtype=dtype, device=device)
    times = []
    for index in range(repeats + 3):  # 3 warm-up passes
        start = time.perf_counter()
        network(inputs).sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
        if index >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def float32_departure(device: str, batch: int, shape: tuple[int, int]) -> tuple[float, float]:
    """W's largest departure in float32 on ``device`` from W in float64 on the CPU, and the span of W's learned
    part (its largest departure from its mean), for the same weights and inputs."""
    generator = torch.Generator().manual_seed(1)
    inputs = torch.rand(
        batch, channel_count(DEFAULT_INPUTS, 2), *shape, dtype=torch.float64, generator=generator
    )
    with torch.no_grad():
        exact = _default_cnn(torch.float64, "cpu")(inputs)
        rounded = _default_cnn(torch.float32, device)(inputs.to(device)).cpu()
    return float((rounded - exact).abs().max()), float((exact - exact.mean()).abs().max())


def default_run(precision: str) -> dict:
    """Wall seconds and the test split's median errors (as ``flowlearn evaluate`` gives them) of ``python train.py
    trainer.precision=...``."""
    with tempfile.TemporaryDirectory() as directory:
        command = [
            sys.executable, str(REPO / "train.py"), f"trainer.precision={precision}", f"hydra.run.dir={directory}",
            "+callbacks.progress_bar.refresh_rate=0",
        ]  # fmt: skip
        start = time.time()
        subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
        seconds = time.time() - start
        test = held_out(Path(directory) / "predictions.h5")
        errors = {name: test.median(MODEL, name) for name in (DEPARTURE_ERR, FLOW_RATE_ERR)}
    return {"seconds": seconds, **errors}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--batch", type=int, default=8, help="maps per step (the default data.batch_size is 8)"
    )
    parser.add_argument(
        "--runs", action="store_true", help="also time the whole default run in each precision"
    )
    args = parser.parse_args()
    devices = ["cpu"] + (["cuda", "cuda, TF32 off"] if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(
        "\n| device | float64 step (s) | float32 step (s) | float32 faster by "
        "| float32 W's largest departure from float64 | span of W's learned part |\n|---|---|---|---|---|---|"
    )
    for name in devices:
        device = name.split(",")[0]
        # On CUDA torch runs float32 convolutions in TF32 unless told not to; the last row tells it not to.
        torch.backends.cudnn.allow_tf32 = name != "cuda, TF32 off"
        seconds = {p: step_seconds(dtype, device, args.batch, (64, 64)) for p, dtype in PRECISIONS.items()}
        ratio = seconds["64-true"] / seconds["32-true"]
        departure, span = float32_departure(device, args.batch, (64, 64))
        print(
            f"| {name} | {seconds['64-true']:.4f} | {seconds['32-true']:.4f} | {ratio:.1f}x | {departure:.1e} "
            f"| {span:.1e} |"
        )
    if args.runs:
        runs = {precision: default_run(precision) for precision in PRECISIONS}
        print(
            "\n| trainer.precision | wall time (s) | test departure error (median) | test flow-rate error (%, median) |"
        )
        print("|---|---|---|---|")
        for precision, r in runs.items():
            print(f"| {precision} | {r['seconds']:.1f} | {r[DEPARTURE_ERR]:.4g} | {r[FLOW_RATE_ERR]:.4g} |")
        ratio = runs["64-true"]["seconds"] / runs["32-true"]["seconds"]
        print(f"\nthe default run with a float32 network is faster by {ratio:.2f}x")
        print(json.dumps(runs))


if __name__ == "__main__":
    main()
