"""``python -m marlin_demo quantize``: build a quantized Marlin variant the app can load as-is, calibrated on
video-caption pairs through the inference processor path (docs/QUANTIZE.md)."""

from __future__ import annotations

from marlin_demo.quantize.artifact import verify_artifact
from marlin_demo.quantize.build import Options, run
from marlin_demo.quantize.calibration import load_pairs
from marlin_demo.quantize.cli import register
from marlin_demo.quantize.recipes import RECIPES, QuantizeError, parse_memory

__all__ = [
    "RECIPES",
    "Options",
    "QuantizeError",
    "load_pairs",
    "parse_memory",
    "register",
    "run",
    "verify_artifact",
]
