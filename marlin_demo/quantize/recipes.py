"""The quantization recipes: which linears go 4-bit (gptqmodel) and which get vision RTN INT8."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

GPTQ_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")
_SKIP_ATTENTION = r"-:.*\.(self_attn|linear_attn)\..*"


@dataclass(frozen=True)
class Recipe:
    """One quantization recipe: the GPTQ part (gptqmodel) and the optional vision RTN part."""

    name: str
    summary: str
    bits: int = 4
    group_size: int = 128
    desc_act: bool = True
    sym: bool = True
    dynamic: dict[str, dict[str, Any]] = field(default_factory=dict)
    vision_rtn_int8: bool = False
    #: module-name pattern -> why it stays 16-bit (written to recipe.yaml)
    exceptions: dict[str, str] = field(default_factory=dict)


_COMMON_EXCEPTIONS = {
    "model.language_model.embed_tokens": "embeddings stay 16-bit",
    "lm_head": "kept 16-bit to protect the output logits (tied to embed_tokens when tie_word_embeddings)",
    "*.linear_attn.in_proj_a / in_proj_b": "Gated DeltaNet gates: quantizing them collapses output",
    "*.linear_attn.conv1d, A_log, dt_bias, norms": "not linear layers / too small; left as trained",
}

RECIPES: dict[str, Recipe] = {
    "seed-w4g128": Recipe(
        name="seed-w4g128",
        summary="GPTQ INT4 g128 desc_act sym on gptqmodel's default Qwen3.5 targets "
        "(in_proj_qkv, in_proj_z, out_proj, q/k/v/o, MLP); vision tower 16-bit",
        exceptions={**_COMMON_EXCEPTIONS, "model.visual": "vision tower and merger stay 16-bit"},
    ),
    "mlp-only-w4g128": Recipe(
        name="mlp-only-w4g128",
        summary="GPTQ INT4 g128 desc_act sym on the MLP linears only (gate/up/down_proj); "
        "full attention, Gated DeltaNet and vision stay 16-bit (Qwen's recipe)",
        dynamic={_SKIP_ATTENTION: {}},
        exceptions={
            **_COMMON_EXCEPTIONS,
            "*.self_attn.*": "full attention kept 16-bit (dynamic negative rule)",
            "*.linear_attn.*": "Gated DeltaNet kept 16-bit (dynamic negative rule)",
            "model.visual": "vision tower and merger stay 16-bit",
        },
    ),
    "mixed-w4-vision-int8": Recipe(
        name="mixed-w4-vision-int8",
        summary="text linears GPTQ INT4 as seed-w4g128; vision encoder linears RTN INT8 symmetric "
        "per output channel (real int8 in rtn_int8.safetensors); projector/merger 16-bit",
        vision_rtn_int8=True,
        exceptions={
            **_COMMON_EXCEPTIONS,
            "model.visual.merger / deepstack mergers": "projectors into the LM stay 16-bit",
            "model.visual.patch_embed, pos_embed": "conv / embedding, not linear: 16-bit",
        },
    ),
}


class QuantizeError(RuntimeError):
    """Quantization could not run; the message names the cause and the fix."""


def parse_memory(text: str | None) -> int | None:
    """'5GiB', '5.0GiB', '4500MiB', '5GB', '5' (GiB) -> bytes; None/'' -> None."""
    if text is None or str(text).strip() == "":
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?)?\s*", str(text), flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"--max-gpu-memory {text!r} is not a size: write e.g. 5GiB, 4500MiB or 5GB.")
    unit = (m.group(2) or "GiB").upper()
    base = 1024 if "I" in unit or len(unit) == 1 else 1000  # KiB and K are binary, KB decimal
    return int(float(m.group(1)) * base ** ("KMGT".index(unit[0]) + 1))
