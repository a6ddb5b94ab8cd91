"""``python -m marlin_demo bench``: speed, memory and quality of the variants on a data folder.

Reproduces the seed GPTQ card's comparison (latency per request, peak
allocated VRAM, accuracy retention, caption score, keyword coverage) and adds
the figures the card leaves out. How to run it and what each figure means:
``docs/BENCHMARK.md``.

Flow: variants run one after another (load, one uncounted warm-up request,
``repeats`` passes over the data, unload). Every finished request is appended
to ``OUT/requests.jsonl`` at once, so an interrupted run resumes where it
stopped; the aggregate files (results.json/.csv, summary.md, plots) are
recomputed from those records at the end of every run. Scores are computed
from the stored answers, never stored themselves, so they always follow
``marlin_demo.metrics``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from marlin_demo import settings as settings_mod
from marlin_demo.compare import agreement as pair_agreement
from marlin_demo.contract import Event
from marlin_demo.datasets import (
    DatasetError,
    Example,
    Query,
    add_convert_parser,
    dataset_digest,
    example_sets,
    load_dataset,
    set_label,
    summarize,
)
from marlin_demo.longbench import WINDOW_COST_KEYS, record_fields, record_moments, window_cost
from marlin_demo.longclip import add_long_set_parser, resolve_data
from marlin_demo.metrics import best_iou, caption_scores, moment_scores, precision_recall_f1
from marlin_demo.results import CaptionResult
from marlin_demo.settings import VARIANTS, Settings

EXIT_OK = 0
EXIT_LOAD_FAILED = 1
EXIT_BAD_INPUT = 2

SCHEMA = 1
TASKS = ("caption", "find")
DEFAULT_VARIANTS = "gptq,bnb4"
DEFAULT_REPEATS = 3
DEFAULT_OUT = "bench-out"
DEFAULT_DATA = Path(__file__).resolve().parent.parent / "examples"

RUN_FILE = "run.json"
REQUESTS_FILE = "requests.jsonl"
VARIANTS_FILE = "variants.jsonl"
RESULT_FILES = (
    "results.json",
    "results.csv",
    "summary.md",
    "quality.png",
    "latency.png",
    "memory.png",
    "latency_distribution.png",
    "sets.png",
)

SETTINGS_FLAGS = (
    "model",
    "bf16_id",
    "gptq_id",
    "revision",
    "gptq_revision",
    "extra_variants",
    "device",
    "gptq_backend",
    "compile",
    "video_backend",
    "cache_dir",
    "caption_max_new_tokens",
    "find_max_new_tokens",
    "caption_window_s",
    "find_window_s",
    "find_overlap_s",
    "max_windows",
    "top_k",
    "max_upload_mb",
    "max_duration_s",
    "max_query_chars",
    "request_timeout_s",
    "trust_remote_code",
)

#: Settings that change what a request measures: a rerun into the same --out must match them
#: (the limits on uploads and requests, and where the cache lives, do not).
FINGERPRINT_FIELDS = tuple(
    name
    for name in SETTINGS_FLAGS
    if name not in ("cache_dir", "max_upload_mb", "max_duration_s", "request_timeout_s")
)

ENV_PACKAGES = (
    "torch",
    "transformers",
    "gptqmodel",
    "bitsandbytes",
    "accelerate",
    "torchcodec",
    "qwen-vl-utils",
    "av",
    "rouge-score",
)


class BenchError(ValueError):
    """Bad arguments or an unusable --out: one line for the user."""


# ---------------------------------------------------------------------------
# Plan and records
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    variant: str
    task: str
    example: Example
    query: Query | None
    repeat: int

    @property
    def key(self) -> tuple[str, str, str, str | None, int]:
        return (
            self.variant,
            self.task,
            self.example.name,
            self.query.query if self.query else None,
            self.repeat,
        )


def record_key(rec: dict[str, Any]) -> tuple[str, str, str, str | None, int]:
    return (rec["variant"], rec["task"], rec["video"], rec.get("query"), int(rec["repeat"]))


def plan_requests(
    examples: Sequence[Example], variant: str, tasks: Sequence[str], repeats: int
) -> list[Request]:
    """Repeats are whole passes over the data (not back-to-back copies of one request)."""
    out: list[Request] = []
    for rep in range(repeats):
        for ex in examples:
            if "caption" in tasks and ex.has_caption_truth:
                out.append(Request(variant, "caption", ex, None, rep))
            if "find" in tasks:
                out.extend(Request(variant, "find", ex, q, rep) for q in ex.queries)
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (interrupted write) is skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record and flush it to disk (a torn previous line gets its own line)."""
    needs_newline = False
    if path.exists() and path.stat().st_size:
        with path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            needs_newline = fh.read(1) != b"\n"
    with path.open("a", encoding="utf-8") as fh:
        if needs_newline:
            fh.write("\n")
        fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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
        rec.update(ok=False, error=f"{type(exc).__name__}: {exc}", time=_now())
        return rec
    rec.update(
        ok=True,
        metrics=dataclasses.asdict(res.metrics),
        decode_s=res.info.decode_s,
        first_text_s=res.info.first_text_s,
        kernel=res.info.kernel,
        attention=res.info.attention,
        compile=res.info.compile,
        compile_s=res.info.compile_s,
        format_ok=bool(res.format_ok),
        repaired=bool(res.repaired),
        repairs=list(res.info.repairs),
        raw=res.raw,
        time=_now(),
        **record_fields(res),  # windows, find's moments (long videos)
    )
    if isinstance(res, CaptionResult):  # the caption task's result
        rec.update(scene=res.scene, events=[e.to_dict() for e in res.events])
    else:
        rec["span"] = None if res.span is None else [float(res.span[0]), float(res.span[1])]
    return rec


# ---------------------------------------------------------------------------
# Environment and run identity
# ---------------------------------------------------------------------------


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total_mb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def environment() -> dict[str, Any]:
    """Machine and package versions (the GPU part only when CUDA is visible)."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for pkg in ENV_PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "memory_total_mb": _mem_total_mb(),
        "packages": versions,
        "cuda": None,
        "cudnn": None,
        "gpu": None,
        "gpu_memory_mb": None,
        "gpu_count": 0,
    }
    try:
        import torch

        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env.update(
                gpu=torch.cuda.get_device_name(0),
                gpu_memory_mb=round(props.total_memory / 2**20, 1),
                gpu_count=torch.cuda.device_count(),
                cudnn=torch.backends.cudnn.version(),
            )
    except Exception:
        pass
    return env


def stack_fingerprint(settings: Settings) -> dict[str, Any]:
    """What runs, decided before any load: device, Gated DeltaNet kernel, GPTQ kernel order, compile."""
    import importlib.util

    from marlin_demo.models import ModelLoadError, pick_device
    from marlin_demo.models.kernels import available_gptq_kernels, gptq_kernel_plan

    try:
        device = pick_device(settings.device)
    except ModelLoadError:
        device = settings.device
    fla = device == "cuda" and importlib.util.find_spec("fla") is not None
    return {
        "device": device,
        "gated_deltanet": "fla" if fla else "torch",
        "gptq_kernels": gptq_kernel_plan(device, available_gptq_kernels(device), settings.gptq_backend),
        "compile": settings.compile,
    }


def fingerprint(settings: Settings, data_digest: str) -> dict[str, Any]:
    fp: dict[str, Any] = {name: getattr(settings, name) for name in FINGERPRINT_FIELDS}
    fp["data_digest"] = data_digest
    fp["stack"] = stack_fingerprint(settings)  # kernels and compile state: set-ups never mix silently
    return fp


def prepare_out(out: Path, fp: dict[str, Any], fresh: bool) -> dict[str, Any]:
    """Create/validate --out; returns the run.json content (old one when resuming)."""
    if out.exists() and not out.is_dir():
        raise BenchError(f"--out {out} is a file: give a folder.")
    if fresh and out.is_dir():
        for name in (RUN_FILE, REQUESTS_FILE, VARIANTS_FILE, *RESULT_FILES):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    run_path = out / RUN_FILE
    if run_path.exists():
        try:
            previous = json.loads(run_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            raise BenchError(f"{run_path} is damaged: use a new --out, or --fresh to start over.") from None
        old = previous.get("fingerprint", {})
        diffs = [f"{k}: {old.get(k)!r} -> {v!r}" for k, v in fp.items() if old.get(k) != v]
        if diffs:
            raise BenchError(
                f"{out} holds results of a different set-up ({'; '.join(diffs)}): "
                "use a new --out, or --fresh to start over there."
            )
        return previous
    if (out / REQUESTS_FILE).exists():
        raise BenchError(
            f"{out} has {REQUESTS_FILE} but no {RUN_FILE}: use a new --out, or --fresh to start over there."
        )
    run = {"schema": SCHEMA, "created": _now(), "fingerprint": fp, "environment": environment()}
    run_path.write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    return run


# ---------------------------------------------------------------------------
# Aggregation (pure: records + ground truth -> figures)
# ---------------------------------------------------------------------------


def stats(values: Iterable[float | None]) -> dict[str, float] | None:
    """n, mean, median, min, max, stdev and quartiles (p25/p75) of the non-None values."""
    xs = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    if not xs:
        return None
    if len(xs) >= 2:
        p25, _, p75 = statistics.quantiles(xs, n=4, method="inclusive")
        sd = statistics.stdev(xs)
    else:
        p25 = p75 = xs[0]
        sd = 0.0
    return {
        "n": len(xs),
        "mean": statistics.fmean(xs),
        "median": statistics.median(xs),
        "min": xs[0],
        "max": xs[-1],
        "stdev": sd,
        "p25": p25,
        "p75": p75,
    }


def _index(records: Iterable[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """Latest record per key, a successful one winning over any failure."""
    idx: dict[tuple, dict[str, Any]] = {}
    for rec in records:
        try:
            key = record_key(rec)
        except (KeyError, TypeError, ValueError):
            continue
        old = idx.get(key)
        if old is None or rec.get("ok") or not old.get("ok"):
            idx[key] = rec
    return idx


def _scored(
    idx: dict[tuple, dict[str, Any]], variant: str, task: str, name: str, query: str | None, repeats: int
):
    """The record quality is scored on: the first successful repeat (greedy decoding: repeats agree)."""
    first = None
    for rep in range(repeats):
        rec = idx.get((variant, task, name, query, rep))
        if rec is None:
            continue
        if rec.get("ok"):
            return rec
        first = first or rec
    return first


QUALITY_ROWS: tuple[tuple[str, str, str], ...] = (
    ("find", "miou", "Find mIoU"),
    ("find", "r1@0.3", "Find R1@0.3"),
    ("find", "r1@0.5", "Find R1@0.5"),
    ("find", "r1@0.7", "Find R1@0.7"),
    ("find", "r5@0.5", "Find R5@0.5 (any of the top 5 moments)"),
    ("find", "occurrence_recall@0.5", "Find occurrences found (true spans matched at IoU 0.5)"),
    ("find", "parse_rate", "Find parse rate (a span was read)"),
    ("find", "format_rate", "Find format rate ('From X to Y.')"),
    ("caption", "rouge_l", "Caption score (ROUGE-L)"),
    ("caption", "keyword_coverage", "Keyword coverage"),
    ("caption", "event_mean_iou", "Event mean matched IoU"),
    ("caption", "event_precision", "Event precision"),
    ("caption", "event_recall", "Event recall"),
    ("caption", "event_f1", "Event F1"),
    ("caption", "parse_rate", "Caption parse rate (>= 1 event read)"),
    ("caption", "format_rate", "Caption format rate (Scene/Events)"),
)
OVERALL_PARTS = (
    ("find", "miou"),
    ("find", "r1@0.5"),
    ("caption", "rouge_l"),
    ("caption", "keyword_coverage"),
    ("caption", "event_f1"),
)


def quality(
    examples: Sequence[Example],
    idx: dict[tuple, dict[str, Any]],
    variant: str,
    tasks: Sequence[str],
    repeats: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Scores against ground truth, and one row per scored item (results.json ``items``)."""
    items: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    if "find" in tasks and any(ex.queries for ex in examples):
        preds, refs, fmt, ranked = [], [], [], []
        for ex in examples:
            for q in ex.queries:
                rec = _scored(idx, variant, "find", ex.name, q.query, repeats)
                ok = bool(rec and rec.get("ok"))
                span = rec.get("span") if ok else None
                preds.append(span)
                refs.append(q.spans)  # every true span (a long video's query can recur)
                ranked.append(record_moments(rec) if ok else [])
                fmt.append(ok and bool(rec.get("format_ok")))
                items.append(
                    {
                        "variant": variant,
                        "task": "find",
                        "video": ex.name,
                        "query": q.query,
                        "reference": list(q.span),
                        "references": [list(s) for s in q.spans],
                        "span": span,
                        "moments": ranked[-1],
                        "iou": best_iou(span, q.spans),
                        "format_ok": fmt[-1],
                        "ok": ok,
                    }
                )
        g = moment_scores(preds, ranked, refs)  # one true span each: the same as grounding_scores
        g["format_rate"] = sum(fmt) / len(fmt)
        out["find"] = g
    caption_examples = [ex for ex in examples if ex.has_caption_truth]
    if "caption" in tasks and caption_examples:
        rl, kw, fmt, parsed, rep = [], [], [], [], []
        tp = n_pred = n_ref = 0
        matched: list[float] = []
        for ex in caption_examples:
            rec = _scored(idx, variant, "caption", ex.name, None, repeats)
            ok = bool(rec and rec.get("ok"))
            scene = rec.get("scene", "") if ok else ""
            events = [Event.from_dict(e) for e in rec.get("events", [])] if ok else []
            sc = caption_scores(scene, events, ex.scene, ex.events)
            rl.append(sc["rouge_l"])
            kw.append(sc["keyword_coverage"])
            fmt.append(ok and bool(rec.get("format_ok")))
            parsed.append(bool(events))
            rep.append(ok and bool(rec.get("repaired")))
            n_pred += sc["n_pred"]
            n_ref += sc["n_ref"]
            tp_ex = round(sc["recall"] * sc["n_ref"]) if sc["n_ref"] else 0
            tp += tp_ex
            if tp_ex:
                matched.extend([sc["mean_matched_iou"]] * tp_ex)
            items.append(
                {
                    "variant": variant,
                    "task": "caption",
                    "video": ex.name,
                    "ok": ok,
                    "rouge_l": sc["rouge_l"],
                    "keyword_coverage": sc["keyword_coverage"],
                    "event_precision": sc["precision"],
                    "event_recall": sc["recall"],
                    "event_f1": sc["f1"],
                    "event_mean_iou": sc["mean_matched_iou"],
                    "n_pred": sc["n_pred"],
                    "n_ref": sc["n_ref"],
                    "format_ok": fmt[-1],
                }
            )
        precision, recall, f1 = precision_recall_f1(tp, n_pred, n_ref)
        n = len(caption_examples)
        out["caption"] = {
            "rouge_l": statistics.fmean(rl),
            "keyword_coverage": statistics.fmean(kw),
            "event_mean_iou": statistics.fmean(matched) if matched else 0.0,
            "event_precision": precision,
            "event_recall": recall,
            "event_f1": f1,
            "parse_rate": sum(parsed) / n,
            "format_rate": sum(fmt) / n,
            "repaired_rate": sum(rep) / n,
            "n": n,
            "n_pred_events": n_pred,
            "n_ref_events": n_ref,
        }
    parts = [out[t][k] for t, k in OVERALL_PARTS if t in out]
    out["overall"] = statistics.fmean(parts) if parts else None
    return out, items


def agreement(
    examples: Sequence[Example],
    idx: dict[tuple, dict[str, Any]],
    variant: str,
    reference: str,
    tasks: Sequence[str],
    repeats: int,
) -> dict[str, Any]:
    """How close a variant's answers are to the reference variant's (bf16), request by request."""
    out: dict[str, Any] = {}
    if "find" in tasks:
        ious, same = [], []
        for ex in examples:
            for q in ex.queries:
                a = _scored(idx, variant, "find", ex.name, q.query, repeats)
                b = _scored(idx, reference, "find", ex.name, q.query, repeats)
                if not (a and a.get("ok") and b and b.get("ok")):
                    continue
                ious.append(pair_agreement("find", {"a": a, "b": b})["a|b"]["span_iou"])
                same.append(a.get("raw") == b.get("raw"))
        if ious:
            out["find"] = {
                "span_iou": statistics.fmean(ious),
                "same_answer_rate": sum(same) / len(same),
                "n": len(ious),
            }
    if "caption" in tasks:
        ev_iou, ev_f1, rl, same = [], [], [], []
        for ex in examples:
            if not ex.has_caption_truth:
                continue
            a = _scored(idx, variant, "caption", ex.name, None, repeats)
            b = _scored(idx, reference, "caption", ex.name, None, repeats)
            if not (a and a.get("ok") and b and b.get("ok")):
                continue
            pair = pair_agreement("caption", {"a": a, "b": b})["a|b"]
            ev_iou.append(pair["event_iou"])
            ev_f1.append(pair["event_f1"])
            rl.append(pair["rouge_l"])
            same.append(a.get("raw") == b.get("raw"))
        if rl:
            out["caption"] = {
                "event_iou": statistics.fmean(ev_iou),
                "event_f1": statistics.fmean(ev_f1),
                "rouge_l": statistics.fmean(rl),
                "same_answer_rate": sum(same) / len(same),
                "n": len(rl),
            }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def retention(q: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """quantized score / reference score for every quality metric (None where the reference is 0)."""
    out: dict[str, Any] = {}
    for task, key, _ in QUALITY_ROWS:
        if task in q and task in ref:
            out.setdefault(task, {})[key] = _ratio(q[task].get(key), ref[task].get(key))
    out["overall"] = _ratio(q.get("overall"), ref.get("overall"))
    return out


def speed(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per task and over all requests: latency, TTFT, decode tok/s, tokens, memory, video decode."""
    out: dict[str, Any] = {}
    groups = {"all": list(records)}
    for task in TASKS:
        sel = [r for r in records if r["task"] == task]
        if sel:
            groups[task] = sel
    for name, recs in groups.items():
        m = [r["metrics"] for r in recs]
        out[name] = {
            "requests": len(recs),
            "latency_s": stats(x["latency_s"] for x in m),
            "ttft_s": stats(x.get("ttft_s") for x in m),
            "first_text_s": stats(r.get("first_text_s") for r in recs),
            "tokens_per_s": stats(x.get("tokens_per_s") for x in m),
            "output_tokens": stats(x.get("output_tokens") for x in m),
            "video_tokens": stats(x.get("video_tokens") for x in m),
            "peak_memory_mb": stats(x.get("peak_memory_mb") for x in m),
            "decode_s": stats(r.get("decode_s") for r in recs),
            **{k: stats(window_cost(r)[k] for r in recs) for k in WINDOW_COST_KEYS},
            "latencies_s": [round(float(x["latency_s"]), 4) for x in m],
        }
    kinds = sorted({r["metrics"].get("memory_kind", "") for r in records})
    out["memory_kind"] = kinds[0] if len(kinds) == 1 else ",".join(kinds) or None
    devices = sorted({r["metrics"].get("device", "") for r in records})
    out["device"] = devices[0] if len(devices) == 1 else ",".join(devices) or None
    return out


def _stability(idx: dict[tuple, dict[str, Any]], plan: Sequence[Request]) -> float | None:
    """Share of requests (with >= 2 successful repeats) whose raw answer was identical in every repeat."""
    raws: dict[tuple, set[str]] = {}
    counts: dict[tuple, int] = {}
    for req in plan:
        rec = idx.get(req.key)
        if rec and rec.get("ok"):
            k = req.key[:4]
            raws.setdefault(k, set()).add(rec.get("raw", ""))
            counts[k] = counts.get(k, 0) + 1
    multi = [k for k, c in counts.items() if c >= 2]
    if not multi:
        return None
    return sum(1 for k in multi if len(raws[k]) == 1) / len(multi)


def by_set(
    examples: Sequence[Example],
    idx: dict[tuple, dict[str, Any]],
    variants: Sequence[str],
    tasks: Sequence[str],
    repeats: int,
) -> dict[str, Any]:
    """Quality and cost per example set: real footage and rendered clips measure different things."""
    out: dict[str, Any] = {}
    for name, exs in example_sets(examples).items():
        per: dict[str, Any] = {}
        for v in variants:
            plan = plan_requests(exs, v, tasks, repeats)
            ok = [idx[r.key] for r in plan if r.key in idx and idx[r.key].get("ok")]
            per[v] = {
                "quality": quality(exs, idx, v, tasks, repeats)[0] if ok else {"overall": None},
                "speed": speed(ok),
                "requests": {"planned": len(plan), "ok": len(ok)},
            }
        out[name] = {"label": set_label(name), "data": summarize(exs), "variants": per}
    return out


def aggregate(
    examples: Sequence[Example],
    variants: Sequence[str],
    tasks: Sequence[str],
    repeats: int,
    records: Iterable[dict[str, Any]],
    variant_records: Iterable[dict[str, Any]],
    reference: str = "bf16",
) -> dict[str, Any]:
    """Every figure of results.json's ``variants``, ``comparison`` and ``items`` from the records."""
    idx = _index(records)
    loads: dict[str, dict[str, Any]] = {}
    imports: dict[str, float] = {}
    for rec in variant_records:
        if rec.get("kind") == "load":
            loads[rec["variant"]] = rec  # the latest load of a variant wins
        elif rec.get("kind") == "imports":
            imports.update(rec.get("import_s") or {})
    per: dict[str, Any] = {}
    items: list[dict[str, Any]] = []
    for v in variants:
        plan = plan_requests(examples, v, tasks, repeats)
        recs = [idx[r.key] for r in plan if r.key in idx]
        ok = [r for r in recs if r.get("ok")]
        errors = [r for r in recs if not r.get("ok")]
        if ok:
            q, its = quality(examples, idx, v, tasks, repeats)
            items.extend(its)
        else:  # never answered (e.g. the load failed): no score rather than a row of zeros
            q = {"overall": None}
        load = loads.get(v, {})
        per[v] = {
            "load": {
                k: load.get(k)
                for k in (
                    "load_s",
                    "footprint_mb",
                    "kernel",
                    "attention",
                    "compile",
                    "device",
                    "allocated_after_load_mb",
                    "source",
                    "revision",
                    "quantized",
                    "warmup_s",
                    "error",
                )
            },
            "requests": {
                "planned": len(plan),
                "ok": len(ok),
                "failed": len(errors),
                "missing": len(plan) - len(recs),
            },
            "complete": len(recs) == len(plan),
            "errors": sorted({r.get("error", "") for r in errors})[:5],
            "speed": speed(ok),
            "quality": q,
            "stability": _stability(idx, plan),
        }
    if reference in per:
        for v in variants:
            if v == reference:
                continue
            per[v]["agreement_with_" + reference] = agreement(examples, idx, v, reference, tasks, repeats)
            per[v]["retention_vs_" + reference] = retention(per[v]["quality"], per[reference]["quality"])
    comparison: dict[str, Any] = {}
    if "gptq" in per and "bnb4" in per:
        comparison["gptq_vs_bnb4"] = {
            name: _rel(get(per["gptq"]), get(per["bnb4"]))
            for name, _, get, _ in _seed_rows(per)
            if name != "retention_vs_bnb4"
        }
        comparison["gptq_vs_bnb4"]["overall_retention"] = _ratio(
            per["gptq"]["quality"]["overall"], per["bnb4"]["quality"]["overall"]
        )
    return {
        "variants": per,
        "sets": by_set(examples, idx, variants, tasks, repeats),
        "comparison": comparison,
        "library_import_s": imports,
        "items": items,
    }


def _rel(a: Any, b: Any) -> float | None:
    """(a - b) / b: the relative difference of a against b."""
    if not isinstance(a, int | float) or not isinstance(b, int | float) or b == 0:
        return None
    return (a - b) / b


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _memory_label(per: dict[str, Any]) -> str:
    kinds = {_get(v, "speed", "memory_kind") for v in per.values()} - {None}
    if kinds == {"cuda_peak_allocated"}:
        return "Peak allocated VRAM (MB)"
    if kinds == {"cpu_peak_rss"}:
        return "Peak process RSS (MB, CPU: not per variant)"
    return "Peak memory (MB)"


def _seed_rows(per: dict[str, Any]) -> list[tuple[str, str, Any, str]]:
    """(key, label, getter, format) rows of the seed card's table, in its order."""
    bnb_overall = _get(per.get("bnb4"), "quality", "overall")
    return [
        (
            "latency_mean_s",
            "Latency per request, mean (s)",
            lambda v: _get(v, "speed", "all", "latency_s", "mean"),
            "s",
        ),
        (
            "latency_median_s",
            "Latency per request, median (s)",
            lambda v: _get(v, "speed", "all", "latency_s", "median"),
            "s",
        ),
        (
            "peak_memory_mb",
            _memory_label(per),
            lambda v: _get(v, "speed", "all", "peak_memory_mb", "max"),
            "mb",
        ),
        (
            "retention_vs_bnb4",
            "Accuracy retention vs bnb4 (overall score)",
            lambda v: _ratio(_get(v, "quality", "overall"), bnb_overall),
            "pct",
        ),
        ("caption_score", "Caption score (ROUGE-L)", lambda v: _get(v, "quality", "caption", "rouge_l"), "q"),
        (
            "keyword_coverage",
            "Keyword coverage",
            lambda v: _get(v, "quality", "caption", "keyword_coverage"),
            "q",
        ),
    ]


# ---------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------

UNITS = {
    "latency_s": "s",
    "ttft_s": "s",
    "first_text_s": "s",
    "decode_s": "s",
    "load_s": "s",
    "warmup_s": "s",
    "tokens_per_s": "tok/s",
    "output_tokens": "tokens",
    "video_tokens": "tokens",
    "peak_memory_mb": "MB",
    "footprint_mb": "MB",
    "allocated_after_load_mb": "MB",
    "windows": "windows",
    "latency_per_window_s": "s",
    "decode_per_window_s": "s",
}


def _flatten(d: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(d, list):
        return
    else:
        yield prefix, d


def _unit(path: str) -> str:
    parts = path.split(".")
    if parts[0].startswith("retention"):
        return "ratio"
    if parts[-1] == "n" or parts[-1] in ("requests", "planned", "ok", "failed", "missing"):
        return "count"
    for p in reversed(parts):
        if p in UNITS:
            return UNITS[p]
    return ""


def write_csv(path: Path, agg: dict[str, Any]) -> None:
    """Long format: one row per (variant, metric); metric is the dotted path in results.json."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "metric", "value", "unit"])
        for v, data in agg["variants"].items():
            for name, value in _flatten(data):
                if name.startswith("errors"):
                    continue
                w.writerow([v, name, "" if value is None else value, _unit(name)])
        for cmp_name, data in agg["comparison"].items():
            for name, value in _flatten(data):
                w.writerow(
                    [
                        cmp_name,
                        name,
                        "" if value is None else value,
                        "relative" if name != "overall_retention" else "ratio",
                    ]
                )


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if kind == "s":
        return f"{value:.3f}" if value < 1 else f"{value:.2f}"
    if kind == "mb":
        return f"{value:.2f}"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "int":
        return f"{value:.0f}"
    if kind == "f1":
        return f"{value:.1f}"
    return f"{value:.4f}"


def _table(per: dict[str, Any], rows: Sequence[tuple[str, Any, str]], rel: bool) -> list[str]:
    names = list(per)
    head = ["Metric", *names] + (["GPTQ vs bnb4"] if rel else [])
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for label, get, kind in rows:
        cells = [_fmt(get(per[n]), kind) for n in names]
        if rel:
            d = _rel(get(per["gptq"]), get(per["bnb4"])) if kind not in ("pct", "str") else None
            cells.append("—" if d is None else f"{100 * d:+.1f}%")
        out.append("| " + " | ".join([label, *cells]) + " |")
    return out


def render_summary(results: dict[str, Any]) -> str:
    per = results["variants"]
    rel = "gptq" in per and "bnb4" in per
    env = results["environment"]
    s = results["settings"]
    data = results["data"]
    imports = ", ".join(f"{k} {v:.1f} s" for k, v in results.get("library_import_s", {}).items()) or "—"
    lines = [
        "# Marlin-2B benchmark",
        "",
        f"- Model: `{results['model_label']}` · variants: {', '.join(per)} · "
        f"data: `{data['dir']}` ({data['examples']} clips, {data['queries']} queries, "
        f"{data['caption_examples']} with reference captions)",
        f"- Repeats: {results['run']['repeats']} per request after 1 warm-up per variant · "
        f"caption max_new_tokens {s['caption_max_new_tokens']}, find {s['find_max_new_tokens']} · greedy",
        f"- Machine: {env.get('gpu') or 'no GPU'} · {env.get('cpu')} · torch {env['packages'].get('torch')} "
        f"(CUDA {env.get('cuda')}) · transformers {env['packages'].get('transformers')} · "
        f"gptqmodel {env['packages'].get('gptqmodel')} · bitsandbytes {env['packages'].get('bitsandbytes')}",
        f"- Library imports, once per process and not in the load times: {imports}",
        f"- Written {results['timestamp']}",
        "",
    ]
    if s.get("model") == "tiny":
        lines += [
            "> The tiny offline stand-in has random weights: its quality figures are meaningless; the "
            "table only shows that every figure is produced.",
            "",
        ]
    lines += ["## The seed card's table", ""]
    seed = [(label, get, kind) for _, label, get, kind in _seed_rows(per)]
    lines += _table(per, seed, rel)
    lines += [
        "",
        "Overall score = mean of find mIoU, find R1@0.5, caption ROUGE-L, keyword coverage and event F1 "
        "(those measured). GPTQ vs bnb4 = (gptq − bnb4) / bnb4.",
        "",
        "## Speed and memory",
        "",
    ]
    sp = [
        ("Model load (s)", lambda v: _get(v, "load", "load_s"), "s"),
        ("Weight footprint (MB)", lambda v: _get(v, "load", "footprint_mb"), "mb"),
        ("Allocated after load (MB, CUDA)", lambda v: _get(v, "load", "allocated_after_load_mb"), "mb"),
        ("Kernel", lambda v: _get(v, "load", "kernel"), "str"),
        ("Attention / linear-attention path", lambda v: _get(v, "load", "attention"), "str"),
        ("Compiled decoding (MARLIN_COMPILE)", lambda v: _get(v, "load", "compile"), "str"),
        ("Device", lambda v: _get(v, "speed", "device"), "str"),
    ]
    for task in ("caption", "find"):
        if any(_get(v, "speed", task) for v in per.values()):
            sp += [
                (f"{task.title()} latency median (s)", _getter("speed", task, "latency_s", "median"), "s"),
                (f"{task.title()} latency p25 (s)", _getter("speed", task, "latency_s", "p25"), "s"),
                (f"{task.title()} latency p75 (s)", _getter("speed", task, "latency_s", "p75"), "s"),
                (f"{task.title()} latency min (s)", _getter("speed", task, "latency_s", "min"), "s"),
                (f"{task.title()} latency max (s)", _getter("speed", task, "latency_s", "max"), "s"),
                (f"{task.title()} latency stdev (s)", _getter("speed", task, "latency_s", "stdev"), "s"),
                (
                    f"{task.title()} time to first token, median (s)",
                    _getter("speed", task, "ttft_s", "median"),
                    "s",
                ),
                (
                    f"{task.title()} time to first visible text, median (s)",
                    _getter("speed", task, "first_text_s", "median"),
                    "s",
                ),
                (
                    f"{task.title()} decode tokens/s, median",
                    _getter("speed", task, "tokens_per_s", "median"),
                    "f1",
                ),
                (
                    f"{task.title()} output tokens, mean",
                    _getter("speed", task, "output_tokens", "mean"),
                    "f1",
                ),
            ]
            if any((_get(v, "speed", task, "windows", "max") or 1) > 1 for v in per.values()):  # long videos
                sp += [
                    (
                        f"{task.title()} windows per request, mean",
                        _getter("speed", task, "windows", "mean"),
                        "f1",
                    ),
                    (
                        f"{task.title()} latency per window, median (s)",
                        _getter("speed", task, "latency_per_window_s", "median"),
                        "s",
                    ),
                ]
    sp += [
        ("Video tokens per request, mean", _getter("speed", "all", "video_tokens", "mean"), "int"),
        ("Video read + sample, median (s)", _getter("speed", "all", "decode_s", "median"), "s"),
        ("Peak memory, median over requests (MB)", _getter("speed", "all", "peak_memory_mb", "median"), "mb"),
        ("Memory measure", _getter("speed", "memory_kind"), "str"),
        ("Requests ok / planned", lambda v: f"{v['requests']['ok']} / {v['requests']['planned']}", "str"),
    ]
    lines += _table(per, sp, rel)
    lines += ["", "## Quality against the ground truth", ""]
    qrows = [
        (label, _getter("quality", task, key), "q")
        for task, key, label in QUALITY_ROWS
        if any(_get(v, "quality", task) for v in per.values())
    ]
    qrows += [
        ("Overall score", _getter("quality", "overall"), "q"),
        ("Same answer in every repeat", _getter("stability"), "pct"),
    ]
    lines += _table(per, qrows, rel)
    lines += _set_tables(results.get("sets") or {}, rel)
    quantized = [v for v in per if "retention_vs_bf16" in per[v]]
    if quantized:
        sub = {v: per[v] for v in quantized}
        lines += ["", "## Agreement with bf16 and retention (quantized / bf16)", ""]
        arows = [
            ("Find span IoU vs bf16", _getter("agreement_with_bf16", "find", "span_iou"), "q"),
            ("Find: same answer as bf16", _getter("agreement_with_bf16", "find", "same_answer_rate"), "pct"),
            ("Caption event IoU vs bf16", _getter("agreement_with_bf16", "caption", "event_iou"), "q"),
            ("Caption event F1 vs bf16", _getter("agreement_with_bf16", "caption", "event_f1"), "q"),
            ("Caption ROUGE-L vs bf16", _getter("agreement_with_bf16", "caption", "rouge_l"), "q"),
            (
                "Caption: same answer as bf16",
                _getter("agreement_with_bf16", "caption", "same_answer_rate"),
                "pct",
            ),
        ]
        arows += [
            (f"Retention: {label}", _getter("retention_vs_bf16", task, key), "pct")
            for task, key, label in QUALITY_ROWS
            if any(_get(v, "retention_vs_bf16", task) for v in sub.values())
        ]
        arows.append(("Retention: overall score", _getter("retention_vs_bf16", "overall"), "pct"))
        lines += _table(sub, arows, "gptq" in sub and "bnb4" in sub)
    notes = []
    if _get(next(iter(per.values()), {}), "speed", "memory_kind") == "cpu_peak_rss":
        notes.append(
            "On CPU the engine reports the process's peak resident memory (ru_maxrss) since it started: it "
            "never goes down, so later variants inherit earlier peaks and libraries dominate it. Use the "
            "weight footprint to compare variants on CPU; on CUDA the figure is torch's peak allocated "
            "memory, reset before each request."
        )
    for v, data in per.items():
        if data["load"].get("error"):
            notes.append(f"{v}: could not be loaded: {data['load']['error']}")
        if data["requests"]["failed"]:
            notes.append(
                f"{v}: {data['requests']['failed']} request(s) failed (scored as no answer): "
                + "; ".join(data["errors"])
            )
        if data["requests"]["missing"]:
            notes.append(
                f"{v}: {data['requests']['missing']} planned request(s) not run yet (rerun to resume); "
                "the quality figures count them as no answer."
            )
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += [
        "",
        "Latency is end to end per request (video read and sampling included, model load excluded). "
        "Definitions: docs/BENCHMARK.md.",
        "",
    ]
    return "\n".join(lines)


def _getter(*path: str):
    return lambda v: _get(v, *path)


def _set_tables(sets: dict[str, Any], rel: bool) -> list[str]:
    """One quality-and-cost table per example set; nothing when the data is one set."""
    if len(sets) < 2:
        return []
    lines = ["", "## By example set", ""]
    lines.append(
        "The same figures for each set alone. Real footage is a handful of clips: a smoke test of "
        "quality on real video, not a benchmark score (docs/BENCHMARK.md)."
    )
    for group in sets.values():
        per, d = group["variants"], group["data"]
        lines += [
            "",
            f"### {group['label']}",
            "",
            f"{d['examples']} clips, {d['queries']} find queries, {d['caption_examples']} captions "
            f"with {d['events']} reference events.",
            "",
        ]
        rows = [
            (label, _getter("quality", task, key), "q")
            for task, key, label in QUALITY_ROWS
            if any(_get(v, "quality", task) for v in per.values())
        ]
        rows.append(("Overall score", _getter("quality", "overall"), "q"))
        for task in ("caption", "find"):
            if any(_get(v, "speed", task) for v in per.values()):
                rows += [
                    (
                        f"{task.title()} latency median (s)",
                        _getter("speed", task, "latency_s", "median"),
                        "s",
                    ),
                    (
                        f"{task.title()} output tokens, mean",
                        _getter("speed", task, "output_tokens", "mean"),
                        "f1",
                    ),
                ]
        rows += [
            ("Video tokens per request, mean", _getter("speed", "all", "video_tokens", "mean"), "int"),
            ("Requests ok / planned", lambda v: f"{v['requests']['ok']} / {v['requests']['planned']}", "str"),
        ]
        lines += _table(per, rows, rel)
    return lines


def write_plots(out: Path, agg: dict[str, Any]) -> None:
    """quality.png, latency.png, memory.png, latency_distribution.png (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    per = agg["variants"]
    names = list(per)
    colors = {"gptq": "#1f77b4", "bnb4": "#ff7f0e", "bf16": "#2ca02c"}
    palette = plt.get_cmap("tab10")
    color = [colors.get(n, palette(3 + i)) for i, n in enumerate(names)]
    width = 0.8 / max(1, len(names))

    def bars(
        ax: Any,
        labels: Sequence[str],
        series: dict[str, list[float | None]],
        err: dict[str, list[tuple[float, float]]] | None = None,
    ) -> None:
        xs = range(len(labels))
        for i, n in enumerate(names):
            vals = [0.0 if x is None else x for x in series[n]]
            pos = [x + (i - (len(names) - 1) / 2) * width for x in xs]
            yerr = None
            if err is not None:
                yerr = [[lo for lo, _ in err[n]], [hi for _, hi in err[n]]]
            ax.bar(pos, vals, width, label=n, color=color[i], yerr=yerr, capsize=3)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, rotation=20, ha="right")
        ax.legend()
        ax.grid(axis="y", alpha=0.3)

    # quality
    qdefs = [(t, k, lbl) for t, k, lbl in QUALITY_ROWS if k not in ("format_rate",)]
    qdefs = [d for d in qdefs if any(_get(per[n], "quality", d[0]) for n in names)]
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    labels = [lbl.split(" (")[0] for _, _, lbl in qdefs] + ["Overall"]
    series: dict[str, list[float | None]] = {
        n: [_get(per[n], "quality", t, k) for t, k, _ in qdefs] + [_get(per[n], "quality", "overall")]
        for n in names
    }
    bars(ax, labels, series)
    ax.set_ylim(0, 1.05)
    ax.set_title("Quality against the ground truth (higher is better)")
    fig.tight_layout()
    _save(fig, out / "quality.png")

    # latency: median with the interquartile range
    tasks = [t for t in ("caption", "find", "all") if any(_get(per[n], "speed", t) for n in names)]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    series = {}
    err: dict[str, list[tuple[float, float]]] = {}
    for n in names:
        series[n], err[n] = [], []
        for t in tasks:
            st = _get(per[n], "speed", t, "latency_s")
            if st:
                series[n].append(st["median"])
                err[n].append((st["median"] - st["p25"], st["p75"] - st["median"]))
            else:
                series[n].append(None)
                err[n].append((0.0, 0.0))
    bars(ax, [f"{t} requests" for t in tasks], series, err)
    ax.set_ylabel("seconds per request (median, bars: p25-p75)")
    ax.set_title("Latency per request (lower is better)")
    fig.tight_layout()
    _save(fig, out / "latency.png")

    # memory: weights and peak side by side, each on its own scale
    mem_label = _memory_label(per)
    fig, axes = plt.subplots(1, 2, figsize=(10, 5), dpi=100)
    panels = [
        ("Weight footprint (MB)", [_get(per[n], "load", "footprint_mb") for n in names]),
        (mem_label, [_get(per[n], "speed", "all", "peak_memory_mb", "max") for n in names]),
    ]
    for ax, (title, vals) in zip(axes, panels, strict=True):
        heights = [0.0 if x is None else x for x in vals]
        rects = ax.bar(names, heights, color=color)
        ax.bar_label(rects, labels=["n/a" if x is None else f"{x:.1f}" for x in vals], padding=2)
        ax.set_title(title)
        ax.set_ylabel("MB")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Memory (lower is better)")
    fig.tight_layout()
    _save(fig, out / "memory.png")

    # latency distribution: one box per variant, one panel per task
    box_tasks = [t for t in ("caption", "find") if any(_get(per[n], "speed", t) for n in names)] or ["all"]
    fig, axes = plt.subplots(1, len(box_tasks), figsize=(5 * len(box_tasks) + 1, 5), dpi=100, squeeze=False)
    for ax, t in zip(axes[0], box_tasks, strict=True):
        data = [_get(per[n], "speed", t, "latencies_s") or [math.nan] for n in names]
        box = ax.boxplot(data, patch_artist=True)
        for patch, c in zip(box["boxes"], color, strict=True):
            patch.set_facecolor(c)
            patch.set_alpha(0.6)
        ax.set_xticks(range(1, len(names) + 1))
        ax.set_xticklabels(names)
        ax.set_title(f"{t} requests")
        ax.set_ylabel("latency per request (s)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Per-request latency over all repeats")
    fig.tight_layout()
    _save(fig, out / "latency_distribution.png")
    _set_plot(out, agg.get("sets") or {}, names, color)


def _set_plot(out: Path, sets: dict[str, Any], names: Sequence[str], color: Sequence[Any]) -> None:
    """sets.png: quality (top) and median latency (bottom), one column per example set."""
    import matplotlib.pyplot as plt

    (out / "sets.png").unlink(missing_ok=True)
    if len(sets) < 2:
        return
    groups = list(sets.values())
    fig, axes = plt.subplots(2, len(groups), figsize=(5 * len(groups) + 1, 8), dpi=100, squeeze=False)
    width = 0.8 / max(1, len(names))
    parts = [
        ("find", "miou", "Find mIoU"),
        ("caption", "rouge_l", "ROUGE-L"),
        ("caption", "event_f1", "Event F1"),
    ]
    for col, group in enumerate(groups):
        per = group["variants"]
        rows = [
            (
                [lbl for _, _, lbl in parts] + ["Overall"],
                lambda v: [_get(v, "quality", t, k) for t, k, _ in parts] + [_get(v, "quality", "overall")],
            ),
            (
                ["caption", "find"],
                lambda v: [_get(v, "speed", t, "latency_s", "median") for t in ("caption", "find")],
            ),
        ]
        for row, (labels, get) in enumerate(rows):
            ax = axes[row][col]
            for i, n in enumerate(names):
                vals = [0.0 if x is None else x for x in get(per[n])]
                pos = [x + (i - (len(names) - 1) / 2) * width for x in range(len(labels))]
                ax.bar(pos, vals, width, label=n, color=color[i])
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, rotation=20, ha="right")
            ax.grid(axis="y", alpha=0.3)
            ax.legend()
        axes[0][col].set_ylim(0, 1.05)
        axes[0][col].set_title(f"{group['label']} ({group['data']['examples']} clips): quality")
        axes[1][col].set_title(f"{group['label']}: latency median")
        axes[1][col].set_ylabel("seconds per request")
    fig.suptitle("By example set (higher quality, lower latency is better)")
    fig.tight_layout()
    _save(fig, out / "sets.png")


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path)
    plt.close(fig)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | tuple):
        return list(obj)
    return str(obj)


def _finite(obj: Any) -> Any:
    """NaN/inf -> None so results.json is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def write_outputs(
    out: Path,
    examples: Sequence[Example],
    data_dir: Path,
    variants: Sequence[str],
    tasks: Sequence[str],
    repeats: int,
    settings: Settings,
    run: dict[str, Any],
    model_label: str,
) -> dict[str, Any]:
    """Recompute every aggregate file from requests.jsonl / variants.jsonl."""
    agg = aggregate(
        examples, variants, tasks, repeats, read_jsonl(out / REQUESTS_FILE), read_jsonl(out / VARIANTS_FILE)
    )
    results = {
        "schema": SCHEMA,
        "timestamp": _now(),
        "first_run": run.get("created"),
        "model_label": model_label,
        "models": {
            "model": settings.model,
            "bf16_id": settings.bf16_id,
            "revision": settings.revision,
            "gptq_id": settings.gptq_id,
            "gptq_revision": settings.gptq_revision,
            "extra_variants": settings.extra_variants,
            "sources": {
                v: {k: _get(agg["variants"][v], "load", k) for k in ("source", "revision", "quantized")}
                for v in variants
            },
        },
        "settings": dataclasses.asdict(settings),
        "environment": environment(),
        "environment_first_run": run.get("environment"),
        "data": {"dir": str(data_dir), "digest": run["fingerprint"]["data_digest"], **summarize(examples)},
        "run": {
            "variants": list(variants),
            "tasks": list(tasks),
            "repeats": repeats,
            "warmup_requests": 1,
            "video_cache": "off: every request reads and samples its video",
        },
        **agg,
    }
    results = _finite(results)
    (out / "results.json").write_text(
        json.dumps(results, indent=2, ensure_ascii=False, default=_json_default) + "\n", encoding="utf-8"
    )
    write_csv(out / "results.csv", agg)
    (out / "summary.md").write_text(render_summary(results), encoding="utf-8")
    write_plots(out, agg)
    return results


# ---------------------------------------------------------------------------
# Running the variants
# ---------------------------------------------------------------------------


def _bench_variant(engine: Any, variant: str, pending: Sequence[Request], out: Path, bar: Any) -> bool:
    """Load, warm up, run the pending requests, unload. Returns whether the variant loaded."""
    from marlin_demo.models import ModelLoadError

    bar.set_postfix_str(f"{variant}: loading")
    try:
        loaded = engine.load(variant)
    except ModelLoadError as exc:
        append_jsonl(
            out / VARIANTS_FILE, {"kind": "load", "variant": variant, "error": str(exc), "time": _now()}
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
        "time": _now(),
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
    """Import the model libraries once, before any load is timed, so that a variant's ``load_s`` is
    not charged with a one-off library import (gptqmodel alone takes 10+ s): whichever variant went
    first would otherwise pay it. Returns the seconds each import took (reported in results.json).
    """
    extra = settings.extra_variant_dirs
    kinds = set()
    for v in variants:
        if v == "gptq" or (v in extra and (extra[v] / "quantize_config.json").exists()):
            kinds.add("gptqmodel")
        elif v == "bnb4":
            kinds.add("bitsandbytes")
    from marlin_demo.models import import_gptqmodel

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


def parse_list(text: str, what: str, allowed: Sequence[str] | None = None, hint: str = "") -> list[str]:
    """Comma-separated names, deduplicated in order; ``hint`` is appended to the unknown-name error."""
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if name and name not in names:
            names.append(name)
    if not names:
        raise BenchError(f"--{what} is empty: give a comma-separated list.")
    if allowed is not None:
        bad = [n for n in names if n not in allowed]
        if bad:
            raise BenchError(f"unknown {what[:-1]} {bad[0]!r}: choose from {', '.join(allowed)}.{hint}")
    return names


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        return _bench(args)
    except (BenchError, DatasetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _bench(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        raise BenchError("--repeats must be at least 1.")
    if args.limit is not None and args.limit < 1:
        raise BenchError("--limit must be at least 1.")
    try:
        settings = settings_mod.from_args(args)
        extra = settings.extra_variant_dirs
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    allowed = [*VARIANTS, *extra]
    variants = parse_list(args.variants, "variants", allowed, " (add others with --extra-variants name=DIR)")
    tasks = parse_list(args.tasks, "tasks", TASKS)
    settings = settings.with_(variants=",".join(variants))
    data_dir = resolve_data(args.data) or (Path(args.data).expanduser() if args.data else DEFAULT_DATA)
    if not data_dir.is_dir():
        raise BenchError(
            f"the data folder {data_dir} does not exist: pass --data DIR (a folder with examples.json)."
        )
    examples = load_dataset(data_dir)
    if args.limit:  # the first N clips of each set, so a quick run still covers every set
        examples = [ex for exs in example_sets(examples).values() for ex in exs[: args.limit]]
    plans = {v: plan_requests(examples, v, tasks, args.repeats) for v in variants}
    if not any(plans.values()):
        raise BenchError(
            f"nothing to run: the data has no {' or '.join(tasks)} ground truth for --tasks {args.tasks}."
        )

    out = Path(args.out).expanduser()
    run = prepare_out(out, fingerprint(settings, dataset_digest(data_dir)), args.fresh)
    done = {record_key(r) for r in read_jsonl(out / REQUESTS_FILE) if r.get("ok")}
    pending = {v: [r for r in plan if r.key not in done] for v, plan in plans.items()}
    total = sum(len(p) for p in pending.values())
    skipped = sum(len(p) for p in plans.values()) - total
    if skipped:
        print(f"Resuming in {out}: {skipped} request(s) already recorded, {total} to run.", file=sys.stderr)

    from tqdm import tqdm

    load_failed = False
    model_label = "?"
    with contextlib.redirect_stdout(sys.stderr):
        from marlin_demo.engine import Engine

        import_s = preimport_backends([v for v in variants if pending[v]], settings) if total else {}

        # video_cache_size=0: every request reads and samples its video, the same for all variants
        engine = Engine(settings, video_cache_size=0)
        model_label = engine.model_label
        with tqdm(
            total=total,
            desc="bench",
            unit="req",
            file=sys.stderr,
            dynamic_ncols=True,
            disable=not total,
        ) as bar:
            for v in variants:
                if not pending[v]:
                    continue
                load_failed |= not _bench_variant(engine, v, pending[v], out, bar)
        if import_s:
            append_jsonl(out / VARIANTS_FILE, {"kind": "imports", "import_s": import_s, "time": _now()})
        results = write_outputs(
            out, examples, data_dir, variants, tasks, args.repeats, settings, run, model_label
        )
    print(render_summary(results).split("## Speed and memory")[0].rstrip())
    print()
    print(
        f"Wrote {out}/: results.json, results.csv, summary.md, quality.png, latency.png, memory.png, "
        f"latency_distribution.png{', sets.png' if len(results.get('sets') or {}) > 1 else ''} "
        f"(per-request records: {REQUESTS_FILE})"
    )
    return EXIT_LOAD_FAILED if load_failed else EXIT_OK


def register(subparsers: Any) -> None:
    """Add ``bench`` (and its ``convert-charades`` helper) to the CLI."""
    p = subparsers.add_parser(
        "bench",
        help="benchmark the variants (speed, memory, quality) on a data folder",
        description=(
            "Run every request of --data on each variant (one warm-up each, then --repeats passes), "
            "write results.json/.csv, summary.md and plots to --out. Rerunning with the same --out resumes. "
            "See docs/BENCHMARK.md."
        ),
    )
    p.add_argument(
        "--variants",
        default=DEFAULT_VARIANTS,
        help=f"comma-separated variants to compare (default {DEFAULT_VARIANTS}; add bf16 for "
        "agreement and retention vs 16-bit)",
    )
    p.add_argument(
        "--data",
        default=None,
        help="folder with examples.json and the videos (default: examples/); `long`: the long-video set",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"passes over the data per variant (default {DEFAULT_REPEATS})",
    )
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT}/)")
    p.add_argument("--tasks", default="caption,find", help="caption, find or both (default caption,find)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N clips of each example set")
    p.add_argument("--fresh", action="store_true", help="discard earlier results in --out and start over")
    settings_mod.add_arguments(p, only=SETTINGS_FLAGS)
    p.set_defaults(func=cmd_bench)
    sub = p.add_subparsers(dest="bench_command", title="helpers", metavar="{convert-charades,build-long-set}")
    add_convert_parser(sub)
    add_long_set_parser(sub)
