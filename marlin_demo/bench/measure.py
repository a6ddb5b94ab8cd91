"""Running the variants: one load, one uncounted warm-up, the pending requests, unload."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marlin_demo.bench.matrix import REQUESTS_FILE, VARIANTS_FILE, Request
from marlin_demo.out_folder import append_jsonl, now
from marlin_demo.settings import Settings
from marlin_demo.tasks import get_task
from marlin_demo.variants import kind_of

#: the run details each request record keeps (``RunInfo`` fields)
INFO_KEYS = ("decode_s", "first_text_s", "kernel", "attention", "compile", "compile_s", "decode", "capture_s")


def run_request(engine: Any, req: Request) -> dict[str, Any]:
    """Run one request; a failure becomes a record with ``ok: false`` (retried by the next run)."""
    rec: dict[str, Any] = {
        "variant": req.variant,
        "task": req.task,
        "video": req.example.name,
        "query": req.query.query if req.query else None,
        "repeat": req.repeat,
    }
    try:
        from marlin_demo import service

        res = service.run(engine, req.task, req.example.video, req.variant, rec["query"])
    except Exception as exc:
        rec.update(ok=False, error=f"{type(exc).__name__}: {exc}", time=now())
        return rec
    rec.update(
        ok=True,
        metrics=dataclasses.asdict(res.metrics),
        # decode: graphs, static, eager or compiled, what these figures were decoded with
        **{key: getattr(res.info, key) for key in INFO_KEYS},
        runtime=res.info.runtime.to_dict(),
        format_ok=bool(res.format_ok),
        repaired=bool(res.repaired),
        repairs=list(res.info.repairs),
        raw=res.raw,
        time=now(),
        windows=max(1, len(res.info.windows)),  # a long video's windows answered
        **get_task(req.task).answer.record(res),  # what the answer said (caption: events; find: the span)
    )
    return rec


def bench_variant(engine: Any, variant: str, pending: Sequence[Request], out: Path, bar: Any) -> bool:
    """Load, warm up, run the pending requests, unload. Returns whether the variant loaded."""
    from marlin_demo.models import ModelLoadError

    bar.set_postfix_str(f"{variant}: loading")
    try:
        loaded = engine.load(variant)
    except ModelLoadError as exc:
        append_jsonl(
            out / VARIANTS_FILE, {"kind": "load", "variant": variant, "error": str(exc), "time": now()}
        )
        bar.write(f"error: {variant}: {exc}", file=sys.stderr)
        bar.update(len(pending))
        return False
    load_rec: dict[str, Any] = {
        "kind": "load",
        "variant": variant,
        **loaded.describe(),
        "compile": "on" if engine.settings.compile else "off",
        "quantized": loaded.source.quantized,
        "allocated_after_load_mb": None,
        "time": now(),
    }
    load_rec["load_s"] = loaded.load_s
    load_rec["footprint_mb"] = loaded.footprint_mb
    if loaded.device == "cuda":
        import torch

        torch.cuda.synchronize()
        load_rec["allocated_after_load_mb"] = torch.cuda.memory_allocated() / 2**20
    bar.set_postfix_str(f"{variant}: warm-up")
    first = pending[0]
    t0 = time.perf_counter()
    warm = run_request(engine, first)
    load_rec["warmup_s"] = time.perf_counter() - t0
    load_rec["decode"] = warm.get("decode") or None  # what the warm-up decoded with (graphs, eager...)
    if not warm["ok"]:
        load_rec["warmup_error"] = warm["error"]
        bar.write(f"warning: {variant}: the warm-up request failed: {warm['error']}", file=sys.stderr)
    append_jsonl(out / VARIANTS_FILE, load_rec)
    failed = 0
    bar.set_postfix_str(variant)
    for req in pending:
        rec = run_request(engine, req)
        append_jsonl(out / REQUESTS_FILE, rec)
        if not rec["ok"]:
            failed += 1
            if failed == 1:
                bar.write(
                    f"warning: {variant}: a request failed ({rec['error']}); continuing", file=sys.stderr
                )
        bar.update(1)
    engine.unload(variant)
    return True


def preimport_backends(variants: Sequence[str], settings: Settings) -> dict[str, float]:
    """Import the model libraries before any load is timed, so the first variant's ``load_s`` is not charged
    with a one-off import (gptqmodel alone takes 10+ s); the seconds each took, for results.json."""
    extra = settings.extra_variant_dirs
    kinds = set()
    for v in variants:
        kind = kind_of(v)
        if v in extra:
            if (extra[v] / "quantize_config.json").exists():
                kinds.add("gptqmodel")
        elif kind is not None and kind.package in ("gptqmodel", "bitsandbytes"):
            kinds.add(kind.package)
    from marlin_demo.models.kernels import import_gptqmodel

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers

    # transformers resolves these lazily: touching them imports the modeling code now
    _ = (transformers.AutoModelForImageTextToText, transformers.AutoProcessor)
    _ = getattr(transformers, "Qwen3_5ForConditionalGeneration", None)
    timings["torch+transformers"] = time.perf_counter() - t0
    for name in sorted(kinds):
        t0 = time.perf_counter()
        try:
            if name == "gptqmodel":  # the loader's own import: HF_HOME kept, banner on stderr
                import_gptqmodel()
            else:
                __import__(name)
        except Exception:  # the load itself reports a missing or broken backend clearly
            continue
        timings[name] = time.perf_counter() - t0
    return timings
