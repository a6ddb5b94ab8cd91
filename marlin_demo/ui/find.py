"""Find tab: "when does this happen" — the span on the timeline, the player jumping there, the span as a clip.

An answer without a usable time range is said plainly; no span is ever drawn
that the model did not give. The public ``/find`` endpoint returns
``FindResult.to_dict()`` only; the jump of the player is a private follow-up.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from marlin_demo import agreement as cmp
from marlin_demo import service
from marlin_demo.longvideo import plan as win
from marlin_demo.metrics import temporal_iou
from marlin_demo.results import FindResult, Result
from marlin_demo.ui import timeline
from marlin_demo.ui.common import (
    GPU_EVENT,
    PRIVATE_UI,
    STATUS_JS,
    UIContext,
    clip_status,
    error_html,
    example_cache_kwargs,
    metrics_html,
    notice_html,
    pick_variant,
    require_upload,
    run_example,
    short_name,
    status_html,
    tiny_in_use,
    upload_video,
    user_errors,
)
from marlin_demo.ui.credits import credit_box, credit_line
from marlin_demo.ui.running import BarView, RunState, Updates, follow, wire_run_and_stop, with_buttons
from marlin_demo.video import VideoError, export_clip

VIDEO_ID = "find-video"


@dataclass
class FindTab:
    video: gr.Video
    query: gr.Textbox
    suggestions: gr.Radio
    variant: gr.Radio
    run: gr.Button
    headline: gr.HTML
    timeline: gr.HTML
    clip: gr.File
    notice: gr.HTML
    metrics: gr.HTML
    raw: gr.Textbox
    jump_to: gr.Number
    api_button: gr.Button
    api_out: gr.JSON
    status: gr.HTML
    query_status: gr.HTML
    progress: gr.HTML
    stop: gr.Button
    examples: gr.helpers.Examples | None = None

    @property
    def outputs(self) -> list[Any]:
        """What a finished find fills (also what a cached example stores)."""
        return [
            self.headline,
            self.timeline,
            self.clip,
            self.metrics,
            self.raw,
            self.notice,
            self.jump_to,
            self.progress,
        ]


def _truth(ctx: UIContext, video: str, query: str) -> tuple[float, float] | None:
    example = ctx.ground_truth(video)
    return None if example is None else cmp.truth_span(example, query)


def headline_html(result: FindResult, truth: tuple[float, float] | None) -> str:
    q = html.escape(result.query)
    if result.span is None:
        said = html.escape(result.raw[:300]) or "(nothing)"
        return (
            f'<div class="mf-head mf-none"><div class="mf-q">“{q}”</div>'
            '<div class="mf-v">No span found</div><div class="mf-h">The answer did not contain a usable '
            f"time range, so nothing is highlighted. The model said: “{said}”</div></div>"
        )
    s, e = result.span
    extra = ""
    if len(result.moments) > 1:
        extra += (
            f'<div class="mf-h">{len(result.moments)} moments found; this is the best '
            f"(score {result.moments[0].score:.2f}). All are listed under the timeline.</div>"
        )
    if truth is not None:
        extra += (
            f'<div class="mf-h">Ground truth of this example: {truth[0]:.1f} s → {truth[1]:.1f} s · '
            f"IoU {temporal_iou(result.span, truth):.2f}</div>"
        )
    return (
        f'<div class="mf-head"><div class="mf-q">“{q}”</div>'
        f'<div class="mf-v">{s:.1f} s → {e:.1f} s</div>'
        f'<div class="mf-h">{e - s:.1f} s long · the player jumped to its start · '
        "click the span to jump again"
        f"</div>{extra}</div>"
    )


def _windows(ctx: UIContext, duration: float) -> list[tuple[float, float]]:
    """A long video's find windows (none for a video that fits one window)."""
    try:
        parts = win.plan_for("find", duration, ctx.engine.settings)
    except ValueError:
        return []
    return [(w.start, w.end) for w in parts] if len(parts) > 1 else []


def stopped_html() -> str:
    return (
        '<div class="mf-head mf-none"><div class="mf-v">Stopped</div><div class="mf-h">You stopped this '
        "search: the model stops at its next token. Run it again for an answer.</div></div>"
    )


def final_outputs(tab: FindTab, ctx: UIContext, result: FindResult, video: str, cold: bool) -> Updates:
    """Every output of a finished find (also what the cached examples store); the player jumps to the
    best moment's start (``jump_to``); every moment is cut as a clip to download."""
    truth = _truth(ctx, video, result.query)
    duration = result.info.duration_s
    clips: list[str | None] = []
    problems: list[str] = []
    folder = ctx.new_run_dir("find") if result.moments else None
    for k, m in enumerate(result.moments, 1):
        out = folder / f"moment{k}_{m.start:.1f}-{m.end:.1f}s.mp4" if folder else None
        try:
            assert out is not None
            clips.append(str(export_clip(video, m.start, m.end, out, info=result.info.video)))
        except (VideoError, RuntimeError) as exc:
            clips.append(None)
            problems.append(f"Moment {k} could not be cut as a clip: {exc}")
    tl = timeline.timeline_html(
        duration,
        span=result.span,
        reference=truth,
        player=f"#{VIDEO_ID}",
        no_span_text="No span: the answer gave no usable time range." if result.span is None else None,
        span_label=f"best {result.moments[0].score:.2f}" if len(result.moments) > 1 else "Marlin",
        windows=_windows(ctx, duration),
        moments=result.moments,
        clips=clips,
    )
    notice = notice_html(
        tiny=tiny_in_use(ctx),
        format_ok=result.format_ok,
        repaired=result.repaired,
        repairs=result.info.repairs,
        what="find",
    )
    for problem in problems:
        notice += error_html(problem)
    jump = None if result.span is None else float(result.span[0])
    metrics = metrics_html(
        result.to_dict()["metrics"],
        cold,
        result.variant,
        result.info,
        reuse=ctx.reuse_note(result.variant, result.info, result.metrics.ttft_s),
    )
    return {
        tab.headline: headline_html(result, truth),
        tab.timeline: tl,
        tab.clip: [c for c in clips if c] or None,
        tab.metrics: metrics,
        tab.raw: result.raw,
        tab.notice: notice,
        tab.jump_to: jump,
        tab.progress: "",
    }


def render(ctx: UIContext) -> FindTab:
    """Lay out the tab; outputs are made first so the examples can name them."""
    headline = gr.HTML("", elem_id="find-headline", render=False)
    tl = gr.HTML(
        timeline.placeholder(
            "Describe an event and run Find: its span appears here; click it to jump there."
        ),
        js_on_load=timeline.TIMELINE_JS,
        elem_id="find-timeline",
        render=False,
    )
    clip = gr.File(
        label="The moments as clips (MP4, cut frame-accurately)",
        file_count="multiple",
        interactive=False,
        elem_id="find-clip",
        render=False,
    )
    progress = gr.HTML("", elem_id="find-progress", render=False)
    notice = gr.HTML("", elem_id="find-notice", render=False)
    metrics = gr.HTML("", elem_id="find-metrics", render=False)
    raw = gr.Textbox(
        label="Exactly what the model wrote",
        lines=2,
        interactive=False,
        buttons=["copy"],
        elem_id="find-raw",
        render=False,
    )
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=320):
            video = upload_video(
                label="Video (also the player)", sources=["upload"], elem_id=VIDEO_ID, height=300
            )
            status = gr.HTML("", js_on_load=STATUS_JS, elem_id="find-status")
            credit = credit_box("find-credit")
            video.change(functools.partial(credit_line, ctx), video, credit, **PRIVATE_UI)
            video.change(functools.partial(clip_status, ctx, task="find"), video, status, **PRIVATE_UI)
            query = gr.Textbox(
                label="What happens? Describe one event",
                placeholder="e.g. the red ball rolls across the field",
                max_length=ctx.settings.max_query_chars,
                lines=1,
                elem_id="find-query",
            )
            query_status = gr.HTML("", elem_id="find-query-status")
            suggestions = gr.Radio(
                choices=[],
                value=None,
                label="This example clip has queries with ground truth: pick one",
                visible=False,
                interactive=True,
                elem_id="find-suggestions",
            )
            variant = gr.Radio(
                ctx.variant_choices(), value=ctx.default_variant, label="Variant", elem_id="find-variant"
            )
            with gr.Row(elem_classes="mr-buttons"):
                run = gr.Button(
                    "Find when it happens", variant="primary", interactive=False, elem_id="find-run"
                )
                stop = gr.Button("Stop", variant="stop", visible=False, elem_id="find-stop")
            api_button = gr.Button("api", visible=False)
            api_out = gr.JSON(label="find", visible=False)
            jump_to = gr.Number(None, visible=False)  # not a State: cached examples store it too
            tab = FindTab(
                video,
                query,
                suggestions,
                variant,
                run,
                headline,
                tl,
                clip,
                notice,
                metrics,
                raw,
                jump_to,
                api_button,
                api_out,
                status=status,
                query_status=query_status,
                progress=progress,
                stop=stop,
            )
            tab.examples = _examples(ctx, tab)
        with gr.Column(scale=7, min_width=360):
            progress.render()
            headline.render()
            tl.render()
            notice.render()
            clip.render()
            metrics.render()
            with gr.Accordion("Raw model output", open=False, elem_id="find-raw-acc"):
                raw.render()
    return tab


def _examples(ctx: UIContext, tab: FindTab) -> gr.helpers.Examples | None:
    rows = [(e, q) for e in ctx.examples for q in (e.get("queries") or [])[:1]]
    if not rows:
        return None

    def example_fn(video: str, query: str, variant: str) -> Updates:
        def run(path: str, v: str) -> FindResult:
            result = service.run(ctx.engine, "find", path, v, query)
            assert isinstance(result, FindResult)
            return result

        return run_example(ctx, video, variant, run, functools.partial(final_outputs, tab))

    return gr.Examples(
        examples=[[str(ctx.clip(e)), q["query"], ctx.default_variant] for e, q in rows],
        inputs=[tab.video, tab.query, tab.variant],
        outputs=tab.outputs,
        fn=example_fn,
        example_labels=[f"▶ {e.get('title') or short_name(e)} · “{q['query']}”" for e, q in rows],
        elem_id="find-examples",
        **example_cache_kwargs(ctx),
    )


class FindView(BarView):
    """The Find tab while the model searches: what it writes, the bar window by window."""

    def __init__(self, ctx: UIContext, tab: FindTab, path: str, variant: str) -> None:
        super().__init__(
            tab.progress,
            variant,
            functools.partial(service.is_cold, ctx.engine, variant),
            written=lambda text: 0.5,  # a span is a few tokens: halfway while it is written
        )
        self.ctx, self.tab, self.path = ctx, tab, path

    def start(self) -> Updates:
        """The last result and the query's old message are cleared as the request starts."""
        t = self.tab
        cleared: Updates = {
            t.clip: None,
            t.metrics: "",
            t.raw: "",
            t.notice: "",
            t.jump_to: None,
            t.query_status: "",
        }
        return {
            t.headline: '<div class="mf-head mf-wait">Looking for the event…</div>',
            **cleared,
            **self.reading(),
        }

    def loaded(self, run: RunState) -> Updates | None:
        assert run.prepared is not None
        return self.bar(0.2, f"Reading the video ({run.prepared.plan.video_tokens} video tokens)…")

    def writing(self, run: RunState) -> Updates:
        return {self.tab.raw: run.text, **super().writing(run)}

    def done(self, run: RunState, result: Result) -> Updates:
        assert isinstance(result, FindResult)
        return final_outputs(self.tab, self.ctx, result, self.path, run.cold)


def find_updates(
    ctx: UIContext, tab: FindTab, video: str | None, query: str, variant: str
) -> Iterator[Updates]:
    """The search with its progress (``FindView``); a bad clip or query is said once, under its input
    (no toast, no error pill)."""
    try:
        path = require_upload(video, ctx)
        v = pick_variant(variant, ctx)
    except gr.Error as exc:
        yield {tab.progress: "", tab.status: status_html(exc.message, error=True)}
        return
    try:
        with user_errors():
            clean = service.check_query(ctx.engine, "find", query)
    except gr.Error as exc:
        yield {tab.progress: "", tab.query_status: status_html(exc.message, error=True)}
        return
    view = FindView(ctx, tab, path, v)
    yield view.start()
    try:
        with user_errors():
            stages = service.stream(ctx.engine, "find", path, v, clean)
            yield from follow(stages, view, None)  # each text, unthrottled: a span is a few tokens
    except gr.Error as exc:  # said once, under the video
        yield {
            tab.headline: "",
            tab.timeline: timeline.placeholder("No result."),
            tab.clip: None,
            tab.metrics: "",
            tab.notice: "",
            tab.jump_to: None,
            tab.progress: "",
            tab.status: status_html(exc.message, error=True),
        }


def listen(ctx: UIContext, tab: FindTab) -> None:
    """Wire the UI event (+ the player's jump), query suggestions, and the public ``/find`` endpoint."""
    buttons = [tab.run, tab.stop]

    def find_ui(video: str | None, query: str, variant: str) -> Iterator[Updates]:
        yield from with_buttons(find_updates(ctx, tab, video, query, variant), buttons)

    def jump(start: float | None) -> Any:
        """Follow-up update: the player seeks to the span's start (it cannot ride on a value update)."""
        return gr.skip() if start is None else gr.update(playback_position=float(start))

    def suggest(video: str | None) -> Any:
        """Offer the example's queries when the clip is one of the examples."""
        example = ctx.ground_truth(video)
        queries = [q["query"] for q in (example or {}).get("queries", []) or []]
        return gr.update(choices=queries, value=None, visible=bool(queries))

    def ready(text: str | None) -> Any:
        """The button waits for a query with words in it."""
        return gr.update(interactive=bool((text or "").strip()))

    jump_step: dict[str, Any] = {
        "fn": jump,
        "inputs": tab.jump_to,
        "outputs": tab.video,
        **PRIVATE_UI,
    }
    triggers = [tab.run.click, tab.query.submit]
    main = wire_run_and_stop(
        triggers,
        find_ui,
        [tab.video, tab.query, tab.variant],
        [*tab.outputs, tab.status, tab.query_status, *buttons],
        buttons,
        tab.progress,
        stopped_html,
        tab.headline,
    )
    main.then(**jump_step)
    if tab.examples is not None and tab.examples.cache_event is not None:
        tab.examples.cache_event.then(**jump_step)
    tab.video.change(suggest, tab.video, tab.suggestions, **PRIVATE_UI)
    tab.query.change(ready, tab.query, tab.run, **PRIVATE_UI)
    tab.suggestions.select(lambda q: q or gr.skip(), tab.suggestions, tab.query, **PRIVATE_UI)
    _listen_api(ctx, tab)


def _listen_api(ctx: UIContext, tab: FindTab) -> None:
    """The public ``/find`` endpoint: plain JSON only (the player's jump is a private follow-up)."""

    def find(video: str | None, query: str, variant: str = "gptq") -> dict[str, Any]:
        """Find when a described event happens in a video: one start-end span in seconds.

        Args:
            video: The clip (MP4, WebM, MOV or MKV) as an uploaded file; a path on the server is refused.
            query: The event in plain words, e.g. "a person opens the door" (not empty).
            variant: Which copy of Marlin-2B answers: "gptq" (GPTQ 4-bit, the default), "bnb4"
                (bitsandbytes nf4 4-bit) or "bf16" (16-bit), among those this server offers.

        Returns:
            JSON {"variant": str, "model": str, "query": str, "span": [start, end] or null,
            "format_ok": bool, "raw": str, "metrics": {...as for caption},
            "moments": [{"start": float, "end": float, "score": float}]}. The span is in seconds
            from the start of the clip and lies inside it; null when the answer gave no usable span;
            "format_ok" says the answer was in the trained "From <start> to <end>." form. "moments"
            are every span found, best first, scored in [0, 1] from the model's token probabilities
            (a long video is searched window by window, so an event that recurs gives several);
            "span" is the best one.
        """
        path = require_upload(video, ctx)
        v = pick_variant(variant, ctx)
        with user_errors():
            return service.run(ctx.engine, "find", path, v, query).to_dict()

    tab.api_button.click(
        find,
        [tab.video, tab.query, tab.variant],
        tab.api_out,
        api_name="find",
        api_description="Start-end span of a described event: {variant, model, query, span, format_ok, raw, "
        "metrics}; span is null when the answer gives none",
        **GPU_EVENT,
    )
