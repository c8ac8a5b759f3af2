"""The differentiable steady pressure solve ``p = solve_pressure(logK, problem)``.

Forward: assemble ``A(K) h_f = Q_f + (Dirichlet inflow)`` and solve it (see :mod:`flowlearn.darcy.assembly`).

Reverse mode (adjoint). With the residual r_i = sum_e T_e (h_i - h_j) - Q_i of each free node and a loss
gradient g = dL/dp, one adjoint solve A lam = g_f -- the same SPD matrix, so the forward factor serves -- gives

    dL/dT_e   = -(lam_a - lam_b) (h_a - h_b)          (lam = 0 on Dirichlet nodes)
    dL/dlogK  = sum over edges at the node of dL/dT_e * T_e / 2
    dL/dQ     = lam                                   (free nodes)
    dL/dh_D   = g_D - (L lam)_D                       (Dirichlet nodes; L = the graph Laplacian with weights T)

Forward mode. The tangent solves A dh_f = dQ_f - (dL h)_f with dT_e = T_e (dlogK_a + dlogK_b) / 2 and the
tangent Dirichlet values dh_D.

The adjoint solve is a pressure solve itself (sources g, zero heads), and the tangent is one with sources
dQ - dL h and heads dh_D. Both rules are therefore written with this op plus torch operations, which makes them
differentiable again: double backward, ``hessian``, ``jacfwd``, ``jacrev`` and ``vmap(grad)`` all work.

Only the linear solve depends on the backend: it runs through the chosen :class:`~flowlearn.engines.base.Engine`
(CHOLMOD, SuperLU or AMG on the CPU, cuDSS or PCG on a GPU, DPFEHM in Julia), while these rules are the same torch
operations everywhere (on the CPU, where no graph of the gradient is recorded, the sum over edges runs as one compiled
loop instead). The ``vmap`` rule folds the vmapped dimension into the batch, so the engine sees one batch.
"""

from __future__ import annotations

import numpy as np
import torch

from flowlearn.checks import nonfinite
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.engines import Engine, get_engine
from flowlearn.errors import SolutionError, SolveInputError


def solve_pressure(
    log_k: torch.Tensor,
    problem: DarcyProblem,
    dirichlet_values: torch.Tensor | None = None,
    sources: torch.Tensor | None = None,
    solver: str | Engine | None = None,
) -> torch.Tensor:
    """Steady Darcy pressure (head) at every node, differentiable in ``log_k``, ``dirichlet_values`` and ``sources``.

    Args:
        log_k: Natural log of the node conductivity K (m/s), image layout, float32 or float64:
            ``problem.grid.shape`` or ``(B, *problem.grid.shape)``. Values at inactive nodes are ignored (they may
            be -inf), all others must be finite. On the engine's device (the CPU, or the GPU engine's CUDA device;
            the Julia engine takes any).
        problem: Grid, Dirichlet nodes, sources and active nodes.
        dirichlet_values: Heads (m) at the Dirichlet nodes, broadcastable to ``log_k``; default the problem's.
        sources: Sources Q (m^3/s, positive = injection), broadcastable to ``log_k``; default the problem's.
        solver: An engine name from :data:`flowlearn.engines.ENGINES` or ``"auto"`` (default: CHOLMOD when
            installed, else SuperLU), each name one shared engine; or a configured
            :class:`~flowlearn.engines.base.Engine`.

    Returns:
        float64 tensor shaped like ``log_k``: the solved head at free nodes, the Dirichlet value at Dirichlet nodes
        and NaN at inactive nodes (they carry no equation; mask them with ``problem.active``).

    Raises:
        SolveInputError: wrong shape, dtype or device (for the engine), or non-finite values at active nodes.
        ConvergenceError: an iterative solve missed its tolerance.
        SolutionError: an active log K outside ``problem.layout.log_k_range`` (conductances beyond float64), or a
            solve without sources returned heads outside its Dirichlet range: the conductivities span more than
            float64 resolves.
    """
    grid_shape = problem.grid.shape
    if not isinstance(log_k, torch.Tensor):
        raise SolveInputError(f"log_k must be a torch.Tensor, got {type(log_k).__name__}")
    unbatched = tuple(log_k.shape) == grid_shape
    if not unbatched and tuple(log_k.shape[1:]) != grid_shape:
        raise SolveInputError(
            f"log_k has shape {tuple(log_k.shape)}, but the problem's grid needs {grid_shape} or "
            f"(batch, {', '.join(map(str, grid_shape))})"
        )
    if unbatched:
        log_k = log_k.unsqueeze(0)
    log_k = _as_float64(log_k, "log_k", log_k.device)
    heads = _field(dirichlet_values, problem.dirichlet_values, "dirichlet_values", log_k)
    flows = _field(sources, problem.sources, "sources", log_k)
    engine = get_engine(solver)
    _check_device(log_k.device, engine)
    pressure = PressureSolve.apply(log_k, heads, flows, _Call(problem, engine, "state"))
    return pressure.squeeze(0) if unbatched else pressure


def _check_device(device: torch.device, engine: Engine) -> None:
    if engine.device is None or device == engine.device:
        return
    hint = ""
    if device.type == "cuda":
        hint = ", or pass solver='gpu' to solve CUDA tensors on their GPU"
    elif engine.device.type == "cuda":
        hint = ", or pass a CPU solver (solver='auto') for CPU tensors"
    raise SolveInputError(
        f"log_k is on device {device}, but solver {engine.name!r} runs on {engine.device}; move the tensors with "
        f".to('{engine.device}'){hint}"
    )


class _Call:
    """The non-tensor arguments of one op application: problem, engine and the role of the rhs (warm starts)."""

    def __init__(self, problem: DarcyProblem, engine: Engine, role: str) -> None:
        self.problem, self.engine, self.role = problem, engine, role

    def with_role(self, role: str) -> _Call:
        return _Call(self.problem, self.engine, role)


class PressureSolve(torch.autograd.Function):
    """``p = solve(logK, h_D, Q)`` on image-layout float64 tensors (B, *shape); see the module docstring."""

    @staticmethod
    def forward(log_k: torch.Tensor, heads: torch.Tensor, flows: torch.Tensor, call: _Call) -> torch.Tensor:
        problem = call.problem
        layout = problem.layout
        batch = log_k.shape[0]
        log_k_nodes, head_nodes, flow_nodes = (x.detach().reshape(batch, -1) for x in (log_k, heads, flows))
        if log_k.device.type == "cpu":
            # numpy masks and values: on small arrays numpy's checks cost less than starting torch's thread pool.
            fixed, active = layout.fixed_mask, layout.active_mask
            checked = tuple(x.numpy() for x in (log_k_nodes, head_nodes, flow_nodes))
        else:
            _, _, _, _, fixed, active = layout.torch_tensors(log_k.device)
            checked = (log_k_nodes, head_nodes, flow_nodes)
        for name, values, where in zip(
            ("log_k", "dirichlet_values", "sources"), checked, (active, fixed, active)
        ):
            fault = nonfinite(values, where, problem.grid.shape, batched=True)
            if fault:
                raise SolveInputError(f"{name} has {fault}")
        _check_float64_range(checked[0], active, problem)
        pressure = call.engine.pressure(problem, log_k_nodes, head_nodes, flow_nodes, call.role)
        _check_maximum_principle(pressure, log_k_nodes, head_nodes, flow_nodes, problem)
        return pressure.reshape(log_k.shape)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        log_k, heads, _, call = inputs
        ctx.call = call
        ctx.save_for_backward(log_k, heads, output)
        ctx.save_for_forward(log_k, output)

    @staticmethod
    def backward(ctx, grad_pressure: torch.Tensor):
        log_k, heads, pressure = ctx.saved_tensors
        call = ctx.call
        layout = call.problem.layout
        node_a, node_b, _, free, fixed, _ = layout.torch_tensors(log_k.device)
        shape = log_k.shape
        flat = _flattener(shape[0])
        # The adjoint system is the forward system with sources g and zero heads.
        grad = torch.where(torch.isnan(pressure), 0.0, grad_pressure)
        adjoint = PressureSolve.apply(log_k, torch.zeros_like(heads), grad, call.with_role("adjoint"))
        lam = torch.where(free, flat(adjoint), 0.0)
        grad_log_k = grad_heads = None
        needs_log_k, needs_heads = ctx.needs_input_grad[:2]
        # Where no graph of the gradient is recorded (no double backward), the CPU takes T from the solve's own
        # assembly and sums the edges in one compiled loop: at 1024x1024 10 ms against 110 ms of torch operations.
        compiled = log_k.device.type == "cpu" and not torch.is_grad_enabled()
        if needs_log_k or needs_heads:
            u = flat(log_k)
            if compiled:
                t = torch.from_numpy(layout.last_transmissibilities(u.detach().numpy()))
            else:
                t = layout.torch_transmissibilities(u)
        if needs_log_k:
            h = flat(pressure)
            if compiled:
                grad_log_k = torch.from_numpy(
                    layout.log_k_gradient(t.numpy(), lam.detach().numpy(), h.detach().numpy())
                )
            else:
                dloss_dt = -(lam[:, node_a] - lam[:, node_b]) * (h[:, node_a] - h[:, node_b])
                grad_log_k = _scatter_edges(0.5 * dloss_dt * t, node_a, node_b, u)
            grad_log_k = grad_log_k.reshape(shape)
        if needs_heads:
            # (L lam) at a Dirichlet node d sums T_e (lam_d - lam_a) = -T_e lam_a over its free-Dirichlet edges
            # (lam_d = 0); no other edge touches a Dirichlet node.
            boundary = slice(layout.num_free_edges, None)
            inflow = t[:, boundary] * lam[:, node_a[boundary]]
            grad_heads = torch.where(fixed, flat(grad), 0.0).index_add(1, node_b[boundary], inflow)
            grad_heads = grad_heads.reshape(shape)
        return grad_log_k, grad_heads, lam.reshape(shape), None

    @staticmethod
    def jvp(
        ctx, d_log_k: torch.Tensor, d_heads: torch.Tensor, d_flows: torch.Tensor, _: None
    ) -> torch.Tensor:
        log_k, pressure = ctx.saved_tensors
        call = ctx.call
        layout = call.problem.layout
        node_a, node_b, _, _, _, active = layout.torch_tensors(log_k.device)
        shape = log_k.shape
        flat = _flattener(shape[0])
        d_log_k, d_heads, d_flows = (
            torch.zeros_like(log_k) if d is None else d for d in (d_log_k, d_heads, d_flows)
        )
        u, h, du = flat(log_k), flat(pressure), flat(d_log_k)
        t = layout.torch_transmissibilities(u)
        dt = 0.5 * t * (du[:, node_a] + du[:, node_b])
        flux_change = _scatter_edges(dt * (h[:, node_a] - h[:, node_b]), node_a, node_b, u, sign=-1.0)
        tangent = PressureSolve.apply(
            log_k, d_heads, d_flows - flux_change.reshape(shape), call.with_role("tangent")
        )
        return torch.where(active.reshape(shape[1:]), tangent, 0.0)

    @staticmethod
    def vmap(info, in_dims, log_k, heads, flows, call):
        # The op is batched natively: fold the vmapped dimension into the batch dimension.
        size = info.batch_size
        args = []
        for x, dim in zip((log_k, heads, flows), in_dims[:3]):
            x = x.unsqueeze(0).expand(size, *x.shape) if dim is None else x.movedim(dim, 0)
            args.append(x.reshape(size * x.shape[1], *x.shape[2:]))
        pressure = PressureSolve.apply(*args, call)
        return pressure.reshape(size, -1, *pressure.shape[1:]), 0


def _flattener(batch: int):
    """(B, *grid shape) -> (B, num_nodes) in flat image order, the numbering of the system layout (a view)."""
    return lambda x: x.reshape(batch, -1)


def _scatter_edges(
    values: torch.Tensor, node_a: torch.Tensor, node_b: torch.Tensor, like: torch.Tensor, sign: float = 1.0
) -> torch.Tensor:
    """Node sums of edge values (B, E): ``+values`` at node_a and ``sign*values`` at node_b, shaped like ``like``."""
    out = torch.zeros_like(like)
    out = out.index_add(1, node_a, values)
    return out.index_add(1, node_b, sign * values)


def _as_float64(x: torch.Tensor, name: str, device: torch.device) -> torch.Tensor:
    if not (
        x.is_floating_point() and x.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    ):
        raise SolveInputError(f"{name} must be a real floating-point tensor, got dtype {x.dtype}")
    if x.device != device:
        raise SolveInputError(
            f"{name} is on device {x.device} but log_k is on {device}; put them on one device"
        )
    return x.to(torch.float64)


def _field(value: torch.Tensor | None, default: np.ndarray, name: str, like: torch.Tensor) -> torch.Tensor:
    if value is None:
        return torch.from_numpy(default).to(like.device).expand_as(like)
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value, dtype=torch.float64, device=like.device)
    value = _as_float64(value, name, like.device)
    try:
        return value.expand_as(like)
    except RuntimeError:
        raise SolveInputError(
            f"{name} has shape {tuple(value.shape)}, which does not broadcast to log_k's {tuple(like.shape)}"
        ) from None


def _check_float64_range(
    log_k: np.ndarray | torch.Tensor, active: np.ndarray | torch.Tensor, problem: DarcyProblem
) -> None:
    """Raise :class:`SolutionError` where an active node's log K (B, num_nodes; numpy on the CPU, with ``active``)
    lies outside :attr:`~flowlearn.darcy.assembly.SystemLayout.log_k_range`: its conductances overflow float64 or
    vanish in it, and no engine could solve the system (multigrid and the factorisations fail on it, each in its
    own way)."""
    low, high = problem.layout.log_k_range
    outside = active & ~((log_k >= low) & (log_k <= high))
    if not bool(outside.any()):
        return
    item, node = (int(i) for i in torch.as_tensor(outside).nonzero()[0])
    pixel = tuple(int(i) for i in np.unravel_index(node, problem.grid.shape))
    raise SolutionError(
        f"log K is {float(log_k[item, node]):.6g} at pixel {pixel} of batch item {item}, outside [{low:.1f}, "
        f"{high:.1f}], beyond which the pressure solve's conductances overflow float64 or vanish in it"
    )


# Relative slack of the maximum-principle check: solves are exact to ~1e-11, so an honest head never leaves the
# Dirichlet range by more than this fraction of it.
MAXIMUM_PRINCIPLE_SLACK = 1e-8


def _check_maximum_principle(
    pressure: torch.Tensor,
    log_k: torch.Tensor,
    heads: torch.Tensor,
    flows: torch.Tensor,
    problem: DarcyProblem,
) -> None:
    """Raise when a source-free solve returned heads outside its Dirichlet range: not a solution.

    Without sources at free nodes, the discrete solution lies between the lowest and highest Dirichlet head (the
    matrix is a diagonally dominant M-matrix). A head outside that range (or NaN) means the conductivities span
    more than float64 resolves at some node, and the factorisation returned rounding noise. Costs a gather and a
    min and max of the free heads per solve (numpy on the CPU, where torch's small reductions cost 5-10x more);
    items with sources are not checked.
    """
    layout = problem.layout
    if pressure.device.type == "cpu":
        free, fixed = layout.free_nodes, layout.fixed_nodes
        pressure, heads, flows = (x.numpy() for x in (pressure, heads, flows))
    else:
        free, fixed = layout.torch_index_maps(pressure.device)[3:]
    # A forward solve usually has no source anywhere, which needs no gather to see.
    source_free = ~(flows[:, free] != 0).any(1) if bool(flows.any()) else ~flows.any(1)
    if not bool(source_free.any()):
        return
    low, high = _row_range(heads[:, fixed])
    slack = MAXIMUM_PRINCIPLE_SLACK * (high - low) + 1e-300
    lowest, highest = _row_range(pressure[:, free])
    outside = source_free & ~((lowest >= low - slack) & (highest <= high + slack))  # NaN heads too
    if not bool(outside.any()):
        return
    item = int(outside.nonzero()[0][0])
    free_heads = torch.as_tensor(pressure[item, free])
    excess = torch.maximum(float(low[item]) - free_heads, free_heads - float(high[item]))
    node = int(free[int(torch.argmax(excess))])
    pixel = tuple(int(i) for i in np.unravel_index(node, problem.grid.shape))
    raise SolutionError(
        f"the pressure solve returned no solution for batch item {item}: the head at pixel {pixel} is "
        f"{float(pressure[item, node]):.12g}, outside the Dirichlet range [{float(low[item]):.6g}, "
        f"{float(high[item]):.6g}] that a solution without sources stays within. {_steepest_jump(log_k[item], problem)}"
    )


def _row_range(x: np.ndarray | torch.Tensor) -> tuple:
    """(min, max) of each row of a 2D array or tensor."""
    if isinstance(x, np.ndarray):
        return x.min(1), x.max(1)
    return torch.aminmax(x, dim=1)


def _steepest_jump(log_k: torch.Tensor, problem: DarcyProblem) -> str:
    """Where log K changes most between neighbouring active pixels, in words (for the error message)."""
    layout = problem.layout
    a, b = layout.edges.T
    values = log_k.detach().cpu().numpy()
    jumps = np.abs(values[a] - values[b])
    edge = int(np.argmax(jumps))
    first, second = (
        tuple(int(i) for i in np.unravel_index(n, problem.grid.shape)) for n in (a[edge], b[edge])
    )
    return (
        f"log K jumps by {jumps[edge]:.3g} between pixels {first} and {second}: conductances that differ by more "
        "than about 1e15 at one node are beyond float64"
    )
