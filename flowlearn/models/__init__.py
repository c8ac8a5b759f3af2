"""Correction models, transmissivity laws and the closed-form baselines: what turns a fracture's geometry into
the log-transmissivity the solve takes."""

from flowlearn.models.baselines import BASELINES, Baseline, baseline_log_t
from flowlearn.models.correction import CNNCorrection, PixelCorrection, UNetCorrection
from flowlearn.models.laws import (
    ApSquaredLaw,
    ClosedFormLaw,
    ExponentLaw,
    InclinedCubicLaw,
    LocalCubicLaw,
    PermeabilityLaw,
    power_law_log_t,
    wedge_factor,
)

__all__ = [
    "BASELINES",
    "ApSquaredLaw",
    "Baseline",
    "CNNCorrection",
    "ClosedFormLaw",
    "ExponentLaw",
    "InclinedCubicLaw",
    "LocalCubicLaw",
    "PermeabilityLaw",
    "PixelCorrection",
    "UNetCorrection",
    "baseline_log_t",
    "power_law_log_t",
    "wedge_factor",
]
