"""Correction models: from an aperture map to the raw correction field that a permeability law consumes."""

from __future__ import annotations

import torch
from torch import nn


class PixelCorrection(nn.Module):
    """One free parameter per pixel, for a single fracture (the original work's setup).

    Args:
        shape: Image shape of the fracture, (H, W) or (D, H, W).
        initial: Starting value of every parameter (the law's ``initial_raw``).
    """

    def __init__(self, shape: tuple[int, ...], initial: float = 0.0) -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.raw = nn.Parameter(torch.full(self.shape, float(initial), dtype=torch.float64))

    def forward(self, log_aperture: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """Raw correction (B, *shape) float64 for log-apertures (B, *shape); the same field for every item."""
        if tuple(log_aperture.shape[1:]) != self.shape:
            raise ValueError(
                f"model=pixel was built for fractures of shape {self.shape}, got {tuple(log_aperture.shape[1:])}"
            )
        return self.raw.expand_as(log_aperture)


class CNNCorrection(nn.Module):
    """A small fully convolutional network that predicts the raw correction from the aperture map.

    Input channels: the log-aperture relative to the fracture's mean over active pixels, and the active mask.
    The last layer starts at zero, so an untrained network returns ``initial`` everywhere (W = 1 for the cubic
    laws): training starts from the law it corrects. Being convolutional, it applies to fractures of any size.

    Args:
        dim: 2 for aperture maps (B, H, W), 3 for volumes (B, D, H, W).
        channels: Hidden channels per layer.
        depth: Number of hidden convolution layers.
        kernel_size: Odd kernel size of the hidden layers.
        initial: Raw value the network starts from (the law's ``initial_raw``).
    """

    def __init__(
        self, dim: int = 2, channels: int = 32, depth: int = 4, kernel_size: int = 5, initial: float = 0.0
    ) -> None:
        super().__init__()
        if dim not in (2, 3):
            raise ValueError(f"CNNCorrection needs dim 2 or 3, got {dim}")
        if kernel_size % 2 == 0 or kernel_size < 1:
            raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
        conv = nn.Conv2d if dim == 2 else nn.Conv3d
        layers: list[nn.Module] = []
        width = 2
        for _ in range(depth):
            layers += [
                conv(width, channels, kernel_size, padding="same", padding_mode="replicate"),
                nn.GELU(),
            ]
            width = channels
        self.body = nn.Sequential(*layers)
        self.head = conv(width, 1, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.initial = float(initial)
        self.double()

    def forward(self, log_aperture: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """Raw correction (B, *shape) float64 from log-apertures (B, *shape) (finite; any value where inactive)
        and the active mask (B, *shape) bool."""
        mask = active.to(log_aperture.dtype)
        count = mask.flatten(1).sum(1).clamp_min(1)
        mean = (log_aperture * mask).flatten(1).sum(1) / count
        relative = (log_aperture - mean.view(-1, *[1] * (log_aperture.ndim - 1))) * mask
        features = torch.stack([relative, mask], dim=1)
        return self.initial + self.head(self.body(features)).squeeze(1)
