"""``python -m marlin_demo quantize``: build a quantized Marlin variant the app can load as-is.

Three recipes (see docs/QUANTIZE.md):

- ``seed-w4g128``: the seed GPTQ card (4-bit, group 128, desc_act, sym, lm_head 16-bit),
  gptqmodel's default Qwen3.5 targets.
- ``mlp-only-w4g128``: only the MLP linears in 4-bit (Qwen's own recipe); full attention
  and Gated DeltaNet stay 16-bit through gptqmodel ``dynamic`` negative rules.
- ``mixed-w4-vision-int8``: the text linears as ``seed-w4g128`` plus the vision encoder
  linears RTN INT8 per output channel, stored as real int8 in ``rtn_int8.safetensors``
  (:mod:`marlin_demo.models.rtn`); the projector/merger stays 16-bit.

Calibration runs the exact inference processor path (chat template, real frames,
``<t seconds>`` timestamps, ``video_metadata``) on video-caption pairs, so the layers
being calibrated see real vision tokens at M-RoPE positions, not text only.

Beside the artifact: ``recipe.yaml`` (what was quantized, how, and every exception, all
checked against the saved tensors), ``versions.txt``, ``report.json`` / ``report.md``,
and gptqmodel's ``quant_log.csv``.

The modules: ``recipes`` (what to quantize and how), ``calibration`` (the video-caption
pairs through the inference processor path), ``build`` (one run: ``run(Options)``),
``artifact`` (recipe.yaml, inspection and verification, the report), ``cli`` (the command).
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
