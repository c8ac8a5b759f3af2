"""A full 2D transmissivity tensor on the pixel grid: a monotone 9-point scheme.

Flow in a gap that winds with its mid-surface has, projected onto the map, a symmetric tensor transmissivity

    q = -T ∇h,      T = [[T_xx, T_xy], [T_xy, T_yy]],

whose cross term couples the two axes. The two-point edges of DPFEHM's scheme carry T_xx and T_yy (the ``axes``
form of :mod:`flowlearn.darcy.conductivity`); the cross term needs the nodes across the diagonals of each square of
four nodes. On a square s with corners 1 = (r, c), 2 = (r, c+1), 3 = (r+1, c), 4 = (r+1, c+1), and T_xy > 0, the
cross term's share of the flow energy, 2·T_xy·∂ₓh·∂ᵧh·dx·dy·dz, is

    2 ∂ₓh ∂ᵧh · dx dy = (dx ∂ₓh + dy ∂ᵧh)² − (dx ∂ₓh)² − (dy ∂ᵧh)²
                     ≈ (h₄ − h₁)² − ½[(h₂ − h₁)² + (h₄ − h₃)²] − ½[(h₃ − h₁)² + (h₄ − h₂)²],

exact for linear h: an edge 1-4 of weight w_s = T_xy·dz, and each of the square's four axis edges lighter by
w_s/2. For T_xy < 0 the anti-diagonal 2-3 takes |T_xy|·dz instead. An interior node's stencil is then (with square
pixels of side h, T constant) (T_xx − |T_xy|) δ²ₓ + (T_yy − |T_xy|) δ²ᵧ + |T_xy| δ²_diagonal, which expands to
T_xx ∂²ₓ + 2T_xy ∂ₓ∂ᵧ + T_yy ∂²ᵧ + O(h²): consistent, second order.

The nodes carry (log T_xx, log T_yy, ρ), ρ = T_xy/√(T_xx T_yy) in (-1, 1). Each axis edge takes the geometric
mean of its two nodes (DPFEHM's rule, as in the ``axes`` form); a square takes

    w_s = min( |ρ̄_s| · √(Ḡₓ Ḡᵧ),  its four axis edges' weights ),

ρ̄_s the mean of its corners' ρ, Ḡₓ and Ḡᵧ the geometric means of its two x-edges' and two y-edges' weights
(√(Gₓ Gᵧ) = dz·√(T_xx T_yy), so w_s = |T_xy|·dz where the cap does not bind). A square with an inactive corner
has no cross term.

**Monotone everywhere; consistent where |T_xy| is below the axis terms.** Every axis edge loses at most half of its
weight to each of its (at most two) squares, so every weight stays ≥ 0: the matrix is a weighted graph Laplacian
restricted to the free nodes, symmetric positive definite wherever the problem is (every free node joined to a
Dirichlet node) and an M-matrix, whose solution obeys the discrete maximum principle (the solve's check of it
holds) for every tensor. The cap binds where |T_xy|·dz exceeds an axis edge's weight, |T_xy| > T_xx·dy/dx
or > T_yy·dx/dy for a smooth field on square pixels, and next to sharp jumps of T (an edge by a contact spot):
there the cross term is cut back and the scheme, still monotone, is no longer consistent. The projected tensor of an
inclined gap (:mod:`flowlearn.fractures.inclination`) has |T_xy| ≤ min(T_xx, T_yy) for slopes up to 2 (63°), so on
smooth walls the cap binds only by contacts. The ``min`` and |ρ̄| are not differentiable where two arguments tie or
ρ̄ = 0; the gradient there is the one-sided one torch takes.

ρ ≡ 0 gives exactly the ``axes`` form: zero diagonals, untouched axis edges.
"""

from __future__ import annotations

import numpy as np
import torch

from flowlearn.darcy.grid import axis_edges
from flowlearn.errors import SolveInputError


def nine_point_edges(shape: tuple[int, int]) -> np.ndarray:
    """The candidate edges of the 9-point stencil on an (H, W) image, int64 (E, 2) flat image indices, in the order
    of :func:`edge_transmissibilities`' output: the x-edges (H, W-1), the y-edges (H-1, W), the diagonals
    (r, c)-(r+1, c+1) and the anti-diagonals (r, c+1)-(r+1, c) (both (H-1, W-1)), each row-major."""
    height, width = shape
    pixel = np.arange(height * width).reshape(shape)
    diagonals = ((pixel[:-1, :-1], pixel[1:, 1:]), (pixel[:-1, 1:], pixel[1:, :-1]))
    return np.concatenate(
        [axis_edges(shape)[0], *(np.stack([a.ravel(), b.ravel()], axis=1) for a, b in diagonals)],
        dtype=np.int64,
    )


def edge_transmissibilities(
    tensor: torch.Tensor, active: torch.Tensor, spacing: tuple[float, float], thickness: float
) -> torch.Tensor:
    """The 9-point scheme's edge transmissibilities (module docstring), differentiable to any order.

    Args:
        tensor: (B, 3, H, W) float64, (log T_xx, log T_yy, ρ) per node; values at inactive nodes are not used.
        active: bool (H, W), the active nodes.
        spacing: node spacing (dx, dy), metres.
        thickness: the grid's out-of-plane thickness dz, metres.

    Returns:
        float64 (B, E), ≥ 0, in the order of :func:`nine_point_edges`: the weights of the free-node equations, as
        ``aol_e·K_e`` is in the scalar form (m²/s for K in m/s on a grid in metres).
    """
    dx, dy = spacing
    # Inactive nodes enter no used edge; zeros there keep every intermediate finite.
    log_xx, log_yy, rho = (torch.where(active, channel, 0.0) for channel in tensor.unbind(1))
    log_gx = np.log(dy * thickness / dx) + 0.5 * (log_xx[..., :, :-1] + log_xx[..., :, 1:])  # (B, H, W-1)
    log_gy = np.log(dx * thickness / dy) + 0.5 * (log_yy[..., :-1, :] + log_yy[..., 1:, :])  # (B, H-1, W)
    # Per square (B, H-1, W-1): its two x-edges (above, below) and two y-edges (left, right).
    sides = (log_gx[..., :-1, :], log_gx[..., 1:, :], log_gy[..., :, :-1], log_gy[..., :, 1:])
    mean_rho = 0.25 * (rho[..., :-1, :-1] + rho[..., :-1, 1:] + rho[..., 1:, :-1] + rho[..., 1:, 1:])
    consistent = mean_rho.abs() * torch.exp(0.25 * sum(sides))
    cap = torch.exp(torch.stack(sides).amin(0))
    square_active = torch.as_tensor(active[:-1, :-1] & active[:-1, 1:] & active[1:, :-1] & active[1:, 1:])
    cross = torch.where(square_active, torch.minimum(consistent, cap), 0.0)
    # Each axis edge gives half of each of its squares' cross weight (squares beyond the map give none).
    above_below = torch.nn.functional.pad(cross, (0, 0, 1, 1))
    left_right = torch.nn.functional.pad(cross, (1, 1, 0, 0))
    lost_x = 0.5 * (above_below[..., :-1, :] + above_below[..., 1:, :])  # (B, H, W-1)
    lost_y = 0.5 * (left_right[..., :, :-1] + left_right[..., :, 1:])  # (B, H-1, W)
    # A cap that binds on both squares of an edge leaves it at zero up to rounding: never below.
    gx = (torch.exp(log_gx) - lost_x).clamp_min(0.0)
    gy = (torch.exp(log_gy) - lost_y).clamp_min(0.0)
    diagonal = torch.where(mean_rho > 0, cross, 0.0)
    anti_diagonal = torch.where(mean_rho < 0, cross, 0.0)
    return torch.cat([x.flatten(1) for x in (gx, gy, diagonal, anti_diagonal)], dim=1)


def check_tensor(tensor: torch.Tensor, active: torch.Tensor) -> None:
    """Raise :class:`SolveInputError` unless the tensor form (B, 3, H, W) is finite with |ρ| < 1 at every active
    node (positive definite), naming the first node that is not and its components.

    Under ``torch.func.vmap`` (and ``jacfwd``, which vmaps) no value can decide what happens next, so the check is
    left out there: the scheme stays monotone for any ρ, and the solve's own check refuses non-finite weights."""
    if torch._C._functorch.is_batchedtensor(tensor):
        return
    log_xx, log_yy, rho = tensor.unbind(1)
    bad = active & ~(torch.isfinite(log_xx) & torch.isfinite(log_yy) & torch.isfinite(rho) & (rho.abs() < 1))
    if not bool(bad.any()):
        return
    item, row, col = (int(i) for i in torch.nonzero(bad)[0])
    xx, yy, r = (float(c[item, row, col]) for c in (log_xx, log_yy, rho))
    components = ""
    if np.isfinite(xx) and np.isfinite(yy) and np.isfinite(r):
        t_xx, t_yy = np.exp(xx), np.exp(yy)
        components = f" (T_xx = {t_xx:.6g}, T_yy = {t_yy:.6g}, T_xy = {r * np.sqrt(t_xx * t_yy):.6g})"
    raise SolveInputError(
        f"the transmissivity tensor is not positive definite and finite at {int(bad.sum())} active node(s); the "
        f"first is batch item {item}, pixel ({row}, {col}): log T_xx = {xx:.6g}, log T_yy = {yy:.6g}, "
        f"rho = T_xy/sqrt(T_xx T_yy) = {r:.6g}{components}; rho must lie in (-1, 1) and the logs be finite"
    )


def tensor_form(components: torch.Tensor) -> torch.Tensor:
    """The tensor form (log T_xx, log T_yy, ρ) of components (T_xx, T_yy, T_xy), both (B, 3, H, W) float64.

    Raises :class:`SolveInputError` where T_xx or T_yy is not positive or T_xy² ≥ T_xx·T_yy (checked at every
    node: mask inactive nodes with a valid tensor, e.g. the identity), naming the node and its components."""
    t_xx, t_yy, t_xy = components.unbind(1)
    bad = ~((t_xx > 0) & (t_yy > 0) & (t_xy**2 < t_xx * t_yy))
    if bool(bad.any()):
        item, row, col = (int(i) for i in torch.nonzero(bad)[0])
        xx, yy, xy = (float(c[item, row, col]) for c in (t_xx, t_yy, t_xy))
        raise SolveInputError(
            f"the transmissivity tensor is not positive definite at {int(bad.sum())} node(s); the first is batch "
            f"item {item}, pixel ({row}, {col}): T_xx = {xx:.6g}, T_yy = {yy:.6g}, T_xy = {xy:.6g} (needs "
            "T_xx > 0, T_yy > 0 and T_xy² < T_xx·T_yy)"
        )
    return torch.stack([torch.log(t_xx), torch.log(t_yy), t_xy / torch.sqrt(t_xx * t_yy)], dim=1)
