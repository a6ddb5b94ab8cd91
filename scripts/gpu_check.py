"""Prepared GPU check: every variant's real CUDA path on a full-size random model, one command.

No network on the GPU machine (wheels: scripts/gpu_wheels.sh, docs/GPU_CHECK.md):

    python scripts/gpu_check.py --out gpu_check.json            # on a CUDA machine
    python scripts/gpu_check.py --dry-run --out /tmp/check.json  # the same steps on the CPU, scaled down
    python scripts/gpu_check.py --apply-speeds gpu_check.json    # back here: its figures into speeds.json

It builds the tiny checkpoint (for its tokenizer and processor), a random-weight model with
Marlin-2B's dimensions (Qwen3.5-2B layout: 24 layers, hidden 2048, a 0.33B vision tower,
248,320-token vocabulary) and its GPTQ copy, then measures rows of (variant, GPTQ kernel,
fla linear-attention kernels on/off, compiled decoding on/off) on a synthetic 60 s clip:
load time, compile time, TTFT, decode tokens/s, caption and find latency, peak allocated
memory, and the kernels that ran. The goal rows run first, no row starts after
``--budget-s``, and the JSON is rewritten after every row, so a cut run still reports.
A row that fails records its error and the check goes on. The report ends with the figures the
app's limits are derived from (``speeds_entry``); ``--apply-speeds`` writes them into
``marlin_demo/service/speeds.json``.
Random weights: the figures are about speed and memory, never about answers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import platform
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marlin_demo.video import largest_window_tokens, synthetic_clip

#: the table the app's limits are derived from (service/capacity.py)
SPEEDS_FILE = Path(__file__).resolve().parents[1] / "marlin_demo" / "service" / "speeds.json"

# Marlin-2B / Qwen3.5-2B layout (2.21B parameters: text 1.88B incl. the 0.51B tied embedding, vision 0.33B)
FULL_TEXT = {
    "vocab_size": 248320,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 24,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
}
FULL_VISION = {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16}


def dry_dims(tiny_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dry run's dimensions: the built tiny checkpoint's own, keyed as the full ones. Its compiled row
    then compiles the graph the tiny's compile tests compile, and inductor's cache serves whichever
    comes second (~30 s of C++ builds on two cores)."""
    config = json.loads((tiny_dir / "config.json").read_text())
    text = {key: config["text_config"][key] for key in FULL_TEXT}
    vision = {key: config["vision_config"][key] for key in FULL_VISION}
    return text, vision


def versions() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in (
        "torch",
        "transformers",
        "gptqmodel",
        "bitsandbytes",
        "accelerate",
        "flash-linear-attention",
        "fla-core",
        "einops",
        "triton",
        "causal-conv1d",
        "torchcodec",
        "av",
    ):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    out["cuda"] = torch.version.cuda
    out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return out


def build_full(tiny_dir: Path, out: Path, text: dict, vision: dict, device: str) -> Path:
    """Random-weight checkpoint of Marlin's size, with the tiny tokenizer and processor."""
    import torch

    from marlin_demo.models.kernels import import_real_kernels
    from marlin_demo.models.tiny import tiny_config

    import_real_kernels()  # before the model class: its import binds the Gated DeltaNet kernels
    from transformers import AutoProcessor, Qwen3_5ForConditionalGeneration

    processor = AutoProcessor.from_pretrained(tiny_dir)
    config = tiny_config(processor.tokenizer)
    for key, value in text.items():
        setattr(config.text_config, key, value)
    n = text["num_hidden_layers"]  # every 4th layer full attention, and the last (dry run: 1 of each)
    config.text_config.layer_types = [
        "full_attention" if (i + 1) % 4 == 0 or i == n - 1 else "linear_attention" for i in range(n)
    ]
    half = text["head_dim"] // 4 // 2  # partial_rotary_factor 0.25
    config.text_config.rope_parameters["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]
    for key, value in vision.items():
        setattr(config.vision_config, key, value)
    config.vision_config.out_hidden_size = text["hidden_size"]
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3_5ForConditionalGeneration(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    (out / "params.txt").write_text(f"{n}\n")
    return out


def full_stamp(text: dict, vision: dict, gptq: str) -> str:
    """What a full-size build in a --work folder was made of: its dimensions and how its GPTQ copy was made
    (``random`` or ``quantized``). Kept in ``<full>/.dims`` once the build is complete."""
    return json.dumps({"text": text, "vision": vision, "gptq": gptq}, sort_keys=True)


def reusable(full: Path, stamp: str) -> bool:
    """True when ``full`` holds a complete build of ``stamp`` (the GPU and CPU checks reuse it across runs
    over the same --work); otherwise ``full`` is cleared for a new build."""
    if (full / ".dims").exists() and (full / ".dims").read_text() == stamp:
        return True
    shutil.rmtree(full, ignore_errors=True)
    return False


# --------------------------------------------------------------------------- the random GPTQ copy

GROUP = 128  # the seed GPTQ card: 4 bit, group 128, desc_act, sym


def gptq_targets(model_dir: Path) -> list[str]:
    """The linear modules GPTQModel quantizes in this checkpoint (its own Qwen3.5 definition).

    Read from gptqmodel's ``module_tree`` for the architecture: ``name:!`` entries (norms, conv1d,
    the Gated DeltaNet ``in_proj_a/b``) stay 16-bit, as they do when gptqmodel quantizes; so do the
    vision tower, the embeddings and lm_head (outside the layer tree).
    """
    from marlin_demo.models.kernels import import_gptqmodel

    import_gptqmodel()
    from gptqmodel.models.definitions.qwen3_5 import Qwen3_5QModel
    from safetensors import safe_open

    tree = Qwen3_5QModel.module_tree
    prefix = ".".join(tree[: tree.index("#")])
    suffixes = [
        f"{block}.{entry.split(':')[0]}"
        for block, entries in tree[tree.index("#") + 1].items()
        for entry in entries
        if ":!" not in entry
    ]
    names: set[str] = set()
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as fh:
            names.update(fh.keys())
    out = []
    for key in sorted(names):
        if not key.startswith(prefix + ".") or not key.endswith(".weight"):
            continue
        rest = key[len(prefix) + 1 : -len(".weight")]
        if rest.split(".", 1)[-1] in suffixes:
            out.append(key[: -len(".weight")])
    return out


def pack_random_gptq(weight_shape: tuple[int, int], seed: int) -> dict[str, Any]:
    """One linear's GPTQ v1 tensors with random int4 codes (4 bit, group 128, desc_act, sym).

    v1 stores each zero point minus one (8 -> 7); desc_act orders the input columns by a permutation,
    so ``g_idx`` (each column's group) is a shuffled, not a sorted, sequence, as in a real desc_act
    checkpoint. The scales give weights of about the 0.02 spread of the random 16-bit model.
    """
    import torch

    out_f, in_f = weight_shape
    if in_f % GROUP or out_f % 8:
        raise ValueError(f"a {out_f}x{in_f} linear does not pack into group {GROUP} int4")
    gen = torch.Generator().manual_seed(seed)
    qweight = torch.randint(-(2**31), 2**31 - 1, (in_f // 8, out_f), generator=gen, dtype=torch.int32)
    qzeros = torch.full((in_f // GROUP, out_f // 8), 0x77777777, dtype=torch.int32)
    scales = (0.0045 * (0.5 + torch.rand(in_f // GROUP, out_f, generator=gen))).to(torch.float16)
    perm = torch.randperm(in_f, generator=gen)
    g_idx = torch.empty(in_f, dtype=torch.int32)
    g_idx[perm] = (torch.arange(in_f) // GROUP).to(torch.int32)
    return {"qweight": qweight, "qzeros": qzeros, "scales": scales, "g_idx": g_idx}


def quantize_config() -> dict[str, Any]:
    """The seed card's recipe as GPTQModel writes it for the v1 (``gptq``) checkpoint format."""
    return {
        "bits": 4,
        "group_size": GROUP,
        "desc_act": True,
        "sym": True,
        "lm_head": False,
        "quant_method": "gptq",
        "checkpoint_format": "gptq",
        "pack_dtype": "int32",
        "meta": {"quantizer": ["scripts/gpu_check.py random int4 packing"]},
    }


def build_random_gptq(src: Path, out: Path) -> dict[str, Any]:
    """A GPTQ checkpoint of ``src`` whose quantized linears hold random int4 codes; the rest copied."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    targets = set(gptq_targets(src))
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "params.txt":
            shutil.copy(f, out / f.name)
    weight_map: dict[str, str] = {}
    n_q = 0
    for f in sorted(src.glob("*.safetensors")):
        tensors: dict[str, Any] = {}
        with safe_open(str(f), framework="pt") as fh:
            meta = fh.metadata() or {"format": "pt"}
            for key in fh.keys():
                module = key.removesuffix(".weight")
                if key.endswith(".weight") and module in targets:
                    shape = tuple(fh.get_slice(key).get_shape())
                    packed = pack_random_gptq((int(shape[0]), int(shape[1])), seed=n_q)
                    n_q += 1
                    tensors.update({f"{module}.{name}": t for name, t in packed.items()})
                else:
                    tensors[key] = fh.get_tensor(key)
        save_file(tensors, str(out / f.name), metadata=meta)
        weight_map.update(dict.fromkeys(tensors, f.name))
        del tensors
    index = out / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"] = weight_map
        index.write_text(json.dumps(data, indent=2) + "\n")
    qcfg = quantize_config()
    (out / "quantize_config.json").write_text(json.dumps(qcfg, indent=2) + "\n")
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"] = qcfg
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    del torch
    return {
        "quantized_linears": n_q,
        "kept_16bit": "vision tower, embeddings, lm_head, norms, in_proj_a/b, conv1d",
    }


def build_once(
    full: Path, tiny: Path, text: dict, vision: dict, device: str, random_gptq: bool, steps: dict, save: Any
) -> None:
    """The full-size model and its GPTQ copy in ``full``, unless a pass before this one over the same --work
    built the same (the Space's rows, then the others: a lease pays the build once)."""
    from marlin_demo.models.tiny import build_tiny_gptq

    stamp = full_stamp(text, vision, "random" if random_gptq else "quantized")
    steps["full_reused"] = reusable(full, stamp)
    if steps["full_reused"]:
        return
    t = time.perf_counter()
    build_full(tiny, full, text, vision, device)
    steps["full_build_s"] = round(time.perf_counter() - t, 2)
    save()
    t = time.perf_counter()
    try:
        if random_gptq:  # seconds instead of minutes: a short lease measures speed, not answers
            steps["full_gptq"] = build_random_gptq(full, full / "gptq")
        else:
            build_tiny_gptq(full, full / "gptq", device=device, samples=8)
        steps["full_gptq_s"] = round(time.perf_counter() - t, 2)
        (full / ".dims").write_text(stamp)
    except Exception as exc:
        steps["full_gptq_error"] = f"{type(exc).__name__}: {exc}"[:800]


#: what the --zero-gpu rows' figures are, said beside them in the report
ZERO_GPU_NOTE = (
    "The Space's kernels as ZeroGPU would pick them (no torch.compile; GPTQ without nvcc: auto is "
    "Triton, then torch), decoding in CUDA graphs as the Space does, measured on this machine's GPU (an "
    "H200 when the GPU check is lent one), not on the Space's card (half an RTX Pro 6000 Blackwell). "
    "Triton's cache starts empty: *_first_latency_s minus latency_s is the first launch's JIT compile; the "
    "warm_up row is the Space's start-up call, then a visitor's first call, each in a fresh process."
)

#: the variants the warm-up row warms, as the Space offers them (the dry run: one, to keep it short)
SPACE_VARIANTS = ("gptq", "bnb4", "bf16")


def plan_rows(
    device: str, backends: list[str], fla: bool, dry_run: bool, zero_gpu: bool = False
) -> list[dict[str, Any]]:
    """The rows to measure, most telling first (a run cut by its budget still has the goal rows).

    Each row is (variant, GPTQ kernel, fla kernels on/off, decoding: graphs, eager or compiled). fla rows
    exist only on CUDA with fla importable; the dry run keeps one compiled row (bf16) so the compile path
    is exercised without paying a CPU compile per variant. ``zero_gpu``: only what the Space runs there
    (GPTQ ``auto`` as ZeroGPU resolves it, and ``gptq_torch``, its fallback; bnb4 and bf16), decoding in
    CUDA graphs, each compared with eager decoding; then the start-up call's row (``warm_up``).
    """
    gptq = [("gptq", b) for b in backends]
    eager_fla = [("bf16", "auto"), ("bnb4", "auto"), *gptq]
    rows: list[dict[str, Any]] = []

    def add(pairs: list[tuple[str, str]], with_fla: bool, decode: str) -> None:
        for variant, backend in pairs:
            rows.append(
                {
                    "variant": variant,
                    "gptq_backend": backend,
                    "fla": with_fla,
                    "compile": decode == "compiled",
                    "decode": decode,
                }
            )

    if zero_gpu:
        space = [("gptq", "auto"), ("gptq", "gptq_torch"), ("bnb4", "auto"), ("bf16", "auto")]
        add(space[:1] if dry_run else space, fla, "graphs")
        rows[0]["long_caption"] = 8 if dry_run else 768  # the 768-token caption goal, on the Space's path
        for row in rows:
            row["zero_gpu"] = True
        variants = SPACE_VARIANTS[-1:] if dry_run else SPACE_VARIANTS
        rows.append({"warm_up": True, "variants": list(variants), "fla": fla, "zero_gpu": True})
        return rows

    if dry_run or device != "cuda":
        add(eager_fla, False, "eager")
        add([("bf16", "auto")], False, "compiled")
        rows[-1]["long_caption"] = 8  # the long-caption step, scaled down
        return rows
    use_fla = fla
    add(gptq[:1], use_fla, "graphs")  # the Marlin kernel (nvcc, off ZeroGPU) in CUDA graphs
    rows[0]["long_caption"] = 768  # the 768-token caption goal
    add([*gptq[:1], ("bnb4", "auto"), ("bf16", "auto")], use_fla, "compiled")
    add(eager_fla, use_fla, "eager")
    add(gptq[1:], use_fla, "compiled")
    if use_fla:  # the same without the linear-attention kernels: what fla buys
        add(eager_fla, False, "eager")
        add([*gptq[:1], ("bf16", "auto")], False, "compiled")
    return rows


def row_key(spec: dict[str, Any], label: str, caption_tokens: int) -> str:
    """A planned row's identity across commands over the same --work (what was done is not measured again)."""
    return json.dumps({"model": label, "caption_tokens": caption_tokens, **spec}, sort_keys=True)


def speeds_entry(report: dict[str, Any]) -> dict[str, Any] | None:
    """The figures speeds.json takes from this run; None when no row measured both tasks.

    The slowest eager decode rate of any row (the limits must hold whichever kernels load, and a variant
    that cannot capture decodes eagerly; a graphs row's eager comparison counts), the longest first-token
    time, scaled linearly from the clip's video tokens to the largest window's, and, when graphs rows ran,
    their slowest rate and longest capture (what a call sized for graphs asks for). Video preparation and
    the per-call overhead are not measured here: they keep their recorded values.
    """
    rows = [r for r in report.get("full", []) if "caption" in r and "find" in r]
    graph_rows = [r for r in rows if r.get("decode_ran") == "graphs"]
    rates = [r[t]["tokens_per_s"] for r in rows if r not in graph_rows for t in ("caption", "find")]
    rates += [r["identity"]["eager_tokens_per_s"] for r in graph_rows if r.get("identity")]
    rates = [x for x in rates if x]
    firsts = [r[t]["ttft_s"] for r in rows for t in ("caption", "find") if r[t].get("ttft_s") is not None]
    if not rates or not firsts:
        return None
    clip, largest = report["clip"]["video_tokens"], largest_window_tokens()
    decode, first = min(rates), max(firsts)
    where = report["versions"].get("gpu") or report["device"]
    entry: dict[str, Any] = {
        "decode_tokens_per_s": round(decode, 1),
        "prefill_s": round(first * largest / clip, 1),
        "source": (
            f"scripts/gpu_check.py on {where} ({time.strftime('%Y-%m-%d')}, full-size random weights): "
            f"slowest eager decode {decode:.1f} tok/s over {len(rows)} rows; first token at most "
            f"{first:.2f} s for {clip:,} video tokens, scaled to the largest window's {largest:,}"
        ),
    }
    graph_rates = [
        r[t]["tokens_per_s"] for r in graph_rows for t in ("caption", "find") if r[t]["tokens_per_s"]
    ]
    if graph_rates:
        entry["graphs_decode_tokens_per_s"] = round(min(graph_rates), 1)
        entry["graphs_capture_s"] = round(max(r.get("capture_s", 0.0) for r in graph_rows), 2)
        entry["source"] += (
            f"; in CUDA graphs: slowest {min(graph_rates):.1f} tok/s over {len(graph_rows)} rows, capture at "
            f"most {entry['graphs_capture_s']:.2f} s"
        )
    return entry


def apply_speeds(report_path: Path, key: str = "h200", speeds_file: Path = SPEEDS_FILE) -> dict[str, Any]:
    """Write a GPU run's figures into speeds.json under ``key`` (its other figures kept)."""
    report = json.loads(report_path.read_text())
    if report.get("dry_run") or report.get("device") != "cuda":
        raise ValueError(f"{report_path} is a CPU dry run, not a GPU's figures: apply a CUDA run's report.")
    entry = speeds_entry(report)
    if entry is None:
        raise ValueError(f"{report_path} has no row that measured both caption and find.")
    table = json.loads(speeds_file.read_text())
    table[key] = {**table.get(key, {}), **entry}
    speeds_file.write_text(json.dumps(table, indent=2, ensure_ascii=False) + "\n")
    return table[key]


def set_fla(on: bool) -> str:
    """Turn the fla-bound Gated DeltaNet ops on or off for the next load (returns what is bound)."""
    import importlib

    from marlin_demo.models.kernels import FLA_OPS, QWEN35_MODELING, bind_linear_kernels, import_real_kernels

    import_real_kernels()
    module = importlib.import_module(QWEN35_MODELING)
    saved = module.__dict__.setdefault("_gpu_check_fla", {})
    for name in FLA_OPS:
        fn = getattr(module, name)
        if getattr(fn, "cuda_kernel", None) and name not in saved:
            saved[name] = fn
        if on and name in saved:
            setattr(module, name, saved[name])
        elif not on and name in saved:
            setattr(module, name, inspect.unwrap(saved[name]))  # transformers' PyTorch op
    bind_linear_kernels(module)
    return ",".join(f"{n}:{'fla' if on and n in saved else 'torch'}" for n in FLA_OPS)


QUERY = "the square crosses the frame"


@dataclass
class Pass:
    """One set of rows on one model: where they run, and what a row needs beyond its spec."""

    label: str
    settings: Any
    clip: Any
    caption_tokens: int
    save: Any
    deadline: float
    work: Path
    progress: Path  # rows measured by an earlier command over the same --work (cleared with a rebuild)


def run_rows(run: Pass, rows_plan: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """Each planned row on a fresh engine (the warm-up row in fresh processes); the report is saved after
    every row, and a row an earlier command over the same --work measured is taken from it, not re-run."""
    import torch

    done = json.loads(run.progress.read_text()) if run.progress.exists() else {}
    for spec in rows_plan:
        key = row_key(spec, run.label, run.caption_tokens)
        if key in done:
            rows.append({**done[key], "resumed": True})
            run.save()
            continue
        row: dict[str, Any] = {"model": run.label, **spec}
        if time.perf_counter() > run.deadline:
            row["skipped"] = "time budget spent"
            rows.append(row)
            run.save()
            continue
        try:
            if spec.get("warm_up"):
                warm_up_row(run, spec, row)
            else:
                measure_row(run, spec, row)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:800]
            row["trace"] = traceback.format_exc()[-1500:]
        torch._dynamo.reset()  # every row compiles its own model: no stale graphs, no recompile limit
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        rows.append(row)
        if "error" not in row:
            done[key] = row
            run.progress.write_text(json.dumps(done))
        run.save()
        print(json.dumps(row)[:600], file=sys.stderr, flush=True)


def measure_row(run: Pass, spec: dict[str, Any], row: dict[str, Any]) -> None:
    """One (variant, kernel, fla, decoding) row: each task once to warm up (its JIT compiles and captures),
    then measured; a graphs row also compares its tokens with eager decoding's on the same engine."""
    from marlin_demo.engine import Engine

    set_fla(spec["fla"])
    # no prefix reuse: the measured request must be as cold as the warm-up, bar the model load
    engine = Engine(
        run.settings.with_(
            caption_max_new_tokens=run.caption_tokens,
            gptq_backend=spec["gptq_backend"],
            compile=spec["compile"],
            decode="eager" if spec["decode"] == "compiled" else spec["decode"],
        ),
        prefix_cache_size=0,
    )
    variant = spec["variant"]
    try:
        row.update(engine.load(variant).describe())
        for task in ("caption", "find"):
            with compiles(row, task):
                first = engine.ask(task, run.clip, variant, query=QUERY)  # warm-up: JIT compiles, captures
            with compiles(row, task):
                res = engine.ask(task, run.clip, variant, query=QUERY)
            row[task] = res.to_dict()["metrics"] | {"raw_chars": len(res.raw)}
            row[f"{task}_first_latency_s"] = first.metrics.latency_s  # JIT compiles included
            row["compile_state"] = res.info.compile
            row["compile_s"] = round(res.info.compile_s, 2)
            row["decode_ran"], row["decode_note"] = res.info.decode, res.info.decode_note
            row["capture_s"] = round(max(row.get("capture_s", 0.0), first.info.capture_s), 3)
            # per call: decode steps that replayed the captured step, of the tokens after the prefill's first
            row.setdefault("replayed", {})[task] = [_replayed(first), _replayed(res)]
        if spec.get("long_caption"):  # same engine and cache size bucket: nothing compiles again
            engine.settings = engine.settings.with_(caption_max_new_tokens=spec["long_caption"])
            res = engine.ask("caption", run.clip, variant)
            row["caption_long"] = res.to_dict()["metrics"] | {"raw_chars": len(res.raw)}
            row["replayed"]["caption_long"] = [_replayed(res)]
            row["compile_s"] = round(res.info.compile_s, 2)
        if spec["decode"] == "graphs":
            row["identity"] = identity(engine, run.clip, variant, run.caption_tokens)
            row["check"] = start_up_check(engine, run.clip, variant)
        if variant == "bnb4":
            row["bitsandbytes"] = bnb_kernels(engine, run.clip, variant)
    finally:
        engine.unload(variant)


@contextlib.contextmanager
def compiles(row: dict[str, Any], key: str) -> Any:
    """Dynamo's compiles during one call, appended to ``row["dynamo_compiles"][key]`` (on the Space's path:
    0, its stance is force_eager; compiled rows: their graphs)."""
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    try:
        yield
    finally:
        row.setdefault("dynamo_compiles", {}).setdefault(key, []).append(
            counters["stats"]["unique_graphs"] - before
        )


def start_up_check(engine: Any, clip: Any, variant: str) -> dict[str, Any]:
    """The start-up call's check of this row's captured step (``warmup.warm``: replayed, then uncaptured,
    logit for logit), beside ``identity`` (graphs against eager decoding)."""
    import dataclasses

    from marlin_demo.engine import warmup
    from marlin_demo.tasks import get_task

    prompt = get_task("caption").ask(None, engine.settings)[1]
    _, verdict = warmup.warm(engine, clip, variant, prompt)
    return {"passed": None, "why": "no step ran"} if verdict is None else dataclasses.asdict(verdict)


def bnb_kernels(engine: Any, clip: Any, variant: str) -> dict[str, Any]:
    """Whether bitsandbytes ran its CUDA kernels: its CUDA ops registered (CUDA showed as available when it
    was imported), its native library built for CUDA, and its ops called on CUDA tensors (one short find,
    its ops counted as they dispatch)."""
    import bitsandbytes
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from marlin_demo.tasks import get_task

    calls = {"cuda": 0, "other": 0}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if getattr(func, "namespace", "") == "bitsandbytes":
                cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
                calls["cuda" if cuda else "other"] += 1
            return func(*args, **(kwargs or {}))

    prompt = get_task("find").ask(QUERY, engine.settings)[1]
    lib = getattr(bitsandbytes.cextension, "lib", None)
    registered = "bitsandbytes.backends.cuda.ops" in sys.modules
    native = bool(getattr(lib, "compiled_with_cuda", False))
    out: dict[str, Any] = {
        "cuda_ops_registered": registered,
        "native_library": type(lib).__name__,
        "native_with_cuda": native,
        "calls": calls,
    }
    try:
        with Count():
            engine.run_clip(clip, variant, prompt, 2)
    except Exception as exc:  # the row's figures stand without this one
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    out["ran_cuda_kernels"] = registered and native and calls["cuda"] > 0
    return out


def _replayed(res: Any) -> dict[str, int]:
    """How many of a call's decode steps replayed the captured step (``steps``: all of them)."""
    return {"replayed": res.info.replayed_steps, "steps": max(0, res.metrics.output_tokens - 1)}


def identity(engine: Any, clip: Any, variant: str, tokens: int) -> dict[str, Any]:
    """The caption's token ids decoded in graphs (as the engine is set) and eagerly, on the same engine."""
    from marlin_demo.tasks import get_task

    prompt = get_task("caption").ask(None, engine.settings)[1]
    graphs_run = engine.run_clip(clip, variant, prompt, tokens)
    asked = engine.settings
    engine.settings = asked.with_(decode="eager")
    try:
        eager_run = engine.run_clip(clip, variant, prompt, tokens)
    finally:
        engine.settings = asked
    a, b = graphs_run.gen.token_ids or [], eager_run.gen.token_ids or []
    return {
        "identical": a == b,
        "tokens": len(a),
        "first_difference": next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None),
        "graphs_decode": graphs_run.gen.decode,
        "graphs_replayed": graphs_run.info.replayed_steps,
        "eager_tokens_per_s": eager_run.metrics.tokens_per_s,
        "eager_latency_s": eager_run.metrics.latency_s,
    }


def warm_up_row(run: Pass, spec: dict[str, Any], row: dict[str, Any]) -> None:
    """The Space's start-up call, then a visitor's first call, each in a fresh process (ZeroGPU forks each
    call from a process that never touched the GPU) over one Triton cache that starts empty: the start-up's
    seconds, then the visitor's first caption against its second (the goal: within 2 s)."""
    import subprocess

    triton = run.work / "triton-warm-up"
    shutil.rmtree(triton, ignore_errors=True)
    env = {**os.environ, "TRITON_CACHE_DIR": str(triton), "MARLIN_GPU_CHECK_FLA": "1" if spec["fla"] else "0"}
    for phase in ("start-up", "visitor"):
        out = run.work / f"warm-up-{phase}.json"
        out.unlink(missing_ok=True)
        argv = [sys.executable, __file__, "--warm-up-phase", phase, "--out", str(out), "--model-dir",
                run.settings.model, "--variants", ",".join(spec["variants"]), "--device", run.settings.device,
                "--caption-tokens", str(run.caption_tokens)]  # fmt: skip
        left = max(30.0, run.deadline + 240 - time.perf_counter())
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=left)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the {phase} process failed ({done.returncode}): {done.stderr[-600:]}")
        row[phase.replace("-", "_")] = json.loads(out.read_text())
    visitor = row["visitor"]
    row["first_call_over_warm_s"] = round(visitor["first_latency_s"] - visitor["latency_s"], 2)


def warm_up_phase(args: argparse.Namespace) -> int:
    """One phase of the warm-up row, in this fresh process: ``start-up`` runs the app's start-up work
    (``warmup.run`` on every variant); ``visitor`` loads the first variant and times its first caption,
    then a second one (the warm latency), as a visitor's first call after the start-up call would."""
    import dataclasses

    from marlin_demo.engine import Engine, warmup
    from marlin_demo.service.startup import prepare_zero_gpu
    from marlin_demo.settings import Settings

    prepare_zero_gpu()  # as the app on ZeroGPU: no kernel that nvcc builds
    set_fla(os.environ.get("MARLIN_GPU_CHECK_FLA") == "1")
    variants = [v for v in args.variants.split(",") if v]
    # graphs: what auto is on CUDA; on the dry run's CPU the step, uncaptured (so the check runs there too)
    settings = Settings(
        model=args.model_dir, device=args.device, variants=",".join(variants), decode="graphs"
    )
    engine = Engine(settings.with_(caption_max_new_tokens=args.caption_tokens), prefix_cache_size=0)
    out: dict[str, Any] = {}
    if args.warm_up_phase == "start-up":
        engine = Engine(engine.settings)  # the app's prefix cache: the check decodes from the clip's prefix
        for v in variants:
            engine.load(v)
        t0 = time.perf_counter()
        with compiles(out, "start_up"):
            warmed = warmup.run(engine, variants)
        # the start-up check's verdict per variant (``verdict``), its seconds measured inside the call
        out.update(
            seconds=round(time.perf_counter() - t0, 2), variants=[dataclasses.asdict(w) for w in warmed]
        )
    else:
        variant = variants[0]
        out["load_s"] = round(engine.load(variant).load_s, 2)
        clip = synthetic_clip(2.0 if args.device == "cpu" else 60.0, 640, 360)
        with compiles(out, "visitor"):
            first = engine.ask("caption", clip, variant)
        with compiles(out, "visitor"):
            res = engine.ask("caption", clip, variant)
        out.update(
            variant=variant,
            first_latency_s=first.metrics.latency_s,
            latency_s=res.metrics.latency_s,
            tokens_per_s=res.metrics.tokens_per_s,
            peak_memory_mb=res.metrics.peak_memory_mb,
            decode=res.info.decode,
            capture_s=first.info.capture_s,
            replayed=[_replayed(first), _replayed(res)],
        )
    Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--dry-run", action="store_true", help="CPU, scaled-down full model")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--caption-tokens", type=int, default=96)
    parser.add_argument("--skip-full", action="store_true")
    parser.add_argument(
        "--gptq-backends",
        default="auto,gptq_triton",
        help="GPTQ kernels to measure in order; the first gets the goal rows (auto: Marlin > Triton > Torch)",
    )
    parser.add_argument("--with-tiny", action="store_true", help="also run every row on the tiny checkpoint")
    parser.add_argument(
        "--budget-s", type=float, default=420.0, help="start no new row after this many seconds"
    )
    parser.add_argument(
        "--apply-speeds",
        metavar="REPORT",
        help="write a CUDA run's figures into marlin_demo/service/speeds.json (no measuring)",
    )
    parser.add_argument("--speeds-key", default="h200", help="the speeds.json entry --apply-speeds writes")
    parser.add_argument(
        "--zero-gpu",
        action="store_true",
        help="only the Space's rows: kernels as ZeroGPU picks them (no compile, no nvcc), empty Triton cache",
    )
    parser.add_argument(
        "--random-gptq",
        action="store_true",
        help="pack the GPTQ copy with random int4 codes (as the CPU check does) instead of quantizing it",
    )
    # the warm-up row's fresh processes (warm_up_phase): not for a person to run
    parser.add_argument("--warm-up-phase", choices=("start-up", "visitor"), help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--variants", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warm_up_phase:
        with contextlib.redirect_stdout(sys.stderr):
            return warm_up_phase(args)
    if args.apply_speeds:
        try:
            entry = apply_speeds(Path(args.apply_speeds), args.speeds_key)
        except FileNotFoundError:
            print(f"error: no report at {args.apply_speeds}.", file=sys.stderr)
            return 2
        except (OSError, ValueError) as exc:  # a JSON decode error is a ValueError
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({args.speeds_key: entry}, indent=2))
        return 0

    import tempfile

    import torch

    from marlin_demo.models.tiny import ensure_tiny
    from marlin_demo.settings import Settings

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device: run with --dry-run on a CPU machine", file=sys.stderr)
        return 2
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-check-"))
    os.environ.setdefault("MARLIN_CACHE_DIR", str(work / "cache"))
    t0 = time.perf_counter()
    report: dict[str, Any] = {"versions": versions(), "device": device, "dry_run": args.dry_run, "steps": {}}
    backends = [b.strip() for b in args.gptq_backends.split(",") if b.strip()]
    os.environ.setdefault("MARLIN_GPTQ_BUILD_DIR", str(work / "gptq-kernels"))
    fla = importlib.util.find_spec("fla") is not None
    rows_plan = plan_rows(device, backends, fla and device == "cuda", args.dry_run, args.zero_gpu)
    if args.zero_gpu:  # as the app does on ZeroGPU; a fresh Triton cache, so the first launch compiles
        from marlin_demo.service.startup import prepare_zero_gpu

        prepare_zero_gpu()
        os.environ["TRITON_CACHE_DIR"] = str(work / "triton-cache")
        report["zero_gpu"] = ZERO_GPU_NOTE
    report["fla_installed"] = fla
    report["plan"] = rows_plan
    deadline = t0 + args.budget_s

    def save() -> None:
        report["total_s"] = round(time.perf_counter() - t0, 1)
        Path(args.out).write_text(json.dumps(report, indent=2))

    seconds = 2.0 if args.dry_run else 60.0  # the dry run checks the steps, not the figures
    clip = synthetic_clip(seconds, 640, 360)
    report["clip"] = {
        "seconds": seconds,
        "frames": clip.plan.nframes,
        "size": [clip.plan.width, clip.plan.height],
        "video_tokens": clip.plan.video_tokens,
    }
    with contextlib.redirect_stdout(sys.stderr):
        t = time.perf_counter()
        paths = ensure_tiny(Path(os.environ["MARLIN_CACHE_DIR"]))
        report["steps"]["tiny_build_s"] = round(time.perf_counter() - t, 2)
        base = Settings(model="tiny", device=device, cache_dir=os.environ["MARLIN_CACHE_DIR"])
        if not args.skip_full:  # the full-size figures matter most: they run first
            text, vision = dry_dims(paths["bf16"]) if args.dry_run else (FULL_TEXT, FULL_VISION)
            full = work / "full"
            build_once(full, paths["bf16"], text, vision, device, args.random_gptq, report["steps"], save)
            report["full_params"] = int((full / "params.txt").read_text())
            save()
            settings = Settings(model=str(full), device=device)
            report["full"] = []
            # rows measured by an earlier command over this --work live with the build (a rebuild clears them)
            run = Pass(
                "full-size random",
                settings,
                clip,
                args.caption_tokens,
                save,
                deadline,
                work,
                full / "rows.json",
            )
            run_rows(run, rows_plan, report["full"])
        if args.with_tiny:
            report["tiny"] = []
            run = Pass("tiny", base, clip, args.caption_tokens, save, deadline, work, work / "tiny-rows.json")
            run_rows(run, rows_plan, report["tiny"])
    report["speeds_entry"] = speeds_entry(report)
    save()
    print(json.dumps({"out": args.out, "total_s": report["total_s"], "speeds_entry": report["speeds_entry"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
