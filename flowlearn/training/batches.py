"""What the training code reads from a batch, and each fracture's Darcy problem.

A batch (from :class:`~flowlearn.data.datamodule.FractureDataModule`) is a dict with ``aperture``, ``pressure``,
``active`` (B, *shape), ``inlet_pressure``/``outlet_pressure`` (B,), ``name`` (B strings) and more (see the
datamodule). Every fracture gets its own :class:`~flowlearn.darcy.DarcyProblem` (its contact spots differ), kept in
an LRU cache so that an engine's symbolic analysis and factors, which it keeps per problem, are reused when the
fracture comes back. The problem's grid has unit pixel size and unit thickness, so that the outlet flow rate of a
law in transmissivity units is in the units of the data's ``flow_rate`` (see :mod:`flowlearn.models.laws`).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from flowlearn.checks import is_integer
from flowlearn.darcy.problem import DarcyProblem
from flowlearn.darcy.solve import solve_pressure
from flowlearn.engines import Engine, get_engine
from flowlearn.errors import SolutionError, SolveInputError


def as_batch(item: dict, device: torch.device | str = "cpu") -> dict:
    """A batch of one on ``device`` from a :class:`~flowlearn.data.datamodule.FractureDataset` item."""
    return {k: [v] if isinstance(v, str) else v.unsqueeze(0).to(device) for k, v in item.items()}


def log_aperture(batch: dict) -> torch.Tensor:
    """log of the aperture, float64 (B, *shape), with 0 at inactive pixels so that no -inf reaches a gradient."""
    aperture = batch["aperture"].to(torch.float64)
    tiny = torch.finfo(torch.float64).tiny
    return torch.where(batch["active"], torch.log(aperture.clamp_min(tiny)), 0.0)


def heads(batch: dict, index: int) -> tuple[float, float]:
    """The inlet and outlet heads of fracture ``index`` of ``batch``."""
    return float(batch["inlet_pressure"][index]), float(batch["outlet_pressure"][index])


def solve_fracture(
    log_k: torch.Tensor,
    problem: DarcyProblem,
    name: str,
    solver: str | Engine | None,
    one_off: bool = False,
) -> torch.Tensor:
    """The pressure of fracture ``name`` by ``solver`` on the solver's own device, returned on ``log_k``'s device:
    the model may sit elsewhere (Lightning hands it back to the CPU after fitting, for one), and the gradient
    crosses the copy. A solve that fails names the fracture. ``one_off``: as for
    :func:`~flowlearn.darcy.solve.solve_pressure`."""
    engine = get_engine(solver)
    on_engine = engine.device is None or engine.device == log_k.device
    try:
        pressure = solve_pressure(
            log_k if on_engine else log_k.to(engine.device), problem, solver=engine, one_off=one_off
        )
        return pressure if on_engine else pressure.to(log_k.device)
    except (SolveInputError, SolutionError) as error:
        raise type(error)(f"fracture {name}: {error}") from error


# Pixels of the problems a FractureProblems keeps, in all. A problem and what the CPU engine keeps for it (factor,
# warm starts, multigrid hierarchy) take about 800 bytes a pixel after training steps (2.9 MiB at 64x64, 52 MiB at
# 256x260), so this is about 3.3 GB: 64 fractures of 256x260, a thousand of 64x64, four of 1024x1024. A training set
# that fits is solved from its own factors epoch after epoch; one that does not is visited in a cycle, which an LRU
# cache serves with no hit at all.
CACHED_PIXELS = 2**22


class FractureProblems:
    """The Darcy problems of the fractures last seen, as many as :data:`CACHED_PIXELS` pixels hold (and at least
    the last one), least recently used dropped first.

    Args:
        pixels: Pixels of the problems kept between visits, in all.
    """

    def __init__(self, pixels: int = CACHED_PIXELS) -> None:
        if not is_integer(pixels) or pixels < 1:
            raise ValueError(f"cache_pixels must be a positive integer, got {pixels!r}")
        self.pixels = pixels
        self._problems: OrderedDict[str, DarcyProblem] = OrderedDict()
        self._held = 0  # pixels of the problems kept

    @staticmethod
    def key(name: str, inlet: float, outlet: float) -> str:
        """What tells two fracture setups apart: the fracture's name and its heads, to the last bit."""
        return f"{name}|{inlet:.17g}|{outlet:.17g}"

    def get(self, name: str, active: torch.Tensor, inlet: float, outlet: float) -> DarcyProblem:
        """The fracture setup of one fracture (``active``: bool (*shape)): inlet head on the first column, outlet
        head on the last, on a grid of unit pixel size and thickness."""
        key = self.key(name, inlet, outlet)
        if key not in self._problems:
            mask = active.detach().cpu().numpy()
            self._problems[key] = DarcyProblem.fracture(
                tuple(mask.shape),
                inlet=inlet,
                outlet=outlet,
                active=mask,
                pixel_size=1.0,
                thickness=1.0,
                drop_unconnected=True,
            )
            self._held += mask.size
            while self._held > self.pixels and len(self._problems) > 1:
                _, dropped = self._problems.popitem(last=False)
                self._held -= dropped.active.size
        self._problems.move_to_end(key)
        return self._problems[key]

    def of(self, batch: dict) -> list[DarcyProblem]:
        """The problem of every fracture of ``batch``, in order."""
        return [self.get(name, batch["active"][i], *heads(batch, i)) for i, name in enumerate(batch["name"])]
