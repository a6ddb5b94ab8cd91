"""``python -m marlin_demo quantize``: build a quantized Marlin variant the app can load as-is, calibrated on
video-caption pairs through the inference processor path (docs/QUANTIZE.md)."""

from __future__ import annotations

from marlin_demo.quantize.artifact import verify_artifact
from marlin_demo.quantize.calibration import load_pairs
from marlin_demo.quantize.cli import register
from marlin_demo.quantize.recipes import parse_memory

__all__ = ["load_pairs", "parse_memory", "register", "verify_artifact"]
