"""What the page says around a run: the line under the clip, the metrics cards, notes, error lines."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gradio as gr

from marlin_demo import service
from marlin_demo.longvideo import policy
from marlin_demo.model_io import clock, clock_part
from marlin_demo.results import Result, RunInfo, memory_label
from marlin_demo.service import cost, gpu_calls
from marlin_demo.tasks import TASKS, get_task
from marlin_demo.ui import example_runs
from marlin_demo.ui.assets import asset
from marlin_demo.ui.context import UIContext, fmt
from marlin_demo.ui.inputs import require_upload, user_errors
from marlin_demo.video import plan_sampling


def tab_work(
    ctx: UIContext, tab: str | None, compare_task: str | None = None, with_bf16: bool = False
) -> tuple[str, list[str]] | None:
    """What the selected tab would run on the clip: its task and variants; None: nothing (Library, About)."""
    first = next(iter(TASKS))  # the page opens on the first task's tab; Compare on that task
    tab = tab or first
    if tab == "compare":
        return get_task(compare_task or first).name, ctx.compare_variants(bool(with_bf16))
    return (tab, [ctx.default_variant]) if tab in TASKS else None  # a task's tab (its id) runs that task


def clip_status(
    ctx: UIContext,
    video: str | None,
    start: float | None = None,
    end: float | None = None,
    tab: str | None = None,
    compare_task: str | None = None,
    with_bf16: bool = False,
) -> str:
    """One line as soon as a clip is chosen: what the selected tab would cost on it (no decoding)."""
    if not video:
        return ""
    work = tab_work(ctx, tab, compare_task, with_bf16)
    share = 1.0
    try:
        path = require_upload(video, ctx)
        with user_errors():
            asked = service.asked_range(ctx.engine, path, start, end)
            info = ctx.engine.info(Path(path), whole=asked is None)
            s = ctx.engine.settings
            seconds = info.duration_s if asked is None else asked[1] - asked[0]
            split = [
                (task.name.capitalize(), len(policy.plan_for(task, seconds, s)), task.windows(s)[0])
                for task in TASKS.values()
            ]
            if work is not None and gpu_calls.zero_gpu():  # the calls are sized by their frames
                share = service.call_share(ctx.engine, work[0], path, start, end)
    except gr.Error as exc:
        return status_html(exc.message, error=True)
    text = f"Ready: {clock(info.duration_s)}, {info.display_width}×{info.display_height}, {info.codec}"
    if asked is not None:
        text += f"; asking about {clock_part(*asked)}"
    for name, n, size in split:
        text += f"; {name} reads it as {n} windows of up to {clock(size)}" if n > 1 else ""
    note = ""
    if work is not None:
        plan = plan_sampling(info, ctx.engine.params)
        kept = {v: ctx.engine.kept_reading(Path(path), v) for v in work[1]} if asked is None else None
        note = cost.estimate_line(work[0], plan, seconds, s, work[1], ctx.engine.params, share, kept)
    return status_html(text + "." + (f" {note}" if note else ""))


def status_html(message: str, error: bool = False) -> str:
    """The line under an input: what is wrong (red) or that it is fine."""
    cls = "ms-status ms-error" if error else "ms-status ms-ok"
    role = ' role="alert"' if error else ""
    return f'<div class="{cls}"{role}>{html.escape(message)}</div>'


STATUS_JS = asset("status.js")


def metrics_html(
    m: Mapping[str, Any], cold: bool, variant: str, info: RunInfo | None = None, reuse: str = ""
) -> str:
    """A request's cost as cards; ``info`` adds what the public JSON leaves out, ``reuse`` what it saved."""
    turn = "its turn on the model: reading the clip, the model's work, any wait for others; load excluded"
    cards = [
        ("Latency", fmt(m.get("latency_s"), " s"), turn),
        ("First token", fmt(m.get("ttft_s"), " s"), "decode + prefill until the first new token"),
        ("Tokens/s", fmt(m.get("tokens_per_s"), "", 1), "generation speed after the first token"),
        ("Output tokens", str(m.get("output_tokens", "–")), "tokens the model wrote"),
        ("Video tokens", str(m.get("video_tokens", "–")), "vision tokens of the sampled frames"),
        ("Peak memory", fmt(m.get("peak_memory_mb"), " MB", 0), memory_label(str(m.get("memory_kind", "")))),
        ("Load time", fmt(m.get("load_s"), " s"), "loading this variant (paid once)"),
        ("Device", html.escape(str(m.get("device", "–"))), f"variant {variant}"),
    ]
    if info is not None:
        dtype = html.escape(info.runtime.compute_dtype or "–")
        cards[-1] = ("Device", f"{cards[-1][1]} · {dtype}", f"variant {variant}, computed in {dtype}")
        cards[2:2] = [("First text", fmt(info.first_text_s, " s"), "until the first visible words")]
        if info.total_s:
            cards.insert(0, ("Total", fmt(info.total_s, " s"), _total_hint(m, info.total_s, cold)))
        compiled = f"; compiled decoding: {info.compile}" if info.compile and info.compile != "off" else ""
        if compiled:
            compiled += f", {info.compile_s:.1f} s compile paid once"
        cards.append(
            ("Kernel", html.escape(info.kernel or "–"), f"attention: {info.attention or '–'}{compiled}")
        )
    body = "".join(
        f'<div class="md-card{" md-wide" if len(v) > 9 else ""}"><div class="md-k">{k}</div>'
        f'<div class="md-v">{v}</div>'
        f'<div class="md-h">{html.escape(h)}</div></div>'
        for k, v, h in cards
    )
    run = (
        f'<span class="md-badge md-cold">cold run: {variant} was loaded for this request '
        f"({fmt(m.get('load_s'), ' s')})</span>"
        if cold
        else f'<span class="md-badge md-warm">warm run: {variant} was already loaded</span>'
    )
    cached = example_runs.cached_badge(m, cold, variant)
    run = cached or run
    if reuse and cached is None:
        run += (
            ' <span class="md-badge md-reuse">video already read</span>'
            f'<div class="md-reuse-note">{html.escape(reuse)}</div>'
        )
    return f'<div class="md-metrics"><div class="md-run">{run}</div><div class="md-grid">{body}</div></div>'


def _total_hint(m: Mapping[str, Any], total_s: float, cold: bool) -> str:
    """What the Total card adds up, so no second of the server's goes unsaid."""
    load = float(m.get("load_s") or 0.0) if cold else 0.0
    latency = float(m.get("latency_s") or 0.0)
    rest = max(0.0, total_s - load - latency)
    loaded = f"load {load:.2f} s + " if cold else ""
    return (
        f"the server's time on it: {loaded}latency {latency:.2f} s + {rest:.2f} s outside the model's turns "
        "(checking the clip; a long video's frames) (not counted: its upload and the page's queue before it)"
    )


def notice_html(ctx: UIContext, result: Result, what: str) -> str:
    """Honest notes: a partial answer, the range asked, stand-in weights, an off-format answer, repairs."""
    notes: list[str] = []
    if result.partial is not None:
        notes.append(f"<b>{html.escape(result.partial.note())}</b>")
    if result.range_s is not None:
        start, end = result.range_s
        notes.append(f"Asked about {clock_part(start, end)} of the video; times are the video's own.")
    if not result.format_ok:
        trained = get_task(what).answer.form  # the format its answer was trained in
        notes.append(
            f"<b>Not in Marlin's format.</b> The answer did not follow the trained {html.escape(trained)} "
            "format; it is shown as far as it could be read."
        )
    if result.repaired:
        items = "".join(f"<li>{html.escape(r)}</li>" for r in result.info.repairs)
        items = items or "<li>details not recorded</li>"
        part = "the video" if result.range_s is None else "the range asked"
        notes.append(f"<b>Repaired.</b> The answer was adjusted to fit {part}:<ul>{items}</ul>")
    if ctx.engine.settings.is_tiny:
        notes.append(
            "<b>Tiny stand-in.</b> These words come from random weights that only learned the answer "
            "format: they say nothing about the video."
        )
    if not notes:
        return ""
    return '<div class="md-notice">' + "".join(f"<p>{n}</p>" for n in notes) + "</div>"


def error_html(message: str) -> str:
    return f'<div class="md-notice md-error"><p>{html.escape(message)}</p></div>'
