"""Sparse SPD linear algebra: factorisation backends, PCG, and reuse across a sequence of solves."""

from flowlearn.linalg.backends import BACKENDS, Backend, Factor, cholmod_available, make_backend
from flowlearn.linalg.pcg import pcg
from flowlearn.linalg.reuse import SparseSolver

__all__ = ["BACKENDS", "Backend", "Factor", "SparseSolver", "cholmod_available", "make_backend", "pcg"]
