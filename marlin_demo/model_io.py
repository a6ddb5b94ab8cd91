"""Marlin-2B's input/output contract: prompts, video parameters, parsers, repair. Pure Python, so it imports
instantly anywhere. The prompts are the fine-tuning's (``shared/REFERENCE.md``): never reword them.
Parsers say ``format_ok`` and ``repair_*`` note every change; every regex runs on one normalised line with
bounded quantifiers, so hostile input parses in linear time."""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marlin_demo.settings import Settings

# Prompts (exact strings the model was trained on)

CAPTION_PROMPT: str = (
    "Provide a spatial description of this clip followed by time-ranged events.\n"
    "For each event, give the time range as <start - end> and a short description."
)
"""Dense-caption prompt: two lines joined by a newline, verbatim from the card."""

FIND_PROMPT_TEMPLATE: str = (
    'Identify the timestamps during which "{query}" takes place. '
    'Output the time range as "From <start> to <end>." (numbers in seconds).'
)
"""Grounding prompt; ``{query}`` sits inside straight double quotes."""

DETAILED_PROMPT: str = "Describe the video in detail."
"""Free-form detailed caption (DREAM-1K style baseline)."""


@dataclass(frozen=True)
class VideoParams:
    """How Marlin expects video to be sampled (qwen-vl-utils budget it was trained on)."""

    fps: float = 2.0
    max_frames: int = 240
    min_frames: int = 4
    max_pixels: int = 200704
    patch_size: int = 16
    merge_size: int = 2

    @property
    def factor(self) -> int:
        """Frame sides are rounded to multiples of this (patch x spatial merge = 32)."""
        return self.patch_size * self.merge_size


# Query sanitising

# Chat-template special tokens such as <|im_end|>, <|vision_start|>, <|endoftext|>.
_SPECIAL_TOKEN_RE = re.compile(r"<\|[^|>]*\|>")
_THINK_TAG_RE = re.compile(r"</?think>", re.IGNORECASE)
# Bidirectional overrides/isolates and the BOM can hide or reorder text on screen.
_INVISIBLE_FORMAT = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff")


def _clean_chars(text: str) -> str:
    """Whitespace becomes spaces; only category Cc and bidi overrides/BOM are dropped, since other
    format characters (ZWJ, emoji tag sequences) are needed by emoji and scripts."""
    return "".join(
        " " if ch.isspace() else ch
        for ch in text
        if ch.isspace() or (ch not in _INVISIBLE_FORMAT and unicodedata.category(ch) != "Cc")
    )


def _replace_double_quotes(text: str) -> str:
    """Straight ``"`` become alternating “ ”: the query sits inside the prompt's straight double quotes,
    which a straight quote in it could close to smuggle in instructions."""
    first, *rest = text.split('"')
    return first + "".join(("\u201d" if i % 2 else "\u201c") + part for i, part in enumerate(rest))


def sanitize_query(query: str, max_chars: int = Settings.max_query_chars) -> str:
    """A user's grounding query made safe to paste into the find prompt (idempotent; other scripts and emoji
    kept); ``ValueError`` (what is wrong, what is allowed) when empty or too long."""
    text = "" if query is None else str(query)
    text = _clean_chars(text)
    # removing one token can join another's halves ("<|im_<|x|>end|>"): repeat until nothing changes
    while (cleaned := _THINK_TAG_RE.sub(" ", _SPECIAL_TOKEN_RE.sub(" ", text))) != text:
        text = cleaned
    text = " ".join(_replace_double_quotes(text).split())
    if not text:
        raise ValueError("The query is empty: describe the event to find, e.g. 'a person opens the door'.")
    if len(text) > max_chars:
        raise ValueError(f"The query is {len(text)} characters long; at most {max_chars} are allowed.")
    return text


def find_prompt(query: str, max_chars: int = Settings.max_query_chars) -> str:
    """The exact grounding prompt, the query sanitised first (``ValueError`` as ``sanitize_query``)."""
    return FIND_PROMPT_TEMPLATE.format(query=sanitize_query(query, max_chars))


# Result types


@dataclass(frozen=True)
class Event:
    """One time-ranged event, times in seconds. Frozen: repair builds new ones."""

    start: float
    end: float
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "description": self.description}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        """Accept the remote code's / ``to_dict`` shape."""
        return cls(float(data["start"]), float(data["end"]), str(data.get("description", "")))


@dataclass
class CaptionParse:
    """A parsed dense caption; ``format_ok`` says whether the trained format was produced."""

    scene: str
    events: list[Event]
    format_ok: bool
    repaired: bool = False
    repairs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Same shape as the remote code's ``caption()`` minus the raw text."""
        return {"scene": self.scene, "events": [e.to_dict() for e in self.events]}


@dataclass
class SpanParse:
    """A parsed grounding answer; ``span`` is None when nothing usable was found."""

    span: tuple[float, float] | None
    format_ok: bool
    repaired: bool = False
    repairs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Same shape as the remote code's ``find()`` minus the raw text."""
        return {
            "span": None if self.span is None else [self.span[0], self.span[1]],
            "format_ok": self.format_ok,
        }


# Think tags

_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_THINK_LINE_RE = re.compile(r"^[ \t]*</?think>[ \t]*(?:\r?\n|$)", re.MULTILINE)


def strip_think(text: str) -> str:
    """Remove ``<think>`` blocks, then stray tags; after an unclosed ``<think>`` the text is kept (where the
    reasoning ends is unknown). ``str.find``: linear, unlike a lazy regex."""
    if not text:
        return ""
    parts: list[str] = []
    pos = 0
    while (i := text.find(_THINK_OPEN, pos)) >= 0 and (j := text.find(_THINK_CLOSE, i)) >= 0:
        parts.append(text[pos:i])
        pos = j + len(_THINK_CLOSE)
    parts.append(text[pos:])
    text = _THINK_LINE_RE.sub("", "".join(parts))
    return text.replace(_THINK_OPEN, "").replace(_THINK_CLOSE, "").strip()


# Time tokens

# Seconds ("12", "1.8") or clock time ("01:15", "1:01:15.5"). Digit runs are bounded.
_TIME = r"\d{1,12}(?::\d{1,2}){0,2}(?:\.\d{1,12})?"
# Optional unit; \b keeps "5 - 9 smoke" from reading the "s" of "smoke" as seconds.
_UNIT = r"(?: ?(?:seconds|second|secs|sec|s)\b\.?)?"
_NUM = r"\d{1,12}(?:\.\d{1,12})?"


def _to_seconds(token: str) -> float:
    """'1.8' -> 1.8, '01:15' -> 75.0, '1:01:15.5' -> 3675.5."""
    return functools.reduce(lambda total, part: total * 60.0 + float(part), token.split(":"), 0.0)


def _norm_line(line: str) -> str:
    """Collapse whitespace so the regexes only ever see single spaces."""
    return " ".join(line.split())


# Caption parsing

_EVENT_RE = re.compile(
    r"^(?:[-*\u2022] )?"  # optional list bullet
    r"[<\[(]? ?"
    rf"(?P<a>{_TIME}){_UNIT} ?"
    r"(?:-|\u2013|\u2014|to) ?"
    rf"(?P<b>{_TIME}){_UNIT} ?"
    r"[>\])]?"
    r"(?: ?[:\-\u2013\u2014,])? ?"
    r"(?P<desc>.*)$",
    re.IGNORECASE,
)
_CANON_EVENT_RE = re.compile(rf"^<(?P<a>{_NUM}) ?- ?(?P<b>{_NUM})> ?(?P<desc>\S.*)$")
_SCENE_HDR_RE = re.compile(r"^[#* ]*scene[* ]*:[* ]*(?P<rest>.*)$", re.IGNORECASE)
_EVENTS_HDR_RE = re.compile(r"^[#* ]*(?:events|timeline)[* ]*(?::[* ]*(?P<rest>.*))?$", re.IGNORECASE)


def _match_event(line: str) -> tuple[Event, bool] | None:
    """Parse one normalised line as an event; returns (event, canonical) or None."""
    m = _EVENT_RE.match(line)
    if m is None:
        return None
    event = Event(_to_seconds(m["a"]), _to_seconds(m["b"]), m["desc"].strip())
    return event, _CANON_EVENT_RE.match(line) is not None


def parse_caption(text: str) -> CaptionParse:
    """Parse ``Scene:`` / ``Events:`` / ``<start - end> description`` output, tolerating stray formats; times
    and order stay as written (``repair_caption``); ``format_ok``: the canonical headers and event lines."""
    lines = [_norm_line(raw) for raw in strip_think(text or "").splitlines()]

    header = next(((i, m) for i, line in enumerate(lines) if (m := _EVENTS_HDR_RE.match(line))), None)
    if header is not None:
        scene_lines = lines[: header[0]]
        event_lines = [header[1]["rest"] or "", *lines[header[0] + 1 :]]
    else:
        first = next((i for i, line in enumerate(lines) if _match_event(line)), len(lines))
        scene_lines = lines[:first]
        event_lines = lines[first:]

    # Scene: text after a "Scene:" header (a chatty preamble before it is dropped).
    scene_hdr = next(((i, m) for i, line in enumerate(scene_lines) if (m := _SCENE_HDR_RE.match(line))), None)
    scene_parts = (
        scene_lines if scene_hdr is None else [scene_hdr[1]["rest"], *scene_lines[scene_hdr[0] + 1 :]]
    )
    scene = " ".join(part for part in scene_parts if part)

    hits = [hit for hit in map(_match_event, event_lines) if hit is not None]
    canonical_headers = (
        scene_hdr is not None
        and scene_lines[scene_hdr[0]].startswith("Scene:")
        and header is not None
        and lines[header[0]] == "Events:"
    )
    format_ok = canonical_headers and any(canonical for _, canonical in hits)
    return CaptionParse(scene=scene, events=[event for event, _ in hits], format_ok=format_ok)


# Span parsing

_CANON_SPAN_RE = re.compile(rf"^From (?P<a>{_NUM}) to (?P<b>{_NUM}) ?\.?$")
# A time not glued to a preceding number, optionally in <...>, optionally with a unit.
_T = rf"<? ?(?<![\d.:])({_TIME})(?!\d){_UNIT} ?>?"
_SPAN_ANY_RE = re.compile(
    rf"\bbetween {_T} and {_T}"
    rf"|(?:\bfrom )?{_T} ?(?:-|\u2013|\u2014|to|until|till|through) ?{_T}",
    re.IGNORECASE,
)


def parse_span(text: str) -> SpanParse:
    """Parse a grounding answer: ``From <start> to <end>.`` is ``format_ok``, a usable stray format a span
    without it, nothing usable ``span=None``; a reversed range stays as written (``repair_span``)."""
    norm = _norm_line(strip_think(text or ""))
    if m := _CANON_SPAN_RE.match(norm):
        return SpanParse(span=(float(m["a"]), float(m["b"])), format_ok=True)
    m = _SPAN_ANY_RE.search(norm)
    if m is None:
        return SpanParse(span=None, format_ok=False)
    a, b = (m[1], m[2]) if m[1] is not None else (m[3], m[4])
    return SpanParse(span=(_to_seconds(a), _to_seconds(b)), format_ok=False)


# Repair


def clock(seconds: float) -> str:
    """The one way a time is written (the page, the notes, the messages): ``12.5 s`` under a minute, else
    ``2:07.5``; tenths, a whole second without them (``9 s``, ``1:00``)."""
    t = round(max(0.0, float(seconds)), 1)
    return f"{t:g} s" if t < 60 else _minutes(t)


def _minutes(t: float) -> str:
    m, sec = divmod(round(t, 1), 60)
    sec = round(sec, 1)
    return f"{int(m)}:{sec:04.1f}" if sec % 1 else f"{int(m)}:{int(sec):02d}"


def clock_span(start: float, end: float) -> str:
    """A span as ``clock`` writes its times, the unit once: ``3–9 s``, ``0:55–1:10.5``."""
    a, b = (round(max(0.0, float(t)), 1) for t in (start, end))
    if max(a, b) < 60:
        return f"{a:g}–{b:g} s"
    return f"{_minutes(a)}–{_minutes(b)}"


def clock_part(start: float, end: float) -> str:
    """A part of a video asked about, with its length: ``3–9 s (6 s long)``, as every message says it."""
    return f"{clock_span(start, end)} ({clock(end - start)} long)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _check_duration(duration: float | None) -> float | None:
    """None means 'unknown': duration-dependent repairs are skipped."""
    if duration is None:
        return None
    value = float(duration)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"duration must be a finite number of seconds >= 0, got {duration!r}.")
    return value


_TRAILING_PUNCT = " .!?,;:\u2026"


def _loop_key(text: str) -> str:
    """Comparison key for repetition detection: case/space/end-punctuation blind."""
    return " ".join(text.casefold().split()).rstrip(_TRAILING_PUNCT)


def _loop_keep(keys: list[str]) -> list[bool]:
    """Which items survive repetition-loop trimming: not a repeat of the one before, nor a copy of a key seen
    twice already (a door may open twice); then a last item cut off by the token limit."""
    counts = Counter(keys)
    first = {key: i for i, key in reversed(list(enumerate(keys)))}  # each key's first index
    keep = [
        not ((i > 0 and key == keys[i - 1]) or (counts[key] > 2 and first[key] < i))
        for i, key in enumerate(keys)
    ]
    if keys and not all(keep) and keep[-1]:
        last = keys[-1]
        if last and any(k != last and k.startswith(last) for k in keys[:-1]):
            keep[-1] = False
    return keep


_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+")


def _trim_scene_loop(scene: str) -> tuple[str, int]:
    """Remove repeated sentences from a looping scene paragraph; returns (scene, removed)."""
    sentences = [s for s in _SENTENCE_SPLIT_RE.split(scene.strip()) if s]
    keep = _loop_keep([_loop_key(s) for s in sentences])  # one sentence (or none) is always kept
    if all(keep):
        return scene, 0
    return " ".join(s for s, k in zip(sentences, keep, strict=True) if k), keep.count(False)


def repair_caption(parse: CaptionParse, duration: float | None) -> CaptionParse:
    """Fix the known failure modes in order, each kind adding one note to ``repairs`` (a new object); event
    order never changes; ``duration=None`` skips the steps that need the clip's length."""
    dur = _check_duration(duration)
    notes: list[str] = []
    events = list(parse.events)

    kept = [e for e in events if e.description.strip() and math.isfinite(e.start) and math.isfinite(e.end)]
    if len(kept) < len(events):
        notes.append(
            f"dropped {_count(len(events) - len(kept), 'event')} with no description or invalid times"
        )
    events = kept

    swapped = sum(1 for e in events if e.start > e.end)
    if swapped:
        events = [Event(e.end, e.start, e.description) if e.start > e.end else e for e in events]
        notes.append(f"swapped start and end of {_count(swapped, 'reversed event')}")

    if dur is not None:
        kept = [e for e in events if e.start < dur]
        if len(kept) < len(events):
            notes.append(f"dropped {_count(len(events) - len(kept), 'event')} starting at or after the end")
        events = kept
        out = [Event(max(0.0, e.start), min(dur, e.end), e.description) for e in events]
        clamped = sum(a != b for a, b in zip(out, events, strict=True))
        events = out
        if clamped:
            notes.append(f"clamped {_count(clamped, 'event')} that ran past the end")

    unique = list(dict.fromkeys(events))  # Event is frozen: equal (and hashed) by its three fields
    if len(unique) < len(events):
        notes.append(f"dropped {_count(len(events) - len(unique), 'duplicate event')}")
    events = unique

    keep = _loop_keep([_loop_key(e.description) for e in events])
    if not all(keep):
        notes.append(f"dropped {_count(keep.count(False), 'repeated event')} (repetition loop)")
        events = [e for e, k in zip(events, keep, strict=True) if k]

    scene, removed = _trim_scene_loop(parse.scene)
    if removed:
        notes.append(f"trimmed {_count(removed, 'repeated sentence')} from the scene (repetition loop)")

    return CaptionParse(
        scene=scene,
        events=events,
        format_ok=parse.format_ok,
        repaired=parse.repaired or bool(notes),
        repairs=[*parse.repairs, *notes],
    )


def repair_span(parse: SpanParse, duration: float | None) -> SpanParse:
    """Swap a reversed span and clamp it into [0, duration] (a new object); an empty one becomes ``None`` with
    a note: a span is never invented (``duration=None``: only swapped)."""
    dur = _check_duration(duration)
    notes: list[str] = []
    span = parse.span
    if span is not None:
        start, end = float(span[0]), float(span[1])
        if not (math.isfinite(start) and math.isfinite(end)):
            notes.append("dropped the span: its times are not finite numbers")
            span = None
        else:
            if start > end:
                notes.append(f"swapped the reversed span {clock_span(start, end)}")
                start, end = end, start
            span = (start, end)
            if dur is not None and start >= dur:
                notes.append(f"dropped the span {clock_span(start, end)}: it starts at or after the end")
                span = None
            elif dur is not None and (start < 0 or end > dur):
                span = (max(0.0, start), min(dur, end))
                notes.append(f"clamped the span {clock_span(start, end)} to {clock_span(*span)}")
            if span is not None and span[0] == span[1]:
                notes.append(f"dropped the span {clock_span(*span)}: it has zero length")
                span = None
    return SpanParse(
        span=span,
        format_ok=parse.format_ok,
        repaired=parse.repaired or bool(notes),
        repairs=[*parse.repairs, *notes],
    )
