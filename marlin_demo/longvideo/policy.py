"""Long videos: the window plan (``plan_for``), mapping window answers to global time, and merging them.

Pure Python (no torch), so the service, runner, UI, ZeroGPU estimate and bench share one set of rules
(docs/LONG_VIDEOS.md). Window lengths, overlap, limit and top-k are settings, never constants here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from marlin_demo.contract import (
    CaptionParse,
    Event,
    SpanParse,
    clock,
    clock_part,
    clock_span,
    repair_caption,
    repair_span,
)
from marlin_demo.results import Moment, Window
from marlin_demo.settings import Settings
from marlin_demo.tasks import Task, get_task

MIN_LAST_WINDOW_S = 2.0  # public Marlin CLI: a last window shorter than this joins the previous one
DEDUP_IOU = 0.5  # public Marlin CLI: hits with IoU >= 0.5 ...
DEDUP_START_S = 5.0  # ... or starts within 5 s are one moment
BOUNDARY_TOL_S = 1.0  # an event "touches" a window boundary within this many seconds
SIMILAR_DESCRIPTION = 0.6  # description similarity (see description_similarity) to join a cut event


class WindowLimitError(ValueError):
    """A video needs more windows than allowed: one sentence naming the limit and what is allowed."""


def plan_windows(
    duration: float,
    length: float,
    overlap: float = 0.0,
    *,
    min_last: float = MIN_LAST_WINDOW_S,
    max_windows: int | None = None,
) -> list[Window]:
    """Windows [k*step, min(k*step + length, duration)], step = length - overlap; none inside another,
    and a last one shorter than ``min_last`` joins the previous one. A short video: exactly [0, duration].
    """
    duration, length, overlap = float(duration), float(length), float(overlap)
    if not (math.isfinite(duration) and duration > 0):
        raise ValueError(f"duration must be a positive number of seconds, got {duration!r}.")
    if not (math.isfinite(length) and length > 0):
        raise ValueError(f"the window length must be a positive number of seconds, got {length!r}.")
    if not (0 <= overlap < length):
        raise ValueError(f"the window overlap must be at least 0 and below the length, got {overlap!r}.")
    step = length - overlap
    bounds = [(0.0, min(length, duration))]
    while bounds[-1][1] < duration:
        start = len(bounds) * step
        bounds.append((start, min(start + length, duration)))
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < min_last:
        bounds.pop()
        bounds[-1] = (bounds[-1][0], duration)
    if max_windows is not None and len(bounds) > max_windows:
        allowed = max_windows * step + overlap
        raise WindowLimitError(
            f"The video is {duration:.1f} s long and needs {len(bounds)} windows of {length:g} s, "
            f"but at most {max_windows} windows are allowed: use a clip of at most {allowed:g} s."
        )
    return [Window(i, round(s, 6), round(e, 6)) for i, (s, e) in enumerate(bounds)]


def caption_windows(duration: float, length: float, max_windows: int | None) -> list[Window]:
    """Caption windows: no overlap (an event is described once; a cut one is joined by merge_captions)."""
    return plan_windows(duration, length, 0.0, max_windows=max_windows)


def find_windows(duration: float, length: float, overlap: float, max_windows: int | None) -> list[Window]:
    """Find windows: overlapping, so a short event on a boundary is seen whole by one window."""
    return plan_windows(duration, length, overlap, max_windows=max_windows)


def plan_for(task: str | Task, duration: float, settings: Settings, *, limit: bool = True) -> list[Window]:
    """The windows ``task`` answers a video of ``duration`` s in (one: answered whole); too many is a
    ``WindowLimitError`` unless ``limit=False`` (sizing a request that is refused anyway)."""
    length, overlap = get_task(task).windows(settings)
    return plan_windows(duration, length, overlap, max_windows=settings.max_windows if limit else None)


# ---------------------------------------------------------------------------
# A time range: part of a video, answered as if cut as its own file, on the video's timeline
# ---------------------------------------------------------------------------

#: the shortest range asked about (a second holds Marlin's minimum of 4 frames at any usual frame rate)
MIN_RANGE_S = 1.0
#: how far past the probed end an end may be and still mean "the end" (a rounded duration typed back)
END_TOLERANCE_S = 0.05


class RangeError(ValueError):
    """A time range that cannot be asked about: one sentence saying what is wrong and what is allowed."""


def check_range(
    start: float | None, end: float | None, duration: float, max_duration: float
) -> tuple[float, float]:
    """The range (start, end) in the video's seconds (None: 0, the video's end), else a ``RangeError``;
    the duration limit applies to the range asked, not to the file."""
    whole = f"the video is {clock(duration)} long"
    for name, value in (("start", start), ("end", end)):
        if value is not None and not math.isfinite(value):
            raise RangeError(f"The range's {name} must be a number of seconds, got {value!r}.")
    s = 0.0 if start is None else float(start)
    e = duration if end is None else float(end)
    if s < 0:
        raise RangeError(f"The range starts at {s:g} s; a start must be 0 s or later ({whole}).")
    if s >= duration:
        raise RangeError(
            f"The range starts at {clock(s)}, at or after the video's end: {whole}; start before it."
        )
    if e > duration + END_TOLERANCE_S:
        raise RangeError(
            f"The range ends at {clock(e)}, after the video's end: {whole}; end at {clock(duration)} at "
            "most, or leave the end empty."
        )
    e = min(e, duration)
    if e <= s:
        raise RangeError(
            f"The range {clock_span(s, e)} does not end after it starts: the end must be after the start."
        )
    if e - s < MIN_RANGE_S:
        raise RangeError(
            # the typed times as typed: rounded to tenths, 3-3.96 s would read "3–4 s (1 s long)"
            f"The range {s:g}–{e:g} s is {e - s:.2f} s long; a range must be at least {clock(MIN_RANGE_S)}."
        )
    if e - s > max_duration:
        raise RangeError(
            f"The range {clock_part(s, e)} is too long: at most {clock(max_duration)} is allowed: "
            "choose a shorter range."
        )
    return s, e


def range_windows(task: str | Task, start: float, end: float, settings: Settings) -> list[Window]:
    """``plan_for`` on the range's length, shifted to its start (answered as the video cut to it would be);
    too many windows: ``RangeError``."""
    try:
        local = plan_for(task, end - start, settings)
    except WindowLimitError:
        allowed = get_task(task).covered_s(settings.max_windows, settings)
        raise RangeError(
            f"The range {clock_part(start, end)} needs more than the {settings.max_windows} windows "
            f"allowed; choose a range of at most {clock(allowed)}."
        ) from None
    return [Window(w.index, round(w.start + start, 6), round(w.end + start, 6)) for w in local]


# ---------------------------------------------------------------------------
# Mapping one window's answer to global time
# ---------------------------------------------------------------------------


def _label(window: Window, single: bool, note: str) -> str:
    return note if single else f"window {window.index + 1} ({clock_span(window.start, window.end)}): {note}"


P = TypeVar("P", CaptionParse, SpanParse)


def _repaired(
    parse: P, repair: Callable[[P, float | None], P] | None, length: float
) -> tuple[P, list[str], list[str]]:
    """(the parse repaired against ``length``, the notes it had, the notes the repair added); ``repair``
    None: repaired already, all its notes are the repair's."""
    if repair is None:
        return parse, [], list(parse.repairs)
    fixed = repair(parse, length)
    return fixed, list(parse.repairs), fixed.repairs[len(parse.repairs) :]


def _clamp(t: float, off: float, window: Window) -> float:
    """A window-time ``t`` shifted by ``off`` to global time, kept inside ``window``."""
    return min(max(round(off + t, 6), window.start), window.end)


def map_caption(
    parse: CaptionParse,
    window: Window,
    *,
    offset: float | None = None,
    single: bool = False,
    repair: Callable[[CaptionParse, float | None], CaptionParse] | None = repair_caption,
) -> CaptionParse:
    """Repair a window's caption against its length (notes name the window), then shift it to global time.

    ``offset``: global time of the window's first frame (default ``window.start``). ``repair=None``: the
    engine repaired it already, every note is the repair's. ``single``: notes unlabelled (one window).
    """
    off = window.start if offset is None else float(offset)
    fixed, kept, new_notes = _repaired(parse, repair, window.end - off)
    events = [
        Event(_clamp(e.start, off, window), _clamp(e.end, off, window), e.description) for e in fixed.events
    ]
    return CaptionParse(
        scene=fixed.scene,
        events=events,
        format_ok=fixed.format_ok,
        repaired=fixed.repaired,
        repairs=[*kept, *(_label(window, single, n) for n in new_notes)],
    )


def map_span(
    parse: SpanParse,
    window: Window,
    *,
    offset: float | None = None,
    single: bool = False,
    repair: Callable[[SpanParse, float | None], SpanParse] | None = repair_span,
) -> SpanParse:
    """Repair a window's span against the window's length (notes say which window), then shift it;
    ``repair=None`` as ``map_caption``."""
    off = window.start if offset is None else float(offset)
    fixed, kept, new_notes = _repaired(parse, repair, window.end - off)
    span = fixed.span
    return SpanParse(
        span=None if span is None else (_clamp(span[0], off, window), _clamp(span[1], off, window)),
        format_ok=fixed.format_ok,
        repaired=fixed.repaired,
        repairs=[*kept, *(_label(window, single, n) for n in new_notes)],
    )


# ---------------------------------------------------------------------------
# Caption merge
# ---------------------------------------------------------------------------

_STOP = frozenset(
    "a an the and or of to in on at by for with from into onto over under is are was were be been "
    "it its this that these those there then while as up down out off again still continues".split()
)
_WORD_RE = re.compile(r"[a-z0-9]+")


def _content_words(text: str) -> list[str]:
    """Casefolded words minus stop words, each cut to its first 4 letters (a crude, exact stemmer)."""
    return [w[:4] for w in _WORD_RE.findall(text.casefold()) if w not in _STOP]


def description_similarity(a: str, b: str) -> float:
    """ROUGE-L F1 between the content-word lists of two descriptions (0..1)."""
    x, y = _content_words(a), _content_words(b)
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
class MergedCaption:
    """One timeline for the whole video; ``windows`` keeps each window's scene."""

    scene: str
    events: list[Event]
    windows: list[dict[str, Any]]
    format_ok: bool
    repaired: bool
    repairs: list[str] = field(default_factory=list)
    joined: list[str] = field(default_factory=list)  # notes: events joined across a boundary

    def to_dict(self) -> dict[str, Any]:
        return {
            "scene": self.scene,
            "events": [e.to_dict() for e in self.events],
            "windows": list(self.windows),
        }


def _join_scenes(scenes: Sequence[str]) -> str:
    """Scenes in order as one paragraph; a scene equal (case/space blind) to an earlier one is skipped."""
    seen: set[str] = set()
    parts: list[str] = []
    for s in scenes:
        s = " ".join(s.split())
        key = s.casefold().rstrip(" .!?")
        if not s or key in seen:
            continue
        seen.add(key)
        parts.append(s if s[-1] in ".!?" else s + ".")
    return " ".join(parts)


def merge_captions(windows: Sequence[tuple[Window, CaptionParse]]) -> MergedCaption:
    """Join the mapped (global-time) captions of consecutive windows into one timeline.

    Events either side of a boundary (each within BOUNDARY_TOL_S of it, B starting by A's end +
    BOUNDARY_TOL_S) with ``description_similarity`` >= SIMILAR_DESCRIPTION are one event: most similar
    pair first, each once, A's start to the later end, the longer part's description (docs/LONG_VIDEOS.md).
    Works on any prefix of the windows, so a stream can re-merge as each window finishes.
    """
    timeline: list[tuple[Event, int]] = []  # (event, index into ``windows`` that gave its end)
    repairs: list[str] = []
    joined: list[str] = []
    for k, (window, parse) in enumerate(windows):
        repairs.extend(parse.repairs)
        incoming = list(parse.events)
        if k > 0:
            prev = windows[k - 1][0]
            tails = [
                i
                for i, (e, src) in enumerate(timeline)
                if src == k - 1 and e.end >= prev.end - BOUNDARY_TOL_S
            ]
            heads = [j for j, e in enumerate(incoming) if e.start <= window.start + BOUNDARY_TOL_S]
            pairs = []
            for i in tails:
                for j in heads:
                    a, b = timeline[i][0], incoming[j]
                    sim = description_similarity(a.description, b.description)
                    if b.start <= a.end + BOUNDARY_TOL_S and sim >= SIMILAR_DESCRIPTION:
                        pairs.append((-sim, i, j))
            used_i: set[int] = set()
            used_j: set[int] = set()
            for _, i, j in sorted(pairs):
                if i in used_i or j in used_j:
                    continue
                used_i.add(i)
                used_j.add(j)
                a, b = timeline[i][0], incoming[j]
                desc = a.description if a.end - a.start >= b.end - b.start else b.description
                timeline[i] = (Event(a.start, max(a.end, b.end), desc), k)
                joined.append(f"joined an event cut by the window boundary at {clock(window.start)}")
            incoming = [e for j, e in enumerate(incoming) if j not in used_j]
        timeline.extend((e, k) for e in incoming)
    return MergedCaption(
        scene=_join_scenes([p.scene for _, p in windows]),
        events=[e for e, _ in timeline],
        windows=[{"start": w.start, "end": w.end, "scene": p.scene} for w, p in windows],
        format_ok=all(p.format_ok for _, p in windows),
        repaired=any(p.repaired for _, p in windows),
        repairs=repairs,
        joined=joined,
    )


# ---------------------------------------------------------------------------
# Find merge
# ---------------------------------------------------------------------------


def _iou(a: Moment, b: Moment) -> float:
    inter = max(0.0, min(a.end, b.end) - max(a.start, b.start))
    union = max(a.end, b.end) - min(a.start, b.start)
    return inter / union if union > 0 else 0.0


def duplicates(a: Moment, b: Moment) -> bool:
    """Public Marlin CLI rule: one moment when IoU >= 0.5 or the starts are within 5 s."""
    return _iou(a, b) >= DEDUP_IOU or abs(a.start - b.start) <= DEDUP_START_S


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
