"""Timeline HTML: events (caption) or a span (find) on a time axis, clickable to seek the player.

Rendered in Python as one HTML string (every model-written text escaped) for a
``gr.HTML``; ``TIMELINE_JS`` (its ``js_on_load``) seeks the page's ``<video>``
named by the timeline's ``data-player`` selector when an item is clicked, and
moves a playhead while the video plays. No made-up data: a missing span draws
no bar, only a sentence saying so.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TIMELINE_CSS", "TIMELINE_JS", "nice_step", "placeholder", "timeline_html"]

PALETTE = ("#0ea5e9", "#8b5cf6", "#f59e0b", "#10b981", "#ef4444", "#ec4899", "#14b8a6", "#6366f1")


def nice_step(duration: float, target_ticks: int = 8) -> float:
    """A tick spacing (1, 2 or 5 x 10^k s, or 15/30 s and minutes) giving about ``target_ticks`` ticks."""
    if not math.isfinite(duration) or duration <= 0:
        return 1.0
    raw = duration / max(1, target_ticks)
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        if step >= raw:
            return float(step)
    return 3600.0


def _fmt_time(seconds: float) -> str:
    if seconds >= 60:
        m, s = divmod(seconds, 60)
        return f"{int(m)}:{s:04.1f}" if s % 1 else f"{int(m)}:{int(s):02d}"
    return f"{seconds:.1f}".rstrip("0").rstrip(".") + "s" if seconds % 1 else f"{int(seconds)}s"


def _pct(t: float, duration: float) -> float:
    return max(0.0, min(100.0, 100.0 * t / duration)) if duration > 0 else 0.0


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name)


def _lanes(events: Sequence[tuple[float, float, str, int]]) -> list[int]:
    """Greedy lane assignment so overlapping events stack instead of hiding each other."""
    lane_end: list[float] = []
    lanes: list[int] = []
    for start, end, _, _ in events:
        for i, last in enumerate(lane_end):
            if start >= last - 1e-9:
                lane_end[i] = end
                lanes.append(i)
                break
        else:
            lane_end.append(end)
            lanes.append(len(lane_end) - 1)
    return lanes


def _axis(duration: float) -> str:
    step = nice_step(duration)
    ticks = []
    n = int(duration / step + 1e-9)
    for i in range(n + 1):
        t = i * step
        pct = _pct(t, duration)
        cls = "mt-tick mt-tick-end" if i and pct > 96 else "mt-tick"
        ticks.append(f'<span class="{cls}" style="left:{pct:.3f}%">{_fmt_time(t)}</span>')
    return f'<div class="mt-axis">{"".join(ticks)}</div>'


def placeholder(text: str) -> str:
    """The empty timeline shown before a run (or after an error)."""
    return f'<div class="mt-timeline mt-empty"><p>{html.escape(text)}</p></div>'


def timeline_html(
    duration: float,
    events: Sequence[Any] = (),
    span: Sequence[float] | None = None,
    reference: Sequence[float] | None = None,
    player: str | None = None,
    span_label: str = "Marlin",
    no_span_text: str | None = None,
) -> str:
    """Events as bars in lanes, or a find span (plus an optional ground-truth span), on one axis.

    ``player`` is a CSS selector of the element holding the ``<video>`` to seek.
    """
    if not math.isfinite(duration) or duration <= 0:
        ends = [float(_field(e, "end")) for e in events] + ([float(span[1])] if span else [])
        duration = max(ends, default=1.0) or 1.0
    rows: list[str] = []
    items = sorted(
        (
            (float(_field(e, "start")), float(_field(e, "end")), str(_field(e, "description")), i)
            for i, e in enumerate(events)
        ),
        key=lambda item: (item[0], item[1]),
    )
    lanes = _lanes(items)
    n_lanes = max(lanes, default=-1) + 1
    for (start, end, desc, idx), lane in zip(items, lanes, strict=True):
        left, right = _pct(start, duration), _pct(end, duration)
        color = PALETTE[idx % len(PALETTE)]
        label = f"{_fmt_time(start)}–{_fmt_time(end)} · {desc}"
        rows.append(
            f'<button type="button" class="mt-item mt-event" data-start="{start:.3f}" data-end="{end:.3f}" '
            f'data-index="{idx}" title="{html.escape(label)}" aria-label="Play from {start:.1f} s: '
            f'{html.escape(desc)}" style="left:{left:.3f}%;width:{max(right - left, 0.8):.3f}%;'
            f'top:{lane * 34 + 4}px;--mt-color:{color}"><span>{html.escape(desc)}</span></button>'
        )
    track_h = max(1, n_lanes) * 34 + 8
    if reference is not None:
        s, e = float(reference[0]), float(reference[1])
        left, right = _pct(s, duration), _pct(e, duration)
        rows.append(
            f'<button type="button" class="mt-item mt-ref" data-start="{s:.3f}" data-end="{e:.3f}" '
            f'title="Ground truth {_fmt_time(s)}–{_fmt_time(e)}" style="left:{left:.3f}%;'
            f'width:{max(right - left, 0.8):.3f}%;top:4px"><span>ground truth {_fmt_time(s)}–{_fmt_time(e)}'
            "</span></button>"
        )
    if span is not None:
        s, e = float(span[0]), float(span[1])
        left, right = _pct(s, duration), _pct(e, duration)
        top = 42 if reference is not None else 4
        rows.append(
            f'<button type="button" class="mt-item mt-span" data-start="{s:.3f}" data-end="{e:.3f}" '
            f'title="{html.escape(span_label)} {_fmt_time(s)}–{_fmt_time(e)}" aria-label="Play the span from '
            f'{s:.1f} s" style="left:{left:.3f}%;width:{max(right - left, 0.8):.3f}%;top:{top}px">'
            f"<span>{html.escape(span_label)} {_fmt_time(s)}–{_fmt_time(e)}</span></button>"
        )
    if span is not None or reference is not None or no_span_text:
        track_h = 80 if (reference is not None and span is not None) else 42
    note = ""
    if span is None and no_span_text:
        note = f'<p class="mt-nospan">{html.escape(no_span_text)}</p>'
    attr = f' data-player="{html.escape(player)}"' if player else ""
    return (
        f'<div class="mt-timeline" data-duration="{duration:.3f}"{attr}>'
        f'<div class="mt-track" style="height:{track_h}px">{"".join(rows)}'
        '<div class="mt-playhead" style="left:0%"></div></div>'
        f"{_axis(duration)}{note}</div>"
    )


TIMELINE_JS = r"""
const findVideo = () => {
  const root = element.querySelector('.mt-timeline');
  const sel = root ? root.dataset.player : null;
  if (!sel) return null;
  const host = document.querySelector(sel);
  if (!host) return null;
  return host.tagName === 'VIDEO' ? host : host.querySelector('video');
};
element.addEventListener('click', (ev) => {
  const item = ev.target.closest('[data-start]');
  if (!item || !element.contains(item)) return;
  const t = parseFloat(item.dataset.start);
  if (!Number.isFinite(t)) return;
  const video = findVideo();
  if (video) {
    video.currentTime = t;
    video.dataset.marlinSeek = String(t);
  }
  element.querySelectorAll('.mt-active').forEach((n) => n.classList.remove('mt-active'));
  item.classList.add('mt-active');
});
setInterval(() => {
  const root = element.querySelector('.mt-timeline');
  const head = element.querySelector('.mt-playhead');
  if (!root || !head) return;
  const video = findVideo();
  const dur = parseFloat(root.dataset.duration);
  if (!video || !Number.isFinite(dur) || dur <= 0) { head.style.display = 'none'; return; }
  head.style.display = 'block';
  head.style.left = Math.min(100, 100 * video.currentTime / dur) + '%';
}, 200);
"""
"""``js_on_load`` for the timeline ``gr.HTML``: click to seek, playhead follows the video."""


TIMELINE_CSS = """
.mt-timeline { padding: 6px 2px 2px; user-select: none; }
.mt-timeline.mt-empty { border: 1px dashed var(--border-color-primary); border-radius: 10px;
  padding: 18px; text-align: center; color: var(--body-text-color-subdued); }
.mt-timeline.mt-empty p { margin: 0; }
.mt-track { position: relative; border-radius: 10px; background: var(--background-fill-secondary);
  border: 1px solid var(--border-color-primary); overflow: hidden; }
.mt-item { position: absolute; height: 28px; border-radius: 7px; border: none; cursor: pointer;
  padding: 0 8px; font-size: 12px; line-height: 28px; text-align: left; overflow: hidden;
  white-space: nowrap; text-overflow: ellipsis; color: #fff; transition: transform .08s, box-shadow .08s; }
.mt-item span { pointer-events: none; }
.mt-event { background: var(--mt-color); }
.mt-item:hover, .mt-item:focus-visible { transform: translateY(-1px); box-shadow: 0 2px 8px rgba(0,0,0,.25);
  outline: none; z-index: 2; }
.mt-item.mt-active { box-shadow: 0 0 0 2px var(--body-text-color); z-index: 3; }
.mt-span { background: linear-gradient(90deg, #0d9488, #0ea5e9); font-weight: 600; height: 32px;
  line-height: 32px; }
.mt-ref { background: repeating-linear-gradient(45deg, rgba(245,158,11,.25), rgba(245,158,11,.25) 6px,
  rgba(245,158,11,.12) 6px, rgba(245,158,11,.12) 12px); color: var(--body-text-color);
  border: 1.5px dashed #f59e0b; }
.mt-playhead { position: absolute; top: 0; bottom: 0; width: 2px; background: #ef4444; pointer-events: none;
  display: none; z-index: 4; }
.mt-axis { position: relative; height: 20px; margin-top: 2px; font-size: 11px;
  color: var(--body-text-color-subdued); }
.mt-tick { position: absolute; transform: translateX(-50%); white-space: nowrap; }
.mt-tick::before { content: ""; position: absolute; left: 50%; top: -4px; height: 4px; width: 1px;
  background: var(--border-color-primary); }
.mt-tick:first-child { transform: none; }
.mt-tick:first-child::before { left: 0; }
.mt-tick.mt-tick-end { transform: translateX(-100%); }
.mt-tick.mt-tick-end::before { left: 100%; }
.mt-nospan { margin: 6px 0 0; color: var(--body-text-color-subdued); font-size: 13px; }
"""
"""Global CSS for the timeline (also used by the Compare tab's per-variant timelines)."""
