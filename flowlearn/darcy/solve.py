"""The differentiable steady pressure solve ``p = solve_pressure(logK, problem)``.

Forward: assemble ``A(K) h_f = Q_f + (Dirichlet inflow)`` and solve it (see :mod:`flowlearn.darcy.assembly`). The
conductivity is one value per node, one per node and axis, or a full 2D tensor (the forms of
:mod:`flowlearn.darcy.conductivity`); each gives the edges' transmissibilities T_e from a field v.

Reverse mode (adjoint). With the residual r_i = sum_e T_e (h_i - h_j) - Q_i of each free node and a loss
gradient g = dL/dp, one adjoint solve A lam = g_f -- the same SPD matrix, so the forward factor serves -- gives

    dL/dT_e   = -(lam_a - lam_b) (h_a - h_b)          (lam = 0 on Dirichlet nodes)
    dL/dv     = sum over edges reading v of dL/dT_e * dT_e/dv
                (T_e / 2 for the geometric mean T_e = aol_e exp((v_a + v_b)/2); 1 for T_e = v_e)
    dL/dQ     = lam                                   (free nodes)
    dL/dh_D   = g_D - (L lam)_D                       (Dirichlet nodes; L = the graph Laplacian with weights T)

The full tensor's edge weights are torch operations on the node tensor (:mod:`flowlearn.darcy.tensor`), so autograd
carries dL/dT_e back to it.

Forward mode. The tangent solves A dh_f = dQ_f - (dL h)_f with dT_e = T_e (dv_a + dv_b) / 2 (dv_e for T_e = v_e)
and the tangent Dirichlet values dh_D.

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
from flowlearn.darcy.conductivity import EDGES, form_of
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.tensor import check_tensor, edge_transmissibilities
from flowlearn.engines import Engine, get_engine
from flowlearn.engines.base import ONE_OFF
from flowlearn.errors import SolutionError, SolveInputError


def solve_pressure(
    log_k: torch.Tensor,
    problem: DarcyProblem,
    dirichlet_values: torch.Tensor | None = None,
    sources: torch.Tensor | None = None,
    solver: str | Engine | None = None,
    one_off: bool = False,
) -> torch.Tensor:
    """Steady Darcy pressure (head) at every node, differentiable in ``log_k``, ``dirichlet_values`` and ``sources``.

    Args:
        log_k: Natural log of the node conductivity K (m/s), image layout, float32 or float64, in one of three
            forms (:mod:`flowlearn.darcy.conductivity`): one value per node, ``problem.grid.shape`` or
            ``(B, *problem.grid.shape)``; one per node and axis, ``(B, dim, *shape)`` with the axes in the order
            x, y[, z]; or, on a 2D grid, the full tensor ``(B, 3, H, W)`` = (log T_xx, log T_yy, ρ) with
            ρ = T_xy/√(T_xx T_yy) in (-1, 1) (:func:`~flowlearn.darcy.tensor.tensor_form` makes it from the
            components). Values at inactive nodes are ignored (they may be -inf), all others must be finite. On the
            engine's device (the CPU, or the GPU engine's CUDA device; the Julia engine takes any).
        problem: Grid, Dirichlet nodes, sources and active nodes.
        dirichlet_values: Heads (m) at the Dirichlet nodes, broadcastable to ``(B, *shape)``; default the
            problem's.
        sources: Sources Q (m^3/s, positive = injection), broadcastable to ``(B, *shape)``; default the problem's.
        solver: An engine name from :data:`flowlearn.engines.ENGINES` or ``"auto"`` (default: CHOLMOD when
            installed, else SuperLU), each name one shared engine; or a configured
            :class:`~flowlearn.engines.base.Engine`.
        one_off: The conductivities will not come back (a baseline's, a trial of a parameter search): the engine
            keeps no factor or warm start of them, and what it keeps for this problem's other solves (a training
            loop's factor) stays as it was. Gradients are exact either way; their adjoint solves are one-offs too.

    Returns:
        float64 tensor (B, *shape), or ``shape`` for an unbatched ``log_k``: the solved head at free nodes, the
        Dirichlet value at Dirichlet nodes and NaN at inactive nodes (they carry no equation; mask them with
        ``problem.active``).

    Raises:
        SolveInputError: wrong shape (an empty batch too), dtype or device (for the engine), non-finite values at
            active nodes, a tensor that is not positive definite, or a ``problem`` that is not a DarcyProblem.
        ConvergenceError: an iterative solve missed its tolerance.
        SolutionError: an active log K outside ``problem.layout.value_range`` (conductances beyond float64), or a
            solve without sources returned heads outside its Dirichlet range: the conductivities span more than
            float64 resolves.
    """
    if not isinstance(log_k, torch.Tensor):
        raise SolveInputError(f"log_k must be a torch.Tensor, got {type(log_k).__name__}")
    if not isinstance(one_off, bool):
        raise SolveInputError(f"one_off must be True or False, got {one_off!r}")
    log_k = _as_float64(log_k, "log_k", log_k.device)
    engine = get_engine(solver)
    _check_device(log_k.device, engine)
    target, values = system_field(log_k, problem)
    unbatched = tuple(log_k.shape) == problem.grid.shape
    shape = (values.shape[0], *problem.grid.shape)
    heads = _field(dirichlet_values, problem.dirichlet_values, "dirichlet_values", shape, log_k.device)
    flows = _field(sources, problem.sources, "sources", shape, log_k.device)
    role = ONE_OFF if one_off else "state"
    pressure = PressureSolve.apply(values, heads, flows, _Call(target, engine, role))
    return pressure.squeeze(0) if unbatched else pressure


def system_field(log_k: torch.Tensor, problem: DarcyProblem) -> tuple[DarcyProblem, torch.Tensor]:
    """(the problem's variant for the form of ``log_k``, the field its layout reads, batched): ``log_k`` itself for
    the scalar (a batch of one added where it has none) and axes forms, the 9-point scheme's edge transmissibilities
    (B, E) for the tensor form, after checking that the tensor is positive definite at every active node.

    Raises:
        SolveInputError: ``problem`` is not a :class:`DarcyProblem`, ``log_k`` has no form on its grid or an
            empty batch.
    """
    if not isinstance(problem, DarcyProblem):
        raise SolveInputError(
            f"problem must be a DarcyProblem, got {type(problem).__name__} (make one with "
            "DarcyProblem.fracture(shape))"
        )
    form = form_of(log_k.shape, problem.grid.shape)
    unbatched = tuple(log_k.shape) == problem.grid.shape
    if not unbatched and log_k.shape[0] == 0:
        raise SolveInputError(
            f"log_k has an empty batch (shape {tuple(log_k.shape)}): give at least one item"
        )
    if form == "scalar":
        batched = log_k.unsqueeze(0) if unbatched else log_k
        return problem.variant("scalar"), batched
    if form == "axes":
        return problem.variant("axes"), log_k
    active = torch.as_tensor(problem.active, device=log_k.device)
    check_tensor(log_k.detach(), active)
    if not torch._C._functorch.is_batchedtensor(log_k):  # no value may decide under vmap (see check_tensor)
        # The diagonal's logs in float64's reach, as for a conductivity per axis: beyond it the edges would
        # overflow, or vanish into edges that carry nothing.
        axes = problem.variant("axes")
        diagonal = log_k.detach()[:, :2].reshape(log_k.shape[0], -1)
        _check_float64_range(diagonal, torch.as_tensor(axes.layout.value_mask, device=log_k.device), axes)
    grid = problem.grid
    return problem.variant(EDGES), edge_transmissibilities(log_k, active, grid.spacing, grid.thickness)


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
        """The call of a derivative's solve of this one's matrix: in ``role``, unless this one is a one-off."""
        return _Call(self.problem, self.engine, self.role if self.role == ONE_OFF else role)


class PressureSolve(torch.autograd.Function):
    """``p = solve(v, h_D, Q)``: a field v (B, ...) in the form of ``call.problem``'s layout, heads and sources
    (B, *shape) float64, image layout; see the module docstring."""

    @staticmethod
    def forward(values: torch.Tensor, heads: torch.Tensor, flows: torch.Tensor, call: _Call) -> torch.Tensor:
        problem = call.problem
        layout = problem.layout
        batch = values.shape[0]
        value_nodes, head_nodes, flow_nodes = (x.detach().reshape(batch, -1) for x in (values, heads, flows))
        if values.device.type == "cpu":
            # numpy masks and values: on small arrays numpy's checks cost less than starting torch's thread pool.
            used, fixed, active = layout.value_mask, layout.fixed_mask, layout.active_mask
            checked = tuple(x.numpy() for x in (value_nodes, head_nodes, flow_nodes))
        else:
            _, _, _, _, fixed, active = layout.torch_tensors(values.device)
            used = torch.as_tensor(layout.value_mask, device=values.device)
            checked = (value_nodes, head_nodes, flow_nodes)
        shapes = (layout.value_shape, problem.grid.shape, problem.grid.shape)
        for name, field, where, shape in zip(
            ("log_k", "dirichlet_values", "sources"), checked, (used, fixed, active), shapes
        ):
            # A tensor's edges come from its nodes, checked already: the range check names their pixels.
            fault = (
                None if name == "log_k" and layout.rule == "linear" else nonfinite(field, where, shape, True)
            )
            if fault:
                raise SolveInputError(f"{name} has {fault}")
        _check_float64_range(checked[0], used, problem)
        pressure = call.engine.pressure(problem, value_nodes, head_nodes, flow_nodes, call.role)
        _check_maximum_principle(pressure, value_nodes, head_nodes, flow_nodes, problem)
        return pressure.reshape(heads.shape)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        values, heads, _, call = inputs
        ctx.call = call
        ctx.save_for_backward(values, heads, output)
        ctx.save_for_forward(values, output)

    @staticmethod
    def backward(ctx, grad_pressure: torch.Tensor):
        values, heads, pressure = ctx.saved_tensors
        call = ctx.call
        layout = call.problem.layout
        node_a, node_b, _, free, fixed, _ = layout.torch_tensors(values.device)
        flat = _flattener(values.shape[0])
        # The adjoint system is the forward system with sources g and zero heads.
        grad = torch.where(torch.isnan(pressure), 0.0, grad_pressure)
        adjoint = PressureSolve.apply(values, torch.zeros_like(heads), grad, call.with_role("adjoint"))
        lam = torch.where(free, flat(adjoint), 0.0)
        grad_values = grad_heads = None
        needs_values, needs_heads = ctx.needs_input_grad[:2]
        # Where no graph of the gradient is recorded (no double backward), the CPU takes T from the solve's own
        # assembly and sums the edges in one compiled loop: at 1024x1024 10 ms against 110 ms of torch operations.
        compiled = values.device.type == "cpu" and not torch.is_grad_enabled()
        if needs_values or needs_heads:
            u = flat(values)
            if compiled:
                t = torch.from_numpy(layout.last_transmissibilities(u.detach().numpy()))
            else:
                t = layout.torch_transmissibilities(u)
        if needs_values:
            h = flat(pressure)
            if compiled:
                grad_values = torch.from_numpy(
                    layout.values_gradient(t.numpy(), lam.detach().numpy(), h.detach().numpy())
                )
            else:
                dloss_dt = -(lam[:, node_a] - lam[:, node_b]) * (h[:, node_a] - h[:, node_b])
                grad_values = layout.torch_values_vjp(t, dloss_dt)
            grad_values = grad_values.reshape(values.shape)
        if needs_heads:
            # (L lam) at a Dirichlet node d sums T_e (lam_d - lam_a) = -T_e lam_a over its free-Dirichlet edges
            # (lam_d = 0); no other edge touches a Dirichlet node.
            boundary = slice(layout.num_free_edges, None)
            inflow = t[:, boundary] * lam[:, node_a[boundary]]
            grad_heads = torch.where(fixed, flat(grad), 0.0).index_add(1, node_b[boundary], inflow)
            grad_heads = grad_heads.reshape(heads.shape)
        return grad_values, grad_heads, lam.reshape(heads.shape), None

    @staticmethod
    def jvp(
        ctx, d_values: torch.Tensor, d_heads: torch.Tensor, d_flows: torch.Tensor, _: None
    ) -> torch.Tensor:
        values, pressure = ctx.saved_tensors
        call = ctx.call
        layout = call.problem.layout
        node_a, node_b, _, _, _, active = layout.torch_tensors(values.device)
        flat = _flattener(values.shape[0])
        d_values = torch.zeros_like(values) if d_values is None else d_values
        d_heads, d_flows = (torch.zeros_like(pressure) if d is None else d for d in (d_heads, d_flows))
        u, h = flat(values), flat(pressure)
        t = layout.torch_transmissibilities(u)
        dt = layout.torch_transmissibility_jvp(t, flat(d_values))
        flux_change = _scatter_edges(dt * (h[:, node_a] - h[:, node_b]), node_a, node_b, h, sign=-1.0)
        tangent = PressureSolve.apply(
            values, d_heads, d_flows - flux_change.reshape(pressure.shape), call.with_role("tangent")
        )
        return torch.where(active.reshape(pressure.shape[1:]), tangent, 0.0)

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


def _field(
    value: torch.Tensor | None,
    default: np.ndarray,
    name: str,
    shape: tuple[int, ...],
    device: torch.device,
) -> torch.Tensor:
    """Heads or sources as float64 (B, *grid shape) = ``shape`` on ``device``: ``default`` where ``value`` is None."""
    if value is None:
        return torch.from_numpy(default).to(device).expand(shape)
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value, dtype=torch.float64, device=device)
    value = _as_float64(value, name, device)
    try:
        return value.expand(shape)
    except RuntimeError:
        raise SolveInputError(
            f"{name} has shape {tuple(value.shape)}, which does not broadcast to the batch's {shape}"
        ) from None


def _check_float64_range(
    values: np.ndarray | torch.Tensor, used: np.ndarray | torch.Tensor, problem: DarcyProblem
) -> None:
    """Raise :class:`SolutionError` where a field value the system reads (B, num_values; numpy on the CPU, with
    ``used``) lies outside :attr:`~flowlearn.darcy.assembly.SystemLayout.value_range`: its conductances overflow
    float64 or vanish in it, and no engine could solve the system (multigrid and the factorisations fail on it, each
    in its own way). Names the pixel (and the axis of a conductivity per axis, or the edge of a tensor's)."""
    layout = problem.layout
    low, high = layout.value_range
    inside = (values >= low) & (values <= high)
    if layout.rule == "linear":
        inside = inside | (values == 0)  # an edge that carries nothing
    outside = used & ~inside
    if not bool(outside.any()):
        return
    item, slot = (int(i) for i in torch.as_tensor(outside).nonzero()[0])
    value = float(values[item, slot])
    if layout.rule == "linear":
        edge = int(np.flatnonzero(layout.slots[:, 0] == slot)[0])
        ends = [tuple(int(i) for i in np.unravel_index(n, problem.grid.shape)) for n in layout.edges[edge]]
        what = f"the tensor's edge transmissibility is {value:.6g} between pixels {ends[0]} and {ends[1]}"
        bounds = f"[{low:.3g}, {high:.3g}] (or 0)"
    else:
        index = np.unravel_index(slot, layout.value_shape)
        axis = f" along {'xyz'[int(index[0])]}" if len(index) > problem.grid.dim else ""
        pixel = tuple(int(i) for i in index[-problem.grid.dim :])
        what = f"log K{axis} is {value:.6g} at pixel {pixel}"
        bounds = f"[{low:.1f}, {high:.1f}]"
    raise SolutionError(
        f"{what} of batch item {item}, outside {bounds}, beyond which the pressure solve's conductances overflow "
        "float64 or vanish in it"
    )


# Relative slack of the maximum-principle check: solves are exact to ~1e-11 relative to the heads (multigrid-
# preconditioned CG left 1.6e-10 of the head at 128x130 with a log K of standard deviation 3), so an honest head never
# leaves the Dirichlet range by more than this fraction of the heads' magnitude |low| + |high|. That magnitude, not
# the range, sets the rounding: it bounds the range too, and it stays > 0 for equal heads, whose constant solution a
# slack of the range alone (0) refused.
MAXIMUM_PRINCIPLE_SLACK = 1e-8


def _check_maximum_principle(
    pressure: torch.Tensor,
    values: torch.Tensor,
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
    slack = MAXIMUM_PRINCIPLE_SLACK * (abs(low) + abs(high)) + 1e-300
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
        f"{float(high[item]):.6g}] that a solution without sources stays within. {_steepest_jump(values[item], problem)}"
    )


def _row_range(x: np.ndarray | torch.Tensor) -> tuple:
    """(min, max) of each row of a 2D array or tensor."""
    if isinstance(x, np.ndarray):
        return x.min(1), x.max(1)
    return torch.aminmax(x, dim=1)


def _steepest_jump(values: np.ndarray | torch.Tensor, problem: DarcyProblem) -> str:
    """Where the conductivity changes most at one node, in words (for the error message): the largest jump of log K
    across an edge for the node forms, the widest spread of the edge transmissibilities at one node otherwise."""
    layout = problem.layout
    field = np.asarray(values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else values)
    a, b = layout.edges.T
    if layout.rule == "geometric":
        jumps = np.abs(field[layout.slots[:, 0]] - field[layout.slots[:, 1]])
        edge = int(np.argmax(jumps))
        first, second = (
            tuple(int(i) for i in np.unravel_index(n, problem.grid.shape)) for n in (a[edge], b[edge])
        )
        return (
            f"log K jumps by {jumps[edge]:.3g} between pixels {first} and {second}: conductances that differ by "
            "more than about 1e15 at one node are beyond float64"
        )
    with np.errstate(divide="ignore"):
        log_t = np.log10(layout.transmissibilities(field[None])[0])
    ends = np.concatenate([a, b])
    highest = np.full(layout.num_nodes, -np.inf)
    lowest = np.full(layout.num_nodes, np.inf)
    np.maximum.at(highest, ends, np.tile(log_t, 2))
    np.minimum.at(lowest, ends, np.where(np.isfinite(np.tile(log_t, 2)), np.tile(log_t, 2), np.inf))
    spread = np.where(np.isfinite(lowest), highest - lowest, 0.0)
    node = int(np.argmax(spread))
    pixel = tuple(int(i) for i in np.unravel_index(node, problem.grid.shape))
    return (
        f"the transmissibilities of the edges at pixel {pixel} span 10^{spread[node]:.3g}: conductances that "
        "differ by more than about 1e15 at one node are beyond float64"
    )
