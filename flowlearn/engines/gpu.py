"""Batched sparse SPD solves in torch on a CUDA device: cuDSS factorisations and a batched PCG.

A batch of B systems shares one sparsity pattern (B fractures of the same size) and differs in its values.
:class:`GPUEngine` solves them in one call, by one of two methods:

* ``direct`` -- a sparse Cholesky factorisation by cuDSS (NVIDIA's sparse direct solver, through nvmath-python).
  The reordering and symbolic analysis run once per pattern and batch size; a new set of values is only
  factorised numerically, all B matrices in one batched call. Solving again with the values of the last
  factorisation -- the adjoint solve right after a forward solve -- reuses the factor. One step of iterative
  refinement follows every solve, as on the CPU.
* ``pcg`` -- conjugate gradients, batched over B, with matrix-vector products in plain torch ops; each role's
  last solution warm-starts the next solve. It stops on the same energy-norm criterion as the CPU engines
  (:mod:`flowlearn.engines.pcg`) and raises :class:`~flowlearn.errors.ConvergenceError` when it misses the
  tolerance. Its preconditioner is either

  - ``jacobi``, the diagonal: memory grows linearly with the grid, so it is the path for grids whose factor does
    not fit, but the iterations grow with the grid's side; or
  - ``factor``, the cuDSS factor of an earlier matrix of the run. Between training steps the conductivities move
    little, and the factor of a nearby matrix leaves CG a handful of iterations whatever the grid's size; a
    numeric refactorisation follows once a solve needs more than ``refactor_iterations``.

``auto`` factorises whenever cuDSS's own memory estimate fits in the free device memory, and otherwise iterates.

nvmath's DirectSolver hands cuDSS the batch as B CSR matrices (the pattern arrays repeated per item) and does not
expose cuDSS's uniform-batch mode, which would analyse the shared pattern once instead of B times. The analysis
runs only when an engine first meets a problem and batch size, so training steps pay for numeric factorisations and
solves alone.

Nothing here imports a GPU library at module import: nvmath is imported when a :class:`GPUEngine` is built, so the
CPU path works without any GPU package installed.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from flowlearn.checks import check_setting, is_number
from flowlearn.engines.base import Engine, check_count, check_flag, check_tolerance
from flowlearn.engines.pcg import batched_pcg
from flowlearn.errors import ConfigError, ConvergenceError, GPUUnavailableError, SettingError
from flowlearn.sparse import diagonal_positions

if TYPE_CHECKING:
    from flowlearn.darcy.assembly import SystemLayout
    from flowlearn.darcy.problem import DarcyProblem

METHODS = ("auto", "direct", "pcg")
PRECONDITIONERS = ("jacobi", "factor")


# nvmath reports every phase of every cuDSS call (analysis, factorisation, solve, release) at INFO: thousands of lines
# in a training run. This logger keeps them out of a run's console and train.log unless a logging config has set its
# level (``python train.py hydra.verbose=flowlearn.cudss``).
CUDSS_LOGGER = logging.getLogger("flowlearn.cudss")
if CUDSS_LOGGER.level == logging.NOTSET:
    CUDSS_LOGGER.setLevel(logging.WARNING)


class EllPattern:
    """A CSR pattern stored row-padded (ELLPACK) on a device, for batched products in plain torch ops.

    Every row gets ``width`` = the longest row's entries; the padding points at an extra zero value, so a padded
    slot adds nothing. A (B, nnz) batch of values then multiplies a (B, n) batch of vectors with one gather and one
    sum, deterministic and the same code on the CPU and on CUDA.

    Args:
        indptr: CSR row pointers, int (n + 1,).
        indices: CSR column indices, int (nnz,); every row holds its diagonal entry.
        device: Where the index maps live.
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, device: torch.device) -> None:
        counts = np.diff(indptr)
        self.n, self.nnz = counts.size, int(indices.size)
        slot = np.arange(counts.max(initial=0))
        valid = slot[None, :] < counts[:, None]
        positions = np.where(valid, indptr[:-1, None] + slot[None, :], self.nnz)
        columns = np.where(valid, indices[np.minimum(positions, self.nnz - 1)], 0)
        diagonal = diagonal_positions(indptr, indices)
        self.positions = torch.as_tensor(positions, dtype=torch.int64, device=device)
        self.columns = torch.as_tensor(columns, dtype=torch.int64, device=device)
        self.diagonal_positions = torch.as_tensor(diagonal, dtype=torch.int64, device=device)

    def padded(self, values: torch.Tensor) -> torch.Tensor:
        """(B, nnz) CSR values -> (B, n, width) row-padded values."""
        return torch.cat([values, values.new_zeros(values.shape[0], 1)], dim=1)[:, self.positions]

    def matvec(self, padded: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``A_i x_i`` for every batch item: padded values (B, n, width), x (B, n) -> (B, n)."""
        return (padded * x[:, self.columns]).sum(dim=-1)

    def diagonal(self, values: torch.Tensor) -> torch.Tensor:
        """The diagonals (B, n) of a batch of values (B, nnz)."""
        return values[:, self.diagonal_positions]


class _CudssFactor:
    """cuDSS's factorisation of a batch of B matrices with one CSR pattern, over buffers it keeps.

    The solver object is built, and the pattern analysed (reordering, symbolic factorisation), once. It reads the
    values and the right-hand side through pointers to this object's own buffers, so a new matrix or rhs is a copy
    into them followed by ``factorize`` or ``solve``: nvmath's documented in-place update of GPU operands.
    """

    def __init__(self, advanced: Any, indptr: np.ndarray, indices: np.ndarray, values: torch.Tensor) -> None:
        batch = values.shape[0]
        n = indptr.size - 1
        device = values.device
        crow = torch.as_tensor(indptr, dtype=torch.int32, device=device)
        col = torch.as_tensor(indices, dtype=torch.int32, device=device)
        # cuDSS takes 32-bit indices for batches; a batch is a 3D CSR tensor, one system per leading index, whose
        # index arrays nvmath requires dense and contiguous (hence repeated, not expanded). The pattern comes from
        # SystemLayout, valid by construction, so torch's invariant checks are skipped. The buffers are normal
        # tensors even when the factor is first needed under inference mode (Lightning's validation), since training
        # later copies its matrices into them.
        with torch.inference_mode(False), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
            warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
            if batch == 1:
                matrix = torch.sparse_csr_tensor(
                    crow, col, values[0].clone(), size=(n, n), check_invariants=False
                )
                self._rhs = torch.zeros(n, dtype=torch.float64, device=device)
            else:
                matrix = torch.sparse_csr_tensor(
                    crow.repeat(batch, 1),
                    col.repeat(batch, 1),
                    values.clone(),
                    size=(batch, n, n),
                    check_invariants=False,
                )
                self._rhs = torch.zeros(batch, n, 1, dtype=torch.float64, device=device)  # column-major items
        self._values = matrix.values()  # the storage cuDSS reads
        self._device_index = device.index
        _ready_thread(device.index)
        options = advanced.DirectSolverOptions(
            sparse_system_type=advanced.DirectSolverMatrixType.SPD,
            sparse_system_view=advanced.DirectSolverMatrixViewType.FULL,
            logger=CUDSS_LOGGER,
            multithreading_lib=_threading_layer(),
        )
        self._solver = advanced.DirectSolver(matrix, self._rhs, options=options, execution="cuda")
        # nvmath releases cuDSS's objects (and the factor's memory) only in free(); tie it to this object's life.
        self._release = weakref.finalize(self, _free_on, self._solver, device.index)
        self._solver.plan()
        estimates = self._solver.plan_info.memory_estimates
        self.peak_bytes = int(np.asarray(estimates["peak_device_memory"]).reshape(-1)[0])
        self.permanent_bytes = int(np.asarray(estimates["permanent_device_memory"]).reshape(-1)[0])
        self.factored = False
        self.shape = (batch, n)

    def holds(self, values: torch.Tensor) -> bool:
        """Whether the current factor was built from exactly these values (B, nnz)."""
        return self.factored and torch.equal(self._values.reshape(values.shape), values)

    def factorize(self, values: torch.Tensor) -> None:
        self._values.copy_(values.reshape(self._values.shape))
        _ready_thread(self._device_index)
        self._solver.factorize()
        # The factorisation runs asynchronously on the current stream; its status is read once it is done.
        torch.cuda.current_stream(self._values.device).synchronize()
        info = self._solver.factorization_info.info
        if info != 0:
            self.factored = False
            raise RuntimeError(
                f"cuDSS could not factorise the batch of {self.shape[0]} SPD matrices of size {self.shape[1]} "
                f"(info={info}); the conductivities may span too many orders of magnitude for float64"
            )
        self.factored = True

    def solve(self, rhs: torch.Tensor) -> torch.Tensor:
        """x (B, n) for rhs (B, n) with the current factor."""
        self._rhs.copy_(rhs.reshape(self._rhs.shape))
        _ready_thread(self._device_index)
        return self._solver.solve().reshape(rhs.shape)

    def free(self) -> None:
        self._release()


def _ready_thread(device_index: int) -> None:
    """Ready this thread for nvmath's cuDSS calls on the device. Autograd runs the backward (the adjoint solve, which
    may factorise) in a thread of its own, and nvmath keeps two things per thread that it sets up only in some:
    cuda.core's current device, which it refuses a thread without, and (nvmath-python 1.0) the scratch word into
    which cuDSS writes the size of an attribute read, created only in the thread that imported nvmath."""
    try:
        from cuda.core import Device
    except ImportError:  # cuda-core before 0.4
        from cuda.core.experimental import Device

    Device(device_index).set_current()
    for name in ("cudss_data_ifc", "cudss_config_ifc"):
        scratch = getattr(sys.modules.get(f"nvmath.sparse._internal.{name}"), "_tls", None)
        if scratch is not None and not hasattr(scratch, "size_written"):
            scratch.size_written = np.empty((1,), dtype=np.uint64)


def _threading_layer() -> str | None:
    """Path of cuDSS's OpenMP threading layer, so that its host-side analysis (the reordering) uses every core.

    ``CUDSS_THREADING_LIB`` when set; else the layer that the cuDSS wheel installs beside the loaded libcudss
    (found through the process's memory map, Linux only); None where there is none, and cuDSS plans on one thread.
    """
    chosen = os.environ.get("CUDSS_THREADING_LIB")
    if chosen:
        return chosen
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and "libcudss.so" in Path(fields[5]).name:
            layers = sorted(Path(fields[5]).parent.glob("libcudss_mtlayer_gomp.so*"))
            return str(layers[0]) if layers else None
    return None


def _free_on(solver: Any, device_index: int) -> None:
    _ready_thread(device_index)
    solver.free()


@dataclass
class GPUState:
    """What a :class:`GPUEngine` keeps per problem."""

    layout: SystemLayout
    ell: EllPattern
    method: str  # "direct" or "pcg"
    factors: dict[int, _CudssFactor] = field(default_factory=dict)  # by batch size
    last_solution: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)  # by (role, batch size)
    # The last assembled batch (log K, T, matrix values): the adjoint solve that follows a forward solve asks for
    # the same matrices again, and handing cuDSS the very same values lets it reuse its factor.
    last_system: tuple[torch.Tensor, ...] | None = None
    # PCG with preconditioner="factor": the last solve needed more than refactor_iterations, so the next new
    # matrix is factorised afresh.
    stale_factor: bool = False


class GPUEngine(Engine):
    """Batched SPD solves on a CUDA device (``solver=gpu``), reusing analysis and factors across calls.

    The batch is assembled with torch from the problem's index maps and solved in one call. The constructor checks
    that the device and libraries are there, so a missing GPU or cuDSS fails at start-up, never in the middle of
    training.

    Args:
        method: ``"auto"`` (cuDSS when its memory estimate fits, else Jacobi PCG), ``"direct"`` (cuDSS) or
            ``"pcg"``.
        preconditioner: PCG's, ``"jacobi"`` (needs no library beyond torch) or ``"factor"`` (the cuDSS factor of
            an earlier matrix; ``method="pcg"`` only).
        refactor_iterations: With ``preconditioner="factor"``, a solve that needs more iterations than this has
            the next new matrix factorised afresh.
        device: The CUDA device. ``"cpu"`` is accepted with ``method="pcg"``: the same torch code then runs on
            the CPU, which checks this path without a GPU (the factorising CPU engines are much faster there).
        rtol: Relative energy-norm error at which PCG stops (direct solves are exact to round-off), in
            [:data:`~flowlearn.engines.base.FINEST_TOLERANCE`, 1).
        max_iter: PCG iteration limit; missing it raises :class:`~flowlearn.errors.ConvergenceError`.
        reuse: Warm-start PCG from each role's last solution.
        memory_fraction: Share of the free device memory that cuDSS's peak estimate may take under ``auto``.

    Raises:
        GPUUnavailableError: no CUDA device, or (for ``auto``/``direct``) no nvmath-python with cuDSS.
        ConfigError: an option out of its range (:class:`~flowlearn.errors.SettingError`, naming it), an unknown
            method or preconditioner, or a CPU device with anything but Jacobi PCG.
    """

    name = "gpu"

    def __init__(
        self,
        method: str = "auto",
        device: str | torch.device = "cuda",
        rtol: float = 1e-11,
        max_iter: int = 20_000,
        reuse: bool = True,
        memory_fraction: float = 0.8,
        preconditioner: str = "jacobi",
        refactor_iterations: int = 20,
    ) -> None:
        super().__init__()
        if method not in METHODS:
            raise ConfigError(f"unknown GPU solve method {method!r}; choose one of {list(METHODS)}")
        if preconditioner not in PRECONDITIONERS:
            raise ConfigError(
                f"unknown PCG preconditioner {preconditioner!r}; choose one of {list(PRECONDITIONERS)}"
            )
        if preconditioner == "factor" and method != "pcg":
            raise ConfigError(f"preconditioner='factor' is PCG's; method={method!r} does not iterate")
        check_tolerance(rtol, "rtol")
        check_count(max_iter, "max_iter", low=1)
        check_count(refactor_iterations, "refactor_iterations", low=1)
        check_flag(reuse, "reuse")
        check_setting(
            is_number(memory_fraction) and 0 < memory_fraction <= 1,
            "memory_fraction",
            "must lie in (0, 1]",
            memory_fraction,
        )
        self.method, self.rtol, self.max_iter, self.reuse = method, rtol, max_iter, reuse
        self.memory_fraction = memory_fraction
        self.preconditioner, self.refactor_iterations = preconditioner, refactor_iterations
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError):
            raise SettingError(
                "device",
                f"must be a CUDA device such as 'cuda' or 'cuda:1' (or 'cpu' for method='pcg'), got {device!r}",
            ) from None
        factorises = method != "pcg" or preconditioner == "factor"
        if device.type == "cpu":
            if factorises:
                raise ConfigError(
                    f"GPUEngine(method={method!r}, preconditioner={preconditioner!r}) factorises with cuDSS, "
                    "which runs on CUDA devices only; device='cpu' is for method='pcg' with the Jacobi "
                    "preconditioner"
                )
        elif device.type == "cuda":
            if not torch.cuda.is_available():
                raise GPUUnavailableError(
                    f"solver=gpu needs a CUDA GPU, but torch {torch.__version__} sees none "
                    "(torch.cuda.is_available() is False). Install the CUDA build of torch on a GPU node, or "
                    "choose a CPU solver (solver=cpu, cholmod, superlu or amg)."
                )
            device = torch.device(
                "cuda", torch.cuda.current_device() if device.index is None else device.index
            )
        else:
            raise ConfigError(f"GPUEngine runs on a CUDA device, got device {device}")
        self.device = device
        self._advanced = _load_cudss() if factorises else None

    def __repr__(self) -> str:
        return (
            f"GPUEngine(method={self.method!r}, preconditioner={self.preconditioner!r}, device='{self.device}', "
            f"rtol={self.rtol})"
        )

    def free(self) -> None:
        """Release every cuDSS factor now (they are released anyway when their problem or this engine goes away);
        the next solve analyses and factorises afresh."""
        with self._lock:
            for state in self._prepared.values():
                for factor in state.factors.values():
                    factor.free()
                state.factors.clear()

    def factor_bytes(self) -> int:
        """Device memory cuDSS keeps for the factors it holds (its own estimate), bytes."""
        return sum(f.permanent_bytes for s in self._prepared.values() for f in s.factors.values())

    # -- the engine protocol ---------------------------------------------------------------------------------

    def prepare(self, problem: DarcyProblem) -> GPUState:
        layout = problem.layout
        method = "pcg" if self.method == "pcg" else "direct"
        return GPUState(layout, EllPattern(layout.indptr, layout.indices, self.device), method)

    def solve(
        self, state: GPUState, log_k: torch.Tensor, heads: torch.Tensor, sources: torch.Tensor, role: str
    ) -> torch.Tensor:
        layout = state.layout
        last = state.last_system
        if last is not None and last[0].shape == log_k.shape and torch.equal(last[0], log_k):
            transmissibility, values = last[1], last[2]
        else:
            transmissibility = layout.torch_transmissibilities(log_k)
            values = layout.torch_matrix_values(transmissibility)
            state.last_system = (log_k.clone(), transmissibility, values)
        rhs = layout.torch_rhs(transmissibility, heads, sources)
        solution = self._solve_values(state, values, rhs, role)
        free_nodes = layout.torch_index_maps(log_k.device)[3]
        active = layout.torch_tensors(log_k.device)[5]
        pressure = torch.where(active, heads, torch.nan)
        return pressure.index_copy(1, free_nodes, solution)

    # -- one batch of systems --------------------------------------------------------------------------------

    def _solve_values(
        self, state: GPUState, values: torch.Tensor, rhs: torch.Tensor, role: str
    ) -> torch.Tensor:
        """Solve ``A_i x_i = b_i`` for matrix values (B, nnz) in the layout's CSR pattern and rhs (B, n)."""
        if state.method == "direct":
            factor = self._analysed(state, values)
            if factor is not None:
                if not factor.holds(values):
                    self._factorize(factor, values)
                return self._direct(state, factor, values, rhs)
            return self._pcg(state, values, rhs, role, None)
        if self.preconditioner == "jacobi":
            return self._pcg(state, values, rhs, role, None)
        factor = self._analysed(state, values)
        if not factor.factored or state.stale_factor:
            self._factorize(factor, values)
            state.stale_factor = False
        if not factor.holds(values):
            return self._pcg(state, values, rhs, role, factor)
        solution = self._direct(state, factor, values, rhs)
        if self.reuse:  # the next, iterative, solve of this role starts here
            state.last_solution[(role, rhs.shape[0])] = solution
        return solution

    def _analysed(self, state: GPUState, values: torch.Tensor) -> _CudssFactor | None:
        """The cuDSS solver for this batch size, analysed once; None when ``auto`` finds its factor too large."""
        batch = values.shape[0]
        factor = state.factors.get(batch)
        if factor is None:
            factor = _CudssFactor(self._advanced, state.layout.indptr, state.layout.indices, values)
            free_bytes = torch.cuda.mem_get_info(self.device)[0]
            if self.method == "auto" and factor.peak_bytes > self.memory_fraction * free_bytes:
                factor.free()
                state.method = "pcg"
                return None
            state.factors[batch] = factor
        return factor

    def _factorize(self, factor: _CudssFactor, values: torch.Tensor) -> None:
        factor.factorize(values)
        self.stats.factorizations += 1

    def _direct(
        self, state: GPUState, factor: _CudssFactor, values: torch.Tensor, rhs: torch.Tensor
    ) -> torch.Tensor:
        # One step of iterative refinement takes the error from ~eps*cond(A) to ~eps, as on the CPU.
        self.stats.direct_solves += 1
        solution = factor.solve(rhs)
        residual = rhs - state.ell.matvec(state.ell.padded(values), solution)
        return solution + factor.solve(residual)

    def _pcg(
        self,
        state: GPUState,
        values: torch.Tensor,
        rhs: torch.Tensor,
        role: str,
        factor: _CudssFactor | None,
    ) -> torch.Tensor:
        """PCG preconditioned by ``factor`` (of an earlier matrix), or by the diagonal when None."""
        ell = state.ell
        padded = ell.padded(values)
        if factor is None:
            inverse_diagonal = 1.0 / ell.diagonal(values)
            precondition, name = (lambda r: inverse_diagonal * r), "Jacobi"
        else:
            precondition, name = factor.solve, "Factor"
        key = (role, rhs.shape[0])
        result = batched_pcg(
            lambda x: ell.matvec(padded, x),
            precondition,
            rhs,
            state.last_solution.get(key) if self.reuse else None,
            self.rtol,
            self.max_iter,
        )
        self.stats.pcg_solves += 1
        self.stats.pcg_iterations += result.iterations
        if not bool(result.converged.all()):
            failed = torch.nonzero(~result.converged).flatten().tolist()
            worst = float(result.error_estimate.max())
            raise ConvergenceError(
                f"{name}-preconditioned CG on {self.device} did not reach rtol={self.rtol:g} within "
                f"{self.max_iter} iterations for batch item(s) {failed} of {rhs.shape[0]} ({rhs.shape[1]} "
                f"unknowns; estimated error {worst:.1e}); raise max_iter, loosen rtol, or use method='direct'"
            )
        if self.reuse:
            state.last_solution[key] = result.solution
        if factor is not None and result.iterations > self.refactor_iterations:
            state.stale_factor = True
        return result.solution


def _load_cudss() -> Any:
    """nvmath's sparse direct solver module, after checking that cuDSS loads; raises GPUUnavailableError."""
    install = (
        "Install it with pip install 'flowlearn[gpu]' for a CUDA 12 build of torch, 'flowlearn[gpu-cu13]' for "
        "CUDA 13 (torch.version.cuda says which), or choose GPUEngine(method='pcg'), which needs torch alone."
    )
    try:
        import nvmath.sparse.advanced as advanced
        from nvmath.bindings import cudss
    except ImportError as error:
        raise GPUUnavailableError(
            f"solver=gpu factorises with cuDSS through nvmath-python: {error}. {install}"
        ) from error
    try:
        cudss.get_property(0)
    except Exception as error:  # the cuDSS shared library itself is missing or broken
        raise GPUUnavailableError(
            f"nvmath-python is installed but cuDSS does not load: {error}. {install}"
        ) from error
    return advanced
