"""Caption events -> WebVTT / SRT text and video chapters (pure Python). So that players accept every file, an
event without a positive length, finite times or text is skipped, not stretched; negative times clamp to 0;
cues go in start order, one line each, ``-->`` as ``→``."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from marlin_demo.model_io import Event, clock, clock_part

_ARROW_RE = re.compile(r"-+>")


def format_timestamp(seconds: float, sep: str = ".") -> str:
    """``hh:mm:ss.mmm`` (WebVTT, ``sep='.'``) or ``hh:mm:ss,mmm`` (SRT, ``sep=','``)."""
    return _fmt_ms(max(0, round(seconds * 1000)), sep)


def _fmt_ms(total_ms: int, sep: str) -> str:
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, ms = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{sep}{ms:03d}"


def _cues(events: Iterable[Event | Mapping[str, Any]]) -> list[tuple[int, int, str]]:
    """(start_ms, end_ms, one-line text) for every event worth a cue, sorted by start."""
    cues: list[tuple[int, int, str]] = []
    for item in events:
        event = item if isinstance(item, Event) else Event.from_dict(item)
        if not (math.isfinite(event.start) and math.isfinite(event.end)):
            continue
        start_ms, end_ms = (max(0, round(t * 1000)) for t in (event.start, event.end))
        text = _ARROW_RE.sub("\u2192", " ".join(str(event.description).split()))
        if end_ms > start_ms and text:
            cues.append((start_ms, end_ms, text))
    cues.sort(key=lambda cue: cue[0])
    return cues


def to_webvtt(events: Iterable[Event | Mapping[str, Any]]) -> str:
    """WebVTT text (``WEBVTT`` header, ``00:00:01.500 --> 00:00:03.000`` cues)."""
    blocks = ["WEBVTT"]
    for start_ms, end_ms, text in _cues(events):
        timing = f"{_fmt_ms(start_ms, '.')} --> {_fmt_ms(end_ms, '.')}"
        escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        blocks.append(f"{timing}\n{escaped}")
    return "\n\n".join(blocks) + "\n"


def to_srt(events: Iterable[Event | Mapping[str, Any]]) -> str:
    """SRT text: 1-based indices, ``00:00:01,500 --> 00:00:03,000`` timings; "" when no event makes a cue."""
    blocks = []
    for index, (start_ms, end_ms, text) in enumerate(_cues(events), start=1):
        timing = f"{_fmt_ms(start_ms, ',')} --> {_fmt_ms(end_ms, ',')}"
        blocks.append(f"{index}\n{timing}\n{text}")
    return "\n\n".join(blocks) + "\n" if blocks else ""


MIN_CHAPTERS = 3
MIN_CHAPTER_S = 10
TITLE_CHARS = 60
#: a range ending this close to the video's end covers it whole (``clock`` writes both ends alike)
PART_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class Chapters:
    """``0:00 Title`` lines by YouTube's rules (3+, the first at 0:00, each 10+ s), or none and why."""

    lines: tuple[str, ...]
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"lines": list(self.lines), "reason": self.reason or None}


def chapter_time(seconds: float) -> str:
    """``0:00``, ``2:07``, ``1:02:03``: whole seconds, as video descriptions write them."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _title(text: str) -> str:
    """One line, cut at a word boundary."""
    line = " ".join(_ARROW_RE.sub("\u2192", str(text)).split())
    if len(line) <= TITLE_CHARS:
        return line
    return line[: TITLE_CHARS + 1].rsplit(" ", 1)[0].rstrip(",;:.") + "…"


def chapters(
    events: Iterable[Event | Mapping[str, Any]], duration: float, part: tuple[float, float] | None = None
) -> Chapters:
    """Chapters from the events: one at each event starting at least 10 s after the chapter before and 10 s
    before the end, the first at 0:00; fewer than three, or a ``part`` (``range_s``) of the video: none, and
    the reason."""
    if part is not None and (part[0] > 0 or part[1] < duration - PART_TOLERANCE_S):
        return Chapters(
            (),
            "No chapters: they name the parts of a whole video from 0:00, and this caption covers only "
            f"{clock_part(*part)} of it.",
        )
    if not math.isfinite(duration) or duration < MIN_CHAPTERS * MIN_CHAPTER_S:
        return Chapters(
            (),
            f"No chapters: this clip is {clock(duration if math.isfinite(duration) else 0)} long, and "
            f"YouTube needs at least {MIN_CHAPTERS} chapters of {MIN_CHAPTER_S} s or more.",
        )
    cues = [(start_ms // 1000, text) for start_ms, _, text in _cues(events)]
    if not cues:
        return Chapters((), "No chapters: the caption has no timed events to name them after.")
    starts: list[tuple[int, str]] = [(0, cues[0][1])]
    last = int(duration)
    for start, text in cues[1:]:
        if start - starts[-1][0] >= MIN_CHAPTER_S and last - start >= MIN_CHAPTER_S:
            starts.append((start, text))
    if len(starts) < MIN_CHAPTERS:
        return Chapters(
            (),
            f"No chapters: the events give {len(starts)} stretch{'es' if len(starts) != 1 else ''} "
            f"of {MIN_CHAPTER_S} s or more, and YouTube needs at least {MIN_CHAPTERS}.",
        )
    return Chapters(tuple(f"{chapter_time(t)} {_title(text)}" for t, text in starts))
