"""Sparse SPD linear algebra: factorisation backends, PCG, reuse across a sequence of solves, and batched GPU
solves."""

from flowlearn.linalg.backends import BACKENDS, Backend, Factor, cholmod_available, make_backend
from flowlearn.linalg.gpu import GPUSolver, GPUUnavailableError, batched_pcg
from flowlearn.linalg.pcg import pcg
from flowlearn.linalg.reuse import SparseSolver

__all__ = [
    "BACKENDS",
    "Backend",
    "Factor",
    "GPUSolver",
    "GPUUnavailableError",
    "SparseSolver",
    "batched_pcg",
    "cholmod_available",
    "make_backend",
    "pcg",
]
