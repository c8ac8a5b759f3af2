"""``julia2pytorch``: a Julia function, differentiated by a Julia AD backend, as a torch op (on juliacall).

juliacall is imported on the first Julia call, never at import time: ``import flowlearn`` does not start Julia.
One Julia runtime serves the whole process; every call into it holds one lock, and a forked child refuses to
use a runtime its parent started (Julia does not survive ``fork``; each process must start its own).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from flowlearn.bridge.core import ForeignFunction, foreign_op
from flowlearn.errors import ForeignError, JuliaUnavailableError

# A Julia name, optionally module-qualified (``f``, ``solve!``, ``DPFEHMBridge.pressure``); unicode letters allowed.
_JULIA_NAME = re.compile(r"[^\W\d][\w!]*(\.[^\W\d][\w!]*)*")

# Glue evaluated once per process, in its own module: it owns no state, and arguments reach Julia only as
# function arguments (never through globals).
_GLUE = r"""
module FlowlearnGlue

import ADTypes
import DifferentiationInterface as DI
import Zygote

# Python arrays arrive as PythonCall wrappers; AD backends get plain Julia arrays.
native(x::AbstractArray) = Array(x)
native(x::Tuple) = map(native, x)
native(x) = x

# What goes back to Python: Float64 arrays and numbers, tuples of them, or nothing (a zero gradient).
host(x::AbstractArray{<:Real}) = Array{Float64}(x)
host(x::Real) = Float64(x)
host(x::Tuple) = map(host, x)
host(::Nothing) = nothing
host(x) = nothing  # structural tangents of non-array arguments: Python gives those arguments no gradient

# Floating tensors arrive as Float64 arrays (0-d included); other arguments get no gradient on the Python side.
differentiable(x) = x isa AbstractArray{<:AbstractFloat}

function zygote_forward(f, args...)
    y, back = Zygote.pullback(f, map(native, args)...)
    return host(y), back
end

function zygote_pullback(back, cotangent, nargs)
    grads = back(native(cotangent))
    # Zygote may answer a single `nothing` when no argument has a gradient.
    return grads === nothing ? ntuple(_ -> nothing, nargs) : map(host, grads)
end

forward_mode(backend) = ADTypes.mode(backend) isa Union{ADTypes.ForwardMode, ADTypes.ForwardOrReverseMode}

# The arguments, kept on the Julia side between the forward and the derivatives (opaque to Python).
struct Saved
    args::Tuple
end

function di_forward(f, args...)
    args = map(native, args)
    return host(f(args...)), Saved(args)
end

# f as a function of its i-th argument alone, the others held fixed.
partial(f, args, i) = x -> f(Base.setindex(args, x, i)...)

function di_pullback(f, backend, saved::Saved, cotangent)
    args = saved.args
    return ntuple(length(args)) do i
        differentiable(args[i]) || return nothing
        host(only(DI.pullback(partial(f, args, i), backend, args[i], (native(cotangent),))))
    end
end

function di_pushforward(f, backend, saved::Saved, tangents)
    args = saved.args
    total = nothing
    for i in eachindex(args)
        tangents[i] === nothing && continue
        t = only(DI.pushforward(partial(f, args, i), backend, args[i], (native(tangents[i]),)))
        total = total === nothing ? t : total .+ t
    end
    return host(total)
end

end
"""

_INSTALL = (
    "Install the Julia extra: pip install -e '.[julia]' from a flowlearn source checkout (the DPFEHMBridge "
    "Julia package lives in its julia/ folder). The first `import juliacall` then downloads Julia and installs "
    "the Julia packages declared in flowlearn/bridge/juliapkg.json, which takes several minutes once. Offline "
    "or on a cluster, see docs/bridges.md, Julia (JULIA_DEPOT_PATH, PYTHON_JULIAPKG_OFFLINE)."
)


class _Runtime:
    """The process's Julia: juliacall's module object, the glue module, the lock and the owning process id."""

    def __init__(self, juliacall: Any) -> None:
        self.juliacall = juliacall
        self.pid = os.getpid()
        # Reentrant: a Julia function may call back into Python, which may call Julia again.
        self.lock = threading.RLock()
        self.glue = juliacall.Main.seval(_GLUE)

    def check_process(self) -> None:
        if os.getpid() != self.pid:
            raise RuntimeError(
                f"Julia was started in process {self.pid} and this process ({os.getpid()}) is a fork of it; "
                "Julia does not survive fork. Start worker processes with the 'spawn' method (DataLoader "
                "multiprocessing_context='spawn', torch.multiprocessing.set_start_method('spawn')) so that each "
                "starts its own Julia."
            )


_runtime: _Runtime | None = None
_start_lock = threading.Lock()


def julia_installed() -> bool:
    """Whether juliacall is importable. Checks without importing it, so without downloading or starting Julia."""
    try:
        return importlib.util.find_spec("juliacall") is not None
    except (ImportError, ValueError):
        return False


def julia_executable() -> str | None:
    """The Julia that juliacall would start (or juliaup, which manages one), where juliapkg looks for one, without
    importing juliacall; None where there is none.

    The first ``import juliacall`` downloads a Julia where it finds none (minutes, or a failure offline), after a
    warning about torch having been imported first: a run with ``solver=julia`` printed both before its own error
    line. juliapkg takes, in this order, the executable configured (``PYTHON_JULIACALL_EXE``,
    ``PYTHON_JULIAPKG_EXE`` or their ``-X`` options), the one it installed itself in the environment's Julia
    project, a Julia that juliaup manages, and ``julia`` on PATH."""
    for option in ("juliacall-exe", "juliapkg-exe"):
        configured = sys._xoptions.get(option) or os.environ.get(f"PYTHON_{option.upper().replace('-', '_')}")
        if isinstance(configured, str) and configured:
            return configured  # juliacall's start-up says what is wrong with it, without downloading
    try:
        from juliapkg.state import STATE  # juliacall's dependency; importing it reads settings only
    except ImportError:
        STATE = {}
    install = STATE.get("install")
    installed = shutil.which(os.path.join(install, "bin", "julia")) if install else None
    depot = STATE.get("depot") or os.path.join(os.path.expanduser("~"), ".julia")
    managed = os.path.join(depot, "juliaup", "juliaup.json")  # the versions juliaup installed
    juliaup = shutil.which("juliaup") or (managed if os.path.isfile(managed) else None)
    return installed or juliaup or shutil.which("julia")


def runtime(purpose: str = "julia2pytorch") -> _Runtime:
    """Start Julia once per process (import juliacall, load the glue) and return it.

    Raises:
        JuliaUnavailableError: juliacall is missing or Julia fails to start; the message starts with
            ``"{purpose} needs Julia"`` and says how to install it.
    """
    global _runtime
    with _start_lock:
        if _runtime is None:
            if not julia_installed():
                raise JuliaUnavailableError(
                    f"{purpose} needs Julia, but juliacall is not installed. {_INSTALL}"
                )
            if "juliacall" not in sys.modules and julia_executable() is None:
                raise JuliaUnavailableError(
                    f"{purpose} needs Julia, and none is installed where juliacall looks (PYTHON_JULIAPKG_EXE, "
                    "juliapkg's own, juliaup, julia on PATH): download it once with python -c 'import juliacall' "
                    "(minutes; it installs the Julia packages too), or set PYTHON_JULIAPKG_EXE=/path/to/julia; "
                    "offline or on a cluster, see docs/bridges.md, Julia"
                )
            try:
                import juliacall

                _runtime = _Runtime(juliacall)
            except Exception as error:
                raise JuliaUnavailableError(
                    f"{purpose} needs Julia, but starting it failed: {error}\n{_INSTALL}"
                ) from error
        _runtime.check_process()
        return _runtime


def validate_fn_name(fn_name: str) -> str:
    """``fn_name`` if it is a (module-qualified) Julia name, else ValueError: it is looked up, never evaluated
    as arbitrary code."""
    if not isinstance(fn_name, str) or _JULIA_NAME.fullmatch(fn_name) is None:
        raise ValueError(
            f"fn_name must be the name of a Julia function, such as 'f', 'solve!' or 'MyModule.f'; got {fn_name!r}"
        )
    return fn_name


def julia2pytorch(
    fn_name: str, setup_code: str = "", *, ad_backend: str | None = None
) -> Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]:
    """The Julia function ``fn_name`` as a differentiable torch op.

    ``setup_code`` runs first, in a fresh Julia module of its own (import packages, define ``fn_name`` there);
    ``fn_name`` is then looked up in that module, so dotted names reach loaded packages. Calling the op calls
    the Julia function with the same arguments, so Julia's multiple dispatch picks the method by arity and type.

    Tensors reach Julia as ``Array{Float64}`` of the same shape (computed in float64, returned in the tensors'
    dtype and device); other arguments go through juliacall's conversion. The function returns an array, a
    number (a 0-d tensor) or a tuple of those. A ``nothing`` gradient becomes zeros.

    Args:
        fn_name: Julia function name, optionally module-qualified; validated before Julia starts.
        setup_code: Julia code defining the function and whatever it needs.
        ad_backend: None for Zygote (reverse mode, any number of outputs). Otherwise a Julia expression for an
            ADTypes backend, such as ``"AutoForwardDiff()"`` (load the backend package in ``setup_code``),
            differentiated through DifferentiationInterface.jl one argument at a time; the function must then
            return one array or number. A backend with a forward mode also gives ``jvp`` and ``jacfwd``.

    Raises:
        ValueError: ``fn_name`` is not a Julia name.
        JuliaUnavailableError: Julia cannot be started.
        ForeignError: ``setup_code`` fails or does not define ``fn_name``.
    """
    validate_fn_name(fn_name)
    julia = runtime()
    with julia.lock:
        module = julia.juliacall.newmodule(f"Julia2PyTorch_{fn_name.replace('.', '_')}")
        try:
            module.seval(setup_code)
            fn = module.seval(fn_name)
            backend, forward_mode = None, False
            if ad_backend is not None:
                module.seval("using ADTypes")
                backend = module.seval(ad_backend)
                forward_mode = julia.glue.forward_mode(backend)
        except julia.juliacall.JuliaError as error:
            raise ForeignError(f"julia2pytorch({fn_name!r}): setup failed: {error}") from error
        if not julia.juliacall.Main.seval("f -> !isempty(methods(f))")(fn):
            raise ForeignError(f"julia2pytorch({fn_name!r}): {fn_name} is not a callable Julia function")
    glue = julia.glue
    call = _JuliaCall(julia, fn_name)

    # The residual is (Julia state, whether the output is a tuple): Zygote's pullback closure, or the saved
    # arguments for DifferentiationInterface.
    if backend is None:

        @call
        def forward(args: tuple[Any, ...]) -> tuple[Any, Any]:
            y, back = glue.zygote_forward(fn, *args)
            return y, (back, isinstance(y, tuple))

        @call
        def pullback(residual: Any, args: tuple[Any, ...], cotangents: tuple[np.ndarray, ...]) -> Any:
            back, is_tuple = residual
            return glue.zygote_pullback(back, _cotangent(cotangents, is_tuple), len(args))

        pushforward = None
    else:

        @call
        def forward(args: tuple[Any, ...]) -> tuple[Any, Any]:
            y, saved = glue.di_forward(fn, *args)
            return y, (saved, isinstance(y, tuple))

        @call
        def pullback(residual: Any, args: tuple[Any, ...], cotangents: tuple[np.ndarray, ...]) -> Any:
            saved, is_tuple = residual
            return glue.di_pullback(fn, backend, saved, _cotangent(cotangents, is_tuple))

        @call
        def di_pushforward(residual: Any, args: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
            return glue.di_pushforward(fn, backend, residual[0], tangents)

        pushforward = di_pushforward if forward_mode else None

    return foreign_op(ForeignFunction(fn_name, forward, pullback, pushforward, lock=julia.lock))


class _JuliaCall:
    """Wraps glue calls: checks the process and turns Julia exceptions into :class:`ForeignError`."""

    def __init__(self, julia: _Runtime, name: str) -> None:
        self.julia, self.name = julia, name

    def __call__(self, body: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any) -> Any:
            self.julia.check_process()
            try:
                return body(*args)
            except self.julia.juliacall.JuliaError as error:
                raise ForeignError(f"{self.name}: {error}") from error

        return wrapped


def _cotangent(cotangents: tuple[np.ndarray, ...], is_tuple: bool) -> Any:
    """Cotangents shaped like the Julia output: a number for a number, a tuple for a tuple."""
    values = tuple(float(c) if c.ndim == 0 else c for c in cotangents)
    return values if is_tuple else values[0]
