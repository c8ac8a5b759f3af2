"""Backends of the pressure solve, one file each behind one protocol (:class:`~flowlearn.engines.base.Engine`).

:data:`ENGINES` maps a name (what ``solver=...`` configs and ``solve_pressure(..., solver=name)`` take) to the class
that implements it. Each module is imported when its engine is first asked for, so the CPU path never loads a GPU
library and ``import flowlearn`` never loads the Julia glue.

* ``cholmod``: :class:`~flowlearn.engines.cholmod.CholmodEngine`, sparse Cholesky (CPU);
* ``superlu``: :class:`~flowlearn.engines.superlu.SuperLUEngine`, sparse LU (CPU, no extra);
* ``amg``: :class:`~flowlearn.engines.amg.AMGEngine`, AMG-preconditioned CG (CPU, large grids);
* ``gpu``: :class:`~flowlearn.engines.gpu.GPUEngine`, cuDSS or batched PCG (CUDA);
* ``julia``: :class:`~flowlearn.engines.dpfehm.DPFEHMEngine`, DPFEHM.jl's multigrid.

``auto`` is CHOLMOD where scikit-sparse is installed, else SuperLU.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any

from flowlearn.engines.base import ROLES, Engine, SolveStats
from flowlearn.errors import ConfigError, SolveInputError

# name -> "module:class", imported on first use.
ENGINES: dict[str, str] = {
    "cholmod": "flowlearn.engines.cholmod:CholmodEngine",
    "superlu": "flowlearn.engines.superlu:SuperLUEngine",
    "amg": "flowlearn.engines.amg:AMGEngine",
    "gpu": "flowlearn.engines.gpu:GPUEngine",
    "julia": "flowlearn.engines.dpfehm:DPFEHMEngine",
}
NAMES = ("auto", *ENGINES)

_SHARED: dict[str, Engine] = {}


def cholmod_available() -> bool:
    """Whether scikit-sparse (CHOLMOD) is installed; checked without importing it."""
    return importlib.util.find_spec("sksparse") is not None


def engine_class(name: str) -> type[Engine]:
    """The engine class registered under ``name`` (``"auto"`` resolved); :class:`ConfigError` for an unknown name."""
    if name == "auto":
        name = "cholmod" if cholmod_available() else "superlu"
    if not isinstance(name, str) or name not in ENGINES:
        raise ConfigError(f"unknown solver {name!r}; choose one of {list(NAMES)}")
    module, cls = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def engine_options(cls: type[Engine]) -> list[str]:
    """The keyword options of the engine class ``cls``: its constructor's, and those of the base classes it passes
    its other keywords on to (``**options``)."""
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = list(inspect.signature(vars(klass)["__init__"]).parameters.values())[1:]  # after self
        names += [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


def make_engine(name: str = "auto", **options: Any) -> Engine:
    """A new engine of ``name`` with ``options`` (its constructor's keyword arguments); what ``solver=...`` configs
    instantiate.

    Raises:
        ConfigError: an unknown name or option, or an option out of its range (naming it).
        UnavailableError: the backend cannot run here (no scikit-sparse, GPU or Julia); the message says why.
    """
    cls = engine_class(name)
    known = engine_options(cls)
    unknown = [option for option in options if option not in known]
    if unknown:
        raise ConfigError(f"{cls.name} takes no option {unknown[0]!r} (options: {', '.join(known)})")
    return cls(**options)


def get_engine(solver: str | Engine | None = None) -> Engine:
    """The engine for ``solver``: an :class:`Engine` as it is, a name (default ``"auto"``) as one shared instance
    per name, so that its caches persist across calls."""
    if isinstance(solver, Engine):
        return solver
    name = "auto" if solver is None else solver
    if not isinstance(name, str):
        raise SolveInputError(
            f"solver must be a name {list(NAMES)} or an Engine, got {type(solver).__name__}"
        )
    if name not in _SHARED:
        _SHARED[name] = make_engine(name)
    return _SHARED[name]


__all__ = [
    "ENGINES",
    "NAMES",
    "ROLES",
    "Engine",
    "SolveStats",
    "engine_class",
    "engine_options",
    "get_engine",
    "make_engine",
]
