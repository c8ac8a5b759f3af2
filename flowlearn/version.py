"""flowlearn's version: the one place it is written (pyproject.toml reads it from here, ``flowlearn.__version__``
and ``flowlearn --version`` show it)."""

__version__ = "0.1.0"
