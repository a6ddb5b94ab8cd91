"""The caption task: a scene paragraph and timed events. Its answer is built, merged across windows (events
cut by a window boundary joined into one timeline: docs/LONG_VIDEOS.md), printed, compared and scored here."""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from marlin_demo import metrics, model_io, subtitles
from marlin_demo.model_io import CaptionParse, Event
from marlin_demo.results import CaptionResult, Result, Window
from marlin_demo.settings import Settings
from marlin_demo.tasks.registry import Answer, Figure, Made, Task, label, register_task, seconds, shift, value

BOUNDARY_TOL_S = 1.0  # an event "touches" a window boundary within this many seconds
SIMILAR_DESCRIPTION = 0.6  # description similarity (see description_similarity) to join a cut event


# Mapping one window's caption to the video's timeline, and merging windows


def map_caption(fixed: CaptionParse, window: Window, offset: float | None = None) -> CaptionParse:
    """A window's caption, as the engine repaired it against the window's length, shifted to the video's
    time (``offset``: the video time of the window's first frame, default its start); notes name it."""
    off = window.start if offset is None else float(offset)
    events = [
        Event(shift(e.start, off, window), shift(e.end, off, window), e.description) for e in fixed.events
    ]
    notes = [label(window, n) for n in fixed.repairs]
    return CaptionParse(fixed.scene, events, fixed.format_ok, fixed.repaired, notes)


_STOP = frozenset(
    "a an the and or of to in on at by for with from into onto over under is are was were be been "
    "it its this that these those there then while as up down out off again still continues".split()
)
_WORD_RE = re.compile(r"[a-z0-9]+")


def description_similarity(a: str, b: str) -> float:
    """ROUGE-L F1 of two descriptions' content words (no stop words, each cut to 4 letters)."""
    x, y = ([w[:4] for w in _WORD_RE.findall(t.casefold()) if w not in _STOP] for t in (a, b))
    if not x or not y:
        return 0.0
    prev = [0] * (len(y) + 1)
    for xi in x:
        cur = [0]
        for j, yj in enumerate(y):
            cur.append(prev[j] + 1 if xi == yj else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(y), lcs / len(x)
    return 2 * p * r / (p + r)


@dataclass
class MergedCaption(CaptionParse):
    """One timeline for the whole video; ``windows`` keeps each window's scene."""

    windows: list[dict[str, Any]] = field(default_factory=list)
    joined: list[str] = field(default_factory=list)  # notes: events joined across a boundary


def _join_scenes(scenes: Sequence[str]) -> str:
    """Scenes in order as one paragraph; a scene equal (case/space blind) to an earlier one is skipped."""
    first: dict[str, str] = {}  # comparison key -> the first scene with it
    for s in filter(None, (" ".join(s.split()) for s in scenes)):
        first.setdefault(s.casefold().rstrip(" .!?"), s)
    return " ".join(s if s[-1] in ".!?" else s + "." for s in first.values())


def merge_captions(windows: Sequence[tuple[Window, CaptionParse]]) -> MergedCaption:
    """Join consecutive windows' mapped captions into one timeline, joining an event cut by a boundary
    (docs/LONG_VIDEOS.md); works on any prefix of the windows, so a stream re-merges as each finishes."""
    timeline: list[tuple[Event, int]] = []  # (event, index into ``windows`` that gave its end)
    joined: list[str] = []
    for k, (window, parse) in enumerate(windows):  # (the first window has no tails to join)
        incoming, edge = list(parse.events), windows[k - 1][0].end - BOUNDARY_TOL_S
        tails = [i for i, (e, src) in enumerate(timeline) if src == k - 1 and e.end >= edge]
        heads = [j for j, e in enumerate(incoming) if e.start <= window.start + BOUNDARY_TOL_S]
        pairs = metrics.greedy_pairs(
            (sim, i, j)
            for i in tails
            for j in heads
            if (sim := description_similarity(timeline[i][0].description, incoming[j].description))
            >= SIMILAR_DESCRIPTION
            and incoming[j].start <= timeline[i][0].end + BOUNDARY_TOL_S
        )
        used_j = {j for _, j, _ in pairs}
        for i, j, _ in pairs:
            a, b = timeline[i][0], incoming[j]
            desc = a.description if a.end - a.start >= b.end - b.start else b.description
            timeline[i] = (Event(a.start, max(a.end, b.end), desc), k)
            joined.append(f"joined an event cut by the window boundary at {model_io.clock(window.start)}")
        timeline.extend((e, k) for j, e in enumerate(incoming) if j not in used_j)
    return MergedCaption(
        scene=_join_scenes([p.scene for _, p in windows]),
        events=[e for e, _ in timeline],
        format_ok=all(p.format_ok for _, p in windows),
        repaired=any(p.repaired for _, p in windows),
        repairs=[note for _, p in windows for note in p.repairs],
        windows=[{"start": w.start, "end": w.end, "scene": p.scene} for w, p in windows],
        joined=joined,
    )


def _events(result: Any) -> list[Any]:
    return list(value(result, "events", []) or [])


class CaptionAnswer(Answer):
    """A scene paragraph and its events on the video's timeline (a long video's windows each keep a scene)."""

    form = "Scene / Events"
    returns = (
        'JSON {"variant": str, "model": str, "scene": str, "events": [{"start": float, "end": float, '
        '"description": str}], "raw": str, "repaired": bool, "metrics": {"latency_s": float, "ttft_s": '
        'float, "output_tokens": int, "tokens_per_s": float, "video_tokens": int, "peak_memory_mb": '
        'float, "memory_kind": str, "load_s": float|null, "device": str}, "windows": [{"start": float, '
        '"end": float, "scene": str}], "chapters": {...}}. Times are seconds from the start of the clip '
        'and lie inside it; "raw" is exactly what the model wrote; "repaired" is true when events were '
        "clamped into the clip or de-duplicated."
    )
    figures = (
        Figure("rouge_l", "Caption score (ROUGE-L)", overall=True, short="ROUGE-L", seed="caption_score"),
        Figure("keyword_coverage", "Keyword coverage", overall=True, seed="keyword_coverage"),
        Figure("event_mean_iou", "Event mean matched IoU"),
        Figure("event_precision", "Event precision"),
        Figure("event_recall", "Event recall"),
        Figure("event_f1", "Event F1", overall=True, short="Event F1"),
        Figure("parse_rate", "Caption parse rate (>= 1 event read)"),
        Figure("format_rate", "Caption format rate (Scene/Events)"),
    )
    measures = (("event_iou", "event IoU"), ("event_f1", "event F1"), ("rouge_l", "ROUGE-L"))
    formats = (("chapters", "print YouTube chapters (0:00 Title lines) to paste into a video description"),)

    def build(self, fixed: CaptionParse, made: Made) -> CaptionResult:
        whole = [{"start": 0.0, "end": made.duration_s, "scene": fixed.scene}]
        return made.result(CaptionResult, fixed, scene=fixed.scene, events=list(fixed.events), windows=whole)

    def merge(self, windows: Sequence[tuple[Result, Window, float]], made: Made) -> CaptionResult:
        """One timeline of the windows' captions (as the engine repaired them), on the video's time."""
        parts = []
        for result, window, offset in windows:
            r = cast(CaptionResult, result)
            fixed = CaptionParse(r.scene, list(r.events), r.format_ok, r.repaired, list(r.info.repairs))
            parts.append((window, map_caption(fixed, window, offset)))
        merged = merge_captions(parts)
        made.info.repairs = [*merged.repairs, *merged.joined]
        return dataclasses.replace(self.build(merged, made), windows=list(merged.windows))

    def to_json(self, result: Result) -> dict[str, Any]:
        """The result plus its chapters (``0:00 Title`` lines, or why the clip has none)."""
        data = result.to_dict()
        data["chapters"] = chapters_of(cast(CaptionResult, result)).to_dict()
        return data

    def formatted(self, result: Result, flag: str) -> tuple[str, str]:
        """``--chapters``: the chapters' lines (none: the reason, for stderr)."""
        chapters = chapters_of(cast(CaptionResult, result))
        return "\n".join(chapters.lines), "" if chapters.lines else chapters.reason

    def text(self, result: Result) -> list[str]:
        d = result.to_dict()
        lines = ["", f"Scene: {d['scene'] or '(none)'}", "", "Events:"]
        if not d["events"]:
            lines.append("  (no timed events could be read from the answer)")
        for e in d["events"]:
            lines.append(f"  {seconds(e['start'])} - {seconds(e['end'])}  {e['description']}")
        if len(d["windows"]) > 1:
            lines += ["", f"Windows ({len(d['windows'])}, each answered as its own clip):"]
            for w in d["windows"]:
                lines.append(f"  {seconds(w['start'])} - {seconds(w['end'])}  {w['scene'] or '(no scene)'}")
        if not result.format_ok:
            lines += [
                "",
                "The answer was not in Marlin's Scene/Events format; shown as far as it could be read.",
            ]
        if d["repaired"]:
            lines += ["", "Repaired: " + "; ".join(result.info.repairs)]
        return lines

    def agree(self, a: Any, b: Any, min_iou: float) -> dict[str, float]:
        """Matched events (``min_iou``) and ROUGE-L of the whole texts."""
        ev_a, ev_b = _events(a), _events(b)
        scores = metrics.event_scores(ev_a, ev_b, min_iou=min_iou)
        text_a = metrics.caption_text(str(value(a, "scene", "") or ""), ev_a)
        text_b = metrics.caption_text(str(value(b, "scene", "") or ""), ev_b)
        return {
            "event_iou": float(scores["mean_matched_iou"]),
            "event_f1": float(scores["f1"]),
            "rouge_l": metrics.rouge_l(text_a, text_b),
        }

    def score(self, result: Any, example: Any, query: str | None) -> dict[str, Any]:
        ref_events = list(example.get("events", []) or [])
        ref_scene = str(example.get("scene", "") or "")
        if not ref_events and not ref_scene:
            return {}
        return metrics.caption_scores(
            str(value(result, "scene", "") or ""), _events(result), ref_scene, ref_events
        )

    def score_row(self, scores: Mapping[str, Any]) -> dict[str, Any]:
        titles = {"rouge_l": "ROUGE-L", "keyword_coverage": "keyword coverage", "f1": "event F1"}
        row = {
            title: scores.get(k) for k, title in {**titles, "mean_matched_iou": "matched-event IoU"}.items()
        }
        return {**row, "events (pred/ref)": f"{scores.get('n_pred')}/{scores.get('n_ref')}"}

    def windows_note(self, settings: Settings) -> str:
        return (
            '; the events are on one timeline and the JSON\'s "windows": [{"start": float, "end": float, '
            '"scene": str}] are the windows answered with each one\'s scene (one entry [0, duration] for a '
            'short video); "scene" is their scenes in order.'
        )

    def record(self, result: Result) -> dict[str, Any]:
        r = cast(CaptionResult, result)
        return {"scene": r.scene, "events": [e.to_dict() for e in r.events]}

    def quality(self, asked: Sequence[tuple[Any, Any, dict[str, Any] | None]]) -> tuple[dict[str, Any], list]:
        """ROUGE-L and keyword coverage of the whole text per example; events matched by time, counted over
        all examples (a failed request scores as an empty answer)."""
        items, repaired = [], []
        for ex, _, rec in asked:
            got = rec if rec and rec.get("ok") else {}
            events = [Event.from_dict(e) for e in got.get("events", [])]
            sc = metrics.caption_scores(got.get("scene", ""), events, ex.scene, ex.events)
            repaired.append(bool(got.get("repaired")))
            items.append(
                {
                    "video": ex.name,
                    "ok": bool(got),
                    **{k: sc[k] for k in ("rouge_l", "keyword_coverage")},
                    **{f"event_{k}": sc[k] for k in ("precision", "recall", "f1")},
                    "event_mean_iou": sc["mean_matched_iou"],
                    **{k: sc[k] for k in ("n_pred", "n_ref")},
                    "format_ok": bool(got.get("format_ok")),
                }
            )
        tps = [round(i["event_recall"] * i["n_ref"]) if i["n_ref"] else 0 for i in items]  # matched events
        matched = [i["event_mean_iou"] for i, tp in zip(items, tps, strict=True) for _ in range(tp)]
        n, n_pred, n_ref = len(items), sum(i["n_pred"] for i in items), sum(i["n_ref"] for i in items)
        precision, recall, f1 = metrics.precision_recall_f1(sum(tps), n_pred, n_ref)
        return {
            "rouge_l": statistics.fmean(i["rouge_l"] for i in items),
            "keyword_coverage": statistics.fmean(i["keyword_coverage"] for i in items),
            "event_mean_iou": statistics.fmean(matched) if matched else 0.0,
            **{"event_precision": precision, "event_recall": recall, "event_f1": f1},
            "parse_rate": sum(i["n_pred"] > 0 for i in items) / n,
            "format_rate": sum(i["format_ok"] for i in items) / n,
            "repaired_rate": sum(repaired) / n,
            **{"n": n, "n_pred_events": n_pred, "n_ref_events": n_ref},
        }, items


def chapters_of(result: CaptionResult) -> subtitles.Chapters:
    """A caption's chapters (``0:00 Title`` lines), or why it has none (a short video, a range asked)."""
    return subtitles.chapters(result.events, result.info.duration_s, result.range_s)


CAPTION = register_task(
    Task(
        name="caption",
        order=10,
        help="scene paragraph and timed events for a video",
        prompt=lambda _query: model_io.CAPTION_PROMPT,
        parse=lambda text: model_io.parse_caption(text),  # looked up per call: a test may count them
        repair=model_io.repair_caption,
        answer=CaptionAnswer(),
        max_new_tokens="caption_max_new_tokens",
        window_s="caption_window_s",
        examples=lambda example: [None] if example.get("scene") or example.get("events") else [],
        noun="a caption",
        plural="captions",
        summary="Describe what happens in a video: a scene paragraph and its events with start and end "
        "times.",
    )
)
