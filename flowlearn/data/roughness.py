"""Rough fractures from two self-affine walls, by spectral (Fourier) synthesis.

A self-affine surface with Hurst exponent H has, in 2D, a radially averaged power spectral density
PSD(q) ∝ q^(-2-2H). Each wall is Gaussian white noise filtered by the amplitude q^(-1-H). The two walls share
their Fourier modes at wavelengths longer than the mismatch length and are independent at shorter ones (the
"mismatch" model of Brown, J. Geophys. Res. 100 (1995) 5941), so the aperture is smooth at large scales and rough
at small ones. Where the walls touch or overlap the aperture is zero: a contact spot, i.e. an inactive cell.

All lengths are in pixels (the in-plane grid spacing, equal to the LBM voxel size). Arrays are (H, W) = (rows y,
columns x) float64, periodic in both directions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from flowlearn.checks import check_setting, is_integer, is_number


@dataclass(frozen=True)
class RoughnessParams:
    """Parameters of a rough fracture; lengths in pixels.

    Attributes:
        shape: (H, W) of the aperture map.
        hurst: Hurst exponent H of each wall, in (0, 1].
        rms: rms height of each wall.
        mean_aperture: separation of the two walls' mean planes.
        mismatch_length: wavelength above which the walls are identical (matched) and below which they are
            independent; ``inf`` makes them independent at every wavelength.
        seed: seed of the random generator; equal parameters and seed give identical fractures.
    """

    shape: tuple[int, int]
    hurst: float
    rms: float
    mean_aperture: float
    mismatch_length: float
    seed: int

    def __post_init__(self) -> None:
        shape = tuple(self.shape) if isinstance(self.shape, tuple | list) else ()
        check_setting(
            len(shape) == 2 and all(is_integer(n) and n >= 2 for n in shape),
            "shape",
            "must be two integers >= 2 (H W)",
            self.shape,
        )
        check_setting(is_number(self.hurst) and 0 < self.hurst <= 1, "hurst", "must be in (0, 1]", self.hurst)
        check_setting(is_number(self.rms) and self.rms >= 0, "rms", "must be >= 0", self.rms)
        check_setting(
            is_number(self.mean_aperture) and self.mean_aperture >= 0,
            "mean_aperture",
            "must be >= 0",
            self.mean_aperture,
        )
        check_setting(
            isinstance(self.mismatch_length, int | float) and self.mismatch_length > 0,
            "mismatch_length",
            "must be > 0 (inf: independent walls)",
            self.mismatch_length,
        )
        check_setting(is_integer(self.seed) and self.seed >= 0, "seed", "must be an integer >= 0", self.seed)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


@dataclass(frozen=True)
class RoughFracture:
    """Two walls and the gap between them, float64 (H, W), pixels.

    ``bottom`` and ``top`` are wall heights with the fracture's mid-plane at 0; ``aperture`` is
    ``max(top - bottom, 0)``, so contact spots are exactly 0.
    """

    params: RoughnessParams
    bottom: np.ndarray
    top: np.ndarray
    aperture: np.ndarray


def _wavenumbers(shape: tuple[int, int]) -> np.ndarray:
    """|q| in cycles per pixel on the grid of ``np.fft.fft2`` for ``shape`` (H, W)."""
    qy = np.fft.fftfreq(shape[0])[:, None]
    qx = np.fft.fftfreq(shape[1])[None, :]
    return np.hypot(qy, qx)


def _self_affine_amplitude(q: np.ndarray, hurst: float) -> np.ndarray:
    amplitude = np.zeros_like(q)
    nonzero = q > 0
    # The q = 0 mode is the mean height, which the caller sets, so it gets no power.
    amplitude[nonzero] = q[nonzero] ** (-1.0 - hurst)
    return amplitude


def _to_rms(field: np.ndarray, rms: float) -> np.ndarray:
    field = field - field.mean()
    std = field.std()
    return field * (rms / std) if std > 0 else field


def self_affine_surface(
    shape: tuple[int, int], hurst: float, rms: float, rng: np.random.Generator
) -> np.ndarray:
    """One periodic self-affine surface: float64 (H, W), zero mean, rms height ``rms`` (pixels).

    Its radially averaged PSD follows q^(-2-2*hurst) from the lowest to the Nyquist wavenumber.
    """
    _check(hurst, rms)
    noise = np.fft.fft2(rng.standard_normal(shape))
    return _to_rms(np.fft.ifft2(noise * _self_affine_amplitude(_wavenumbers(shape), hurst)).real, rms)


def rough_fracture(params: RoughnessParams) -> RoughFracture:
    """Synthesise the two walls of ``params`` and the aperture between them (see :class:`RoughFracture`)."""
    # RoughnessParams checked its values when it was made.
    rng = np.random.default_rng(params.seed)
    shape = tuple(params.shape)
    q = _wavenumbers(shape)
    amplitude = _self_affine_amplitude(q, params.hurst)
    shared = np.fft.fft2(rng.standard_normal(shape))
    independent = np.fft.fft2(rng.standard_normal(shape))
    matched = q < 1.0 / params.mismatch_length
    top = np.fft.ifft2(amplitude * shared).real
    bottom = np.fft.ifft2(amplitude * np.where(matched, shared, independent)).real
    # One common scale keeps the matched modes identical in both walls, so they cancel in the aperture.
    scale = params.rms / np.sqrt(0.5 * (top.var() + bottom.var()))
    top = (top - top.mean()) * scale + params.mean_aperture / 2
    bottom = (bottom - bottom.mean()) * scale - params.mean_aperture / 2
    return RoughFracture(params, bottom, top, np.maximum(top - bottom, 0.0))


def _check(hurst: float, rms: float) -> None:
    if not 0 < hurst <= 1:
        raise ValueError(f"hurst must be in (0, 1], got {hurst}")
    if rms < 0:
        raise ValueError(f"rms must be >= 0, got {rms}")
