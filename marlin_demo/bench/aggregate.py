"""Every figure of results.json from the records (pure): per variant speed, quality against the ground truth,
agreement and stability, per example set, and the headline pair (``variants.HEADLINE``, GPTQ vs bnb4)."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from marlin_demo.agreement import (
    agreement as pair_agreement,  # alias: this module defines its own agreement()
)
from marlin_demo.bench.matrix import Request, asks, plan_requests, record_key
from marlin_demo.datasets import Example, example_sets, set_label, summarize
from marlin_demo.tasks import TASKS, get_task
from marlin_demo.variants import HEADLINE


def _scored(
    idx: dict[tuple, dict[str, Any]], variant: str, task: str, name: str, query: str | None, repeats: int
):
    """The record quality is scored on: the first successful repeat (greedy decoding: repeats agree)."""
    recs = [r for rep in range(repeats) if (r := idx.get((variant, task, name, query, rep))) is not None]
    return next((r for r in recs if r.get("ok")), recs[0] if recs else None)


def quality_rows() -> list[tuple[str, str, str]]:
    """(task, key, label) of every quality figure, the tasks in the registry's order."""
    return [(name, f.key, f.label) for name, task in TASKS.items() for f in task.answer.figures]


def _asked(examples: Sequence[Example], tasks: Sequence[str]) -> dict[str, list[tuple[Example, Any]]]:
    """Per task run (registry order): the (example, query) pairs it asks (``matrix.asks``), when any."""
    out = {name: [(ex, q) for ex in examples for q in asks(ex, name)] for name in TASKS if name in tasks}
    return {name: pairs for name, pairs in out.items() if pairs}


def quality(
    examples: Sequence[Example],
    idx: dict[tuple, dict[str, Any]],
    variant: str,
    tasks: Sequence[str],
    repeats: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Scores against ground truth (each task's answer type scores its own), and one row per scored item
    (results.json ``items``); ``overall`` is the mean of the figures marked for it."""
    items: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    for name, pairs in _asked(examples, tasks).items():
        rows = [(ex, q, _scored(idx, variant, name, ex.name, q and q.query, repeats)) for ex, q in pairs]
        out[name], scored = get_task(name).answer.quality(rows)
        items += [{"variant": variant, "task": name, **item} for item in scored]
    parts = [out[t][f.key] for t in list(out) for f in get_task(t).answer.figures if f.overall]
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
    for task, pairs in _asked(examples, tasks).items():
        matched = []
        for ex, q in pairs:
            a = _scored(idx, variant, task, ex.name, q and q.query, repeats)
            b = _scored(idx, reference, task, ex.name, q and q.query, repeats)
            if a and a.get("ok") and b and b.get("ok"):
                matched.append((pair_agreement(task, {"a": a, "b": b})["a|b"], a.get("raw") == b.get("raw")))
        if matched:
            out[task] = {k: statistics.fmean(p[k] for p, _ in matched) for k in matched[0][0]}
            out[task]["same_answer_rate"] = sum(same for _, same in matched) / len(matched)
            out[task]["n"] = len(matched)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def retention(q: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """quantized score / reference score for every quality metric (None where the reference is 0)."""
    out: dict[str, Any] = {}
    for task, key, _ in quality_rows():
        if task in q and task in ref:
            out.setdefault(task, {})[key] = _ratio(q[task].get(key), ref[task].get(key))
    out["overall"] = _ratio(q.get("overall"), ref.get("overall"))
    return out


def stats(values: Iterable[float | None]) -> dict[str, float] | None:
    """n, mean, median, min, max, stdev and quartiles (p25/p75) of the non-None values."""
    xs = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    if not xs:
        return None
    many = len(xs) >= 2
    p25, _, p75 = statistics.quantiles(xs, n=4, method="inclusive") if many else xs * 3
    return {
        "n": len(xs),
        "mean": statistics.fmean(xs),
        "median": statistics.median(xs),
        "min": xs[0],
        "max": xs[-1],
        "stdev": statistics.stdev(xs) if many else 0.0,
        "p25": p25,
        "p75": p75,
    }


#: what results.json keeps of a variant's load record (cli.bench_variant), in this order
LOAD_KEYS = tuple(
    "load_s footprint_mb kernel compute_dtype attention compile decode device allocated_after_load_mb "
    "source revision quantized warmup_s error".split()
)
WINDOW_COST_KEYS = ("windows", "latency_per_window_s", "decode_per_window_s")


def window_cost(record: dict[str, Any]) -> dict[str, float | None]:
    """Windows answered, and the request's latency and video read + sample time divided by them (the
    bench's engine keeps no prefix cache, so there is no prefill time to divide)."""
    n = max(1, int(record.get("windows") or 1))
    latency = (record.get("metrics") or {}).get("latency_s")
    decode = record.get("decode_s")
    return {
        "windows": float(n),
        "latency_per_window_s": None if latency is None else float(latency) / n,
        "decode_per_window_s": None if decode is None else float(decode) / n,
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


def speed(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per task and over all requests: latency, TTFT, decode tok/s, tokens, memory, video decode."""
    out: dict[str, Any] = {}
    groups = {"all": list(records)}
    groups.update({t: sel for t in TASKS if (sel := [r for r in records if r["task"] == t])})
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
    for key in ("memory_kind", "device"):  # one value, or every one seen
        seen = sorted({r["metrics"].get(key, "") for r in records})
        out[key] = seen[0] if len(seen) == 1 else ",".join(seen) or None
    return out


def _stability(idx: dict[tuple, dict[str, Any]], plan: Sequence[Request]) -> float | None:
    """Share of requests (with >= 2 successful repeats) whose raw answer was identical in every repeat."""
    answers: dict[tuple, list[str]] = {}
    for req in plan:
        rec = idx.get(req.key)
        if rec and rec.get("ok"):
            answers.setdefault(req.key[:4], []).append(rec.get("raw", ""))
    multi = [set(a) for a in answers.values() if len(a) >= 2]
    return sum(len(a) == 1 for a in multi) / len(multi) if multi else None


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
            "load": {k: load.get(k) for k in LOAD_KEYS},
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
        for v in [v for v in variants if v != reference]:
            per[v]["agreement_with_" + reference] = agreement(examples, idx, v, reference, tasks, repeats)
            per[v]["retention_vs_" + reference] = retention(per[v]["quality"], per[reference]["quality"])
    comparison: dict[str, Any] = {}
    a, b = HEADLINE  # the JSON key names the pair: gptq_vs_bnb4
    if a in per and b in per:
        comparison[f"{a}_vs_{b}"] = {
            name: _rel(get(per[a]), get(per[b]))
            for name, _, get, _ in _seed_rows(per)
            if name != f"retention_vs_{b}"
        }
        comparison[f"{a}_vs_{b}"]["overall_retention"] = _ratio(
            per[a]["quality"]["overall"], per[b]["quality"]["overall"]
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


def _getter(*path: str) -> Any:
    return lambda v: _get(v, *path)


def _memory_label(per: dict[str, Any]) -> str:
    kinds = {_get(v, "speed", "memory_kind") for v in per.values()} - {None}
    if kinds == {"cuda_peak_allocated"}:
        return "Peak allocated VRAM (MB)"
    if kinds == {"cpu_peak_rss"}:
        return "Peak process RSS (MB, CPU: not per variant)"
    return "Peak memory (MB)"


def _seed_rows(per: dict[str, Any]) -> list[tuple[str, str, Any, str]]:
    """(key, label, getter, format) rows of the seed card's table, in its order."""
    base = HEADLINE[1]  # retention is against the headline's 4-bit baseline (bnb4)
    base_overall = _get(per.get(base), "quality", "overall")
    latency = functools.partial(_getter, "speed", "all", "latency_s")
    return [
        ("latency_mean_s", "Latency per request, mean (s)", latency("mean"), "s"),
        ("latency_median_s", "Latency per request, median (s)", latency("median"), "s"),
        ("peak_memory_mb", _memory_label(per), _getter("speed", "all", "peak_memory_mb", "max"), "mb"),
        (
            f"retention_vs_{base}",
            f"Accuracy retention vs {base} (overall score)",
            lambda v: _ratio(_get(v, "quality", "overall"), base_overall),
            "pct",
        ),
        *(
            (f.seed, f.label, _getter("quality", name, f.key), "q")
            for name, task in TASKS.items()
            for f in task.answer.figures
            if f.seed
        ),
    ]
