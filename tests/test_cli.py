"""The command line's own surface: ``--version`` and what ``--help`` says of each option."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys

import pytest
from cli_support import run_counting_lightning

from flowlearn.cli import COMMANDS, build_parser


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of ``parser``'s subcommands, by name (none where it has no subcommands)."""
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return found[0].choices if found else {}


def _subparser(name: str) -> argparse.ArgumentParser:
    """The parser of the command ``name``, or of a command's own subcommand: ``"import volume"``."""
    parser = build_parser()
    for word in name.split():
        parser = _choices(parser)[word]
    return parser


# Every command, and every subcommand of a command that has them (flowlearn import volume, ...).
PARSERS = [
    *(c.name for c in COMMANDS),
    *(f"{c.name} {kind}" for c in COMMANDS for kind in _choices(_subparser(c.name))),
]


def test_version_is_the_installed_distributions():
    result = subprocess.run(
        [sys.executable, "-m", "flowlearn.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == f"flowlearn {importlib.metadata.version('flowlearn')}"


def _entry(help_text: str, flag: str) -> str:
    """The help entry of option ``flag``: its line and the indented lines after it, joined by single spaces."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"  (\S+ )*?{re.escape(flag)}\b", line))
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if not lines[i].startswith(" " * 3) or lines[i].startswith("  -")
        ),
        len(lines),
    )
    return " ".join(" ".join(lines[start:end]).split())


@pytest.mark.parametrize("command", PARSERS)
def test_help_says_each_default_once(command):
    parser = _subparser(command)
    text = parser.format_help()
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or action.dest == "help":
            continue
        entry = _entry(text, action.option_strings[-1])
        has_default = action.default is not None and action.default is not False
        assert entry.count("(default:") == int(has_default or "(default:" in (action.help or "")), entry
        if has_default and "(default:" not in (action.help or ""):
            # As typed on the command line: a list of two values is two words, not a Python list.
            value = action.default
            shown = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
            assert f"(default: {shown})" in entry, entry


@pytest.mark.parametrize("argv", [["--help"], *([*command.split(), "--help"] for command in PARSERS)])
def test_no_command_line_loads_lightning_to_declare_its_options(argv):
    """Declaring a command's options imports what their defaults and ranges come from, never Lightning: its import
    is 1.5-2 s, more than the whole of ``flowlearn --help`` (1.4 s). The commands that run a model load it
    (tests/test_report.py)."""
    output, _, _, count = run_counting_lightning(argv)
    assert count == 0
    # Each command's own options are still declared, and --help still lists every command.
    if argv == ["--help"]:
        assert all(command.name in output for command in COMMANDS)
    else:
        assert "--" in output.split("options:")[-1]
