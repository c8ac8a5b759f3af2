"""Turn a foreign function with a pullback (and optionally a pushforward) into a torch op.

A :class:`ForeignFunction` describes code that lives outside torch (a compiled library, a Julia function) by three
host-side callables that see only numpy arrays:

* ``forward(args) -> (outputs, residual)``
* ``pullback(residual, args, cotangents) -> gradients``   (reverse mode, vector-Jacobian product)
* ``pushforward(residual, args, tangents) -> output tangents``   (forward mode, optional)

:func:`foreign_op` wraps it as an ``autograd.Function`` that works with ``backward``, ``torch.autograd.grad``,
forward-mode AD and ``torch.func`` (``grad``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``vmap``). The core does,
once for every adapter:

* **dtype and device round trips.** Floating tensors reach the foreign side as float64, C-contiguous, on the host.
  Outputs come back in the promoted dtype of the floating tensor arguments, on their (common) device; each
  gradient comes back in its argument's dtype, on its device.
* **non-tensor arguments** are passed through untouched and get no gradient.
* **0-d and tuple outputs.** A single array (0-d included) gives one tensor, a tuple of arrays a tuple of tensors.
* **missing gradients.** A pullback may answer ``None`` for an argument (Julia's ``nothing``, a NULL pointer in C):
  it becomes zeros of the argument's shape.
* **a lock** (the adapter's) is held around every foreign call, so concurrent calls cannot interleave.
* **foreign errors** are raised by the adapters as :class:`ForeignError` carrying the foreign message.

The foreign pullback and pushforward compute first derivatives only, so the backward and jvp of this op are
themselves ops (:class:`_Pullback`, :class:`_Pushforward`) that run under ``vmap`` but refuse to be differentiated:
double backward, ``hessian`` or ``jacfwd(jacrev(f))`` raise :class:`ForeignDerivativeError` instead of returning
silently wrong (zero) second derivatives.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from flowlearn.errors import ForeignDerivativeError, ForeignError

ForwardFn = Callable[[tuple[Any, ...]], tuple[Any, Any]]
PullbackFn = Callable[[Any, tuple[Any, ...], tuple[np.ndarray, ...]], Sequence[Any]]
PushforwardFn = Callable[[Any, tuple[Any, ...], tuple[Any, ...]], Any]


@dataclass(frozen=True, eq=False)
class ForeignFunction:
    """A foreign differentiable function, described by host-side callables.

    ``args`` below is the call's argument tuple in which every floating tensor has become a float64 C-contiguous
    numpy array of the same shape, every other tensor a numpy array of its own dtype, and everything else is
    unchanged.

    Args:
        name: Used in error messages.
        forward: ``forward(args) -> (outputs, residual)``. ``outputs`` is one float64 array-like (0-d allowed) or
            a tuple of them; ``residual`` is anything the pullback and pushforward need (for example a Julia
            pullback closure), or None.
        pullback: ``pullback(residual, args, cotangents) -> gradients``. ``cotangents`` holds one float64 array
            per output, shaped like it. Returns one entry per argument: an array shaped like that argument, or
            None for a zero gradient (entries at non-floating arguments are ignored).
        pushforward: Optional ``pushforward(residual, args, tangents) -> output tangents``. ``tangents`` holds,
            per argument, a float64 array shaped like it (zeros where the caller gave none) at floating tensor
            arguments and None elsewhere. Returns tangents structured like ``outputs``.
        lock: Held around every call of the three callables. Adapters pass one lock per foreign runtime or
            library, so that all functions sharing global state are serialised together.
    """

    name: str
    forward: ForwardFn
    pullback: PullbackFn
    pushforward: PushforwardFn | None = None
    lock: Any = field(default_factory=threading.Lock)


@dataclass(frozen=True, eq=False)
class _Tape:
    """What the forward hands to the derivatives: the foreign residual and whether there was one output."""

    residual: Any
    single: bool


@dataclass(frozen=True, eq=False)
class _BatchedTape:
    """Per-sample tapes of a forward that ran under ``vmap``, one per sample of that vmap level."""

    tapes: list[Any]


def foreign_op(fn: ForeignFunction) -> Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]:
    """The torch op computing ``fn``: call it with tensors and other arguments, as the foreign function expects.

    It returns a tensor, or a tuple of tensors when the foreign forward returns a tuple; see the module docstring
    for the dtype, device and gradient rules.
    """

    def op(*args: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        device = _device(args)
        # The op itself runs on host tensors; the device transfers are ordinary torch ops around it. Autograd then
        # runs the foreign pullback on the thread that called backward, not on a device's worker thread.
        host_args = tuple(a.to("cpu") if isinstance(a, torch.Tensor) else a for a in args)
        *outputs, tape = _ForeignOp.apply(fn, *host_args)
        outputs = tuple(y.to(device) for y in outputs)
        return outputs[0] if _is_single(tape) else outputs

    op.__name__ = op.__qualname__ = fn.name
    op.__doc__ = f"The foreign function {fn.name!r} as a differentiable torch op."
    return op


def _is_single(tape: _Tape | _BatchedTape) -> bool:
    while isinstance(tape, _BatchedTape):
        tape = tape.tapes[0]
    return tape.single


class _ForeignOp(torch.autograd.Function):
    @staticmethod
    def forward(fn: ForeignFunction, *args: Any) -> tuple[Any, ...]:
        with fn.lock:
            outputs, residual = fn.forward(_to_host(args))
        single = not isinstance(outputs, tuple)
        dtype = _result_dtype(args)
        tensors = tuple(_from_host(y, dtype) for y in ((outputs,) if single else outputs))
        return (*tensors, _Tape(residual, single))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        fn, *args = inputs
        ctx.fn = fn
        ctx.tape = output[-1]
        ctx.template = tuple(None if isinstance(a, torch.Tensor) else a for a in args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        ctx.save_for_forward(*tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        # The last grad belongs to the tape (not a tensor); the others are zero-filled by autograd when unused.
        args = _fill(ctx.template, ctx.saved_tensors)
        differentiable = _floating_positions(args)
        result = _Pullback.apply(ctx.fn, ctx.tape, len(args), *args, *grads[:-1])
        by_position = dict(zip(differentiable, result))
        return (None, *(by_position.get(i) for i in range(len(args))))

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> tuple[Any, ...]:
        if ctx.fn.pushforward is None:
            raise ForeignDerivativeError(
                f"{ctx.fn.name}: forward-mode AD (jvp, jacfwd) needs a pushforward, and none was given"
            )
        args = _fill(ctx.template, ctx.saved_tensors)
        # The pushforward gets a tangent at every floating tensor argument (zeros where none was given).
        dense = tuple(
            (torch.zeros_like(a) if t is None else t) if _is_floating(a) else None
            for a, t in zip(args, tangents[1:])
        )
        return (*_Pushforward.apply(ctx.fn, ctx.tape, len(args), *args, *dense), None)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], fn: ForeignFunction, *args: Any) -> tuple[Any, Any]:
        samples = [_ForeignOp.apply(fn, *_select(args, in_dims[1:], i)) for i in range(info.batch_size)]
        outputs = tuple(torch.stack(ys) for ys in zip(*(s[:-1] for s in samples)))
        tape = _BatchedTape([s[-1] for s in samples])
        return (*outputs, tape), (*(0,) * len(outputs), None)


class _FirstDerivative(torch.autograd.Function):
    """Base of the ops that run a foreign derivative: they work under vmap but cannot be differentiated again."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.name = inputs[0].name

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> None:
        raise ForeignDerivativeError(_second_order_message(ctx.name))

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> None:
        raise ForeignDerivativeError(_second_order_message(ctx.name))


class _Pullback(_FirstDerivative):
    """Gradients of the floating tensor arguments: ``_Pullback(fn, tape, n, *args, *cotangents)``."""

    @staticmethod
    def forward(fn: ForeignFunction, tape: _Tape, n: int, *rest: Any) -> tuple[torch.Tensor, ...]:
        args, cotangents = rest[:n], rest[n:]
        with fn.lock:
            grads = fn.pullback(tape.residual, _to_host(args), tuple(_to_host(cotangents)))
        grads = tuple(grads)
        if len(grads) != n:
            raise ForeignError(f"{fn.name}: the pullback returned {len(grads)} gradients for {n} arguments")
        return tuple(_gradient(fn, i, args[i], grads[i]) for i in _floating_positions(args))

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], fn: ForeignFunction, tape: Any, n: int, *rest: Any) -> Any:
        return _vmap_derivative(_Pullback, info, in_dims, fn, tape, n, rest)


class _Pushforward(_FirstDerivative):
    """Output tangents: ``_Pushforward(fn, tape, n, *args, *tangents)``, tangents None at non-floating args."""

    @staticmethod
    def forward(fn: ForeignFunction, tape: _Tape, n: int, *rest: Any) -> tuple[torch.Tensor, ...]:
        args, tangents = rest[:n], rest[n:]
        with fn.lock:
            result = fn.pushforward(tape.residual, _to_host(args), tuple(_to_host(tangents)))
        result = (result,) if tape.single else tuple(result)
        dtype = _result_dtype(args)
        return tuple(_from_host(t, dtype) for t in result)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], fn: ForeignFunction, tape: Any, n: int, *rest: Any) -> Any:
        return _vmap_derivative(_Pushforward, info, in_dims, fn, tape, n, rest)


def _vmap_derivative(op: Any, info: Any, in_dims: tuple[Any, ...], fn, tape, n: int, rest) -> tuple[Any, Any]:
    """Run a derivative op once per sample. The tape is per sample exactly when the primal arguments are batched
    at this vmap level, because then the forward itself ran per sample at this level (``_ForeignOp.vmap``)."""
    primals_batched = any(d is not None for d in in_dims[3 : 3 + n])
    samples = []
    for i in range(info.batch_size):
        sample_tape = tape.tapes[i] if primals_batched else tape
        samples.append(op.apply(fn, sample_tape, n, *_select(rest, in_dims[3:], i)))
    outputs = tuple(torch.stack(ys) for ys in zip(*samples))
    return outputs, (0,) * len(outputs)


def _second_order_message(name: str) -> str:
    return (
        f"{name}: the foreign code provides first derivatives only, so its pullback and pushforward cannot be "
        "differentiated again (double backward, hessian, jacfwd of jacrev). Differentiate once through it."
    )


def _select(args: Sequence[Any], in_dims: Sequence[Any], i: int) -> list[Any]:
    return [a if d is None else a.select(d, i) for a, d in zip(args, in_dims)]


def _fill(template: tuple[Any, ...], tensors: Sequence[torch.Tensor]) -> tuple[Any, ...]:
    it = iter(tensors)
    return tuple(next(it) if a is None else a for a in template)


def _is_floating(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point()


def _floating_positions(args: Sequence[Any]) -> list[int]:
    return [i for i, a in enumerate(args) if _is_floating(a)]


def _device(args: Sequence[Any]) -> torch.device:
    """The device of the tensor arguments, which must share one (CPU when there are none)."""
    devices = {a.device for a in args if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        raise ValueError(
            f"tensor arguments of a foreign op must share one device, got {sorted(map(str, devices))}"
        )
    return devices.pop() if devices else torch.device("cpu")


def _result_dtype(args: Sequence[Any]) -> torch.dtype:
    """The promoted dtype of the floating tensor arguments (the default dtype when there are none)."""
    floating = [a.dtype for a in args if _is_floating(a)]
    dtype = floating[0] if floating else torch.get_default_dtype()
    for other in floating[1:]:
        dtype = torch.promote_types(dtype, other)
    return dtype


def _to_host(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(_host_array(a) if isinstance(a, torch.Tensor) else a for a in args)


def _host_array(t: torch.Tensor) -> np.ndarray:
    t = t.detach().to(torch.float64 if t.is_floating_point() else t.dtype)
    return np.ascontiguousarray(t.numpy())


def _from_host(value: Any, dtype: torch.dtype) -> torch.Tensor:
    # Always copy: the foreign runtime may own (and later free or reuse) the memory behind `value`.
    return torch.from_numpy(np.array(value, dtype=np.float64, copy=True)).to(dtype)


def _gradient(fn: ForeignFunction, i: int, arg: torch.Tensor, grad: Any) -> torch.Tensor:
    if grad is None:
        return torch.zeros_like(arg)
    g = _from_host(grad, arg.dtype)
    if g.shape != arg.shape:
        raise ForeignError(
            f"{fn.name}: the pullback returned a gradient of shape {tuple(g.shape)} for argument {i} of shape "
            f"{tuple(arg.shape)}"
        )
    return g
