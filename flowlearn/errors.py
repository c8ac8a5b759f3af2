"""Every exception flowlearn raises, in one place.

Bad input is a ``ValueError`` subclass whose message names what and where (option, file, group, field, pixel);
a backend that cannot run here is an :class:`UnavailableError`; a computation that failed to reach its tolerance is
a ``RuntimeError`` subclass. The command line (``train.py``, ``flowlearn``) reports :data:`USER_ERRORS` as one line.
"""


class ProblemError(ValueError):
    """A grid or Darcy problem that cannot be solved as specified (empty grid, no Dirichlet node, ...)."""


class DisconnectedRegionError(ProblemError):
    """Active nodes that have no path to any Dirichlet node, so their pressure is undefined."""


class SolveInputError(ValueError):
    """A tensor passed to the pressure solve has the wrong shape, dtype, device or non-finite values."""


class ConvergenceError(RuntimeError):
    """An iterative linear solve stopped at its iteration limit before reaching its tolerance."""


class SolutionError(RuntimeError):
    """A solve whose result is not a solution of its system (conductivities beyond float64): raised, never returned."""


class DivergenceError(RuntimeError):
    """Training diverged: a non-finite or exploding loss, or a model whose conductivities left float64's range."""


class ConfigError(ValueError):
    """A training config value that cannot work; the message names the option."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or an output folder that cannot be written; the message names it."""


class SettingError(ConfigError):
    """A value of a settings dataclass (LBM, roughness, dataset) out of its range.

    ``field`` is the dataclass field, so that a command line can name its own option for it; the message starts
    with the field name.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


class OutputError(OSError):
    """An output that cannot be written (a read-only place, a full disk, a directory in the way); the message
    names the path and the reason."""


class DataValidationError(ValueError):
    """A fracture file, group or field that violates the schema. The message names file, group and field."""


class RunDirectoryError(FileNotFoundError):
    """A directory that is not a finished run (or sweep of runs); the message says what is missing."""


class UnavailableError(RuntimeError):
    """A backend that cannot run in this environment; the message says what to install."""


class GPUUnavailableError(UnavailableError):
    """``solver=gpu`` cannot run here (no CUDA device, or no cuDSS)."""


class JuliaUnavailableError(UnavailableError):
    """Julia (through juliacall) cannot be started in this environment."""


class ForeignError(RuntimeError):
    """A foreign function reported a failure; the message is the foreign one, prefixed by the function's name."""


class ForeignDerivativeError(RuntimeError):
    """A derivative the foreign code does not provide was requested (second order, or forward mode without a
    pushforward)."""


class ReferenceConvergenceError(RuntimeError):
    """A reference simulation (the LBM, the Stokes solve) reached its step limit before its steady-state criterion
    was met."""


# Exit status of a user's mistake (an error in USER_ERRORS), in `python train.py` and every `flowlearn` command,
# as argparse uses for usage errors. Status 1 is left to tracebacks and to `flowlearn report` on a sweep with
# incomplete runs, which is a status, not an error.
USER_ERROR_STATUS = 2


class UserErrorExit(SystemExit):
    """The exit of a run stopped by a user's mistake: status :data:`USER_ERROR_STATUS`, its one-line message kept
    (``message``), so that a launcher can record why the run failed."""

    def __init__(self, message: str) -> None:
        super().__init__(USER_ERROR_STATUS)
        self.message = message


# Failures that are about the user's input or environment: reported as one line, not a stack trace.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ProblemError,
    SolveInputError,
    ConvergenceError,
    # A reference simulation stopped at the step limit its settings give it: the message says which to raise.
    ReferenceConvergenceError,
    SolutionError,
    DivergenceError,
    ConfigError,
    CheckpointError,
    DataValidationError,
    OutputError,
    UnavailableError,
    FileNotFoundError,
    FloatingPointError,
)
