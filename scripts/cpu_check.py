"""CPU check: Marlin-2B's full size on this CPU per variant (load, peak memory, prefill, decode).

    python scripts/cpu_check.py --out cpu_check.json                 # the real run (many minutes)
    python scripts/cpu_check.py --dry-run --out /tmp/cpu.json         # the same steps, scaled down (seconds)
    python scripts/cpu_check.py --apply-speeds cpu_check.json         # its figures into speeds.json

It reuses the GPU check's random-weight model at Marlin-2B's dimensions (``gpu_check.build_full``) and
its synthetic clip, packs a GPTQ copy with random int4 weights (``gpu_check.build_random_gptq``: quantizing 2B
parameters on a CPU is not what is measured), then runs each variant through the real ``Engine`` in a
process of its own, so each variant's peak memory is its own (a dry run: one for all): load time, peak
resident memory (of the load and of the run), the prefill rate on a short clip (vision tower included)
and the decode rate over a fixed number of tokens (random weights never stop on their own:
``min_new_tokens`` forces the count), then the first token of a longer clip. A full window's figures are
scaled from the two clips (``window_figures``); a variant that loads but cannot answer records why, in
one sentence. A small slice of the full model (one Gated DeltaNet layer and one attention layer at full
width) is timed in bf16 and float32, natively and under an AVX2-only imitation
(``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``).
The compute type follows ``MARLIN_COMPUTE_DTYPE`` (auto: bf16 only where the CPU runs it natively).
The report's ``speeds_entry`` is what ``--apply-speeds`` writes into ``service/speeds.json`` under
the CPU's key (``capacity.cpu_key``: instruction-set class and threads). Random weights: speed and
memory only, never answers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_check  # the sibling script: the full-size model, the clip, the window size

SPEEDS_FILE = gpu_check.SPEEDS_FILE
VARIANTS = ("gptq", "bnb4", "bf16")
#: the environment that makes this CPU behave like an AVX2-only one for ATen and oneDNN
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
#: what every variant's measured row must hold for the entry to be written
ROW_FIELDS = ("load_s", "peak_mb", "prefill_tokens_per_s", "decode_tokens_per_s", "prompt_tokens")


# --------------------------------------------------------------------------- one variant, one process


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Reset this process's peak resident size (VmHWM), so the next phase's peak is its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def measure_variant(
    variant: str, model_dir: Path, clip_s: float, warm_s: float, long_s: float, decode_tokens: int
) -> dict[str, Any]:
    """Load ``variant`` of the full-size checkpoint, then caption a warm-up clip, the measured clip and a
    longer one, each phase's peak memory its own.

    The measured caption generates exactly ``decode_tokens`` tokens: its first-token time is the prefill
    (frames to pixels, the vision tower, the prompt's prefill) and the rest is the decode rate. The
    longer clip's first token is the second point the window's prefill and memory are scaled from.
    """

    import torch

    from marlin_demo import model_io
    from marlin_demo import settings as settings_mod
    from marlin_demo.engine import Engine
    from marlin_demo.engine.prompt import render_prompt

    row: dict[str, Any] = {"variant": variant, "threads": torch.get_num_threads()}
    settings = settings_mod.from_env().with_(
        model=str(model_dir),
        device="cpu",
        request_timeout_s=86400.0,
        caption_max_new_tokens=decode_tokens,
        compile=False,
    )
    engine = Engine(settings, prefix_cache_size=0)
    if imitating_avx2():
        hide_avx512bf16_from_bitsandbytes()
        row["bitsandbytes_avx512bf16"] = "hidden (AVX2 imitation)"
    row["rss_start_mb"] = _status_kb("VmRSS") / 1024
    _reset_peak()
    loaded = engine.load(variant)
    row.update(loaded.describe())
    row["compute_dtype"] = getattr(loaded, "compute_dtype", str(next(loaded.model.parameters()).dtype))
    row["compute_reason"] = getattr(loaded, "compute_reason", "")
    row["load_peak_mb"] = _status_kb("VmHWM") / 1024
    row["rss_loaded_mb"] = _status_kb("VmRSS") / 1024
    loaded.model.generation_config.min_new_tokens = decode_tokens  # random weights: a fixed count
    # the first request pays one-off costs (its peak and time say little): the measured clip and a longer
    # one after it (prefill only) are the two points a full window is scaled from
    phases = (("warmup", warm_s, 2), ("clip", clip_s, decode_tokens), ("long", long_s, 2))
    for name, seconds, tokens in phases:
        clip = gpu_check.synthetic_clip(seconds, 640, 360)
        text = render_prompt(loaded.processor, model_io.CAPTION_PROMPT, str(clip.info.path))
        _, inputs = engine.build_inputs(loaded, clip, model_io.CAPTION_PROMPT, text=text)
        prompt_tokens = int(inputs["input_ids"].shape[1])
        del inputs
        engine.settings = engine.settings.with_(caption_max_new_tokens=tokens)
        loaded.model.generation_config.min_new_tokens = tokens
        _reset_peak()
        try:
            res = engine.ask("caption", clip, variant)
        except Exception as exc:  # it loads but cannot answer here: the one sentence the page will say
            row["error"] = explain_failure(exc, loaded.model)
            row["failed_in"] = name
            row["peak_mb"] = max(_peak(row), _status_kb("VmHWM") / 1024)
            print(traceback.format_exc(), file=sys.stderr)
            return row
        m = res.to_dict()["metrics"]
        part = {
            "seconds": seconds,
            "video_tokens": clip.plan.video_tokens,
            "prompt_tokens": prompt_tokens,
            "ttft_s": m["ttft_s"],
            "latency_s": m["latency_s"],
            "output_tokens": m["output_tokens"],
            "tokens_per_s": m["tokens_per_s"],
            "peak_mb": _status_kb("VmHWM") / 1024,
        }
        row[name] = part
        if name == "warmup":  # every weight has been touched (a 16-bit load maps its file lazily)
            row["rss_ready_mb"] = _status_kb("VmRSS") / 1024
        print(json.dumps({variant: {name: part}}), file=sys.stderr, flush=True)
    clip_row = row["clip"]
    row["prompt_tokens"] = clip_row["prompt_tokens"]
    row["prefill_tokens_per_s"] = clip_row["prompt_tokens"] / clip_row["ttft_s"]
    row["decode_tokens_per_s"] = clip_row["tokens_per_s"]
    row["run_peak_mb"] = clip_row["peak_mb"]
    row["peak_mb"] = _peak(row)
    return row


def _peak(row: dict[str, Any]) -> float:
    """The process's peak resident size: the highest of its phases' (each reset before it began).

    Not ``ru_maxrss``: Linux carries it over from the parent across fork and exec, so a child started by
    the process that built the model would report the builder's peak.
    """
    phases = [row[k]["peak_mb"] for k in ("warmup", "clip", "long") if k in row]
    return max([row["load_peak_mb"], *phases])


def imitating_avx2() -> bool:
    """Whether this process runs under the AVX2-only imitation (``AVX2_ENV``)."""
    return os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2"


def hide_avx512bf16_from_bitsandbytes() -> None:
    """Make bitsandbytes' own CPU check agree with the AVX2 imitation.

    bitsandbytes asks CPUID (its native library), not ATen, whether AVX512-BF16 exists, and on such a CPU
    repacks 4-bit weights for its AVX512-BF16 kernel. ``ATEN_CPU_CAPABILITY`` cannot hide that, so the
    imitation answers for it: a real AVX2-only CPU takes bitsandbytes' other path.
    """
    import bitsandbytes.functional as bf
    import bitsandbytes.nn.modules as bm

    bf.has_avx512bf16 = bm.has_avx512bf16 = lambda: False


def explain_failure(exc: BaseException, model: Any) -> str:
    """One sentence for a variant that loads but cannot answer on this CPU (what the page and CLI say).

    bitsandbytes' AVX512-BF16 CPU path repacks each 4-bit linear in blocks of 32 output features;
    Marlin-2B's Gated DeltaNet ``in_proj_a``/``in_proj_b`` have 16 (one per value head), so that path
    stops at their first forward. Anything else is named by its exception.
    """
    text = f"{type(exc).__name__}: {exc}".strip()
    if "block_n" in text:
        odd = sorted(
            {
                name.rsplit(".", 1)[-1]
                for name, module in model.named_modules()
                if type(module).__name__ == "Linear4bit" and module.out_features % 32
            }
        )
        return (
            "bitsandbytes' AVX512-BF16 kernel needs every 4-bit layer's output size to be a multiple of 32 "
            f"and Marlin-2B's {'/'.join(odd) or 'Gated DeltaNet'} layers are not (bitsandbytes "
            f"{importlib.metadata.version('bitsandbytes')})"
        )
    return text.splitlines()[0][:300]


def run_variants(
    variants: list[str], model_dir: Path, args: argparse.Namespace, work: Path, env: dict[str, str]
) -> list[dict[str, Any]]:
    """``measure_variant`` for each of ``variants`` in one fresh interpreter, in turn (a real run gives
    each variant its own, so its peak is its own); a failure is recorded, not raised."""
    out = work / f"rows-{'-'.join(variants)}.json"
    out.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--measure",
        ",".join(variants),
        "--model-dir",
        str(model_dir),
        "--clip-s",
        str(args.clip_s),
        "--warm-s",
        str(args.warm_s),
        "--long-s",
        str(args.long_s),
        "--decode-tokens",
        str(args.decode_tokens),
        "--out",
        str(out),
    ]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = round(time.perf_counter() - t, 1)
    sys.stderr.write(proc.stderr[-4000:])
    load = _load_average()
    if proc.returncode != 0 or not out.exists():
        error = _last_error(proc.stderr)
        return [{"variant": v, "wall_s": wall, "load_after": load, "error": error} for v in variants]
    return [{**row, "wall_s": wall, "load_after": load} for row in json.loads(out.read_text())]


def _last_error(stderr: str) -> str:
    """The exception line a failed child ended with (what the page and the CLI will say)."""
    lines = [x.strip() for x in stderr.strip().splitlines() if x.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[:600]
    return (lines[-1] if lines else "no output")[:600]


# --------------------------------------------------------------------------- the bf16 / float32 slice


def slice_check(text: dict[str, Any], tokens: int, seconds: float) -> dict[str, Any]:
    """One full-width Gated DeltaNet layer and one attention layer over ``tokens`` tokens, per dtype.

    The whole model in float32 is too slow to run twice; this slice shows what the compute type
    alone does at the real width (tokens/s through the two layers, the best of the repeats).
    """
    import torch

    from marlin_demo.models.kernels import import_real_kernels

    import_real_kernels()  # the same Gated DeltaNet binding as a loaded model (no fla without CUDA)
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    cfg = Qwen3_5TextConfig(
        **{**text, "num_hidden_layers": 2}, layer_types=["linear_attention", "full_attention"]
    )
    half = text["head_dim"] // 4 // 2
    cfg.rope_parameters["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    out: dict[str, Any] = {"tokens": tokens, "capability": torch.backends.cpu.get_cpu_capability()}
    layers = [mq.Qwen3_5DecoderLayer(cfg, i) for i in range(2)]
    rotary = mq.Qwen3_5TextRotaryEmbedding(cfg)
    for dtype in ("float32", "bfloat16"):
        dt = getattr(torch, dtype)
        for layer in layers:
            layer.to(dt).eval()
        x = torch.randn(1, tokens, text["hidden_size"], dtype=dt)
        pos = torch.arange(tokens).view(1, 1, -1).expand(3, 1, -1)
        emb = rotary(x, pos)
        best = float("inf")
        deadline = time.perf_counter() + seconds
        runs = 0
        with torch.inference_mode():
            for layer in layers:  # one untimed pass: one-off set-up (oneDNN primitives) is not the dtype's
                layer(x, position_embeddings=emb, attention_mask=None, position_ids=pos)
            deadline = time.perf_counter() + seconds
            while runs < 2 or (time.perf_counter() < deadline and runs < 20):
                t = time.perf_counter()
                h = x
                for layer in layers:
                    h = layer(h, position_embeddings=emb, attention_mask=None, position_ids=pos)
                    h = h[0] if isinstance(h, tuple) else h
                best = min(best, time.perf_counter() - t)
                runs += 1
        out[dtype] = {"tokens_per_s": round(tokens / best, 1), "best_s": round(best, 4), "runs": runs}
    out["bf16_vs_fp32"] = round(out["bfloat16"]["tokens_per_s"] / out["float32"]["tokens_per_s"], 3)
    out["matmul_gflops"] = matmul_gflops(seconds / 10)
    return out


def matmul_gflops(seconds: float) -> dict[str, float]:
    """Square 256 and 512 matmuls per dtype: GFLOPS over ``seconds`` each (as first measured on AVX2)."""
    import torch

    out = {}
    for n in (256, 512):
        for dtype in ("float32", "bfloat16"):
            a = torch.randn(n, n).to(getattr(torch, dtype))
            b = torch.randn(n, n).to(getattr(torch, dtype))
            for _ in range(3):
                a @ b
            runs, t = 0, time.perf_counter()
            while time.perf_counter() - t < seconds or runs < 3:
                a @ b
                runs += 1
            out[f"{n}-{dtype}"] = round(2 * n**3 * runs / (time.perf_counter() - t) / 1e9, 2)
    return out


def run_slice(args: argparse.Namespace, text: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """``slice_check`` in a fresh interpreter under ``env`` (an ISA imitation must be set before torch)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--slice", json.dumps(text)]
    cmd += ["--slice-tokens", str(args.slice_tokens), "--slice-s", str(args.slice_s)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": _last_error(proc.stderr)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the figures


def attention_share(tokens: int, text: dict[str, Any]) -> float:
    """Extra prefill work of the full-attention layers over ``tokens``, as a share of the linear work.

    The linear work per token is two flops per text weight (the embedding lookup aside); causal
    attention adds 2 * n * heads * head_dim flops per token in each full-attention layer (QK^T and AV,
    half the square each). The Gated DeltaNet layers and the vision tower (attention within a frame)
    grow linearly with the clip and scale as measured.
    """
    h, inter, d = text["hidden_size"], text["intermediate_size"], text["head_dim"]
    layers = text["num_hidden_layers"]
    full = layers // 4  # every fourth layer is full attention (gpu_check.build_full)
    q, kv = text["num_attention_heads"] * d, text["num_key_value_heads"] * d
    attn_w = h * 2 * q + 2 * h * kv + q * h  # q (with its gate), k, v, o
    lk, lv = (
        text["linear_num_key_heads"] * text["linear_key_head_dim"],
        (text["linear_num_value_heads"] * text["linear_value_head_dim"]),
    )
    linear_w = h * (2 * lk + lv) + h * lv + 2 * h * text["linear_num_value_heads"] + lv * h
    weights = layers * 3 * h * inter + full * attn_w + (layers - full) * linear_w + text["vocab_size"] * h
    return full * 2 * tokens * text["num_attention_heads"] * d / (2 * weights)


def kv_share(tokens: int, text: dict[str, Any], weight_bytes: float, dtype_bytes: int) -> float:
    """Bytes of key/value cache a decode step reads at ``tokens`` of context, over the weights' bytes."""
    full = text["num_hidden_layers"] // 4
    kv = 2 * text["num_key_value_heads"] * text["head_dim"] * dtype_bytes * tokens * full
    return kv / weight_bytes if weight_bytes > 0 else 0.0


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def window_figures(row: dict[str, Any], text: dict[str, Any], window_tokens: int) -> dict[str, Any]:
    """A full window's figures from one variant's short-clip row.

    Prefill: the window's prompt (its video tokens plus the clip's prompt text) on the line through the
    clip's and the long clip's first-token times (where it rises; else the clip's time scaled in
    proportion, which over-counts its fixed part), then grown by the full-attention layers' extra
    (``attention_share``). Decode: the measured rate slowed by the window's key/value reads
    (``kv_share``, against the loaded footprint). Memory: the loaded resident size plus the run's
    growth over it on the same kind of line (``memory_growth``), never under the load's own peak.
    """
    clip = row["clip"]
    text_tokens = clip["prompt_tokens"] - clip["video_tokens"]
    tokens = window_tokens + text_tokens
    attn = (1 + attention_share(tokens, text)) / (1 + attention_share(clip["prompt_tokens"], text))
    prefill_s = _on_line(row, "ttft_s", tokens, 0.0) * attn
    dtype_bytes = DTYPE_BYTES.get(str(row.get("compute_dtype")), 2)
    weight_bytes = float(row.get("footprint_mb", 0.0)) * 2**20
    slower = (
        1
        + kv_share(tokens, text, weight_bytes, dtype_bytes)
        - kv_share(clip["prompt_tokens"], text, weight_bytes, dtype_bytes)
    )
    base = row.get("rss_ready_mb", row["rss_loaded_mb"])
    memory = memory_growth(row, tokens)
    window_peak = max(row["load_peak_mb"], base + memory)
    return {
        "window_tokens": tokens,
        "prefill_s": round(prefill_s, 1),
        "decode_tokens_per_s": round(row["decode_tokens_per_s"] / slower, 2),
        "window_peak_mb": round(window_peak),
        "prefill_rule": "line through the clip and the long clip"
        if _on_line(row, "ttft_s", tokens, 0.0) != _on_line(row, "ttft_s", tokens, 0.0, proportional=True)
        else "the clip's time scaled with the tokens",
        "memory_rule": "line through the clip's and the long clip's growth"
        if memory != memory_growth(row, tokens, proportional=True)
        else "the clip's growth scaled with the tokens",
    }


def memory_growth(row: dict[str, Any], tokens: int, proportional: bool = False) -> float:
    """How far a request of ``tokens`` tokens grows the resident memory over the loaded model's.

    Two measured points (the clip's and the long clip's phase peaks over the loaded size, both after the
    warm-up's one-off allocations) give a line; where they do not rise with the tokens (noise) the
    clip's growth is scaled in proportion to the tokens, which over-counts its fixed part.
    """
    base = row.get("rss_ready_mb", row["rss_loaded_mb"])
    return max(0.0, _on_line(row, "peak_mb", tokens, base, proportional))


def _on_line(row: dict[str, Any], key: str, tokens: int, base: float, proportional: bool = False) -> float:
    """``row[phase][key] - base`` at ``tokens`` prompt tokens: on the line through the clip's and the long
    clip's values where it rises with the tokens, else the larger of the two scaled in proportion."""
    clip, long = row["clip"], row.get("long") or row["clip"]
    y0, y1 = clip[key] - base, long[key] - base
    n0, n1 = clip["prompt_tokens"], long["prompt_tokens"]
    if not proportional and n1 > n0 and y1 > y0 >= 0:
        return y0 + (y1 - y0) / (n1 - n0) * (tokens - n0)
    return max(0.0, y0 * tokens / n0, y1 * tokens / n1)


def cpu_facts() -> dict[str, Any]:
    """The processor, its flags class and the threads torch uses (what the entry is keyed by)."""
    import torch

    from marlin_demo.models import compute
    from marlin_demo.service import capacity

    caps = compute.probe()
    return {
        "model": compute.cpu_name(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "capability": caps.describe(),
        "isa": capacity.cpu_isa(caps),
        "key": capacity.cpu_key(capacity.cpu_isa(caps), torch.get_num_threads()),
        "memory_mb": capacity.total_memory_mb(),
        "compute_dtype_setting": os.environ.get("MARLIN_COMPUTE_DTYPE", "auto"),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", ""),
    }


def speeds_entry(report: dict[str, Any]) -> dict[str, Any] | None:
    """What speeds.json takes from this run; None when no variant was measured.

    Per variant: load time, peak memory (measured, and a full window's), prefill and decode rates and
    the window's prefill time, or the error that stopped it. The entry's own decode rate and prefill
    are the slowest of the variants that ran (the limits must hold whichever a visitor picks). Video
    preparation and the per-call overhead are not measured here: ``apply_speeds`` keeps the recorded
    CPU figures for them.
    """
    rows = report.get("variants", [])
    ran = [r for r in rows if "error" not in r and all(r.get(k) for k in ROW_FIELDS)]
    if not ran:
        return None
    per: dict[str, Any] = {}
    for r in rows:
        if r in ran:
            w = r["window"]
            per[r["variant"]] = {
                "compute_dtype": r["compute_dtype"],
                "kernel": r.get("kernel", ""),
                "load_s": round(r["load_s"], 1),
                "peak_mb": round(r["peak_mb"]),
                "window_peak_mb": w["window_peak_mb"],
                "prefill_tokens_per_s": round(r["prefill_tokens_per_s"], 1),
                "decode_tokens_per_s": round(r["decode_tokens_per_s"], 2),
                "prefill_s": w["prefill_s"],
                "window_decode_tokens_per_s": w["decode_tokens_per_s"],
            }
        else:
            per[r["variant"]] = {"error": r.get("error") or "not measured"}
    decode = min(per[r["variant"]]["window_decode_tokens_per_s"] for r in ran)
    prefill = max(per[r["variant"]]["prefill_s"] for r in ran)
    cpu = report["cpu"]
    largest = report["window_video_tokens"]
    return {
        "decode_tokens_per_s": decode,
        "prefill_s": prefill,
        "isa": cpu["isa"],
        "threads": cpu["threads"],
        "variants": per,
        "source": (
            f"scripts/cpu_check.py on {cpu['model']} ({cpu['capability']}; {cpu['threads']} threads, "
            f"{report['date']}, full-size random weights, {report['clip']['seconds']:g} s clip of "
            f"{report['clip']['video_tokens']:,} video tokens scaled to the largest window's {largest:,}; "
            f"load average {report['load_before']} before, {report['load_after']} after): slowest decode "
            f"{decode:g} tok/s and longest prefill {prefill:g} s over {len(ran)} variants"
        ),
    }


def apply_speeds(report_path: Path, speeds_file: Path = SPEEDS_FILE) -> tuple[str, dict[str, Any]]:
    """Write a real run's figures into speeds.json under the CPU's key; returns (key, entry).

    Video preparation and the per-call overhead (not measured here) keep the entry's recorded values,
    or the tiny stand-in's CPU ones for a new entry (the same CPU work: decoding and parsing).
    """
    report = json.loads(report_path.read_text())
    if report.get("dry_run") or report.get("check") != "cpu":
        raise ValueError(
            f"{report_path} is not a real CPU run's report (a dry run's figures are not speeds)."
        )
    entry = report.get("speeds_entry") or speeds_entry(report)
    if not entry:
        raise ValueError(f"{report_path} has no variant that was measured.")
    key = report["cpu"]["key"]
    table = json.loads(speeds_file.read_text())
    tiny = table.get("cpu-tiny", {})
    kept = {k: table.get(key, {}).get(k, tiny.get(k)) for k in ("prepare_s", "overhead_s")}
    table[key] = {**table.get(key, {}), **{k: v for k, v in kept.items() if v is not None}, **entry}
    speeds_file.write_text(json.dumps(table, indent=2, ensure_ascii=False) + "\n")
    return key, table[key]


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default="cpu_check.json")
    parser.add_argument("--dry-run", action="store_true", help="scaled-down model: checks the steps")
    parser.add_argument("--work", default=None, help="scratch folder, reused (default: a temp dir)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--clip-s", type=float, default=None, help="measured clip (default 4, dry run 2)")
    parser.add_argument("--warm-s", type=float, default=1.0, help="warm-up clip before it")
    parser.add_argument("--long-s", type=float, default=None, help="longer clip after it (10, dry 4)")
    parser.add_argument("--decode-tokens", type=int, default=None, help="decoded tokens (default 16, dry 4)")
    parser.add_argument(
        "--slice-tokens", type=int, default=None, help="tokens through the slice (512, dry 64)"
    )
    parser.add_argument("--slice-s", type=float, default=None, help="seconds per dtype in the slice")
    parser.add_argument("--no-avx2-slice", action="store_true", help="skip the AVX2-imitation slice")
    parser.add_argument(
        "--apply-speeds", metavar="REPORT", help="write a real run's figures into speeds.json"
    )
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a child: variants, comma-separated
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--slice", help=argparse.SUPPRESS)  # a child: the slice, dims as JSON
    args = parser.parse_args(argv)
    if args.apply_speeds:
        try:
            key, entry = apply_speeds(Path(args.apply_speeds))
        except FileNotFoundError:
            print(f"error: no report at {args.apply_speeds}.", file=sys.stderr)
            return 2
        except (OSError, ValueError, KeyError) as exc:  # a JSON decode error is a ValueError
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({key: entry}, indent=2))
        return 0
    dry = args.dry_run
    args.clip_s = args.clip_s or (2.0 if dry else 4.0)
    args.long_s = args.long_s or (4.0 if dry else 10.0)
    args.decode_tokens = args.decode_tokens or (4 if dry else 16)
    args.slice_tokens = args.slice_tokens or (64 if dry else 512)
    args.slice_s = args.slice_s or (0.5 if dry else 10.0)
    if args.slice:
        print(json.dumps(slice_check(json.loads(args.slice), args.slice_tokens, args.slice_s)))
        return 0
    if args.measure:
        phases = (args.clip_s, args.warm_s, args.long_s, args.decode_tokens)
        rows = []
        for variant in args.measure.split(","):
            try:  # one variant failing to load is its own row's error, not the others'
                with contextlib.redirect_stdout(sys.stderr):
                    rows.append(measure_variant(variant, Path(args.model_dir), *phases))
            except Exception:
                trace = traceback.format_exc()
                print(trace, file=sys.stderr)
                rows.append({"variant": variant, "error": _last_error(trace)})
        Path(args.out).write_text(json.dumps(rows, indent=2))
        return 0
    return run_check(args)


def run_check(args: argparse.Namespace) -> int:
    """Build (or reuse) the full-size checkpoints, then each variant in a fresh process, the native
    slice here and the AVX2 one in a fresh process."""
    from marlin_demo.models.tiny import ensure_tiny

    dry = args.dry_run
    work = Path(args.work or tempfile.mkdtemp(prefix="cpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MARLIN_CACHE_DIR", str(work / "cache"))
    if dry:  # the tiny checkpoint's dimensions (``gpu_check.dry_dims``)
        text, vision = gpu_check.dry_dims(
            ensure_tiny(Path(os.environ["MARLIN_CACHE_DIR"]), with_gptq=False)["bf16"]
        )
    else:
        text, vision = gpu_check.FULL_TEXT, gpu_check.FULL_VISION
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "check": "cpu",
        "dry_run": dry,
        "date": time.strftime("%Y-%m-%d"),
        "versions": gpu_check.versions(),
        "cpu": cpu_facts(),
        "load_before": _load_average(),
        "dims": {"text": text, "vision": vision},
        "window_video_tokens": gpu_check.largest_window_tokens(),
        "steps": {},
    }
    report["command"] = "python scripts/cpu_check.py " + " ".join(
        sys.argv[1:] if __name__ == "__main__" else []
    )

    def save() -> None:
        report["total_s"] = round(time.perf_counter() - t0, 1)
        Path(args.out).write_text(json.dumps(report, indent=2))

    clip = gpu_check.synthetic_clip(args.clip_s, 640, 360)
    report["clip"] = {
        "seconds": args.clip_s,
        "frames": clip.plan.nframes,
        "video_tokens": clip.plan.video_tokens,
    }
    full, gptq = work / "full", work / "full" / "gptq"
    stamp = gpu_check.full_stamp(text, vision, "random")
    with contextlib.redirect_stdout(sys.stderr):
        if not gpu_check.reusable(full, stamp):
            t = time.perf_counter()
            paths = ensure_tiny(Path(os.environ["MARLIN_CACHE_DIR"]), with_gptq=False)
            gpu_check.build_full(paths["bf16"], full, text, vision, "cpu")
            report["steps"]["full_build_s"] = round(time.perf_counter() - t, 1)
            t = time.perf_counter()
            report["gptq"] = gpu_check.build_random_gptq(full, gptq)
            report["steps"]["gptq_pack_s"] = round(time.perf_counter() - t, 1)
            (full / ".dims").write_text(stamp)
        else:
            report["gptq"] = {"reused": str(gptq)}
    report["full_params"] = int((full / "params.txt").read_text())
    save()
    env = dict(os.environ)
    report["variants"] = []
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    # a real run measures each variant in its own process; a dry run, whose figures are not kept, all
    # in one (each process pays ~8 s of imports first)
    for group in [variants] if dry else [[v] for v in variants]:
        for row in run_variants(group, full, args, work, env):
            if "error" not in row:
                row["window"] = window_figures(row, text, report["window_video_tokens"])
            report["variants"].append(row)
        save()
    try:  # here: this process's instruction set is the machine's own
        with contextlib.redirect_stdout(sys.stderr):
            report["slice"] = {"native": slice_check(text, args.slice_tokens, args.slice_s)}
    except Exception:  # recorded like a child's failure, in the same one line; the rest of the report stands
        report["slice"] = {"native": {"error": _last_error(traceback.format_exc())}}
    if not args.no_avx2_slice:
        report["slice"]["avx2"] = run_slice(args, text, {**env, **AVX2_ENV})
    report["load_after"] = _load_average()
    report["speeds_entry"] = speeds_entry(report)
    save()
    print(json.dumps({"out": args.out, "total_s": report["total_s"], "speeds_entry": report["speeds_entry"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
