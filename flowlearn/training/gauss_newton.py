"""Levenberg–Marquardt: damped Gauss–Newton steps on a least-squares loss, matrix-free.

The training loss is a sum of squares, L(θ) = ‖r(θ)‖² with the residuals r of
:func:`~flowlearn.metrics.training_residuals`. Each step solves the damped normal equations

    (JᵀJ + λI) δ = −Jᵀr,        J = ∂r/∂θ at the current parameters θ,

by conjugate gradients (CG) that see J only through products: one Jacobian-vector product (JVP) and one
vector-Jacobian product (VJP) of r per iteration, never J itself. Through the pressure solve each product is one
linear solve with the matrix of the forward solve (whose factor the engine keeps), so a CG iteration costs about
one Adam step's gradient, and the memory is a few vectors of the parameters' and of the residuals' size. The number
of parameters therefore matters little: any model whose loss gradient fits in memory fits, the pixel model of a
256×260 fracture (66,560 parameters) included.

The JVP is the VJP of the VJP: u ↦ Jᵀu is linear, so its own VJP at any u is v ↦ Jv. It reuses the forward pass of
the step's VJP, where ``torch.func.jvp`` would solve the forward again for every product: one solve per JVP instead
of two (24 ms against 48 ms on the 256×260 fracture, one thread).

The damping matrix is the identity (Levenberg's choice) rather than diag(JᵀJ) (Marquardt's): that diagonal is one
JVP per parameter away, and the identity keeps CG's operator exactly the Gauss–Newton one plus a multiple of I.
A step is tried and kept only if the loss falls: the gain ratio ρ = (L(θ) − L(θ + δ)) / (L(θ) − ‖r + Jδ‖²), the
actual decrease over the one the linear model predicts, must be positive. λ follows Nielsen's rule: after an
accepted step λ ← λ·max(1/3, 1 − (2ρ − 1)³), ν ← 2; after a rejected one λ ← νλ, ν ← 2ν. The first λ is
``damping`` times the curvature of JᵀJ along the gradient, ‖JJᵀr‖²/‖Jᵀr‖², so that ``damping`` is scale-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from flowlearn.errors import SolutionError, SolveInputError

# r(θ): the parameters' values, in the optimiser's order, to the residuals, float64 (m,).
Residuals = Callable[[tuple[torch.Tensor, ...]], torch.Tensor]
# Nielsen's rule: the least factor λ shrinks by after an accepted step, and the growth factor ν starts at.
SMALLEST_SHRINK = 1 / 3
FIRST_GROWTH = 2.0


class GaussNewton(torch.optim.Optimizer):
    """Levenberg–Marquardt with adaptive damping and a matrix-free CG inner solve (see the module docstring).

    Each :meth:`step` takes one accepted step (or, after ``max_trials`` rejections in a row, none). The damping λ,
    Nielsen's growth factor ν and the count of accepted steps are the optimiser's state: ``state_dict`` carries
    them, so that a checkpoint resumes with the damping the run had reached.

    Args:
        params: The parameters (one group).
        damping: The first λ relative to the curvature of JᵀJ along the gradient; small trusts the Gauss–Newton
            model at once, large starts with short, gradient-like steps.
        cg_iterations: At most this many CG iterations (one JVP and one VJP each) per trial step.
        cg_tolerance: CG stops once its residual is this fraction of ‖Jᵀr‖ (an inexact Newton forcing term).
        max_trials: Trial steps per :meth:`step` before it gives up with the parameters unchanged (λ raised).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        damping: float = 1e-3,
        cg_iterations: int = 20,
        cg_tolerance: float = 1e-2,
        max_trials: int = 10,
    ) -> None:
        if not damping > 0:
            raise ValueError(f"damping must be > 0, got {damping}")
        if not 0 < cg_tolerance < 1:
            raise ValueError(f"cg_tolerance must be in (0, 1), got {cg_tolerance}")
        for name, value in (("cg_iterations", cg_iterations), ("max_trials", max_trials)):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        defaults = {
            "damping": damping,
            "cg_iterations": int(cg_iterations),
            "cg_tolerance": cg_tolerance,
            "max_trials": int(max_trials),
        }
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError(f"GaussNewton takes one parameter group, got {len(self.param_groups)}")

    @property
    def params(self) -> list[torch.Tensor]:
        """The parameters, in the order :meth:`step` hands their values to the residual function."""
        return self.param_groups[0]["params"]

    def step(
        self,
        residuals: Residuals,
        closure: Callable[[], object] | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> torch.Tensor:
        """One Levenberg–Marquardt step on the loss ‖residuals(θ)‖².

        Args:
            residuals: r(θ), from the parameters' values (a tuple in :attr:`params` order, float64) to the residuals
                (m,) float64; differentiable by ``torch.func`` (twice in reverse mode).
            closure: Called once first, as torch optimisers do (Lightning runs its hooks in it); its value is unused.
            stop_requested: Asked before every CG iteration; once it answers True the step is abandoned with the
                parameters unchanged. A step of up to ``max_trials`` × ``cg_iterations`` products
                can run for minutes on a large grid, and a scheduler's SIGTERM gives a job seconds to end.

        Returns:
            The loss ‖r‖² (0-d float64) at the parameters after the step.
        """
        if closure is not None:
            closure()
        group = self.param_groups[0]
        theta = tuple(p.detach().clone() for p in self.params)
        r, jacobian, transpose = linearize(residuals, theta)
        loss = r.square().sum()
        gradient = transpose(r)  # Jᵀr: half the loss gradient
        gradient_norm = float(torch.linalg.vector_norm(gradient))
        if gradient_norm == 0:
            return loss
        state = self.state[self.params[0]]
        if "damping" not in state:
            curvature = float(jacobian(gradient).square().sum()) / gradient_norm**2
            state.update(damping=group["damping"] * curvature, growth=FIRST_GROWTH, steps=0)
        for _ in range(group["max_trials"]):
            solved = _damped_cg(
                jacobian,
                transpose,
                gradient,
                state["damping"],
                group["cg_iterations"],
                group["cg_tolerance"] * gradient_norm,
                stop_requested or _never,
            )
            if solved is None:
                return loss
            delta, j_delta = solved
            predicted = float(loss - (r + j_delta).square().sum())
            trial = tuple(t + d for t, d in zip(theta, _unflat(delta, theta)))
            trial_loss = _loss_at(residuals, trial)
            gain = (float(loss) - trial_loss) / predicted if predicted > 0 else -math.inf
            if gain > 0:
                with torch.no_grad():
                    for p, value in zip(self.params, trial):
                        p.copy_(value)
                state["damping"] *= max(SMALLEST_SHRINK, 1 - (2 * gain - 1) ** 3)
                state["growth"] = FIRST_GROWTH
                state["steps"] += 1
                return torch.tensor(trial_loss, dtype=torch.float64)
            state["damping"] *= state["growth"]
            state["growth"] *= 2
        return loss


def linearize(
    residuals: Residuals, theta: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]:
    """The residuals r(θ) (m,) and the products v ↦ Jv and u ↦ Jᵀu at θ, for v flat (n,) in the order of
    ``theta`` and u (m,). One forward evaluation of r here, then one backward pass per product: Jᵀu is the VJP,
    Jv the VJP of the VJP (see the module docstring)."""
    r, pullback = torch.func.vjp(residuals, theta)

    def transpose(u: torch.Tensor) -> torch.Tensor:
        return _flat(pullback(u)[0])

    _, pushforward = torch.func.vjp(transpose, torch.zeros_like(r))

    def jacobian(v: torch.Tensor) -> torch.Tensor:
        return pushforward(v)[0]

    return r, jacobian, transpose


def _loss_at(residuals: Residuals, theta: tuple[torch.Tensor, ...]) -> float:
    """‖r(θ)‖², or infinity where the trial parameters break the pressure solve (a rejected step, not an error)."""
    try:
        with torch.no_grad():
            loss = float(residuals(theta).square().sum())
    except (SolveInputError, SolutionError):
        return math.inf
    return loss if math.isfinite(loss) else math.inf


def _damped_cg(
    jacobian: Callable[[torch.Tensor], torch.Tensor],
    transpose: Callable[[torch.Tensor], torch.Tensor],
    gradient: torch.Tensor,
    damping: float,
    iterations: int,
    tolerance: float,
    stop_requested: Callable[[], bool],
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """CG from zero on (JᵀJ + λI) δ = −g; returns δ and Jδ (kept along the way from the products CG makes), or
    None once ``stop_requested()`` says so before an iteration.

    Each iterate lowers ‖r + Jδ‖² + λ‖δ‖² from its value ‖r‖² at δ = 0, so a truncated solve still predicts a
    decrease of the loss."""
    delta = torch.zeros_like(gradient)
    j_delta = None
    residual = -gradient
    direction = residual.clone()
    residual_sq = residual.dot(residual)
    for _ in range(iterations):
        if stop_requested():
            return None
        j_direction = jacobian(direction)
        product = transpose(j_direction) + damping * direction
        alpha = residual_sq / direction.dot(product)
        delta += alpha * direction
        j_delta = alpha * j_direction if j_delta is None else j_delta + alpha * j_direction
        residual -= alpha * product
        new_residual_sq = residual.dot(residual)
        if float(new_residual_sq) <= tolerance**2:
            break
        direction = residual + (new_residual_sq / residual_sq) * direction
        residual_sq = new_residual_sq
    return delta, j_delta


def _never() -> bool:
    return False


def _flat(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _unflat(vector: torch.Tensor, like: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    sizes = [t.numel() for t in like]
    return tuple(v.view_as(t) for v, t in zip(vector.split(sizes), like))
