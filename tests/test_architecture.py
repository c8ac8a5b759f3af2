"""The package's structure: no import cycles, a lean ``import flowlearn``, one engine registry, every exception in
errors.py. Read from the source with ast, so that a cycle fails here before it fails some import order at run time.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import flowlearn.errors
from flowlearn.engines import ENGINES, Engine, engine_class

PACKAGE = Path(__file__).resolve().parents[1] / "flowlearn"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _loaded_with(name: str, modules: dict[str, Path], importer: str) -> list[str]:
    """The flowlearn modules that importing ``name`` from module ``importer`` executes: ``name`` itself (when it is
    a module) and its parent packages, less those that contain ``importer`` -- Python has initialised them before
    ``importer`` runs, so they are no dependency of it (unless ``importer`` names one itself)."""
    parts = name.split(".")
    loaded = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [m for m in loaded if m in modules and (m == name or not importer.startswith(m + "."))]


def _imports(path: Path, name: str, modules: dict[str, Path], deferred: bool = False) -> set[str]:
    """flowlearn modules that ``path`` imports when it is imported: every import statement outside a function
    body, ``if TYPE_CHECKING:`` blocks included (a type-only cycle is still a cycle of the design); with
    ``deferred``, those inside function bodies too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not deferred and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue  # deferred imports run when called, not when the module loads
            if isinstance(child, ast.Import):
                for alias in child.names:
                    targets.update(_loaded_with(alias.name, modules, name))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets.update(_loaded_with(base, modules, name))
                for alias in child.names:
                    if f"{base}.{alias.name}" in modules:
                        targets.add(f"{base}.{alias.name}")
            visit(child)

    visit(ast.parse(path.read_text()))
    targets.discard(name)
    return targets


def _import_graph(deferred: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules, deferred) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first search (each reported once, from where the search first closed it)."""
    cycles, state = [], dict.fromkeys(graph, 0)  # 0 unvisited, 1 on the stack, 2 done
    stack: list[str] = []

    def search(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state[target] == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif state[target] == 0:
                search(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if state[node] == 0:
            search(node)
    return cycles


def test_the_package_has_no_import_cycle():
    graph = _import_graph()
    assert "flowlearn.darcy.solve" in graph["flowlearn"], "the graph misses a known import"
    assert _cycles(graph) == []


def test_no_cycle_hides_behind_an_import_inside_a_function():
    # A deferred import breaks a cycle at load time only: the two modules still cannot be read one without the other.
    graph = _import_graph(deferred=True)
    assert "flowlearn.data.generate" in graph["flowlearn.cli"], "the graph misses a known deferred import"
    assert "flowlearn.data.generate" not in _import_graph()["flowlearn.cli"]
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_through_a_package_file():
    # darcy/solve -> engines (package) -> engines/base -> darcy/problem: a cycle once darcy/__init__ imports solve.
    graph = _import_graph()
    graph["flowlearn.darcy"] = graph["flowlearn.darcy"] | {"flowlearn.darcy.solve"}
    assert any("flowlearn.darcy" in cycle for cycle in _cycles(graph))


def test_import_flowlearn_loads_no_bridge_and_no_optional_backend():
    code = (
        "import flowlearn, sys\n"
        "assert not any(m.startswith(('juliacall', 'flowlearn.bridge')) for m in sys.modules)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('nvmath', 'cupy', 'pyamg', 'lightning', "
        "'hydra', 'matplotlib', 'h5py'))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_registered_engine_implements_the_protocol_in_its_own_file(name):
    cls = engine_class(name)
    assert issubclass(cls, Engine) and not inspect.isabstract(cls)
    assert cls.name == name
    assert Path(inspect.getfile(cls)).stem in (name, cls.__module__.rpartition(".")[2])


def test_every_exception_is_defined_in_errors_py():
    defined_elsewhere = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and (base.id.endswith(("Error", "Exception")))
                for base in node.bases
            ):
                defined_elsewhere.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert defined_elsewhere == []
    # Every user-facing error class is one the command line reports as one line.
    for name in ("ProblemError", "ConfigError", "DataValidationError", "GPUUnavailableError"):
        assert issubclass(getattr(flowlearn.errors, name), flowlearn.errors.USER_ERRORS)
