"""The engine protocol: what a backend of the pressure solve provides.

:class:`~flowlearn.darcy.solve.PressureSolve` differentiates with torch operations that call the op again (the
adjoint is a pressure solve with the loss gradient as sources and zero heads; the tangent one with the tangent
sources and heads), so derivatives of every order work the same on every backend. Only the linear solve of the
free-node system ``A(K) h_f = Q_f + (Dirichlet inflow)`` depends on the backend. An engine

1. **prepares** for a problem, once per :class:`~flowlearn.darcy.DarcyProblem`: whatever depends on the grid and the
   Dirichlet set alone (a sparsity pattern and its symbolic analysis, index maps on a device, a Julia problem);
2. **solves** the system for a batch of node log-conductivities, Dirichlet heads and sources. Each solve carries a
   role -- ``"state"`` (the forward solve), ``"adjoint"`` or ``"tangent"`` -- so that an engine can keep per-role
   warm starts, and reuse a factorisation or preconditioner from one call to the next (the adjoint right after the
   forward solve has the same matrix; a training step's matrix is close to the last step's). The role
   ``"one-off"`` marks a solve whose matrix will not come back (a baseline's, a trial of a parameter search): an
   engine may keep nothing of it, and should leave what it keeps for the problem's other solves as it was.

Engines are chosen by name from :data:`flowlearn.engines.ENGINES`. A new backend is one :class:`Engine` subclass in
one file, one line in that table and one config in ``configs/solver/``.
"""

from __future__ import annotations

import threading
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from flowlearn.checks import check_setting, is_integer, is_number
from flowlearn.runtime import solve_done

if TYPE_CHECKING:
    from flowlearn.darcy.problem import DarcyProblem

# What a solve is for; ONE_OFF: a matrix that will not come back (see above).
ONE_OFF = "one-off"
ROLES = ("state", "adjoint", "tangent", ONE_OFF)
# The tightest relative tolerance an engine accepts: float64 resolves relative differences of 2.2e-16, so no solve
# reaches a tolerance much below it (AMG with rtol=1e-300 ran to its iteration limit, after the first batch).
FINEST_TOLERANCE = 1e-15


def check_tolerance(value: object, option: str) -> None:
    """Raise :class:`~flowlearn.errors.SettingError` for the engine option ``option`` unless ``value`` is a relative
    tolerance a solve can reach: a number in [:data:`FINEST_TOLERANCE`, 1)."""
    check_setting(
        is_number(value) and FINEST_TOLERANCE <= value < 1,
        option,
        f"must lie in (0, 1), at least {FINEST_TOLERANCE:g} (float64's resolution: no solve reaches a tighter one)",
        value,
    )


def check_count(value: object, option: str, low: int = 0, none: bool = False) -> None:
    """Raise :class:`~flowlearn.errors.SettingError` for the engine option ``option`` unless ``value`` is an integer
    >= ``low`` (0 or 1), or None where ``none`` allows it (an option that None switches off)."""
    expected = "a positive integer" if low == 1 else f"an integer >= {low}"
    check_setting(
        (none and value is None) or (is_integer(value) and value >= low),
        option,
        f"must be {'None or ' if none else ''}{expected}",
        value,
    )


def check_flag(value: object, option: str) -> None:
    """Raise :class:`~flowlearn.errors.SettingError` for the engine option ``option`` unless ``value`` is a bool: a
    string such as "no" would otherwise switch the option on."""
    check_setting(isinstance(value, bool), option, "must be True or False", value)


@dataclass
class SolveStats:
    """Counters since construction (or :meth:`Engine.reset_stats`), for benchmarks and tests."""

    factorizations: int = 0
    direct_solves: int = 0
    pcg_solves: int = 0
    pcg_iterations: int = 0


class Engine(ABC):
    """A backend of the pressure solve.

    Attributes:
        name: The engine's name in :data:`flowlearn.engines.ENGINES` (and in ``solver=...`` configs).
        device: Where the tensors it solves must live; None for an engine that takes tensors on any device and
            computes on the host.
        stats: Solve counters.
    """

    name: ClassVar[str]
    device: torch.device | None = torch.device("cpu")

    def __init__(self) -> None:
        self.stats = SolveStats()
        self._prepared: weakref.WeakKeyDictionary[DarcyProblem, Any] = weakref.WeakKeyDictionary()
        # Factorisation libraries and the per-problem caches are not thread-safe: one solve at a time per engine.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def reset_stats(self) -> None:
        self.stats = SolveStats()

    def prepared(self, problem: DarcyProblem) -> Any:
        """This engine's state for ``problem``: made by :meth:`prepare` on first use, kept as long as the problem."""
        state = self._prepared.get(problem)
        if state is None:
            state = self._prepared[problem] = self.prepare(problem)
        return state

    def pressure(
        self,
        problem: DarcyProblem,
        log_k: torch.Tensor,
        heads: torch.Tensor,
        sources: torch.Tensor,
        role: str,
    ) -> torch.Tensor:
        """Pressure (head, m), float64 (B, num_nodes) in flat image order: the solution at free nodes, ``heads`` at
        Dirichlet nodes, NaN at inactive nodes.

        Args:
            problem: The problem solved; its layout numbers the nodes.
            log_k: Log-conductivity (K in m/s), float64 (B, num_nodes), finite at active nodes.
            heads: Dirichlet heads (m), float64 (B, num_nodes).
            sources: Sources Q (m^3/s, positive = injection), float64 (B, num_nodes).
            role: What the solve is for (one of :data:`ROLES`).
        """
        with self._lock:
            pressure = self.solve(self.prepared(problem), log_k, heads, sources, role)
        solve_done()
        return pressure

    @abstractmethod
    def prepare(self, problem: DarcyProblem) -> Any:
        """Whatever this engine keeps per problem (called once per problem)."""

    @abstractmethod
    def solve(
        self, state: Any, log_k: torch.Tensor, heads: torch.Tensor, sources: torch.Tensor, role: str
    ) -> torch.Tensor:
        """:meth:`pressure` for the prepared ``state`` of the problem (called under the engine's lock)."""
