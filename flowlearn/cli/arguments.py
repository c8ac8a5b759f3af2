"""What every ``flowlearn`` command shares: the parser whose mistakes are one line, the help formatter, and the
argparse types and small converters whose range checks answer in the options' own words."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from flowlearn.checks import (
    VOXEL_SIZE,
    check_dpi,
    check_voxel_size,
)
from flowlearn.errors import (
    USER_ERROR_STATUS,
    DataValidationError,
    SettingError,
)


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit status 2), like every other mistake.

    argparse takes a word that starts with '-' for an option unless it looks like a plain negative number
    (``-2``, ``-0.5``, not ``-1e-5``), so ``--voxel-size -1e-5`` reads as an option without its value: the error
    then says how to attach the value, after which the option's own range check answers.

    An option of one or more numbers (``nargs="+"``, such as ``flowlearn generate --hurst LOW HIGH``) takes its
    numbers only: argparse gave it every word up to the next option, so that ``--hurst 0.5 0.7 out.h5`` read the
    output file as a third value (:meth:`_numbers_last`)."""

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # Kept for error(); a subcommand's parser sees its own part of the command line.
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._numbers_last(self._words), namespace)

    def _numbers_last(self, words: list[str]) -> list[str]:
        """``words`` with each option of several numbers moved, with the numbers that follow it, behind the other
        words (before a ``--``), so that argparse reads the words after its numbers as what they are: a positional
        keeps its place among the other positionals."""
        numeric = {
            name
            for action in self._actions
            if action.nargs == "+" and action.type in (int, float)
            for name in action.option_strings
        }
        moved: list[str] = []
        kept: list[str] = []
        index = 0
        while index < len(words) and words[index] != "--":
            end = index + 1
            if words[index] in numeric:
                while end < len(words) and is_number(words[end]):
                    end += 1
            (moved if words[index] in numeric else kept).extend(words[index:end])
            index = end
        return kept + moved + words[index:]

    def error(self, message: str) -> NoReturn:
        self.exit(
            USER_ERROR_STATUS,
            f"{self.prog}: error: {message}{self._hint(message)} (see {self.prog} --help)\n",
        )

    def _hint(self, message: str) -> str:
        """How to write the value that argparse took for an option, where a missing value was one."""
        if not message.endswith(": expected one argument"):
            return ""
        options = message.removeprefix("argument ").removesuffix(": expected one argument").split("/")
        words = getattr(self, "_words", [])
        for option, value in itertools.pairwise(words):
            if option in options and value.startswith("-") and is_number(value):
                return f"; a value that starts with '-' is written attached: {option}={value}"
        return ""


def is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


class HelpFormatter(argparse.HelpFormatter):
    """Each option's default said once, as it is typed (``64 64`` for two values): appended to its help unless the
    help says it already, and left out for an option without one (None, or a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "(default:" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or (not action.option_strings and action.nargs not in ("?", "*"))
        ):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else default
        return f"{text} (default: {shown})"


def note(command: str) -> Callable[[str], None]:
    """A line for stderr that is no error: what a command did that its user may not expect."""
    return lambda line: print(f"flowlearn {command}: note: {line}", file=sys.stderr)


def from_options(cls: type, args: argparse.Namespace, **given: object) -> object:
    """An instance of the dataclass ``cls`` from the command-line options named like its fields, and ``given``."""
    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return cls(**{**options, **given})


def as_typed(value: object) -> str:
    """A recipe setting as the help shows its default: '0.5 0.9' for a range."""
    return " ".join(f"{v:g}" for v in value) if isinstance(value, tuple) else f"{value:g}"


def one_or_pair(name: str, values: list[float]) -> float | tuple[float, ...]:
    """The option ``name`` of one value (a fixed setting) or two (a range to draw from)."""
    if len(values) > 2:
        raise SettingError(name, f"takes one value or two (LOW HIGH), got {len(values)}: {values}")
    return values[0] if len(values) == 1 else tuple(values)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def named_fractures(data: str, wanted: list[str] | None, every: int = 1) -> list[str]:
    """The fractures of ``data`` that ``--fracture`` names (in the file's order), or, without it, every
    ``every``-th of them.

    Raises:
        SettingError: a name that is no fracture of ``data``.
    """
    from flowlearn.data.files import list_fractures

    names = [info.name for info in list_fractures(data)]
    unknown = sorted(set(wanted or ()) - set(names))
    if unknown:
        raise SettingError(
            "--fracture", f"names no fracture of {data}: {unknown[0]!r} (it has {', '.join(names)})"
        )
    return [name for name in names if name in wanted] if wanted else names[::every]


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def path_text(text: str) -> str:
    """An argparse type: a file or folder name, not empty (an unset shell variable, say), which the commands would
    otherwise take for the current directory or for no value."""
    if not text:
        raise argparse.ArgumentTypeError("must be a path, got ''")
    return text


def checked(convert: Callable[[str], Any], check: Callable[[Any], Any], kind: str) -> Callable[[str], Any]:
    """An argparse type: ``check(convert(text))``, refused with the check's problem (a
    :class:`~flowlearn.errors.SettingError`'s) or, for text ``convert`` cannot read, argparse's own wording."""

    def parse(text: str) -> Any:
        try:
            return check(convert(text))
        except ValueError as err:  # SettingError is one
            problem = err.problem if isinstance(err, SettingError) else f"invalid {kind} value: {text!r}"
            raise argparse.ArgumentTypeError(problem) from None

    return parse


# A figure resolution (check_dpi) and metres per voxel (check_voxel_size).
dpi = checked(int, check_dpi, "int")


voxel_size = checked(float, check_voxel_size, "float")


def voxel_range() -> str:
    """The voxel sizes a command takes, as its help says them."""
    low, high = VOXEL_SIZE
    return f"[{low:g}, {high:g}]"


def check_predictions_files(option: str, paths: Sequence[str]) -> None:
    """Raise :class:`DataValidationError` for a folder among ``paths``, which ``option`` takes predictions files for:
    for a run directory, naming its predictions.h5."""
    for path in paths:
        if Path(path).is_dir():
            inside = Path(path) / "predictions.h5"
            if inside.is_file():
                raise DataValidationError(f"{option} {path} is a run directory: give {inside}")
            raise DataValidationError(f"{option} {path} is a directory, not a predictions file")
