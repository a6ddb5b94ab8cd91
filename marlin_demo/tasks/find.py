"""The find task: a start-end span for a described event, scored by the model's own token probabilities,
merged across windows into ranked moments (docs/LONG_VIDEOS.md), printed, compared and scored here."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

from marlin_demo import metrics, model_io
from marlin_demo.model_io import SpanParse
from marlin_demo.results import FindResult, Moment, Result, Window
from marlin_demo.settings import Settings
from marlin_demo.tasks.registry import Answer, Figure, Made, Task, label, register_task, seconds, shift, value

DEDUP_IOU = 0.5  # public Marlin CLI: hits with IoU >= 0.5 ...
DEDUP_START_S = 5.0  # ... or starts within 5 s are one moment


# Mapping one window's span to the video's timeline, and merging windows into moments


def map_span(fixed: SpanParse, window: Window, offset: float | None = None) -> SpanParse:
    """A window's span, as the engine repaired it, shifted to the video's time (as ``map_caption``)."""
    off = window.start if offset is None else float(offset)
    span = (
        None if fixed.span is None else (shift(fixed.span[0], off, window), shift(fixed.span[1], off, window))
    )
    return SpanParse(span, fixed.format_ok, fixed.repaired, [label(window, n) for n in fixed.repairs])


def duplicates(a: Moment, b: Moment) -> bool:
    """Public Marlin CLI rule: one moment when IoU >= 0.5 or the starts are within 5 s."""
    return (
        metrics.temporal_iou((a.start, a.end), (b.start, b.end)) >= DEDUP_IOU
        or abs(a.start - b.start) <= DEDUP_START_S
    )


def merge_moments(answers: Sequence[tuple[Window, SpanParse, float | None]], top_k: int) -> list[Moment]:
    """Mapped (global) spans with their scores -> at most ``top_k`` moments, best first: greedy by score
    (ties: earlier start, then window), a duplicate of a kept moment dropped; scores clamped to [0, 1]."""
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k!r}.")
    cands = [
        Moment(p.span[0], p.span[1], min(1.0, max(0.0, float(s))), w.index)
        for w, p, s in answers
        if p.span is not None and s is not None and math.isfinite(float(s))
    ]
    cands.sort(key=lambda m: (-m.score, m.start, m.window))
    kept: list[Moment] = []
    for m in cands:
        if not any(duplicates(m, k) for k in kept):
            kept.append(m)
        if len(kept) == top_k:
            break
    return kept


def best_span(moments: Sequence[Moment]) -> tuple[float, float] | None:
    """The ``span`` key: the best moment, or None when no window gave a usable span."""
    return (moments[0].start, moments[0].end) if moments else None


def _span(result: Any) -> tuple[float, float] | None:
    span = value(result, "span")
    return None if span is None else (float(span[0]), float(span[1]))


def normalize_query(query: str | None) -> str:
    """Casefolded, whitespace-collapsed, without trailing punctuation or quotes: for matching queries."""
    text = " ".join(str(query or "").casefold().split())
    return text.strip(" .!?\"'\u201c\u201d")


def truth_span(example: Mapping[str, Any], query: str | None) -> tuple[float, float] | None:
    """The reference span of ``query`` in an example, or None when the example has no such query."""
    wanted = normalize_query(query)
    if not wanted:
        return None
    for item in example.get("queries", []) or []:
        if normalize_query(item.get("query")) == wanted and item.get("span") is not None:
            return float(item["span"][0]), float(item["span"][1])
    return None


def record_moments(record: dict[str, Any]) -> list[tuple[float, float]]:
    """A bench record's moments as (start, end), best first; without moments (an older record, or an
    answer the score could not rate) its span alone, so R5 never misses what R1 counts."""
    if moments := record.get("moments"):
        return [(float(m["start"]), float(m["end"])) for m in moments]
    span = _span(record)
    return [] if span is None else [span]


class FindAnswer(Answer):
    """A span, scored by the model's confidence in its times; a long video's spans become ranked moments."""

    form = "“From <start> to <end>.”"
    returns = (
        'JSON {"variant": str, "model": str, "query": str, "span": [start, end] or null, "format_ok": '
        'bool, "raw": str, "metrics": {...as for caption}, "moments": [{"start": float, "end": float, '
        '"score": float}]}. The span is in seconds from the start of the clip and lies inside it; null '
        'when the answer gave no usable span; "format_ok" says the answer was in the trained "From '
        '<start> to <end>." form.'
    )
    logprobs = True
    figures = (
        Figure("miou", "Find mIoU", overall=True, short="Find mIoU"),
        Figure("r1@0.3", "Find R1@0.3"),
        Figure("r1@0.5", "Find R1@0.5", overall=True),
        Figure("r1@0.7", "Find R1@0.7"),
        Figure("r5@0.5", "Find R5@0.5 (any of the top 5 moments)"),
        Figure("occurrence_recall@0.5", "Find occurrences found (true spans matched at IoU 0.5)"),
        Figure("parse_rate", "Find parse rate (a span was read)"),
        Figure("format_rate", "Find format rate ('From X to Y.')"),
    )
    measures = (("span_iou", "span IoU"),)

    def build(self, fixed: SpanParse, made: Made) -> FindResult:
        span, score = fixed.span, made.score
        moments = [] if span is None or score is None else [Moment(span[0], span[1], score)]
        return made.result(FindResult, fixed, query=made.query, span=span, moments=moments)

    def merge(self, windows: Sequence[tuple[Result, Window, float]], made: Made) -> FindResult:
        """The windows' spans (as the engine repaired and scored them) as moments on the video's time."""
        answers = []
        for result, window, offset in windows:
            r = cast(FindResult, result)
            fixed = SpanParse(r.span, r.format_ok, r.repaired, list(r.info.repairs))
            mapped = map_span(fixed, window, offset)
            answers.append((window, mapped, r.moments[0].score if r.moments else None))
        moments = merge_moments(answers, max(1, made.settings.top_k))
        made.info.repairs = [note for _, p, _ in answers for note in p.repairs]
        ok, repaired = all(p.format_ok for _, p, _ in answers), any(p.repaired for _, p, _ in answers)
        best = SpanParse(best_span(moments), ok, repaired)
        return dataclasses.replace(self.build(best, made), moments=moments)

    def text(self, result: Result) -> list[str]:
        d = result.to_dict()
        lines = [f"Query: {d['query']}"]
        if d["span"] is None:
            lines.append(f"No span: the answer did not give a usable time range (raw: {d['raw']!r}).")
        else:
            s, e = d["span"]
            lines.append(f"Span: {s:.1f} s - {e:.1f} s")
            if not d["format_ok"]:
                lines.append(
                    "The answer was not in the trained 'From <start> to <end>.' format; read leniently."
                )
        if d["moments"]:
            lines.append("Moments (best first, score = the model's confidence in the times, 0-1):")
            for m in d["moments"]:
                lines.append(f"  {seconds(m['start'])} - {seconds(m['end'])}  score {m['score']:.3f}")
        if len(result.info.windows) > 1:
            lines.append(f"Searched {len(result.info.windows)} windows, each as its own clip.")
        if result.repaired:
            lines.append("Repaired: " + "; ".join(result.info.repairs))
        return lines

    def agree(self, a: Any, b: Any, min_iou: float) -> dict[str, float]:
        """Temporal IoU of the two spans (a missing span counts as 0.0)."""
        return {"span_iou": metrics.temporal_iou(_span(a), _span(b))}

    def truth(self, example: Mapping[str, Any], query: str | None) -> tuple[float, float] | None:
        return truth_span(example, query)

    def score(self, result: Any, example: Mapping[str, Any], query: str | None) -> dict[str, Any]:
        ref = truth_span(example, query if query is not None else value(result, "query"))
        if ref is None:
            return {}
        scores: dict[str, Any] = dict(metrics.grounding_scores([_span(result)], [ref]))
        scores["ref_span"] = [ref[0], ref[1]]
        return scores

    def score_row(self, scores: Mapping[str, Any]) -> dict[str, Any]:
        ref = scores.get("ref_span")
        row = {
            "IoU vs truth": scores.get("miou"),
            **{k.upper(): scores.get(k) for k in ("r1@0.3", "r1@0.5", "r1@0.7")},
        }
        return {**row, "truth span (s)": "–" if not ref else f"{ref[0]:.1f}–{ref[1]:.1f}"}

    def windows_note(self, settings: Settings) -> str:
        return (
            '. The JSON\'s "moments" are every place the event was found, best first, at most '
            f"{settings.top_k}, duplicates merged; score (0-1) is the model's own token probability for the "
            'times, for ranking; "span" is the best moment (for a short video "moments" holds its one '
            "scored span)."
        )

    def record(self, result: Result) -> dict[str, Any]:
        r = cast(FindResult, result)
        span = None if r.span is None else [float(r.span[0]), float(r.span[1])]
        return {"moments": r.to_dict()["moments"], "span": span}

    def quality(self, asked: Sequence[tuple[Any, Any, dict[str, Any] | None]]) -> tuple[dict[str, Any], list]:
        """Grounding against every true span of each query, the moments ranked (R5), the format rate."""
        items = []
        for ex, q, rec in asked:
            got = rec if rec and rec.get("ok") else {}
            span, spans = got.get("span"), [list(s) for s in q.spans]  # every true span (it can recur)
            items.append(
                {
                    "video": ex.name, "query": q.query, "reference": list(q.span), "references": spans,
                    "span": span, "moments": record_moments(got), "iou": metrics.best_iou(span, q.spans),
                    "format_ok": bool(got.get("format_ok")), "ok": bool(got),
                }
            )  # fmt: skip
        refs = [q.spans for _, q, _ in asked]
        g = metrics.moment_scores([i["span"] for i in items], [i["moments"] for i in items], refs)
        g["format_rate"] = sum(i["format_ok"] for i in items) / len(items)
        return g, items


FIND = register_task(
    Task(
        name="find",
        order=20,
        help="start-end span of a described event",
        prompt=lambda query: model_io.FIND_PROMPT_TEMPLATE.format(query=query),
        parse=lambda text: model_io.parse_span(text),
        repair=model_io.repair_span,
        answer=FindAnswer(),
        max_new_tokens="find_max_new_tokens",
        window_s="find_window_s",
        overlap_s="find_overlap_s",
        query=True,
        query_label="What happens? Describe one event",
        query_placeholder="e.g. the red ball rolls across the field",
        query_help='The event in plain words, e.g. "a person opens the door" (not empty).',
        examples=lambda example: [q["query"] for q in example.get("queries") or []],
        noun="a find",
        plural="find",
        summary="Find when a described event happens in a video: one start-end span in seconds.",
    )
)
