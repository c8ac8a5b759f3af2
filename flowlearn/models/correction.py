"""Correction models: from a fracture's input channels to the raw correction field that a permeability law consumes.

Every model maps the batch's ``inputs``, float (B, C, *shape) (the channels named by its ``inputs``; see
:mod:`flowlearn.data.inputs`), to the raw correction, float64 (B, *shape). The networks start at zero output, so an
untrained network returns ``initial`` everywhere (W = 1 for the cubic laws): training starts from the law it
corrects. Being fully convolutional, they apply to fractures of any size.

Where the physics is exact the networks stay out of the way, by construction: with ``exact_on_plates`` (the
default) a network's raw correction is its output g minus its output on the inputs of flat parallel plates of the
same shape (:func:`~flowlearn.data.inputs.plate_channels`),

    raw(x) = initial + g(x) - g(x_plates),

so that W = 1 exactly on parallel plates, and on tilted ones where the inputs do not include the walls: there the
law alone (the cubic law, with the inclination tensor for a tilted pair) gives the exact flow. The subtraction
costs one more pass of the network over a single map, and takes nothing from what it can learn: any correction
that vanishes on plates is still some g(x) - g(x_plates).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from flowlearn.data.inputs import DEFAULT_INPUTS, channel_count, check_input_names, plate_channels


class PixelCorrection(nn.Module):
    """One free parameter per pixel, for a single fracture (the original work's setup).

    Args:
        shape: Image shape of the fracture, (H, W) or (D, H, W).
        initial: Starting value of every parameter (the law's ``initial_raw``).
    """

    # Only the shape of the inputs matters, and every fracture has the aperture.
    inputs = DEFAULT_INPUTS
    config_name = "pixel"  # the model's name in configs/model

    def __init__(self, shape: tuple[int, ...], initial: float = 0.0) -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.raw = nn.Parameter(torch.full(self.shape, float(initial), dtype=torch.float64))

    def check_shape(self, shape: tuple[int, ...]) -> None:
        """ValueError unless a map of ``shape`` (H, W) or (D, H, W) is one this model can correct."""
        if tuple(shape) != self.shape:
            raise ValueError(f"model=pixel was built for fractures of shape {self.shape}, got {tuple(shape)}")

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Raw correction (B, *shape) float64 for inputs (B, C, *shape); the same field for every item."""
        self.check_shape(inputs.shape[2:])
        return self.raw.to(torch.float64).expand(inputs.shape[0], *self.shape)

    @property
    def description(self) -> str:
        """What the weights fit: the model and the options that shape them, as a config would say them."""
        return f"model={self.config_name} (shape {list(self.shape)})"


def _convolution(dim: int) -> type[nn.Module]:
    if dim not in (2, 3):
        raise ValueError(f"a correction network needs dim 2 or 3, got {dim}")
    return nn.Conv2d if dim == 2 else nn.Conv3d


def _zero_head(conv: type[nn.Module], width: int) -> nn.Module:
    """A 1x1 convolution to one channel whose weights start at zero: the network starts at zero output."""
    head = conv(width, 1, 1)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    return head


class _Network(nn.Module):
    """What the networks share: the raw correction from the network's output g (:meth:`_output`), anchored on
    parallel plates (module docstring)."""

    inputs: tuple[str, ...]
    dim: int  # 2 for maps, 3 for volumes
    kernel_size: int
    initial: float
    exact_on_plates: bool
    config_name: str  # the model's name in configs/model
    options: tuple[str, ...]  # the attributes that shape its weights, as in its config

    def __init__(
        self, dim: int, kernel_size: int, initial: float, inputs: Sequence[str], exact_on_plates: bool
    ) -> None:
        """Check and keep the arguments every network takes (documented by the subclasses); a subclass then builds
        its layers and makes its weights float64."""
        super().__init__()
        if kernel_size % 2 == 0 or kernel_size < 1:
            raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
        self.dim, self.kernel_size = dim, kernel_size
        self.inputs = check_input_names(inputs)
        self.initial = float(initial)
        self.exact_on_plates = bool(exact_on_plates)

    @property
    def description(self) -> str:
        """What the weights fit: the model and the options that shape them, as a config would say them."""
        values = [f"{name}={getattr(self, name)}" for name in self.options]
        values += [
            f"inputs=[{','.join(self.inputs)}]",
            f"exact_on_plates={str(self.exact_on_plates).lower()}",
        ]
        return f"model={self.config_name} ({', '.join(values)})"

    def check_shape(self, shape: tuple[int, ...]) -> None:
        """ValueError unless a map of ``shape`` (H, W) or (D, H, W) is one this model can correct."""
        if len(shape) != self.dim:
            kind = "maps (H, W)" if self.dim == 2 else "volumes (D, H, W)"
            raise ValueError(f"{self.description} takes {kind}, got shape {tuple(shape)}")

    def _output(self, inputs: torch.Tensor) -> torch.Tensor:
        """g (B, *shape) from the input channels (B, C, *shape), both in the dtype of the weights."""
        raise NotImplementedError

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Raw correction (B, *shape) float64 from the input channels (B, C, *shape), any shape and float dtype.
        The network computes in the dtype of its weights (``trainer.precision``)."""
        inputs = inputs.to(self.head.weight.dtype)
        if self.exact_on_plates:
            values = torch.tensor(plate_channels(self.inputs, inputs.ndim - 2), dtype=inputs.dtype)
            plates = (
                values.to(inputs.device)
                .view(1, -1, *[1] * (inputs.ndim - 2))
                .expand(1, -1, *inputs.shape[2:])
            )
            # The plates go through in the inputs' batch: a float32 convolution may choose its algorithm by the
            # batch's size, and within one batch it gives plates the anchor's bits (W = 1 exactly); float64 ones
            # round the two alike to an ulp of g.
            output = self._output(torch.cat([inputs, plates]))
            raw = output[:-1] - output[-1:]
        else:
            raw = self._output(inputs)
        return self.initial + raw.to(torch.float64)


class CNNCorrection(_Network):
    """A small fully convolutional network that predicts the raw correction from the input channels.

    Args:
        dim: 2 for aperture maps (B, H, W), 3 for volumes (B, D, H, W).
        channels: Hidden channels per layer.
        depth: Number of hidden convolution layers.
        kernel_size: Odd kernel size of the hidden layers.
        initial: Raw value the network starts from (the law's ``initial_raw``).
        inputs: Names of the input channels it reads (:data:`flowlearn.data.inputs.INPUTS`).
        exact_on_plates: Subtract the output on parallel plates, so that W = 1 there (module docstring).
    """

    config_name = "cnn"
    options = ("channels", "depth", "kernel_size")

    def __init__(
        self,
        dim: int = 2,
        channels: int = 32,
        depth: int = 4,
        kernel_size: int = 5,
        initial: float = 0.0,
        inputs: Sequence[str] = DEFAULT_INPUTS,
        exact_on_plates: bool = True,
    ) -> None:
        super().__init__(dim, kernel_size, initial, inputs, exact_on_plates)
        conv = _convolution(dim)
        self.channels, self.depth = channels, depth
        layers: list[nn.Module] = []
        width = channel_count(self.inputs, dim)
        for _ in range(depth):
            layers += [
                conv(width, channels, kernel_size, padding="same", padding_mode="replicate"),
                nn.GELU(),
            ]
            width = channels
        self.body = nn.Sequential(*layers)
        self.head = _zero_head(conv, width)
        self.double()

    def _output(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(inputs)).squeeze(1)


class UNetCorrection(_Network):
    """A small U-Net: the input channels seen at the full resolution and at ``levels`` coarser ones.

    Each level halves the resolution with a stride-2 convolution (an odd size is first padded by one replicated
    pixel) and doubles the channels; on the way up a stride-2 transposed convolution restores the size (cropped
    to the finer level's), and the finer level's features join through a skip connection. Each resolution has two
    ``kernel_size`` convolutions on each way. Each level doubles how far around a pixel the network looks, so
    that a pixel's correction can follow the contact spots and channels that steer the flow around it.

    Args:
        dim: 2 for aperture maps (B, H, W), 3 for volumes (B, D, H, W).
        channels: Channels at the full resolution (doubled at each coarser level).
        levels: Coarser resolutions, each half the previous one.
        kernel_size: Odd kernel size of the convolutions within a level.
        initial: Raw value the network starts from (the law's ``initial_raw``).
        inputs: Names of the input channels it reads (:data:`flowlearn.data.inputs.INPUTS`).
        exact_on_plates: Subtract the output on parallel plates, so that W = 1 there (module docstring).
    """

    config_name = "unet"
    options = ("channels", "levels", "kernel_size")

    def __init__(
        self,
        dim: int = 2,
        channels: int = 16,
        levels: int = 2,
        kernel_size: int = 3,
        initial: float = 0.0,
        inputs: Sequence[str] = DEFAULT_INPUTS,
        exact_on_plates: bool = True,
    ) -> None:
        super().__init__(dim, kernel_size, initial, inputs, exact_on_plates)
        conv = _convolution(dim)
        transposed = nn.ConvTranspose2d if dim == 2 else nn.ConvTranspose3d
        if levels < 1:
            raise ValueError(f"levels must be >= 1, got {levels}")
        self.channels, self.levels = channels, levels

        def block(width_in: int, width_out: int) -> nn.Sequential:
            return nn.Sequential(
                conv(width_in, width_out, kernel_size, padding="same", padding_mode="replicate"),
                nn.GELU(),
                conv(width_out, width_out, kernel_size, padding="same", padding_mode="replicate"),
                nn.GELU(),
            )

        widths = [channels * 2**level for level in range(levels + 1)]
        self.encoders = nn.ModuleList([block(channel_count(self.inputs, dim), widths[0])])
        self.downs = nn.ModuleList()
        for fine, coarse in itertools.pairwise(widths):
            self.downs.append(conv(fine, coarse, 2, stride=2))
            self.encoders.append(block(coarse, coarse))
        self.ups = nn.ModuleList(
            [transposed(coarse, fine, 2, stride=2) for fine, coarse in itertools.pairwise(widths)]
        )
        self.decoders = nn.ModuleList([block(2 * fine, fine) for fine in widths[:-1]])
        self.head = _zero_head(conv, widths[0])
        self.double()

    def _halve(self, features: torch.Tensor, down: nn.Module) -> torch.Tensor:
        """``down`` (stride 2) on ``features``, each odd spatial size padded by one replicated pixel first."""
        padding = [0] * (2 * self.dim)
        for axis in range(self.dim):  # F.pad lists the last axis first
            padding[2 * axis + 1] = features.shape[-1 - axis] % 2
        return down(F.pad(features, padding, mode="replicate") if any(padding) else features)

    def _output(self, inputs: torch.Tensor) -> torch.Tensor:
        features = self.encoders[0](inputs)
        skips = []
        for down, encoder in zip(self.downs, self.encoders[1:]):
            skips.append(features)
            features = encoder(self._halve(features, down))
        for up, decoder, skip in zip(reversed(self.ups), reversed(self.decoders), reversed(skips)):
            upsampled = up(features)[(..., *(slice(0, size) for size in skip.shape[2:]))]
            features = decoder(torch.cat([skip, upsampled], dim=1))
        return self.head(features).squeeze(1)
