"""``python -m marlin_demo quantize``: build a quantized Marlin variant the app can load as-is.

Three recipes (``recipes``), calibrated on video-caption pairs through the inference processor
path (``calibration``), one run (``build``), the artifact's records checked against its tensors
(``artifact``) and the command (``cli``): docs/QUANTIZE.md.
"""

from __future__ import annotations

from marlin_demo.quantize.artifact import inspect_artifact, verify_artifact, versions, write_recipe
from marlin_demo.quantize.build import DEFAULT_CALIBRATION, Options, resolve_model, run
from marlin_demo.quantize.calibration import (
    CalibrationPair,
    build_calibration,
    caption_answer,
    encode_pair,
    load_pairs,
)
from marlin_demo.quantize.cli import cmd_quantize, register
from marlin_demo.quantize.recipes import RECIPES, QuantizeError, Recipe, parse_memory

__all__ = [
    "DEFAULT_CALIBRATION",
    "RECIPES",
    "CalibrationPair",
    "Options",
    "QuantizeError",
    "Recipe",
    "build_calibration",
    "caption_answer",
    "cmd_quantize",
    "encode_pair",
    "inspect_artifact",
    "load_pairs",
    "parse_memory",
    "register",
    "resolve_model",
    "run",
    "verify_artifact",
    "versions",
    "write_recipe",
]
