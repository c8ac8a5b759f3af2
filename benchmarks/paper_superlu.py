"""The original fit as a plain numpy/SuperLU script: the baseline of ``bench_paper.py``.

One W per pixel, K = Ap^(2·relu(w)) with w = 0.5 at the start, Adam (lr 1e-3) on the pressure MSE over the active
pixels, one step per iteration, 100 steps -- what ``python train.py experiment=paper`` does. Every step assembles
the two-point flux system, solves it with scipy's SuperLU for the pressure, solves it again for the adjoint (as
DPFEHM's pullback does: a second solve of the same matrix) and forms the gradient with numpy.

Nothing here comes from flowlearn: the grid, the assembly and the adjoint are written out from the equations, so
the losses it prints are an independent check of the flowlearn run.

    python benchmarks/paper_superlu.py ../shared/data/example_fracture.mat [--steps 100] [--factor-once]

``--factor-once`` factorises each step's matrix once (``splu``) and reuses it for the adjoint: the faster way a
careful script would write it. Prints one JSON line: the loss before every step and the seconds taken.

Equations (grid of H x W nodes spanning [0, W] x [0, H], so nodes hx = W/(W-1) apart along x, hy = H/(H-1) along
y, unit thickness; heads 2 on column 0 and 1 on the last column; a node is active where Ap > 0):

    T_e = (face area / node distance)_e · exp((log K_a + log K_b) / 2)     x-edges: hy/hx, y-edges: hx/hy
    A h_f = b:  A_ii = Σ_e T_e,  A_ij = −T_e,  b_i = Σ_(e to a fixed node d) T_e h_d
    L = mean over active pixels (h − p_ref)²,   A λ = ∂L/∂h_f,   ∂L/∂T_e = −(λ_a − λ_b)(h_a − h_b)
    ∂L/∂log K_a = Σ_(e at a) ∂L/∂T_e · T_e / 2,   ∂L/∂w = ∂L/∂log K · 2 log Ap · [w > 0]
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import h5py
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

INLET, OUTLET = 2.0, 1.0


def read(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(aperture, reference pressure), float64 (H, W), from the original file layout (group fracture_1)."""
    with h5py.File(path, "r") as f:
        group = f["fracture_1"]
        return (
            group["aperture_field"][0, 0].astype(np.float64),
            group["pressure_field"][0, 0].astype(np.float64),
        )


def edges(shape: tuple[int, int], active: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, face area over node distance) of every edge between two active pixels, flat image indices."""
    height, width = shape
    hx, hy = width / (width - 1), height / (height - 1)
    index = np.arange(height * width).reshape(shape)
    pairs = [
        (index[:, :-1], index[:, 1:], hy / hx),  # along x
        (index[:-1, :], index[1:, :], hx / hy),  # along y
    ]
    a = np.concatenate([p[0].ravel() for p in pairs])
    b = np.concatenate([p[1].ravel() for p in pairs])
    aol = np.concatenate([np.full(p[0].size, p[2]) for p in pairs])
    keep = active.ravel()[a] & active.ravel()[b]
    return a[keep], b[keep], aol[keep]


def fit(path: str, steps: int, factor_once: bool, lr: float = 1e-3) -> dict:
    aperture, reference = read(path)
    shape = aperture.shape
    active = aperture > 0
    fixed = np.zeros(shape, dtype=bool)
    fixed[:, 0] = fixed[:, -1] = True
    fixed &= active
    heads = np.where(fixed, np.where(np.arange(shape[1]) == 0, INLET, OUTLET), 0.0).ravel()
    free = (active & ~fixed).ravel()
    free_nodes = np.flatnonzero(free)
    row = np.full(free.size, -1)
    row[free_nodes] = np.arange(free_nodes.size)
    a, b, aol = edges(shape, active)
    a_free, b_free = free[a], free[b]
    both = a_free & b_free
    log_ap = np.log(np.where(active, aperture, 1.0)).ravel()
    reference = reference.ravel()
    n_active = int(active.sum())

    w = np.full(free.size, 0.5)
    m, v = np.zeros_like(w), np.zeros_like(w)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    losses = []
    for step in range(1, steps + 1):
        log_k = 2 * np.maximum(w, 0) * log_ap
        t = aol * np.exp((log_k[a] + log_k[b]) / 2)
        # A on the free nodes: diagonal from every edge at a free end, off-diagonals from free-free edges.
        diagonal = np.bincount(row[a[a_free]], t[a_free], free_nodes.size)
        diagonal += np.bincount(row[b[b_free]], t[b_free], free_nodes.size)
        rows = np.concatenate([row[a[both]], row[b[both]]])
        cols = np.concatenate([row[b[both]], row[a[both]]])
        off = np.concatenate([-t[both], -t[both]])
        matrix = sp.csc_matrix((off, (rows, cols)), shape=(free_nodes.size,) * 2) + sp.diags(diagonal)
        matrix = matrix.tocsc()
        rhs = np.bincount(
            row[a[a_free & ~b_free]], t[a_free & ~b_free] * heads[b[a_free & ~b_free]], free_nodes.size
        )
        rhs += np.bincount(
            row[b[b_free & ~a_free]], t[b_free & ~a_free] * heads[a[b_free & ~a_free]], free_nodes.size
        )

        solve = spla.splu(matrix).solve if factor_once else functools.partial(spla.spsolve, matrix)
        h = heads.copy()
        h[free_nodes] = solve(rhs)
        error = np.where(active.ravel(), h - reference, 0.0)
        losses.append(float((error**2).sum() / n_active))
        lam = np.zeros_like(h)
        lam[free_nodes] = solve(2 * error[free_nodes] / n_active)
        dloss_dt = -(lam[a] - lam[b]) * (h[a] - h[b])
        grad_log_k = np.bincount(a, dloss_dt * t / 2, free.size) + np.bincount(b, dloss_dt * t / 2, free.size)
        grad = grad_log_k * 2 * log_ap * (w > 0)

        m = beta1 * m + (1 - beta1) * grad
        v = beta2 * v + (1 - beta2) * grad**2
        w -= lr * (m / (1 - beta1**step)) / (np.sqrt(v / (1 - beta2**step)) + eps)
    return {"losses": losses}


def main() -> None:
    start = time.perf_counter()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--factor-once", action="store_true")
    args = parser.parse_args()
    result = fit(args.path, args.steps, args.factor_once)
    result["seconds"] = time.perf_counter() - start
    print(json.dumps(result))


if __name__ == "__main__":
    main()
