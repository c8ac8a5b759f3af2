"""The benchmarks' shared test cases: a rough fracture's log K and a loss on its pressure; the generator's rough
fractures."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from flowlearn.reference.generate import DatasetConfig


def rough_log_k(shape: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """log K of a rough fracture: 2*log(aperture), aperture a smoothed lognormal field (float64, image layout)."""
    rng = np.random.default_rng(seed)
    noise = np.fft.rfft2(rng.normal(size=shape))
    ky = np.fft.fftfreq(shape[0])[:, None]
    kx = np.fft.rfftfreq(shape[1])[None, :]
    smooth = np.fft.irfft2(noise / (1 + (np.hypot(kx, ky) * 32) ** 2), s=shape)
    log_aperture = smooth / smooth.std() * 0.5
    return torch.from_numpy(2 * log_aperture)


def loss_of(pressure: torch.Tensor) -> torch.Tensor:
    return ((pressure - 1.5) ** 2).mean()


def rough_indices(config: DatasetConfig, count: int) -> list[int]:
    """The indices of ``config``'s first ``count`` rough fractures. The published recipe opens every block with its
    exact cases (plates, flat mid-surfaces), whose thin LBM boxes converge in a fraction of a rough fracture's time
    and so would overstate the generator's rate."""
    rough = (i for i in itertools.count() if config.recipe.kind(i) == "rough")
    return list(itertools.islice(rough, count))
