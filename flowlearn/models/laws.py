"""Permeability laws: how a raw correction field turns an aperture map into a log-conductivity.

Each law maps ``log_aperture`` (natural log of the aperture in metres) and the correction model's raw output
``raw`` (same shape) to the node log-conductivity that the pressure solve takes. Only ratios of conductivity
matter for the fracture problem (fixed heads, no sources), so constant factors such as 1/12 do not change the
pressure, but they are kept so that k carries its physical meaning (m^2).
"""

from __future__ import annotations

import math

import torch


class PermeabilityLaw:
    """Base class. ``initial_raw`` is the raw value a correction model starts from."""

    name: str = ""
    initial_raw: float = 0.0
    correction_name: str = "W"  # what ``correction`` returns, for outputs and figures

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        """Node log-conductivity, shaped like the inputs."""
        raise NotImplementedError

    def correction(self, raw: torch.Tensor) -> torch.Tensor:
        """The correction field in the law's own terms (W for the cubic laws, the exponent w for ``exponent``)."""
        return torch.exp(raw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CubicLaw(PermeabilityLaw):
    """k = Ap^2/12 * W with W = exp(raw) > 0; W = 1 (raw = 0), the local cubic law, at the start."""

    name = "cubic"

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        return 2 * log_aperture - math.log(12.0) + raw


class TransmissivityLaw(PermeabilityLaw):
    """T = Ap^3/12 * W, the local cubic law of a depth-averaged model, with W = exp(raw) > 0 starting at 1."""

    name = "transmissivity"

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        return 3 * log_aperture - math.log(12.0) + raw


class ExponentLaw(PermeabilityLaw):
    """K = Ap^(2*relu(w)), the original work's law, with w = raw starting at 0.5 (K = Ap); w = 1 gives Ap^2."""

    name = "exponent"
    correction_name = "w"

    def __init__(self, initial_exponent: float = 0.5) -> None:
        self.initial_raw = initial_exponent

    def log_k(self, log_aperture: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        return 2 * torch.relu(raw) * log_aperture

    def correction(self, raw: torch.Tensor) -> torch.Tensor:
        return raw

    def __repr__(self) -> str:
        return f"ExponentLaw(initial_exponent={self.initial_raw})"


def cubic_law_log_k(log_aperture: torch.Tensor) -> torch.Tensor:
    """log k of the plain local cubic law (W = 1), the baseline every model is compared with."""
    return CubicLaw().log_k(log_aperture, torch.zeros_like(log_aperture))
