"""Timeline HTML: events (caption) or a span (find) on a time axis; every model text is escaped."""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from marlin_demo.model_io import clock, clock_span
from marlin_demo.ui.assets import asset

__all__ = ["TIMELINE_CSS", "TIMELINE_JS", "clock", "nice_step", "placeholder", "timeline_html"]

#: event colours dark enough for white 12 px labels (WCAG AA, 4.5:1 or more)
PALETTE = ("#0369a1", "#6d28d9", "#b45309", "#047857", "#b91c1c", "#be185d", "#0f766e", "#4338ca")
#: a span narrower than this (percent of the clip) has its label beside it: inside, it would be cut
NARROW_SPAN_PCT = 22.0


def nice_step(duration: float, target_ticks: int = 8) -> float:
    """A tick spacing (1, 2 or 5 x 10^k s, or 15/30 s and minutes) giving about ``target_ticks`` ticks."""
    if not math.isfinite(duration) or duration <= 0:
        return 1.0
    raw = duration / max(1, target_ticks)
    steps = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
    return float(next((step for step in steps if step >= raw), 3600))


def _label(long: str, short: str) -> str:
    """A bar's label: the whole text where the bar is wide enough, else its number (``TIMELINE_JS``)."""
    return (
        f'<span class="mt-long">{html.escape(long)}</span><span class="mt-short">{html.escape(short)}</span>'
    )


def _pct(t: float, duration: float) -> float:
    return max(0.0, min(100.0, 100.0 * t / duration)) if duration > 0 else 0.0


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name)


def _lanes(events: Sequence[tuple[float, float, int, str]]) -> list[int]:
    """Greedy lane assignment so overlapping events stack instead of hiding each other."""
    lane_end: list[float] = []
    lanes: list[int] = []
    for start, end, _, _ in events:
        i = next((i for i, last in enumerate(lane_end) if start >= last - 1e-9), len(lane_end))
        lane_end[i : i + 1] = [end]  # the first lane free by then, else a new one
        lanes.append(i)
    return lanes


def _axis(duration: float) -> str:
    step = nice_step(duration)
    ticks = ""
    for i in range(int(duration / step + 1e-9) + 1):
        pct = _pct(i * step, duration)
        cls = "mt-tick mt-tick-end" if i and pct > 96 else "mt-tick"
        ticks += f'<span class="{cls}" style="left:{pct:.3f}%">{clock(i * step)}</span>'
    return f'<div class="mt-axis">{ticks}</div>'


def placeholder(text: str, ghost: Sequence[tuple[float, float]] = ()) -> str:
    """The empty timeline; ``ghost``: faint bars that show the shape of the result to come."""
    bars = "".join(f'<span style="left:{a:.0%};width:{b - a:.0%}"></span>' for a, b in ghost)
    track = f'<div class="mt-ghost" aria-hidden="true">{bars}</div>' if ghost else ""
    return f'<div class="mt-timeline mt-empty">{track}<p>{html.escape(text)}</p></div>'


def timeline_html(
    duration: float,
    events: Sequence[Any] = (),
    span: Sequence[float] | None = None,
    reference: Sequence[float] | None = None,
    player: str | None = None,
    span_label: str = "Marlin",
    no_span_text: str | None = None,
    windows: Sequence[Sequence[float]] = (),
    windows_done: int | None = None,
    moments: Sequence[Any] = (),
    clips: Sequence[str | None] = (),
) -> str:
    """Events as bars in lanes, or a find span (and truth, moments, windows), on one axis."""
    if not math.isfinite(duration) or duration <= 0:
        ends = [float(_field(e, "end")) for e in events] + ([float(span[1])] if span else [])
        duration = max(ends, default=1.0) or 1.0
    rows: list[str] = []
    items = sorted(  # by start, then end, then as given
        (float(_field(e, "start")), float(_field(e, "end")), i, str(_field(e, "description")))
        for i, e in enumerate(events)
    )
    lanes = _lanes(items)
    for (start, end, idx, desc), lane in zip(items, lanes, strict=True):
        label = html.escape(f"{idx + 1}. {clock_span(start, end)} · {desc}")
        said = html.escape(f"{idx + 1}. {desc}: play from {start:.1f} s")  # its visible label first
        attrs = f'data-index="{idx}" title="{label}" aria-label="{said}"'
        inner = _label(f"{idx + 1}. {desc}", str(idx + 1))
        color = f";--mt-color:{PALETTE[idx % len(PALETTE)]}"
        rows.append(_bar("mt-event", start, end, duration, lane * 34 + 4, attrs, inner, color))
    track_h = (max(lanes, default=0) + 1) * 34 + 8
    top = 42 if reference is not None else 4
    if reference is not None:
        s, e = float(reference[0]), float(reference[1])
        inner = _label(f"ground truth {clock_span(s, e)}", "truth")
        rows.append(_bar("mt-ref", s, e, duration, 4, f'title="Ground truth {clock_span(s, e)}"', inner))
    best = [(float(_field(m, "start")), float(_field(m, "end")), float(_field(m, "score"))) for m in moments]
    if best:
        span = best[0][:2]
    for k, (s, e, score) in enumerate(best[1:], 2):
        attrs = (
            f'data-moment="{k}" title="Moment {k}: {clock_span(s, e)}, score {score:.2f}" '
            f'aria-label="#{k} {score:.2f}: play moment {k} from {s:.1f} s"'
        )
        rows.append(_bar("mt-moment", s, e, duration, top + 38, attrs, _label(f"#{k} {score:.2f}", f"#{k}")))
    if span is not None:
        s, e = float(span[0]), float(span[1])
        said = f"{html.escape(span_label)} {clock_span(s, e)}"
        cls = f"mt-span{' mt-best' if best else ''}{_outside_label(_pct(s, duration), _pct(e, duration))}"
        attrs = f'title="{said}" aria-label="{said}: play the span from {s:.1f} s"'
        rows.append(_bar(cls, s, e, duration, top, attrs, f"<span>{said}</span>"))
    if span is not None or reference is not None or no_span_text:
        track_h = 80 if (reference is not None and span is not None) else 42
        if len(best) > 1:
            track_h += 38
    note = f'<p class="mt-nospan">{html.escape(no_span_text)}</p>' if span is None and no_span_text else ""
    attr = f' data-player="{html.escape(player)}"' if player else ""
    detail = (
        '<p class="mt-detail" aria-live="polite">'
        "Point at an event to read it in full; click it to jump there.</p>"
        if items
        else ""
    )
    return (
        f'<div class="mt-timeline" data-duration="{duration:.3f}"{attr}>'
        f'<div class="mt-track" style="height:{track_h}px">{"".join(rows)}'
        '<div class="mt-playhead" style="left:0%"></div></div>'
        f"{_windows_strip(windows, duration, windows_done)}{_axis(duration)}{detail}{note}"
        f"{_moments_list(best, clips)}</div>"
    )


def _bar(
    cls: str, s: float, e: float, duration: float, top: int, attrs: str, inner: str, style: str = ""
) -> str:
    left, right = _pct(s, duration), _pct(e, duration)
    return (
        f'<button type="button" class="mt-item {cls}" data-start="{s:.3f}" data-end="{e:.3f}" {attrs} '
        f'style="left:{left:.3f}%;width:{max(right - left, 0.8):.3f}%;top:{top}px{style}">{inner}</button>'
    )


def _windows_strip(windows: Sequence[Sequence[float]], duration: float, done: int | None) -> str:
    """A long video's windows under the track (overlapping find windows alternate between two rows)."""
    if len(windows) < 2:
        return ""
    overlap = any(float(b[0]) < float(a[1]) - 1e-6 for a, b in itertools.pairwise(windows))
    cells = []
    for k, w in enumerate(windows, 1):
        s, e = float(w[0]), float(w[1])
        left, right = _pct(s, duration), _pct(e, duration)
        state = ""
        if done is not None:
            state = " mt-win-done" if k <= done else " mt-win-now" if k == done + 1 else ""
        top = 12 * ((k - 1) % 2) if overlap else 0
        cells.append(
            f'<span class="mt-win{state}" data-window="{k}" '
            f'title="window {k}: {clock_span(s, e)}" '
            f'style="left:{left:.3f}%;width:{right - left:.3f}%;top:{top}px">{k}</span>'
        )
    height = 24 if overlap else 12
    return f'<div class="mt-windows" style="height:{height}px">{"".join(cells)}</div>'


def _outside_label(left: float, right: float) -> str:
    """Classes that put a narrow span's label beside it (right of it, or left near the end), not cut."""
    if right - left >= NARROW_SPAN_PCT:
        return ""
    return " mt-out mt-out-left" if right > 70 else " mt-out"


def _moments_list(best: list[tuple[float, float, float]], clips: Sequence[str | None]) -> str:
    if not best:
        return ""
    rows = []
    for k, (s, e, score) in enumerate(best, 1):
        clip = clips[k - 1] if k - 1 < len(clips) else None
        # the page-relative URL Gradio serves a file of the output folder under
        url = html.escape("gradio_api/file=" + quote(str(clip)))
        link = f'<a class="mt-dl" href="{url}" download>clip ⤓</a>' if clip else ""
        label = "best" if k == 1 else f"#{k}"
        rows.append(
            f'<li class="mt-mrow{" mt-best" if k == 1 else ""}"><button type="button" class="mt-mlink" '
            f'data-start="{s:.3f}" data-end="{e:.3f}" data-moment="{k}">'
            f'<b>{label}</b> {clock(s)} → {clock(e)} <span class="mt-score">score {score:.2f}</span>'
            f"</button>{link}</li>"
        )
    title = "Moments (best first; click one to jump there)" if len(best) > 1 else "The moment"
    return f'<div class="mt-moments"><div class="mt-mtitle">{title}</div><ol>{"".join(rows)}</ol></div>'


TIMELINE_JS = asset("timeline.js")
"""``js_on_load`` for the timeline ``gr.HTML``: click to seek, playhead follows the video."""


TIMELINE_CSS = asset("timeline.css")
