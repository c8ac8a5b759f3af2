"""Exceptions raised by flowlearn. Bad input is always a ``ValueError`` subclass that names what and where."""


class ProblemError(ValueError):
    """A grid or Darcy problem that cannot be solved as specified (empty grid, no Dirichlet node, ...)."""


class DisconnectedRegionError(ProblemError):
    """Active nodes that have no path to any Dirichlet node, so their pressure is undefined."""


class SolveInputError(ValueError):
    """A tensor passed to the pressure solve has the wrong shape, dtype, device or non-finite values."""


class ConvergenceError(RuntimeError):
    """An iterative linear solve stopped at its iteration limit before reaching its tolerance."""
