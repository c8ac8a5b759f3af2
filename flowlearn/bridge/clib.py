"""Shared libraries with a C ABI (C, C++, Fortran through ``bind(c)``) as differentiable torch ops, via ctypes.

Calling convention
------------------
A library exports, for a function ``NAME``, the forward ``NAME``, its vector-Jacobian product ``NAME_vjp`` and,
optionally, its Jacobian-vector product ``NAME_jvp``. All arrays are float64 and C-contiguous, passed flat (the
shapes live on the Python side); all counts are ``int64_t``::

    int NAME(const double *const *x, const int64_t *nx, int64_t n_x,     /* n_x input arrays, x[i] has nx[i] */
             const double *p, int64_t n_p,                              /* n_p scalar parameters             */
             double *const *y, const int64_t *ny, int64_t n_y,          /* n_y output arrays, to be written  */
             char *msg, int64_t msg_len);

    int NAME_vjp(const double *const *x, const int64_t *nx, int64_t n_x,
                 const double *p, int64_t n_p,
                 const double *const *ybar, const int64_t *ny, int64_t n_y,   /* cotangents of the outputs     */
                 double **xbar,                                             /* gradients, xbar[i] has nx[i] */
                 char *msg, int64_t msg_len);

    int NAME_jvp(const double *const *x, const int64_t *nx, int64_t n_x,
                 const double *p, int64_t n_p,
                 const double *const *xdot,                                 /* tangents, xdot[i] has nx[i]   */
                 double *const *ydot, const int64_t *ny, int64_t n_y,       /* output tangents, to be written */
                 char *msg, int64_t msg_len);

* Return 0 on success. On failure return any other value and write a NUL-terminated message of at most
  ``msg_len`` bytes (including the NUL) to ``msg``; it is raised in Python as :class:`ForeignError`.
* Output and gradient buffers arrive filled with NaN, so an element left unwritten shows up. A VJP sets
  ``xbar[i] = NULL`` for an input it does not differentiate (structurally zero or not differentiable); that
  gradient becomes zeros.
* Tensor arguments are the inputs ``x`` in the order given; non-tensor arguments (Python numbers) are the
  parameters ``p`` in the order given. Parameters get no gradient.
* Calls into one library are serialised by a lock, so the library may keep global state; it must not keep
  pointers to the buffers after returning.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Callable, Sequence
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowlearn.bridge.core import ForeignFunction, foreign_op
from flowlearn.errors import ForeignError

Shape = tuple[int, ...]
OutputShapes = Callable[..., Sequence[Shape]]

_MESSAGE_BYTES = 1024
_I64 = ctypes.c_int64
_DOUBLE_P = ctypes.POINTER(ctypes.c_double)
_DOUBLE_PP = ctypes.POINTER(_DOUBLE_P)
_I64_P = ctypes.POINTER(_I64)
_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()

_INPUTS = [_DOUBLE_PP, _I64_P, _I64, _DOUBLE_P, _I64]  # x, nx, n_x, p, n_p
_OUTPUTS = [_DOUBLE_PP, _I64_P, _I64]  # y (or ybar, ydot), ny, n_y
_MESSAGE = [ctypes.c_char_p, _I64]  # msg, msg_len
_FORWARD_ARGS = [*_INPUTS, *_OUTPUTS, *_MESSAGE]
_VJP_ARGS = [*_INPUTS, *_OUTPUTS, _DOUBLE_PP, *_MESSAGE]
_JVP_ARGS = [*_INPUTS, _DOUBLE_PP, *_OUTPUTS, *_MESSAGE]


class CLibrary:
    """A shared library following the calling convention of this module.

    Args:
        path: Path of the ``.so`` / ``.dylib`` / ``.dll``.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lib = ctypes.CDLL(str(self.path))
        # One lock per library file, shared by all its functions and all CLibrary objects of that file: the loader
        # maps a file once per process, so they all share its global state.
        with _LOCKS_LOCK:
            self._lock = _LOCKS.setdefault(self.path.resolve(), threading.Lock())

    def function(
        self,
        name: str,
        output_shapes: OutputShapes,
        vjp: str | None = None,
        jvp: str | None = None,
    ) -> Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]:
        """The exported function ``name`` as a torch op.

        Args:
            name: Exported symbol of the forward.
            output_shapes: ``output_shapes(*input_shapes) -> [shape, ...]``: the shape of every output from the
                shapes of the tensor inputs. One shape gives an op returning a tensor; several, a tuple. ``()`` is
                a 0-d output.
            vjp: Symbol of the VJP; default ``name + "_vjp"``, which must exist.
            jvp: Symbol of the JVP; default ``name + "_jvp"`` if the library exports it, else no forward mode.

        Returns:
            ``op(*args)``: tensors (any floating dtype and device, computed in float64 on the host) and Python
            numbers, in the order the foreign function expects them.
        """
        forward = self._symbol(name, _FORWARD_ARGS)
        pullback = self._symbol(vjp or f"{name}_vjp", _VJP_ARGS)
        if jvp is None and hasattr(self._lib, f"{name}_jvp"):
            jvp = f"{name}_jvp"
        pushforward = self._symbol(jvp, _JVP_ARGS) if jvp is not None else None
        call = _Caller(f"{self.path.name}:{name}", output_shapes)

        def run_forward(args: tuple[Any, ...]) -> tuple[Any, None]:
            x, p = _split(args)
            shapes = call.shapes(x)
            y = [_nan_buffer(s) for s in shapes]
            call.check(forward, *_arrays(x), *_params(p), *_arrays(y), *call.message())
            return (y[0] if len(y) == 1 else tuple(y)), None

        def run_pullback(_: None, args: tuple[Any, ...], cotangents: tuple[np.ndarray, ...]) -> list[Any]:
            x, p = _split(args)
            xbar = [_nan_buffer(a.shape) for a in x]
            pointers = (_DOUBLE_P * len(x))(*(_pointer(g) for g in xbar))
            call.check(pullback, *_arrays(x), *_params(p), *_arrays(cotangents), pointers, *call.message())
            grads = iter(None if not pointers[i] else xbar[i] for i in range(len(x)))
            return [next(grads) if isinstance(a, np.ndarray) else None for a in args]

        def run_pushforward(_: None, args: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
            x, p = _split(args)
            # Tangents of non-floating tensors (integers, booleans) are zero.
            xdot = [
                np.zeros(a.shape) if t is None else t
                for a, t in zip(args, tangents)
                if isinstance(a, np.ndarray)
            ]
            shapes = call.shapes(x)
            ydot = [_nan_buffer(s) for s in shapes]
            call.check(
                pushforward, *_arrays(x), *_params(p), _array_list(xdot), *_arrays(ydot), *call.message()
            )
            return ydot[0] if len(ydot) == 1 else tuple(ydot)

        return foreign_op(
            ForeignFunction(
                name=call.name,
                forward=run_forward,
                pullback=run_pullback,
                pushforward=run_pushforward if pushforward is not None else None,
                lock=self._lock,
            )
        )

    def _symbol(self, name: str, argtypes: list[Any]) -> Any:
        try:
            fn = getattr(self._lib, name)
        except AttributeError:
            raise AttributeError(f"{self.path} does not export {name!r}") from None
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
        return fn


class _Caller:
    """Output shapes, the message buffer and status checking for one exported function."""

    def __init__(self, name: str, output_shapes: OutputShapes) -> None:
        self.name = name
        self._output_shapes = output_shapes
        self._buffer = ctypes.create_string_buffer(_MESSAGE_BYTES)

    def shapes(self, x: list[np.ndarray]) -> list[Shape]:
        return [tuple(int(n) for n in s) for s in self._output_shapes(*(a.shape for a in x))]

    def message(self) -> tuple[Any, int]:
        self._buffer.value = b""
        return self._buffer, _MESSAGE_BYTES

    def check(self, symbol: Any, *args: Any) -> None:
        status = symbol(*args)
        if status != 0:
            text = self._buffer.value.decode(errors="replace").strip() or "(no message)"
            raise ForeignError(f"{self.name}: {symbol.__name__} failed with status {status}: {text}")


def _split(args: tuple[Any, ...]) -> tuple[list[np.ndarray], list[float]]:
    x = [np.ascontiguousarray(a, dtype=np.float64) for a in args if isinstance(a, np.ndarray)]
    p = []
    for a in args:
        if isinstance(a, np.ndarray):
            continue
        if not isinstance(a, Real):
            raise TypeError(
                f"non-tensor arguments of a C-ABI function must be real numbers, got {type(a).__name__}"
            )
        p.append(float(a))
    return x, p


def _nan_buffer(shape: Shape) -> np.ndarray:
    return np.full(shape, math.nan)


def _pointer(a: np.ndarray) -> Any:
    return a.ctypes.data_as(_DOUBLE_P)


def _array_list(arrays: Sequence[np.ndarray]) -> Any:
    return (_DOUBLE_P * len(arrays))(*(_pointer(a) for a in arrays))


def _arrays(arrays: Sequence[np.ndarray]) -> tuple[Any, Any, int]:
    sizes = (_I64 * len(arrays))(*(a.size for a in arrays))
    return _array_list(arrays), sizes, len(arrays)


def _params(p: list[float]) -> tuple[Any, int]:
    return (ctypes.c_double * len(p))(*p), len(p)
