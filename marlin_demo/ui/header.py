"""Header: what Marlin does, which model answers, on what device, the limits, and any warning banner.

Refreshed on every page load, so variants loaded (or failed) since startup show up.
"""

from __future__ import annotations

import html

import gradio as gr

from marlin_demo.ui.common import FALLBACK_FIX, PRIVATE_UI, UIContext, tiny_in_use, variant_label

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
    "Marlin-2B watches a video and tells you <b>what happens</b> (a scene paragraph and a timeline of "
    "timed events) and <b>when something happens</b> (the start–end span of an event you describe)."
)


def _device(ctx: UIContext) -> str:
    loaded = ctx.engine.loaded()
    if loaded:
        return ", ".join(sorted({m.device for m in loaded.values()}))
    try:
        from marlin_demo.models import pick_device

        return pick_device(ctx.settings.device)
    except Exception as exc:
        return f"unavailable ({exc})"


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
    elif tiny_in_use(ctx):
        out.append(
            '<div class="mh-banner mh-warn" role="alert"><b>Tiny stand-in: random weights, answers are '
            "meaningless.</b> It has Marlin's architecture and was taught only the answer format, so every "
            "tab works offline on a CPU. Start with <code>--model marlin</code> (the default) on a machine "
            "with the Hub or local weights for real answers.</div>"
        )
    for variant, message in ctx.engine.load_errors().items():
        out.append(
            f'<div class="mh-banner mh-danger" role="alert"><b>{html.escape(variant)} could not be loaded.'
            f"</b> {html.escape(message)}</div>"
        )
    return "".join(out)


def limits_html(ctx: UIContext) -> str:
    s = ctx.settings
    return (
        '<div class="mh-limits"><b>Limits</b> · videos up to '
        f"{s.max_upload_mb:g} MB, {s.max_duration_s:g} s and {s.max_width}×{s.max_height} (MP4, WebM, MOV, "
        f"MKV) · queries up to {s.max_query_chars} characters · each request stops after "
        f"{s.request_timeout_s:g} s · {s.queue_size} requests can wait, more are turned away (try again) · "
        "Marlin samples 2 frames/s up to 240 frames: clips over 2 minutes are sampled more sparsely.</div>"
    )


def header_html(ctx: UIContext) -> str:
    """The whole header as one HTML string."""
    loaded = ctx.engine.loaded()
    failed = ctx.engine.load_errors()
    chips = []
    for v in ctx.variants:
        state = "loaded" if v in loaded else ("failed" if v in failed else "loads on first use")
        cls = {"loaded": "mh-ok", "failed": "mh-bad"}.get(state, "")
        chips.append(
            f'<span class="mh-chip {cls}" title="{html.escape(state)}">'
            f"{html.escape(variant_label(v))}"
            f"<small>{html.escape(state)}</small></span>"
        )
    return (
        '<div class="mh-header">'
        f'<div class="mh-title"><span class="mh-logo" aria-hidden="true">{LOGO}</span>'
        "<div><h1>Marlin-2B video demo</h1>"
        f"<p>{TAGLINE}</p></div></div>"
        '<div class="mh-facts">'
        f'<div><span class="mh-k">Model</span> {html.escape(_source(ctx))}</div>'
        f'<div><span class="mh-k">Variants</span> {"".join(chips)}</div>'
        f'<div><span class="mh-k">Device</span> {html.escape(_device(ctx))}</div>'
        "</div>"
        f"{banners_html(ctx)}{limits_html(ctx)}</div>"
    )


def render(ctx: UIContext) -> gr.HTML:
    """The header component (static HTML, refreshed by ``listen``)."""
    return gr.HTML(header_html(ctx), elem_id="marlin-header", js_on_load=None)


def listen(ctx: UIContext, demo: gr.Blocks, header: gr.HTML) -> None:
    """Re-render the header on page load: load states change while the server runs."""
    demo.load(lambda: header_html(ctx), None, header, **PRIVATE_UI)
