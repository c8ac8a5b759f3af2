"""Time and peak memory of importing a segmented 3D scan (``flowlearn.data.scans.import_volume``); prints a markdown
table.

    python benchmarks/bench_import.py                      # a 1000 x 1000 x 200 uint8 volume (200 MB)
    python benchmarks/bench_import.py --shape 500 500 100 --repeats 1

The volume is a synthetic fracture: a gap between two walls made from smooth random fields (white noise under a
Gaussian filter), with contact spots where the gap closes, voxelised into uint8 (1 pore, 0 solid) with the normal
along the last axis and saved as .npy in a temporary folder. Each case runs in a fresh process, so that its peak
memory is its own; each case runs in ``--repeats`` processes, and the fastest time is given (on a shared machine the
others measure its neighbours too), with the largest peak memory:

1. the import with the normal detected, and with it given (``normal=2``), from the file (the page cache warm):
   reading, the SHA-256 checksum (timed alone as well), the pore's connectivity, the per-column maps, validation;
2. the floor: ``np.count_nonzero(volume, axis=2)`` on the volume already in memory, the least any import of the
   aperture does.

Peak memory is given as a ratio to the volume's bytes: numpy's peak allocations (tracemalloc, which misses the pages
of the file mapped into the process), and the growth of the peak resident set size (ru_maxrss: those pages
included) over the process's size before the case. In a fresh process the first use of memory costs its page
faults: ndimage.label's int32 labels (4 bytes a voxel) take about three times as long as in a process that has had
that memory before.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from scipy import ndimage

from flowlearn.data.scans import common, import_volume

VOXEL = 1e-5  # metres


def synthetic_volume(shape: tuple[int, int, int], seed: int = 0) -> np.ndarray:
    """uint8 (H, W, D): 1 between two walls from smooth random fields, 0 elsewhere, with the normal along axis 2.

    The mid-plane wanders by about D/10 and the gap is about D/10 wide, varying by as much as it is wide, so that
    about 10% of the map is in contact; both fields are correlated over about a tenth of the map's side.
    """
    rng = np.random.default_rng(seed)
    rows, cols, depth = shape
    smooth = []
    for _ in range(2):
        field = ndimage.gaussian_filter(
            rng.standard_normal((rows, cols)), sigma=max(rows, cols) / 40, mode="wrap"
        )
        smooth.append(field / field.std())
    mid = depth / 2 + depth / 10 * smooth[0]
    gap = np.maximum(depth / 10 * (1 + 0.8 * smooth[1]), 0)
    bottom, top = mid - gap / 2, mid + gap / 2
    centres = np.arange(depth, dtype=np.float32) + 0.5
    volume = np.empty(shape, dtype=np.uint8)
    block = max(1, 2**24 // (cols * depth))  # rows at a time: a few tens of MB of temporaries
    for start in range(0, rows, block):
        part = slice(start, start + block)
        volume[part] = (bottom[part, :, None] < centres) & (centres < top[part, :, None])
    return volume


def _resident() -> int:
    """This process's resident set size now, bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _case(path: Path, case: str) -> dict[str, float]:
    """Run one case in this process: seconds, peak allocations and peak resident growth (bytes)."""
    volume = np.load(path) if case == "floor" else None
    before = _resident()
    tracemalloc.start()
    start = time.perf_counter()
    if case == "floor":
        np.count_nonzero(volume, axis=2)
    elif case == "checksum":
        common.sha256([path])
    else:
        import_volume(path, VOXEL, normal=None if case == "detected" else 2)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return {"seconds": seconds, "allocated": peak, "resident": max(grown, 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[1000, 1000, 200], help="H W D, normal along D")
    parser.add_argument("--repeats", type=int, default=3, help="processes per case")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # a case, run in a fresh process
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(_case(Path(args.path), args.case)))
        return
    shape = tuple(args.shape)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "volume.npy"
        start = time.perf_counter()
        volume = synthetic_volume(shape)
        np.save(path, volume)
        made = time.perf_counter() - start
        size, pore = volume.nbytes, float(volume.mean())
        contact = float(np.mean(~volume.any(axis=2)))
        del volume
        results = {}
        for case in ("detected", "given", "checksum", "floor"):
            command = [sys.executable, __file__, "--case", case, "--path", str(path)]
            runs = [
                json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
                for _ in range(args.repeats)
            ]
            results[case] = {
                key: (min if key == "seconds" else max)(run[key] for run in runs) for key in runs[0]
            }
    print(
        f"volume {'x'.join(map(str, shape))} uint8, {size / 2**20:.0f} MiB, pore {pore:.3f} of it, contact "
        f"{contact:.3f} of the map (made and saved in {made:.1f} s)\n"
    )
    print("| case | time (s) | x floor | peak allocations / volume | peak RSS growth / volume |")
    print("|---|---|---|---|---|")
    names = {
        "detected": "import_volume, normal detected",
        "given": "import_volume, normal=2",
        "checksum": "of which: SHA-256 of the file",
        "floor": "floor: np.count_nonzero(volume, axis=2)",
    }
    floor = results["floor"]["seconds"]
    for case, name in names.items():
        r = results[case]
        print(
            f"| {name} | {r['seconds']:.2f} | {r['seconds'] / floor:.0f} | {r['allocated'] / size:.2f} | "
            f"{r['resident'] / size:.2f} |"
        )


if __name__ == "__main__":
    main()
