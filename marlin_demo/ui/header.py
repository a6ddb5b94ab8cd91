"""Header: what Marlin does, which model answers, on what device, the limits, any warning banner."""

from __future__ import annotations

import functools
import html
from collections.abc import Iterable

import gradio as gr

from marlin_demo.models import ModelLoadError, compute_choice, pick_device
from marlin_demo.service import capacity, gpu_calls
from marlin_demo.service.startup import FALLBACK_FIX
from marlin_demo.ui.assets import asset
from marlin_demo.ui.context import PRIVATE_UI, UIContext, variant_label
from marlin_demo.ui.running import PAGE_JS

LOGO = (
    '<svg width="42" height="42" viewBox="0 0 42 42"><defs>'
    '<linearGradient id="mh-g" x1="0" y1="0" x2="1" y2="1">'
    '<stop offset="0" stop-color="#0ea5e9"/><stop offset="1" stop-color="#0d9488"/></linearGradient></defs>'
    '<rect width="42" height="42" rx="11" fill="url(#mh-g)"/>'
    '<rect x="8" y="12" width="26" height="4" rx="2" fill="#fff" opacity=".55"/>'
    '<rect x="8" y="19" width="12" height="4" rx="2" fill="#fff"/>'
    '<rect x="22" y="19" width="12" height="4" rx="2" fill="#fff" opacity=".8"/>'
    '<rect x="8" y="26" width="18" height="4" rx="2" fill="#fff" opacity=".65"/>'
    '<rect x="27" y="9" width="2" height="24" rx="1" fill="#fde047"/></svg>'
)
"""A small timeline glyph (no emoji: headless and minimal systems often lack an emoji font)."""

TAGLINE = (
    "A video model that tells you <b>what happens</b> (a scene and timed events) and <b>when</b> "
    "something happens (the start–end span of an event you describe)."
)


def _device(ctx: UIContext) -> str:
    """The device and what the models compute in there ("cpu · float32"), with the reason as a tooltip."""
    try:
        device = pick_device(ctx.settings.device)
        choices = {compute_choice(ctx.engine.settings, v, device) for v in ctx.variants}
    except (ModelLoadError, ValueError) as exc:
        return html.escape(f"unavailable ({exc})")
    loaded = ctx.engine.loaded()
    if loaded:  # what really loaded (a variant may have been loaded under other settings)
        device = ", ".join(sorted({m.device for m in loaded.values()}))
    dtypes = ", ".join(sorted({c.dtype for c in choices}))
    why = "; ".join(sorted({c.reason for c in choices}))
    text = html.escape(f"{device} · computes in {dtypes}")
    return f'<span class="mh-dtype" title="{html.escape(why)}">{text}</span>'


def _source(ctx: UIContext) -> str:
    s = ctx.engine.settings
    if s.is_tiny:
        return "marlin-tiny, an offline stand-in with random weights (built locally, ~1.6 MB)"
    if s.model == "marlin":
        return f"{s.bf16_id} (bf16, bnb4) · {s.gptq_id} (gptq)"
    return f"local folder {s.model}"


def banners_html(ctx: UIContext) -> str:
    """Warnings a visitor must see before trusting an answer."""
    out: list[str] = []
    status = ctx.status
    if status.fell_back:
        out.append(
            '<div class="mh-banner mh-danger" role="alert"><b>Marlin-2B could not be loaded, so the offline '
            "tiny stand-in answers instead: its answers are meaningless.</b>"
            f"<div>Reason: {html.escape(status.fallback_reason or '')}</div>"
            f"<div>Fix: {html.escape(FALLBACK_FIX)}</div></div>"
        )
    elif ctx.engine.settings.is_tiny:
        out.append(
            '<div class="mh-banner mh-warn" role="alert" title="It has the architecture of Marlin-2B and '
            'was taught only the answer format, so every tab works offline on a CPU."><b>Tiny stand-in: '
            'random weights, answers are meaningless.</b> <span class="mh-more">For real answers start with '
            "<code>--model marlin</code> (the default) where the Hub or local weights are.</span></div>"
        )
    # ZeroGPU's start-up call failed: said while the next call still asks for the compile
    if status.warm_up_note and (note := gpu_calls.first_call_note(pick_device(ctx.engine.settings.device))):
        out.append(f'<div class="mh-banner mh-warn" role="status">{html.escape(note)}</div>')
    for variant, message in ctx.engine.load_errors().items():
        out.append(
            f'<div class="mh-banner mh-danger" role="alert"><b>{html.escape(variant)} could not be loaded.'
            f"</b> {html.escape(message)}</div>"
        )
    return "".join(out)


def duration_text(seconds: float) -> str:
    """600 -> "10 min", 90 -> "90 s": how long a video may be, as a visitor reads it."""
    return f"{seconds / 60:g} min" if seconds >= 120 and seconds % 60 == 0 else f"{seconds:g} s"


def limits_html(ctx: UIContext) -> str:
    """The duration and size limits in one line; the rest folded under it (a ``<details>``)."""
    s = ctx.engine.settings  # what the engine enforces (the stand-in after a fallback keeps the limits)
    return (
        '<details class="mh-limits" id="mh-limits"><summary>'
        f'<span class="mh-k">Limits</span> videos up to '
        f'<b class="mh-dur">{duration_text(s.max_duration_s)}</b>'
        f" and {s.max_upload_mb:g} MB · details</summary>"
        f"<div>Videos up to {s.max_duration_s:g} s, {s.max_upload_mb:g} MB and {s.max_width}×{s.max_height} "
        f"(MP4, WebM, MOV, MKV): {capacity.limits_line(s)} · queries up to {s.max_query_chars} characters · "
        f"each window (or short clip) stops after {s.request_timeout_s:g} s of model work, waiting not "
        f"counted · {s.queue_size} requests are answered in turns, more are turned away (try again) · "
        "Marlin samples 2 frames/s; a long video is answered window by window, in turns with "
        "other requests.</div></details>"
    )


def chips_html(ctx: UIContext) -> str:
    """One chip per variant: loaded, failed, or loads on first use (live: see ``listen``)."""
    loaded, failed, chips = ctx.engine.loaded(), ctx.engine.load_errors(), ""
    for v in ctx.variants:
        state = "loaded" if v in loaded else ("failed" if v in failed else "loads on first use")
        cls = {"loaded": "mh-ok", "failed": "mh-bad"}.get(state, "")
        chips += (
            f'<span class="mh-chip {cls}" data-variant="{html.escape(v)}" data-state="{html.escape(state)}" '
            f'title="{html.escape(state)}">{html.escape(variant_label(v))}'
            f"<small>{html.escape(state)}</small></span>"
        )
    return chips


def header_html(ctx: UIContext) -> str:
    """The whole header as one HTML string: a title line, one line of facts, banners."""
    return (
        '<div class="mh-header">'
        f'<div class="mh-title"><span class="mh-logo" aria-hidden="true">{LOGO}</span>'
        "<div><h1>Marlin-2B video demo</h1>"
        f"<p>{TAGLINE}</p></div></div>"
        '<div class="mh-facts">'
        f'<span class="mh-fact"><span class="mh-k">Model</span> {html.escape(_source(ctx))}</span>'
        f'<span class="mh-fact mh-variants"><span class="mh-k">Variants</span> {chips_html(ctx)}</span>'
        f'<span class="mh-fact"><span class="mh-k">Device</span> {_device(ctx)}</span>'
        f"{limits_html(ctx)}</div>"
        f"{banners_html(ctx)}</div>"
    )


KEYBOARD_JS = asset("keyboard.js")
"""``js_on_load`` of the header, after ``PAGE_JS``: the page's keyboard order and focus."""


def render(ctx: UIContext) -> gr.HTML:
    """The header component (static HTML, refreshed by ``listen``)."""
    return gr.HTML(header_html(ctx), elem_id="marlin-header", js_on_load=PAGE_JS + KEYBOARD_JS)


def listen(ctx: UIContext, demo: gr.Blocks, header: gr.HTML, after: Iterable[gr.HTML | gr.Dataframe]) -> None:
    """Re-render the header on load and when one of ``after`` changes, so the chips follow the engine."""
    for event in [demo.load, *(component.change for component in after)]:
        event(functools.partial(header_html, ctx), None, header, **PRIVATE_UI)
