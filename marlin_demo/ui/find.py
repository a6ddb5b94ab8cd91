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
from marlin_demo.ui import example_notes, timeline
from marlin_demo.ui.common import (
    GPU_EVENT,
    PRIVATE_UI,
    STATUS_JS,
    UIContext,
    clip_status,
    clip_stem,
    error_html,
    example_labels,
    examples_label,
    examples_note,
    kept_answer,
    metrics_html,
    notice_html,
    pick_variant,
    require_upload,
    short_name,
    status_html,
    tiny_in_use,
    upload_video,
    user_errors,
)
from marlin_demo.ui.credits import credit_box, credit_line
from marlin_demo.ui.running import (
    BarView,
    RunState,
    Updates,
    clear_when_clip_changes,
    follow,
    owns,
    scroll_mark,
    waiting_updates,
    wire_run_and_stop,
    with_buttons,
)
from marlin_demo.ui.timeline import clock
from marlin_demo.video import VideoError, export_clip

VIDEO_ID = "find-video"
PLACEHOLDER = "Describe an event and run Find: its span appears here; click it to play it."
GHOST = ((0.41, 0.63),)  # the empty timeline's faint bars: one span


@dataclass
class FindTab:
    video: gr.Video
    query: gr.Textbox
    suggestions: gr.Radio
    variant: gr.Radio
    run: gr.Button
    headline: gr.HTML
    timeline: gr.HTML
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
    """The answer in one line (times as the timeline writes them), brought into view when it comes."""
    q = html.escape(result.query)
    mark = scroll_mark()
    if result.span is None:
        said = html.escape(result.raw[:300]) or "(nothing)"
        return (
            f'<div class="mf-head mf-none"{mark}><div class="mf-q">“{q}”</div>'
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
            f'<div class="mf-h">Ground truth of this example: {clock(truth[0])} → {clock(truth[1])} · '
            f"IoU {temporal_iou(result.span, truth):.2f}</div>"
        )
    return (
        f'<div class="mf-head"{mark}><div class="mf-q">“{q}”</div>'
        f'<div class="mf-v">{clock(s)} → {clock(e)}</div>'
        f'<div class="mf-h">{clock(e - s)} long · the player is set to its start · '
        "click the span or a moment to play it"
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
        "search before it finished. Run it again for an answer.</div></div>"
    )


def final_outputs(tab: FindTab, ctx: UIContext, result: FindResult, video: str, cold: bool) -> Updates:
    """Every output of a finished find (also what the cached examples store); the player jumps to the
    best moment's start (``jump_to``); every moment is cut as a clip to download."""
    truth = _truth(ctx, video, result.query)
    duration = result.info.duration_s
    clips: list[str | None] = []
    problems: list[str] = []
    folder = ctx.new_run_dir("find") if result.moments else None
    stem = clip_stem(video)
    for k, m in enumerate(result.moments, 1):
        out = folder / f"{stem}.moment{k}_{m.start:.1f}-{m.end:.1f}s.mp4" if folder else None
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
        timeline.placeholder(PLACEHOLDER, GHOST),
        js_on_load=timeline.TIMELINE_JS,
        elem_id="find-timeline",
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
    with gr.Row(equal_height=False, elem_classes="mr-tab"):
        with gr.Column(scale=5, min_width=320, elem_classes="mr-inputs"):
            video = upload_video(
                label="Video (also the player)", sources=["upload"], elem_id=VIDEO_ID, height=300
            )
            status = gr.HTML("", js_on_load=STATUS_JS, elem_id="find-status", elem_classes="mr-slim")
            credit = credit_box("find-credit")
            video.change(functools.partial(credit_line, ctx), video, credit, **PRIVATE_UI)
            video.change(functools.partial(clip_status, ctx, task="find"), video, status, **PRIVATE_UI)
            query = gr.Textbox(
                label="What happens? Describe one event",
                placeholder="e.g. the red ball rolls across the field",
                lines=1,
                elem_id="find-query",
            )
            query_status = gr.HTML(query_hint(ctx, ""), elem_id="find-query-status", elem_classes="mr-slim")
            suggestions = gr.Radio(
                choices=[],
                value=None,
                label="This example clip has queries with ground truth: pick one",
                visible=False,
                interactive=True,
                elem_id="find-suggestions",
            )
            variant = gr.Radio(
                ctx.variant_choices(),
                value=ctx.default_variant,
                label="Variant",
                info=ctx.status.withheld_note or None,  # a variant this machine cannot run: why
                elem_id="find-variant",
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
            with gr.Column(elem_classes="mr-examples"):  # on a phone: after the result (style.css)
                tab.examples = _examples(ctx, tab)
        with gr.Column(scale=7, min_width=360, elem_classes="mr-results"):
            progress.render()
            headline.render()
            tl.render()
            notice.render()
            metrics.render()
            with gr.Accordion("Raw model output", open=False, elem_id="find-raw-acc"):
                raw.render()
    return tab


def _examples(ctx: UIContext, tab: FindTab) -> gr.helpers.Examples | None:
    """The examples fill the inputs; the run after that is Run's own (see ``listen``)."""
    rows = [(e, q) for e in ctx.examples for q in (e.get("queries") or [])[:1]]
    if not rows:
        return None
    examples = gr.Examples(
        examples=[[str(ctx.clip(e)), q["query"], ctx.default_variant] for e, q in rows],
        inputs=[tab.video, tab.query, tab.variant],
        example_labels=example_labels(
            [f"▶ {e.get('title') or short_name(e)} · “{q['query']}”" for e, q in rows]
        ),
        label=examples_label(ctx),
        examples_per_page=8,
        elem_id="find-examples",
    )
    gr.HTML(examples_note(ctx), elem_id="find-examples-note")
    return examples


def query_hint(ctx: UIContext, text: str | None) -> str:
    """Under the query: why Find waits (no words yet), how long it is near the limit, or that it is
    too long (Find then waits too: nothing is cut silently)."""
    limit = ctx.settings.max_query_chars
    n = len((text or "").strip())
    if n == 0:
        return '<div class="ms-status ms-hint">Find waits for a query: describe one event.</div>'
    if n > limit:
        return status_html(
            f"This query is {n:,} characters long; at most {limit:,} are read. Shorten it to run Find.",
            error=True,
        )
    if n > 0.8 * limit:
        return f'<div class="ms-status ms-hint">{n:,} / {limit:,} characters</div>'
    return ""


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
        self.result: FindResult | None = None  # the finished answer (kept when it is an example's)
        self.cold = False

    def start(self) -> Updates:
        """The last result and the query's old message are cleared as the request starts."""
        t = self.tab
        cleared: Updates = {
            t.timeline: timeline.placeholder("The span appears here when the model answers."),
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
        self.result, self.cold = result, run.cold
        return final_outputs(self.tab, self.ctx, result, self.path, run.cold)


def find_updates(
    ctx: UIContext,
    tab: FindTab,
    video: str | None,
    query: str,
    variant: str,
    request: gr.Request | None = None,
    example: bool = False,
) -> Iterator[Updates]:
    """The search with its progress (``FindView``); a bad clip or query is said once, under its input
    (no toast, no error pill). An example's answer is kept for its next click."""
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
    key, kept = kept_answer(ctx, "find", path, v, clean) if example else (None, None)
    if kept is not None:
        return  # the first step showed it
    owns(ctx, "find", request, path)
    view = FindView(ctx, tab, path, v)
    yield view.start()
    try:
        with user_errors():
            stages = service.stream(ctx.engine, "find", path, v, clean)
            yield from follow(stages, view, None)  # each text, unthrottled: a span is a few tokens
    except gr.Error as exc:  # said once, under the video
        yield {**cleared_outputs(tab), tab.progress: "", tab.status: status_html(exc.message, error=True)}
        return
    if key is not None and view.result is not None:
        ctx.answers.keep(key, view.result, view.cold)


#: The follow-up step after a run: Find's player seeks to the best moment's start.
SEEK_JS = """(start) => { const v = document.querySelector('#find-video video');
  if (v && start !== null && start !== undefined) v.currentTime = start; }"""


def cleared_outputs(tab: FindTab) -> Updates:
    """Nothing of an earlier answer (its clip changed, or the run failed)."""
    return {
        tab.headline: "",
        tab.timeline: timeline.placeholder(PLACEHOLDER, GHOST),
        tab.metrics: "",
        tab.raw: "",
        tab.notice: "",
        tab.jump_to: None,
    }


def kept_example(
    ctx: UIContext, tab: FindTab, video: str | None, query: str, variant: str, request: gr.Request
) -> Updates:
    """An example's first step: its kept answer at once (the model does not run), else the wait."""
    try:
        path = require_upload(video, ctx)
        clean = service.check_query(ctx.engine, "find", query)
        _, kept = kept_answer(ctx, "find", path, pick_variant(variant, ctx), clean)
    except (gr.Error, ValueError):
        kept = None
    if kept is None:
        return waiting_updates([tab.run, tab.stop], tab.progress)
    owns(ctx, "find", request, path)
    with example_notes.replaying(kept):
        return {**final_outputs(tab, ctx, kept.result, path, kept.cold), tab.query_status: ""}


def listen(ctx: UIContext, tab: FindTab) -> None:
    """Wire the UI event (+ the player's jump), query suggestions, and the public ``/find`` endpoint;
    an example click runs like Run (``wire_run_and_stop``)."""
    buttons = [tab.run, tab.stop]

    def find_ui(video: str | None, query: str, variant: str, request: gr.Request) -> Iterator[Updates]:
        yield from with_buttons(find_updates(ctx, tab, video, query, variant, request), buttons)

    def find_example(video: str | None, query: str, variant: str, request: gr.Request) -> Iterator[Updates]:
        updates = find_updates(ctx, tab, video, query, variant, request, example=True)
        yield from with_buttons(updates, buttons)

    def first_step(video: str | None, query: str, variant: str, request: gr.Request) -> Updates:
        return kept_example(ctx, tab, video, query, variant, request)

    def suggest(video: str | None) -> Any:
        """Offer the example's queries when the clip is one of the examples."""
        example = ctx.ground_truth(video)
        queries = [q["query"] for q in (example or {}).get("queries", []) or []]
        return gr.update(choices=queries, value=None, visible=bool(queries))

    def ready(text: str | None) -> Updates:
        """The button waits for a query with words in it, within the length limit; the line under the
        query says why it waits."""
        n = len((text or "").strip())
        return {
            tab.run: gr.update(interactive=0 < n <= ctx.settings.max_query_chars),
            tab.query_status: query_hint(ctx, text),
        }

    example = None
    if tab.examples is not None:
        example = (tab.examples.load_input_event, first_step, find_example)
    ends = wire_run_and_stop(
        [tab.run.click, tab.query.submit],
        find_ui,
        [tab.video, tab.query, tab.variant],
        [*tab.outputs, tab.status, tab.query_status, *buttons],
        buttons,
        tab.progress,
        stopped_html,
        tab.headline,
        example,
    )
    for end in ends:
        # in the page, not an update of the player: an update landing after the visitor cleared the
        # clip would put the old clip back in the player
        end.then(None, tab.jump_to, None, js=SEEK_JS, **PRIVATE_UI)
    clear = functools.partial(cleared_outputs, tab)
    clear_when_clip_changes(ctx, "find", tab.video, list(clear()), clear)
    tab.video.change(suggest, tab.video, tab.suggestions, **PRIVATE_UI)
    tab.query.change(ready, tab.query, [tab.run, tab.query_status], **PRIVATE_UI)
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
