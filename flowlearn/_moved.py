"""Modules that moved when the package was arranged by job (0.2), still importable under their old names for one
release, each with a :class:`DeprecationWarning` that names the new place.

The old name is an alias of the new module (the same object), so ``from flowlearn.data.lbm import simulate`` gives
what ``from flowlearn.reference.lbm import simulate`` gives. Nothing of flowlearn imports an old name.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {
    **{
        f"flowlearn.data.{name}": f"flowlearn.fractures.{name}"
        for name in ("closure", "inclination", "recipes", "roughness", "statistics")
    },
    **{
        f"flowlearn.data.{name}": f"flowlearn.reference.{name}"
        for name in (
            "cluster",
            "conservation",
            "convergence",
            "departure",
            "generate",
            "lbm",
            "placements",
            "reference_error",
            "refinement",
            "stokes",
            "voxels",
            "wall_mesh",
        )
    },
    "flowlearn.outputs": "flowlearn.cli.outputs",
    "flowlearn.reporting.runs": "flowlearn.runs",
    "flowlearn.training.metrics": "flowlearn.metrics",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name of :data:`MOVED` and loads it as the new module, warning once per name."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec] = {}  # each new module's own spec, by its name

    def find_spec(
        self, name: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} has moved to {new}; the old name will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has given the module the alias's spec: it keeps its own (pickling, reloading read it).
        module.__spec__ = self._specs[MOVED[module.__spec__.name]]


def install() -> None:
    """Let the old names of :data:`MOVED` be imported (once per interpreter)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
