"""Scores against the ground truth and agreement between variants (pure: records -> figures)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from marlin_demo.agreement import agreement as pair_agreement
from marlin_demo.bench.longrecords import record_moments
from marlin_demo.contract import Event
from marlin_demo.datasets import Example
from marlin_demo.metrics import best_iou, caption_scores, moment_scores, precision_recall_f1


def _scored(
    idx: dict[tuple, dict[str, Any]], variant: str, task: str, name: str, query: str | None, repeats: int
):
    """The record quality is scored on: the first successful repeat (greedy decoding: repeats agree)."""
    recs = [r for rep in range(repeats) if (r := idx.get((variant, task, name, query, rep))) is not None]
    return next((r for r in recs if r.get("ok")), recs[0] if recs else None)


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
                    **{k: sc[k] for k in ("rouge_l", "keyword_coverage")},
                    **{f"event_{k}": sc[k] for k in ("precision", "recall", "f1")},
                    "event_mean_iou": sc["mean_matched_iou"],
                    **{k: sc[k] for k in ("n_pred", "n_ref")},
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
    asked: dict[str, list[tuple[str, str | None]]] = {
        "find": [(ex.name, q.query) for ex in examples for q in ex.queries],
        "caption": [(ex.name, None) for ex in examples if ex.has_caption_truth],
    }
    out: dict[str, Any] = {}
    for task, keys in asked.items():
        if task not in tasks:
            continue
        pairs = []
        for name, query in keys:
            a = _scored(idx, variant, task, name, query, repeats)
            b = _scored(idx, reference, task, name, query, repeats)
            if a and a.get("ok") and b and b.get("ok"):
                pairs.append((pair_agreement(task, {"a": a, "b": b})["a|b"], a.get("raw") == b.get("raw")))
        if pairs:
            out[task] = {k: statistics.fmean(p[k] for p, _ in pairs) for k in pairs[0][0]}
            out[task]["same_answer_rate"] = sum(same for _, same in pairs) / len(pairs)
            out[task]["n"] = len(pairs)
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
