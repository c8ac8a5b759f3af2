"""A griffe extension for the API reference: flowlearn's docstrings in Markdown.

The docstrings name other objects with Sphinx roles (``:class:`~flowlearn.engines.base.Engine```), introduce
literal blocks with ``::`` and describe parameters that go together in one entry of an ``Args:`` section
(``inlet, outlet: (B,) the heads.``). Markdown and griffe's Google-style parser know none of these, so before
mkdocstrings renders a docstring this extension rewrites

* each role as an optional cross-reference: a link where the target is in the reference, plain code where it is
  not (never a warning);
* each ``::`` that ends a paragraph as a colon (the indented block after it is already a code block in Markdown);
* each entry that names several parameters or attributes as one entry per name, with the same description.

It also keeps each object in one place: a name that a package re-exports from one of its modules (``from
flowlearn import solve_pressure``) is documented where it is defined, not again under the package. It changes the
rendered reference only, never the source files.

mkdocs.yml loads it by path (``plugins: mkdocstrings: handlers: python: options: extensions``).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:mod|class|func|meth|data|attr|exc|obj|const):`(~?)([^`<>]+?)`")
_LITERAL = re.compile(r"(?<=\S)::(?=\n\n|\n?\Z)")
_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Attributes|Other Parameters):\s*$")
_SHARED_ENTRY = re.compile(r"^(\s*)([A-Za-z_*][\w*]*(?:\s*,\s*[A-Za-z_*][\w*]*)+)\s*:(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _split_shared_entries(text: str) -> str:
    """``a, b: description`` in a parameter or attribute section as ``a: description`` and ``b: description``."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    section_indent: int | None = None
    while i < len(lines):
        line = lines[i]
        if (header := _SECTION.match(line)) is not None:
            section_indent = len(header.group(1))
        elif line.strip() and section_indent is not None and _indent(line) <= section_indent:
            section_indent = None
        entry = _SHARED_ENTRY.match(line) if section_indent is not None else None
        if entry is None or _indent(line) <= section_indent:
            out.append(line)
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() and _indent(lines[j]) > _indent(line):
            j += 1
        for name in entry.group(2).split(","):
            out.append(f"{entry.group(1)}{name.strip()}:{entry.group(3)}")
            out.extend(lines[i + 1 : j])
        i = j
    return "\n".join(out)


def _canonical(obj: griffe.Object, path: str) -> str:
    """Where the object at ``path`` is defined, for a path through a package's re-export (``flowlearn.DarcyProblem``
    is ``flowlearn.darcy.problem.DarcyProblem``); ``path`` itself where griffe does not know it."""
    root = obj.package
    if not path.startswith(f"{root.name}."):
        return path
    try:
        found = root[path.removeprefix(f"{root.name}.")]
    except Exception:  # KeyError for an unknown path, alias errors for an unresolvable one
        return path
    try:
        return found.target_path if found.is_alias else found.path
    except Exception:
        return path


def _target(obj: griffe.Object, name: str) -> str | None:
    """The full path of ``name`` as seen from ``obj``, or None where griffe cannot tell."""
    if name.startswith("flowlearn."):
        return _canonical(obj, name)
    head, _, rest = name.partition(".")
    for scope in (obj, obj.parent):
        if scope is None:
            continue
        try:
            resolved = scope.resolve(head)
        except Exception:  # griffe raises NameResolutionError, aliases may raise others
            continue
        return _canonical(obj, f"{resolved}.{rest}" if rest else resolved)
    return None


def _rewrite(obj: griffe.Object, text: str) -> str:
    def role(match: re.Match[str]) -> str:
        short, name = match.group(1), match.group(2).strip()
        shown = name.rsplit(".", 1)[-1] if short else name
        title = f"<code>{html.escape(shown)}</code>"
        target = _target(obj, name)
        if target is None:
            return title
        return f'<autoref identifier="{html.escape(target)}" optional>{title}</autoref>'

    return _split_shared_entries(_LITERAL.sub(":", _ROLE.sub(role, text)))


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring of the package once it is loaded, and hide its re-exports from the reference."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj, obj.docstring.value)
            for member in obj.members.values():
                if not member.is_alias:
                    stack.append(member)
                elif member.target_path.startswith(f"{pkg.name}."):
                    # Documented where it is defined; mkdocstrings renders imported names only when public.
                    member.public = False
