"""``python -m flowlearn.cli``: the ``flowlearn`` command."""

from flowlearn.cli import console

console()
