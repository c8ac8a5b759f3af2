"""Correction models and permeability laws."""

from flowlearn.models.correction import CNNCorrection, PixelCorrection, UNetCorrection
from flowlearn.models.laws import CubicLaw, ExponentLaw, PermeabilityLaw, TransmissivityLaw, cubic_law_log_k

__all__ = [
    "CNNCorrection",
    "CubicLaw",
    "ExponentLaw",
    "PermeabilityLaw",
    "PixelCorrection",
    "TransmissivityLaw",
    "UNetCorrection",
    "cubic_law_log_k",
]
