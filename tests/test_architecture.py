"""The package's structure: its floors (no import runs up the house), no import cycles, a lean ``import flowlearn``,
one engine registry, every exception in errors.py, the old names of moved modules. Read from the source with ast,
so that a cycle or an upward import fails here before it fails some import order at run time.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import flowlearn.errors
from flowlearn._moved import MOVED
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


# The floors of the house, from the ground up (docs/architecture.md draws them): a module may import modules of its
# own floor and of the floors below it, never one above, whether at load time or inside a function. A room is a
# package or a module; a module belongs to the longest room that contains it. The package's face (flowlearn/
# __init__.py, what `import flowlearn` gives) stands on top.
FLOORS = (
    # Shared by every floor: errors, argument checks, the process's runtime and threads, sparse helpers, every
    # metric's definition, the reading of a run folder, the version, the old names of moved modules.
    (
        "flowlearn.errors",
        "flowlearn.checks",
        "flowlearn.runtime",
        "flowlearn.threads",
        "flowlearn.sparse",
        "flowlearn.metrics",
        "flowlearn.runs",
        "flowlearn.version",
        "flowlearn._moved",
    ),
    ("flowlearn.darcy", "flowlearn.engines", "flowlearn.bridge"),  # the solve and its backends
    ("flowlearn.fractures",),  # geometry: arrays in, arrays out
    ("flowlearn.data",),  # fracture files, input channels, the DataModule
    ("flowlearn.reference",),  # the flow a law is judged against
    ("flowlearn.models",),  # corrections, laws, closed forms
    ("flowlearn.training",),
    ("flowlearn.reporting",),
    ("flowlearn.cli",),  # the commands, python train.py's entry point
    ("flowlearn",),
)


def _floor(module: str) -> int:
    rooms = [
        (len(room), level)
        for level, floor in enumerate(FLOORS)
        for room in floor
        if module == room or module.startswith(room + ".")
    ]
    return max(rooms)[1]


def test_every_module_stands_on_a_floor_and_no_import_runs_up():
    graph = _import_graph(deferred=True)
    assert {_floor(module) for module in graph} == set(range(len(FLOORS))), "a floor without a module"
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if _floor(target) > _floor(module)
    )
    assert upward == []


def test_the_floor_check_finds_an_import_that_runs_up():
    # data/placements.py once drew its figure with reporting.figures; data/reference_error.py read training's
    # metrics: both would be found.
    graph = _import_graph(deferred=True)
    graph["flowlearn.reference.placements"] = graph["flowlearn.reference.placements"] | {
        "flowlearn.reporting.figures"
    }
    assert _floor("flowlearn.reference.placements") < _floor("flowlearn.reporting.figures")
    assert _floor("flowlearn.metrics") < _floor("flowlearn.data.schema") < _floor("flowlearn.reference.lbm")


def test_no_file_is_over_a_thousand_lines_and_no_room_over_a_quarter_of_the_package():
    lines = {path: len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert [str(path.relative_to(PACKAGE)) for path, n in lines.items() if n > 1000] == []
    rooms: dict[str, int] = {}
    for path, n in lines.items():
        room = path.relative_to(PACKAGE).parts[0]
        rooms[room] = rooms.get(room, 0) + n
    total = sum(rooms.values())
    assert {room: n for room, n in rooms.items() if n > total / 4} == {}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_is_importable_by_its_old_name_with_a_warning(old):
    code = (
        "import importlib, warnings\n"
        "import flowlearn\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({MOVED[old]!r})\n"
        "assert old is new and new.__spec__.name == new.__name__, (old, new.__spec__)\n"
        "assert [w.category for w in caught] == [DeprecationWarning], caught\n"
        f"assert {MOVED[old]!r} in str(caught[0].message)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert old not in _modules(), "an old name is still a file"


def test_the_package_has_no_import_cycle():
    graph = _import_graph()
    assert "flowlearn.darcy.solve" in graph["flowlearn"], "the graph misses a known import"
    assert _cycles(graph) == []


def test_no_cycle_hides_behind_an_import_inside_a_function():
    # A deferred import breaks a cycle at load time only: the two modules still cannot be read one without the other.
    graph = _import_graph(deferred=True)
    assert "flowlearn.reference.generate" in graph["flowlearn.cli.generate"], (
        "the graph misses a known deferred import"
    )
    assert "flowlearn.reference.generate" not in _import_graph()["flowlearn.cli.generate"]
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
