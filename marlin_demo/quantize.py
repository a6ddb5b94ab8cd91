"""``python -m marlin_demo quantize``: build a quantized Marlin variant the app can load as-is.

Three recipes (see docs/QUANTIZE.md):

- ``seed-w4g128``: the seed GPTQ card (4-bit, group 128, desc_act, sym, lm_head 16-bit),
  gptqmodel's default Qwen3.5 targets.
- ``mlp-only-w4g128``: only the MLP linears in 4-bit (Qwen's own recipe); full attention
  and Gated DeltaNet stay 16-bit through gptqmodel ``dynamic`` negative rules.
- ``mixed-w4-vision-int8``: the text linears as ``seed-w4g128`` plus the vision encoder
  linears RTN INT8 per output channel, stored as real int8 in ``rtn_int8.safetensors``
  (:mod:`marlin_demo.rtn`); the projector/merger stays 16-bit.

Calibration runs the exact inference processor path (chat template, real frames,
``<t seconds>`` timestamps, ``video_metadata``) on video-caption pairs, so the layers
being calibrated see real vision tokens at M-RoPE positions, not text only.

Beside the artifact: ``recipe.yaml`` (what was quantized, how, and every exception, all
checked against the saved tensors), ``versions.txt``, ``report.json`` / ``report.md``,
and gptqmodel's ``quant_log.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import os
import platform
import re
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from marlin_demo import contract
from marlin_demo.models import ModelLoadError, import_gptqmodel, pick_device
from marlin_demo.rtn import SIDECAR

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CALIBRATION = ROOT / "examples"
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1

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


# --------------------------------------------------------------------------- small helpers


def parse_memory(text: str | None) -> int | None:
    """'5GiB', '5.0GiB', '4500MiB', '5GB', '5' (GiB) -> bytes; None/'' -> None."""
    if text is None or str(text).strip() == "":
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?)?\s*", str(text), flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"--max-gpu-memory {text!r} is not a size: write e.g. 5GiB, 4500MiB or 5GB.")
    value = float(m.group(1))
    unit = (m.group(2) or "GiB").upper()
    binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    decimal = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    scale = binary[unit[0]] if ("I" in unit or unit in ("K", "M", "G", "T")) else decimal[unit[0]]
    return int(value * scale)


def versions() -> dict[str, str]:
    """Package versions that decide the artifact's bytes (written to versions.txt)."""
    import safetensors
    import torch
    import transformers

    out = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() and torch.version.cuda else "none",
    }
    try:
        from importlib.metadata import version

        out["gptqmodel"] = version("gptqmodel")
        out["marlin-demo"] = version("marlin-demo")
    except Exception:
        out.setdefault("gptqmodel", "unknown")
        out.setdefault("marlin-demo", "source checkout")
    if out["cuda"] != "none":
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


# --------------------------------------------------------------------------- calibration


@dataclass
class CalibrationPair:
    """One (video, prompt, answer) row: the answer is what Marlin should say for the prompt."""

    video: Path
    prompt: str
    answer: str
    kind: str  # "caption" | "find"


def caption_answer(scene: str, events: list[dict[str, Any]]) -> str:
    """The trained caption format: ``Scene: ...`` then ``Events:`` and ``<s - e> text`` lines."""
    lines = [f"Scene: {scene.strip()}", "", "Events:"]
    for e in events:
        lines.append(f"<{float(e['start']):.1f} - {float(e['end']):.1f}> {str(e['description']).strip()}")
    return "\n".join(lines)


def load_pairs(folder: Path, samples: int | None = None) -> list[CalibrationPair]:
    """Pairs from ``folder/examples.json`` in file order: every caption pair, then every find pair.

    Deterministic: no shuffling; ``samples`` keeps the first N.
    """
    folder = Path(folder)
    index = folder / "examples.json" if folder.is_dir() else folder
    if not index.is_file():
        raise ValueError(
            f"No calibration index at {index}: give --calibration a folder holding examples.json "
            "(a list of {video, scene, events[, queries]}) and its videos."
        )
    try:
        items = json.loads(index.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{index} is not valid JSON: {exc}") from None
    if not isinstance(items, list) or not items:
        raise ValueError(f"{index} must hold a non-empty list of clips.")
    captions: list[CalibrationPair] = []
    finds: list[CalibrationPair] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not {"video", "scene", "events"} <= set(item):
            raise ValueError(f"{index} entry {i} needs video, scene and events.")
        video = (index.parent / item["video"]).resolve()
        if not video.is_file():
            raise ValueError(f"{index} entry {i}: no video file at {video}.")
        captions.append(
            CalibrationPair(
                video, contract.CAPTION_PROMPT, caption_answer(item["scene"], item["events"]), "caption"
            )
        )
        for q in item.get("queries", []) or []:
            s, e = q["span"]
            finds.append(
                CalibrationPair(video, contract.find_prompt(q["query"]), f"From {s:.1f} to {e:.1f}.", "find")
            )
    pairs = captions + finds
    if samples is not None:
        if samples < 1:
            raise ValueError("--samples must be at least 1.")
        pairs = pairs[:samples]
    return pairs


def _turn_end(tokenizer: Any) -> str:
    vocab = tokenizer.get_vocab()
    return "<|im_end|>" if "<|im_end|>" in vocab else str(tokenizer.eos_token or "")


def encode_pair(processor: Any, pair: CalibrationPair, prepared: Any | None) -> dict[str, Any]:
    """Processor tensors for prompt + answer, by the engine's exact path (Engine.build_inputs).

    ``prepared`` None gives the text-only fallback (same text, no video).
    """
    from marlin_demo.engine import encode, render_prompt

    text = render_prompt(processor, pair.prompt, str(pair.video) if prepared is not None else None)
    enc = encode(processor, text + pair.answer + _turn_end(processor.tokenizer), prepared)
    return {k: v for k, v in dict(enc).items() if v is not None}


def build_calibration(
    processor: Any, pairs: list[CalibrationPair], mode: str = "video"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Encoded rows (batch 1, in order) plus one description row per sample for the report."""
    from marlin_demo.video import prepare

    rows, info = [], []
    cache: dict[Path, Any] = {}
    for pair in pairs:
        prepared = None
        if mode == "video":
            if pair.video not in cache:
                cache[pair.video] = prepare(pair.video, contract.VideoParams())
            prepared = cache[pair.video]
        enc = encode_pair(processor, pair, prepared)
        ids = enc["input_ids"]
        video_token_id = getattr(processor, "video_token_id", None)
        n_video = int((ids == video_token_id).sum()) if video_token_id is not None else 0
        text = processor.tokenizer.decode(ids[0])
        rows.append(enc)
        info.append(
            {
                "video": pair.video.name,
                "kind": pair.kind,
                "tokens": int(ids.shape[-1]),
                "video_tokens": n_video,
                "timestamps": len(re.findall(r"<\d+(?:\.\d+)? seconds>", text)),
                "keys": sorted(enc),
            }
        )
    return rows, info


class _VisionProbe:
    """Forward hooks proving that vision features, at M-RoPE positions, reach the decoder layers.

    On every calibration forward it records: the vision tower ran, how many rows of the
    first decoder layer's input (``inputs_embeds``) at video-token positions differ from the
    pad token's own embedding (i.e. were replaced by vision features), and whether the
    position ids are 3-axis M-RoPE ids that differ between the axes.
    """

    def __init__(self, hf_model: Any, video_token_id: int | None) -> None:
        self.model = hf_model
        self.video_token_id = video_token_id
        self.handles: list[Any] = []
        self.vision_calls = 0
        self.vision_rows = 0
        self.samples: list[dict[str, Any]] = []
        self._ids: Any = None

    def __enter__(self) -> _VisionProbe:
        core = getattr(self.model, "model", self.model)
        self.handles.append(self.model.register_forward_pre_hook(self._top, with_kwargs=True))
        if hasattr(core, "visual"):
            self.handles.append(core.visual.register_forward_hook(self._visual))
        if hasattr(core, "language_model"):
            self.handles.append(core.language_model.register_forward_pre_hook(self._lm, with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()

    def _top(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._ids = None if ids is None else ids.detach()

    def _visual(self, module: Any, args: tuple, output: Any) -> None:
        self.vision_calls += 1
        pooled = getattr(output, "pooler_output", None)
        if pooled is None and isinstance(output, tuple):
            pooled = output[0]
        if pooled is not None and hasattr(pooled, "shape"):
            self.vision_rows += int(pooled.shape[0])

    def _lm(self, module: Any, args: tuple, kwargs: dict) -> None:
        import torch

        emb = kwargs.get("inputs_embeds")
        pos = kwargs.get("position_ids")
        row: dict[str, Any] = {"seq_len": None, "video_positions": 0, "vision_rows_in_layer_input": 0}
        if emb is not None:
            row["seq_len"] = int(emb.shape[1])
        if emb is not None and self._ids is not None and self.video_token_id is not None:
            mask = self._ids.to(emb.device) == self.video_token_id
            row["video_positions"] = int(mask.sum())
            if row["video_positions"]:
                with torch.no_grad():
                    pad = module.embed_tokens(torch.tensor([self.video_token_id], device=emb.device))[0]
                    replaced = (emb[mask] != pad.to(emb.dtype)).any(-1)
                row["vision_rows_in_layer_input"] = int(replaced.sum())
        if pos is not None and pos.ndim == 3:
            row["position_axes"] = int(pos.shape[0])
            row["mrope_axes_differ"] = bool((pos[-2] != pos[-1]).any() or (pos[-3] != pos[-2]).any())
        self.samples.append(row)

    def summary(self) -> dict[str, Any]:
        return {
            "vision_tower_calls": self.vision_calls,
            "vision_feature_rows": self.vision_rows,
            "first_layer_inputs": self.samples,
            "video_rows_reaching_layers": sum(s["vision_rows_in_layer_input"] for s in self.samples),
        }


# --------------------------------------------------------------------------- artifact inspection


def _weight_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("*.safetensors") if p.name != SIDECAR)


def inspect_artifact(folder: Path) -> dict[str, Any]:
    """What the saved tensors say: GPTQ modules, int8 RTN modules, 16-bit weights (no model load)."""
    from safetensors import safe_open

    from marlin_demo.rtn import read_sidecar

    dtypes: dict[str, str] = {}
    for f in _weight_files(folder):
        with safe_open(str(f), framework="pt") as fh:
            for key in fh.keys():
                dtypes[key] = str(fh.get_slice(key).get_dtype())
    gptq = sorted({k.rsplit(".", 1)[0] for k in dtypes if k.endswith(".qweight")})
    incomplete = [m for m in gptq if not all(f"{m}.{s}" in dtypes for s in GPTQ_SUFFIXES)]
    rtn_entries = read_sidecar(Path(folder)) or {}
    rtn = sorted(rtn_entries)
    bad_rtn = [
        m for m, (q, s) in rtn_entries.items() if str(q.dtype) != "torch.int8" or s.shape != (q.shape[0],)
    ]
    float_weights = sorted(
        k[: -len(".weight")]
        for k, dt in dtypes.items()
        if k.endswith(".weight") and dt.upper() in ("BF16", "F16", "F32", "BFLOAT16", "FLOAT16", "FLOAT32")
    )
    return {
        "gptq": gptq,
        "gptq_incomplete": incomplete,
        "rtn_int8": rtn,
        "rtn_bad": bad_rtn,
        "float_weights": float_weights,
        "keys": len(dtypes),
    }


def verify_artifact(folder: Path, found: dict[str, Any] | None = None) -> list[str]:
    """Problems (empty when none): recipe.yaml must list exactly what the saved tensors quantize.

    ``found`` is a prior :func:`inspect_artifact` of ``folder``, to avoid reading it twice.
    """
    import yaml

    folder = Path(folder)
    recipe_path = folder / "recipe.yaml"
    if not recipe_path.exists():
        return [f"{recipe_path} is missing"]
    recipe = yaml.safe_load(recipe_path.read_text(encoding="utf-8"))
    if found is None:
        found = inspect_artifact(folder)
    methods = recipe.get("methods", {})
    listed_gptq = set(methods.get("gptq", {}).get("modules", []))
    listed_rtn = set(methods.get("rtn_int8", {}).get("modules", []))
    kept = set(recipe.get("kept_16bit", {}).get("modules", []))
    problems = []
    for label, listed, saved in (
        ("gptq", listed_gptq, set(found["gptq"])),
        ("rtn_int8", listed_rtn, set(found["rtn_int8"])),
    ):
        if listed - saved:
            problems.append(
                f"{label}: listed but not quantized in the saved tensors: {sorted(listed - saved)}"
            )
        if saved - listed:
            problems.append(
                f"{label}: quantized in the saved tensors but not listed: {sorted(saved - listed)}"
            )
    if found["gptq_incomplete"]:
        problems.append(f"gptq modules missing qzeros/scales/g_idx: {found['gptq_incomplete']}")
    if found["rtn_bad"]:
        problems.append(f"rtn modules not int8 + per-row scale: {found['rtn_bad']}")
    quantized = set(found["gptq"]) | set(found["rtn_int8"])
    both = quantized & set(found["float_weights"])
    if both:
        problems.append(f"quantized modules also stored 16-bit: {sorted(both)}")
    floats = set(found["float_weights"])
    if kept != floats:
        problems.append(
            "kept_16bit differs from the saved 16-bit weights: "
            f"missing {sorted(floats - kept)}, extra {sorted(kept - floats)}"
        )
    if listed_gptq & listed_rtn:
        problems.append(f"modules listed under two methods: {sorted(listed_gptq & listed_rtn)}")
    return problems


# --------------------------------------------------------------------------- writing the artifact


def _strip_weights(folder: Path, names: list[str]) -> int:
    """Drop the 16-bit ``<name>.weight`` of RTN modules from the main checkpoint: the int8 copy is the one."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    drop = {f"{n}.weight" for n in names}
    removed = 0
    for f in _weight_files(folder):
        with safe_open(str(f), framework="pt") as fh:
            keys = list(fh.keys())
            if not drop & set(keys):
                continue
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in keys if k not in drop}
        removed += len(keys) - len(tensors)
        save_file(tensors, str(f), metadata=meta)
        f.chmod(0o644)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"] = {k: v for k, v in data.get("weight_map", {}).items() if k not in drop}
        index.write_text(json.dumps(data, indent=2) + "\n")
    return removed


def _gptq_fallback(folder: Path) -> Any:
    """gptqmodel's own rule for modules that saw too few calibration tokens (from quantize_config.json)."""
    try:
        meta = json.loads((folder / "quantize_config.json").read_text()).get("meta", {})
    except (OSError, json.JSONDecodeError):
        return None
    return meta.get("fallback")


def write_recipe(
    folder: Path,
    recipe: Recipe,
    source: str,
    calibration: dict[str, Any],
    found: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """recipe.yaml from the saved tensors (so it cannot list what was not done).

    ``found`` is a prior :func:`inspect_artifact` of ``folder``, to avoid reading it twice.
    """
    import yaml

    if found is None:
        found = inspect_artifact(folder)
    methods: dict[str, Any] = {
        "gptq": {
            "tool": "gptqmodel",
            "bits": recipe.bits,
            "group_size": recipe.group_size,
            "desc_act": recipe.desc_act,
            "sym": recipe.sym,
            "format": "gptq",
            "storage": "qweight (int32-packed 4-bit), qzeros, scales (fp16), g_idx in model*.safetensors",
            "dynamic": recipe.dynamic or None,
            "gptqmodel_fallback": _gptq_fallback(folder),
            "modules": found["gptq"],
        }
    }
    if recipe.vision_rtn_int8:
        methods["rtn_int8"] = {
            "tool": "marlin_demo.rtn",
            "bits": 8,
            "granularity": "per-output-channel",
            "sym": True,
            "range": "[-127, 127], scale = max|w_row| / 127, round to nearest",
            "calibration": "none (round-to-nearest needs no Hessian)",
            "storage": f"{SIDECAR}: <module>.weight_int8 (int8, out x in) + <module>.weight_scale "
            "(float32, out); the module's 16-bit weight is removed from the main checkpoint; "
            "biases stay 16-bit there. marlin_demo.models applies it at load (RTNInt8Linear); a loader "
            "that ignores this file finds no weight for these modules and leaves them randomly initialised.",
            "modules": found["rtn_int8"],
        }
    data = {
        "recipe": recipe.name,
        "summary": recipe.summary,
        "source": source,
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "methods": methods,
        "kept_16bit": {
            "dtype": "bfloat16",
            "note": "every module below has its weight saved in 16-bit; 1-D tensors (norms, biases, A_log, "
            "dt_bias) are 16-bit too. lm_head is tied to embed_tokens when the config ties them.",
            "exceptions": recipe.exceptions,
            "modules": found["float_weights"],
        },
        "calibration": calibration,
    }
    (folder / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False, width=110), encoding="utf-8")
    return data


def _read_quant_log(model: Any, folder: Path) -> list[dict[str, Any]]:
    rows = []
    for entry in getattr(model, "quant_log", None) or []:
        rows.append({k: entry.get(k) for k in ("layer", "module", "loss", "samples", "damp", "time")})
    if not rows and (folder / "quant_log.csv").exists():
        with (folder / "quant_log.csv").open() as fh:
            rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("loss", "damp", "time"):
            with contextlib.suppress(TypeError, ValueError):
                r[k] = float(r[k])
    return rows


def _report_md(report: dict[str, Any]) -> str:
    cal = report["calibration"]
    t = report["time_s"]
    lines = [
        f"# Quantization report: {report['recipe']}",
        "",
        f"- source: `{report['source']}`",
        f"- device: {report['device']}; time {report['time_s']['total']:.1f} s "
        f"(load {report['time_s']['load']:.1f}, calibration data {report['time_s']['calibration_data']:.1f}, "
        f"gptq {t['gptq']:.1f}, rtn {t['rtn']:.1f}, save {t['save']:.1f})",
        f"- peak memory: {report['peak_memory_mb']:.0f} MB ({report['memory_kind']})",
        f"- max GPU memory: {report['max_gpu_memory']['requested']} -> {report['max_gpu_memory']['effect']}",
        f"- calibration: {cal['mode']}, {cal['samples']} samples from `{cal['source']}` "
        f"({cal['total_tokens']} tokens, {cal['total_video_tokens']} video tokens)",
    ]
    probe = cal.get("evidence") or {}
    if probe:
        lines.append(
            f"- vision reached the layers: vision tower ran {probe['vision_tower_calls']} times, "
            f"{probe['video_rows_reaching_layers']} video-token rows of the first decoder layer's input "
            "carried vision features (not the pad embedding)"
        )
    if cal.get("fallback_reason"):
        lines.append(f"- text fallback because: {cal['fallback_reason']}")
    lines += ["", f"Quantized: {report['counts']}", ""]
    log_rows = report.get("gptq_log") or []
    if log_rows:
        losses = [r["loss"] for r in log_rows if isinstance(r.get("loss"), float)]
        lines += [
            "## GPTQ per-module loss (gptqmodel)",
            "",
            f"mean {sum(losses) / max(len(losses), 1):.3g}, max {max(losses, default=0):.3g} "
            f"over {len(losses)} modules",
            "",
            "| layer | module | loss | samples |",
            "|---|---|---|---|",
        ]
        for r in log_rows:
            lines.append(f"| {r.get('layer')} | {r.get('module')} | {r.get('loss')} | {r.get('samples')} |")
        lines.append("")
    if report.get("rtn_log"):
        lines += [
            "## RTN INT8 per-module error",
            "",
            "| module | rel. error | max abs error |",
            "|---|---|---|",
        ]
        for r in report["rtn_log"]:
            lines.append(f"| {r['module']} | {r['rel_error']:.3e} | {r['max_abs_error']:.3e} |")
        lines.append("")
    lines += [
        f"Verification against the saved tensors: {'OK' if not report['problems'] else report['problems']}"
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the run


@dataclass
class Options:
    """Everything one quantization run needs (the CLI flags, resolved)."""

    model: str
    out: Path
    recipe: str
    calibration: Path = DEFAULT_CALIBRATION
    samples: int | None = None
    max_gpu_memory: str | None = "5GiB"
    device: str = "auto"
    overwrite: bool = False
    progress: bool = True
    calibration_mode: str = "video"  # "video" (falls back to text on failure) or "text"


def resolve_model(model: str) -> str:
    """'tiny' -> the offline tiny checkpoint folder; a folder stays a folder; anything else is a Hub id."""
    if model == "tiny":
        from marlin_demo.models.tiny import ensure_tiny

        return str(ensure_tiny(with_gptq=False)["bf16"])
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ValueError(f"--model {model}: the folder has no config.json, so it is not a checkpoint.")
        return str(path.resolve())
    if model.count("/") != 1 or model.startswith((".", "/")):
        raise ValueError(
            f"--model {model!r} is neither 'tiny', an existing checkpoint folder nor a Hub id (org/name)."
        )
    return model


def _device(setting: str) -> str:
    """--device auto|cpu|cuda -> "cuda" or "cpu" (models.pick_device; its error as bad input)."""
    try:
        return pick_device(setting)
    except ModelLoadError:
        raise ValueError("--device cuda but no CUDA GPU is visible: use --device cpu or auto.") from None


def _apply_gpu_cap(device: str, cap: int | None) -> dict[str, Any]:
    """Honour --max-gpu-memory on CUDA by a per-process allocator cap; record that it is inert on CPU."""
    import torch

    requested = None if cap is None else f"{cap / 2**30:.2f} GiB"
    if cap is None:
        return {"requested": None, "effect": "no cap"}
    if device != "cuda":
        return {"requested": requested, "effect": "none: quantizing on the CPU, the GPU cap does not apply"}
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = min(1.0, cap / total)
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    return {
        "requested": requested,
        "effect": f"torch.cuda.set_per_process_memory_fraction({fraction:.4f}) of {total / 2**30:.1f} GiB: "
        "allocations past the cap raise OOM instead of growing. The cap is an allocator limit: gptqmodel "
        "loads the checkpoint lazily and materializes one decoder layer at a time on the GPU, so a 2B model "
        "fits; the peak is in peak_memory_mb",
        "fraction": fraction,
    }


def _vision_rtn(model: Any, source: str, progress: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """RTN INT8 of the vision linears from the source's own 16-bit tensors.

    gptqmodel loads lazily (weights stay on the meta device until a layer is needed), so
    the weights are read from the checkpoint files, which is also exactly what was shipped.
    """
    from marlin_demo.rtn import checkpoint_weights, quantize_modules, vision_linear_names

    names = vision_linear_names(model.model)
    if not names:
        raise QuantizeError("the mixed recipe found no vision linears under model.visual")
    folder = Path(getattr(model, "model_local_path", None) or source)
    return quantize_modules(checkpoint_weights(folder, names), progress=progress)


def _peak_memory(device: str) -> tuple[float, str]:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20, "cuda_peak_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "cpu_peak_rss"


def _quantize_config(recipe: Recipe, device: str) -> Any:
    from gptqmodel import QuantizeConfig

    qkw: dict[str, Any] = {
        "bits": recipe.bits,
        "group_size": recipe.group_size,
        "desc_act": recipe.desc_act,
        "sym": recipe.sym,
        "dynamic": dict(recipe.dynamic) or None,
        # QuantizeConfig(device=...) and a load-time device/device_map together raise: only here
        "device": "cuda:0" if device == "cuda" else "cpu",
    }
    if device == "cpu":
        qkw["pack_impl"] = "original"  # avoids a one-off C++ extension build (~60 s)
    return QuantizeConfig(**qkw)


def _gptq_pass(
    source: str,
    recipe: Recipe,
    device: str,
    rows: list[dict[str, Any]],
    probe_token: int | None,
    scratch: Path,
) -> tuple[Any, _VisionProbe, float]:
    """Load the 16-bit model (lazily) with gptqmodel and run GPTQ on our rows: (model, probe, load_s)."""
    from gptqmodel import GPTQModel

    t0 = time.perf_counter()
    with contextlib.chdir(scratch), contextlib.redirect_stdout(sys.stderr):  # quantize() writes ./logs
        model = GPTQModel.load(
            source, quantize_config=_quantize_config(recipe, device), trust_remote_code=False
        )
    load_s = time.perf_counter() - t0

    def prepared_rows(**_: Any) -> list[dict[str, Any]]:
        # the rows already are processor outputs in order; gptqmodel's own text preparation
        # would keep only input_ids/attention_mask and drop pixel_values_videos, video_grid_thw
        # and mm_token_type_ids (so no vision tokens and no M-RoPE positions)
        return [dict(r) for r in rows]

    model.prepare_dataset = prepared_rows
    probe = _VisionProbe(model.model, probe_token)
    with contextlib.chdir(scratch), contextlib.redirect_stdout(sys.stderr), probe:
        model.quantize(rows, batch_size=1)
    return model, probe, load_s


def run(opts: Options) -> dict[str, Any]:
    """Quantize, write the artifact and its records, verify, return the report (report.json)."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoProcessor

    recipe = RECIPES[opts.recipe]
    out = Path(opts.out).expanduser().resolve()
    if out.exists() and any(out.iterdir()) and not opts.overwrite:
        raise ValueError(f"{out} exists and is not empty: choose a new --out or pass --overwrite.")
    cap = parse_memory(opts.max_gpu_memory)
    device = _device(opts.device)
    pairs = load_pairs(Path(opts.calibration), opts.samples)
    source = resolve_model(opts.model)

    stages = tqdm(total=5, desc="quantize", unit="stage", disable=not opts.progress, file=sys.stderr)
    times: dict[str, float] = {"load": 0.0, "calibration_data": 0.0, "gptq": 0.0, "rtn": 0.0, "save": 0.0}
    t_start = time.perf_counter()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    gpu_cap = _apply_gpu_cap(device, cap)
    gptqmodel = import_gptqmodel()

    stages.set_description("quantize: calibration data")
    t0 = time.perf_counter()
    processor = AutoProcessor.from_pretrained(source)
    mode, fallback_reason = opts.calibration_mode, None
    rows, rows_info = build_calibration(processor, pairs, mode)
    times["calibration_data"] = time.perf_counter() - t0
    stages.update()

    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    scratch = Path(tempfile.mkdtemp(prefix="marlin-quantize-"))
    video_token_id = getattr(processor, "video_token_id", None)
    try:
        stages.set_description("quantize: gptq")
        t0 = time.perf_counter()
        try:
            model, probe, times["load"] = _gptq_pass(source, recipe, device, rows, video_token_id, scratch)
        except Exception as exc:
            if mode != "video":
                raise
            # documented fallback: the same prompts and answers as text, on a freshly loaded model
            fallback_reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.warning("video calibration failed (%s): falling back to text calibration", fallback_reason)
            mode = "text"
            rows, rows_info = build_calibration(processor, pairs, mode)
            model, probe, times["load"] = _gptq_pass(source, recipe, device, rows, video_token_id, scratch)
        times["gptq"] = time.perf_counter() - t0 - times["load"]
        stages.update()

        rtn_tensors: dict[str, torch.Tensor] = {}
        rtn_rows: list[dict[str, Any]] = []
        if recipe.vision_rtn_int8:
            stages.set_description("quantize: rtn int8")
            t0 = time.perf_counter()
            rtn_tensors, rtn_rows = _vision_rtn(model, source, opts.progress)
            times["rtn"] = time.perf_counter() - t0
        stages.update()

        stages.set_description("quantize: save")
        t0 = time.perf_counter()
        with contextlib.chdir(scratch), contextlib.redirect_stdout(sys.stderr):
            model.save(str(partial))
        processor.save_pretrained(str(partial))
        if rtn_tensors:
            from marlin_demo.rtn import save_sidecar

            _strip_weights(
                partial, [k[: -len(".weight_int8")] for k in rtn_tensors if k.endswith(".weight_int8")]
            )
            save_sidecar(partial, rtn_tensors)
        times["save"] = time.perf_counter() - t0
        gptq_log = _read_quant_log(model, partial)
        stages.update()
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    stages.set_description("quantize: records")
    calibration = {
        "mode": mode,
        "source": str(Path(opts.calibration)),
        "samples": len(rows_info),
        "order": "examples.json order: caption pairs, then find pairs; the first --samples are kept",
        "path": "chat template + processor(text, videos=[frames], video_metadata, do_sample_frames=False, "
        "do_resize=False) as in Engine.build_inputs, the answer appended after the generation prompt",
        "total_tokens": sum(r["tokens"] for r in rows_info),
        "total_video_tokens": sum(r["video_tokens"] for r in rows_info),
        "fallback_reason": fallback_reason,
    }
    found = inspect_artifact(partial)
    recipe_data = write_recipe(
        partial, recipe, opts.model if opts.model == "tiny" else source, calibration, found
    )
    (partial / "versions.txt").write_text(
        "".join(f"{k}: {v}\n" for k, v in versions().items()), encoding="utf-8"
    )
    problems = verify_artifact(partial, found)
    peak, kind = _peak_memory(device)
    report = {
        "recipe": recipe.name,
        "summary": recipe.summary,
        "source": source,
        "out": str(out),
        "device": device,
        "time_s": {
            **{k: round(v, 3) for k, v in times.items()},
            "total": round(time.perf_counter() - t_start, 3),
        },
        "peak_memory_mb": round(peak, 1),
        "memory_kind": kind,
        "memory_note": "process peak RSS, which includes torch/transformers/gptqmodel themselves"
        if kind == "cpu_peak_rss"
        else "torch.cuda.max_memory_allocated over the whole run",
        "max_gpu_memory": gpu_cap,
        "calibration": {
            **calibration,
            "per_sample": rows_info,
            "evidence": probe.summary() if mode == "video" else None,
        },
        "counts": {m: len(v.get("modules", [])) for m, v in recipe_data["methods"].items()}
        | {"kept_16bit": len(recipe_data["kept_16bit"]["modules"])},
        "gptq_log": gptq_log,
        "rtn_log": rtn_rows,
        "problems": problems,
        "gptqmodel": getattr(gptqmodel, "__version__", "unknown"),
    }
    (partial / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (partial / "report.md").write_text(_report_md(report), encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    os.replace(partial, out)
    stages.update()
    stages.close()
    if problems:
        raise QuantizeError("the artifact does not match its recipe.yaml: " + "; ".join(problems))
    return report


# --------------------------------------------------------------------------- CLI


def register(subparsers: Any) -> None:
    """Add ``quantize`` to ``python -m marlin_demo`` (cli.py discovers this module)."""
    p = subparsers.add_parser(
        "quantize",
        help="build a quantized variant (GPTQ 4-bit, MLP-only, or mixed with vision INT8)",
        description="Quantize a 16-bit Marlin checkpoint into a folder the app loads as an extra variant "
        "(MARLIN_EXTRA_VARIANTS=name=DIR). See docs/QUANTIZE.md.",
    )
    p.add_argument("--model", required=True, help="16-bit checkpoint: a local folder, a Hub id, or 'tiny'")
    p.add_argument("--out", required=True, help="output folder (must be new or empty, or pass --overwrite)")
    p.add_argument("--recipe", required=True, choices=sorted(RECIPES), help="what to quantize and how")
    p.add_argument(
        "--calibration",
        default=str(DEFAULT_CALIBRATION),
        help="folder with examples.json (video, scene, events[, queries]) and its videos "
        "(default: examples/)",
    )
    p.add_argument(
        "--samples", type=int, default=None, help="use the first N calibration pairs (default: all)"
    )
    p.add_argument(
        "--max-gpu-memory", default="5GiB", help="GPU memory cap on CUDA (default 5GiB; no effect on CPU)"
    )
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="where to quantize")
    p.add_argument(
        "--calibration-mode",
        default="video",
        choices=("video", "text"),
        help="video (default): frames through the processor; "
        "text: the same prompts and answers without the video",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print report.json on stdout")
    p.set_defaults(func=cmd_quantize)


def cmd_quantize(args: argparse.Namespace) -> int:
    """CLI entry: 0 done, 2 bad input, 1 quantization failed."""
    opts = Options(
        model=args.model,
        out=Path(args.out),
        recipe=args.recipe,
        calibration=Path(args.calibration),
        samples=args.samples,
        max_gpu_memory=args.max_gpu_memory,
        device=args.device,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        calibration_mode=args.calibration_mode,
    )
    try:
        report = run(opts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (QuantizeError, RuntimeError, OSError) as exc:
        print(f"error: quantization failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        c = report["calibration"]
        print(f"{report['recipe']}: {report['out']}")
        print(f"  quantized: {report['counts']}")
        print(f"  calibration: {c['mode']}, {c['samples']} samples, {c['total_video_tokens']} video tokens")
        print(
            f"  time {report['time_s']['total']:.1f} s, "
            f"peak {report['peak_memory_mb']:.0f} MB ({report['memory_kind']})"
        )
        print(
            f"  load it: MARLIN_EXTRA_VARIANTS=q={report['out']} "
            "python -m marlin_demo caption VIDEO --variant q"
        )
    return 0
