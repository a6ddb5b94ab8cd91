"""Compare tab: one video, one task, run on GPTQ and bnb4 (and bf16 on request) side by side.

Shows each variant's answer, the cost of each (charts), how much the variants
agree, and on the bundled examples how each scores against the ground truth.
Runs accumulate in a per-session table that downloads as CSV; a variant's
first run (cold: it includes loading the model) is reported apart from warm runs.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from marlin_demo import agreement as cmp
from marlin_demo import service
from marlin_demo.results import Loaded, Prepared, Progress
from marlin_demo.service import space
from marlin_demo.ui import timeline
from marlin_demo.ui.common import (
    GPU_EVENT,
    PRIVATE_UI,
    UIContext,
    error_html,
    require_upload,
    short_name,
    upload_video,
    user_errors,
    variant_label,
)
from marlin_demo.ui.compare_view import (
    CHARTS,
    COLD_WARM_COLUMNS,
    METRIC_COLUMNS,
    SESSION_COLUMNS,
    TASK_CHOICES,
    VIDEO_ID,
    cards_html,
    chart_frame,
    cold_warm_frame,
    metrics_frame,
    progress_html,
    scores_frame,
    session_rows,
    summary_html,
    titled,
    variant_colors,
    write_session_csv,
)
from marlin_demo.ui.credits import credit_box, credit_line

#: the charts' y axis ends this far above the tallest bar
CHART_HEADROOM = 1.15


@dataclass
class CompareTab:
    video: gr.Video
    task: gr.Radio
    query: gr.Textbox
    include_bf16: gr.Checkbox
    run: gr.Button
    stop: gr.Button
    summary: gr.HTML
    cards: gr.HTML
    metrics_table: gr.Dataframe
    plots: list[gr.BarPlot]
    scores: gr.Dataframe
    cold_warm: gr.Dataframe
    session: gr.State
    session_table: gr.Dataframe
    session_csv: gr.File
    api_button: gr.Button
    api_out: gr.JSON
    session_box: gr.Accordion

    @property
    def outputs(self) -> list[Any]:
        return [
            self.summary,
            self.cards,
            self.metrics_table,
            *self.plots,
            self.scores,
            self.cold_warm,
            self.session,
            self.session_table,
            self.session_csv,
            self.session_box,
        ]


# ---------------------------------------------------------------------------
# HTML pieces
# ---------------------------------------------------------------------------


def render(ctx: UIContext) -> CompareTab:
    """Lay out the tab."""
    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=300):
            video = upload_video(label="Video", sources=["upload"], elem_id=VIDEO_ID, height=260)
            credit = credit_box("compare-credit")
            video.change(functools.partial(credit_line, ctx), video, credit, **PRIVATE_UI)
            task = gr.Radio(TASK_CHOICES, value="caption", label="Task", elem_id="compare-task")
            query = gr.Textbox(
                "",
                label="Event to find",
                placeholder="e.g. the blue square leaves the frame",
                visible=False,
                max_length=ctx.settings.max_query_chars,
                elem_id="compare-query",
            )
            include_bf16 = gr.Checkbox(
                False,
                label="Also run bf16 (16-bit reference: more memory, slower to load)",
                visible="bf16" in ctx.variants,
                elem_id="compare-bf16",
            )
            with gr.Row():
                run = gr.Button(run_label(ctx, False), variant="primary", elem_id="compare-run", scale=4)
                stop = gr.Button("Stop", variant="stop", elem_id="compare-stop", scale=1, min_width=70)
            gr.Markdown(
                "Each variant runs in turn on the same frames and prompt. A variant's first run is *cold*: "
                "it includes loading the model, shown apart from *warm* runs.",
                elem_classes=["cs-help"],
            )
            api_button = gr.Button("api", visible=False)
            api_out = gr.JSON(label="comparison", visible=False)
            if ctx.examples:
                rows = [(e, (e.get("queries") or [{}])[0].get("query", "")) for e in ctx.examples]
                gr.Examples(
                    examples=[
                        [str(ctx.clip(e)), "find" if i % 2 else "caption", q if i % 2 else ""]
                        for i, (e, q) in enumerate(rows)
                    ],
                    inputs=[video, task, query],
                    example_labels=[
                        f"▶ {e.get('title') or short_name(e)} · " + (f"find “{q}”" if i % 2 else "caption")
                        for i, (e, q) in enumerate(rows)
                    ],
                    label="Examples (fill the inputs; press Compare)",
                    elem_id="compare-examples",
                )
        with gr.Column(scale=8, min_width=420):
            summary = gr.HTML("", elem_id="compare-summary")
            cards = gr.HTML(
                '<div class="cc-empty">Run a comparison: each variant gets a column here.</div>',
                js_on_load=timeline.TIMELINE_JS,
                elem_id="compare-cards",
            )
    metrics_table = gr.Dataframe(
        titled(pd.DataFrame(columns=METRIC_COLUMNS)),
        label="Cost of each variant on this request",
        interactive=False,
        visible=False,  # empty outputs stay hidden until a comparison has run
        elem_id="compare-metrics",
    )
    plots = []
    for row in (CHARTS[:3], CHARTS[3:]):
        with gr.Row():
            for key, title in row:
                plots.append(
                    gr.BarPlot(
                        None,
                        x="variant",
                        y=key,
                        color="variant",
                        color_map=variant_colors(ctx.variants),
                        colors_in_legend=[],
                        sort=list(ctx.variants),
                        x_title=" ",
                        y_title=" ",
                        title=title,
                        y_lim=[0, None],
                        height=220,
                        elem_classes=["cs-plot"],
                        elem_id=f"compare-plot-{key}",
                        show_label=False,
                        visible=False,
                    )
                )
    with gr.Row(equal_height=False):
        scores = gr.Dataframe(
            label="Scores against the example's ground truth",
            interactive=False,
            visible=False,
            elem_id="compare-scores",
        )
        cold_warm = gr.Dataframe(
            pd.DataFrame(columns=COLD_WARM_COLUMNS),
            wrap=True,
            label="Cold vs warm runs (this session)",
            interactive=False,
            visible=False,
            elem_id="compare-coldwarm",
        )
    with gr.Accordion("This session's runs", open=True, elem_id="compare-session-acc", visible=False) as acc:
        session = gr.State([])
        session_table = gr.Dataframe(
            titled(pd.DataFrame(columns=SESSION_COLUMNS)),
            interactive=False,
            elem_id="compare-session",
            wrap=False,
        )
        session_csv = gr.File(
            label="Session as CSV", interactive=False, elem_id="compare-csv", height=90, visible=False
        )
    return CompareTab(
        video,
        task,
        query,
        include_bf16,
        run,
        stop,
        summary,
        cards,
        metrics_table,
        plots,
        scores,
        cold_warm,
        session,
        session_table,
        session_csv,
        api_button,
        api_out,
        acc,
    )


def _chart_update(frame: Any, key: str) -> Any:
    """A bar chart's new data, with headroom above the tallest bar (its tooltip and top stay visible);
    an all-zero chart (every load warm) gets a 0-1 axis, not "0.000000"."""
    top = float(frame[key].max()) if len(frame) else 0.0
    return gr.update(value=frame, visible=True, y_lim=[0, top * CHART_HEADROOM if top > 0 else 1])


def run_label(ctx: UIContext, include_bf16: bool) -> str:
    """The Compare button names the variants it will run."""
    return "Compare: " + " vs ".join(variant_label(v) for v in ctx.compare_variants(include_bf16))


def _runs_for(*args: Any, **kwargs: Any) -> int:
    include_bf16 = bool(args[3]) if len(args) > 3 else bool(kwargs.get("include_bf16"))
    return 3 if include_bf16 else 2


def listen(ctx: UIContext, tab: CompareTab) -> None:
    """Wire the streaming UI comparison and the public ``/compare`` endpoint."""
    running_in: set[str] = set()  # the sessions whose comparison is running (for Stop's message)
    stop_state = gr.State(False)

    @space.gpu(space.duration_for("caption", ctx.settings, _runs_for))
    def compare_ui(
        video: str | None,
        task: str,
        query: str,
        include_bf16: bool,
        rows: list[dict[str, Any]],
        request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008
    ) -> Iterator[Any]:
        skip = gr.skip()
        n_rest = len(tab.outputs) - 2
        session = request.session_hash or ""
        running_in.add(session)
        try:
            path = require_upload(video, ctx)
            with user_errors():
                variants = ctx.compare_variants(include_bf16)
                n = len(variants)
                yield (progress_html(None, 0, n, "Reading the video…"), skip, *([skip] * n_rest))
                results: dict[str, Any] = {}  # a variant's result, or its error message
                cold: dict[str, bool] = {}
                live: dict[str, str] = {}
                duration, truth, example = 0.0, None, None
                i, v, last = 0, "", 0.0
                events = service.compare(ctx.engine, task, path, variants, query, live=True)
                with contextlib.closing(events):  # closing it (Stop) stops the model at its next token
                    for event in events:
                        if isinstance(event, Prepared):
                            duration = event.video.duration_s
                            example = ctx.ground_truth(path)
                            clean = service.check_query(ctx.engine, task, query)
                            truth = cmp.truth_span(example, clean) if (example and task == "find") else None
                        elif isinstance(event, service.VariantStarted):
                            i, v = event.index, event.variant
                            cold[v] = event.cold
                            step = f"Loading {v} (its first use)…" if event.cold else "Starting…"
                            progress((i + 0.1) / n, desc=f"{v}: {step} ({i + 1}/{n})")
                            yield (
                                progress_html(v, i, n, step),
                                cards_html(ctx, variants, results, cold, duration, truth, live),
                                *([skip] * n_rest),
                            )
                        elif isinstance(event, Loaded):
                            live[v] = ""
                            yield (
                                progress_html(v, i, n, "Reading the frames (prefill)…"),
                                cards_html(ctx, variants, results, cold, duration, truth, live),
                                *([skip] * n_rest),
                            )
                        elif isinstance(event, Progress):
                            now = time.monotonic()
                            if event.text and now - last >= ctx.settings.stream_every_s:
                                last = now
                                live[v] = event.text
                                step = "Writing…"
                                if event.window is not None and event.windows:
                                    step = f"Writing window {event.window} of {event.windows}…"
                                yield (
                                    progress_html(v, i, n, step, len(event.text)),
                                    cards_html(ctx, variants, results, cold, duration, truth, live),
                                    *([skip] * n_rest),
                                )
                        elif isinstance(event, service.VariantFinished):
                            live.pop(event.variant, None)
                            results[event.variant] = event.result if event.result is not None else event.error
                        elif isinstance(event, service.Comparison):
                            run = event
                run.require_answer()
                ok = run.results
                payload = run.payload(example)
                frame = metrics_frame(ok, cold)
                new_rows = session_rows(rows, path, task, run.query, ok, cold, payload)
                has_scores = "scores" in payload
                yield (
                    summary_html(payload),
                    cards_html(ctx, variants, results, cold, duration, truth),
                    gr.update(value=titled(frame), visible=True),
                    *[_chart_update(chart_frame(frame, key), key) for key, _ in CHARTS],
                    gr.update(value=scores_frame(task, payload) if has_scores else None, visible=has_scores),
                    gr.update(value=cold_warm_frame(new_rows), visible=True),
                    new_rows,
                    titled(pd.DataFrame(new_rows, columns=SESSION_COLUMNS)),
                    gr.update(value=write_session_csv(ctx, new_rows), visible=True),
                    gr.update(visible=True),
                )
        except gr.Error as exc:
            yield (error_html(exc.message), skip, *([skip] * n_rest))
            raise
        finally:
            running_in.discard(session)

    @space.gpu(space.duration_for("caption", ctx.settings, 2))
    def compare(video: str | None, task: str = "caption", query: str = "") -> dict[str, Any]:
        """Run caption or find on every 4-bit variant (GPTQ and bnb4; not bf16) and say how far they agree.

        Args:
            video: The clip (MP4, WebM, MOV or MKV) as an uploaded file; a path on the server is refused.
            task: "caption" (what happens) or "find" (when the query happens).
            query: For task "find": the event in plain words (not empty); ignored for "caption".

        Returns:
            JSON {"task": str, "query": str or null, "results": {variant: the caption or find JSON},
            "agreement": {"gptq|bnb4": {"event_iou": float, "event_f1": float, "rouge_l": float}} for
            caption or {"gptq|bnb4": {"span_iou": float}} for find, one key per pair of variants},
            plus "scores": {variant: {...}} against the ground truth when the clip is one of the
            app's bundled examples, and "errors": {variant: one sentence} when a variant could not
            load or run (the others still answer; when none answers the call fails).
        """
        path = require_upload(video, ctx)
        with user_errors():
            *_, run = service.compare(ctx.engine, task, path, ctx.compare_variants(), query)
            assert isinstance(run, service.Comparison)
            run.require_answer()
            return run.payload(ctx.ground_truth(path))

    tab.task.change(
        lambda t: gr.update(visible=t == "find"),
        tab.task,
        tab.query,
        **PRIVATE_UI,
    )
    tab.include_bf16.change(
        lambda on: gr.update(value=run_label(ctx, bool(on))),
        tab.include_bf16,
        tab.run,
        **PRIVATE_UI,
    )
    running = tab.run.click(
        compare_ui,
        [tab.video, tab.task, tab.query, tab.include_bf16, tab.session],
        tab.outputs,
        api_visibility="private",
        show_progress="hidden",  # the progress area (summary) and the cards say what runs
        **GPU_EVENT,
    )

    # Stop: Gradio closes the running generator, which closes the request: the model stops at its
    # next token. The variants that finished are not shown (their tables need the whole comparison).
    # Whether a comparison was running is read when Stop is pressed; the message then goes through
    # the queue, after the stopped run's last messages, so none of them can overwrite it.
    def was_running(request: gr.Request) -> bool:
        return (request.session_hash or "") in running_in

    def stopped(was: bool) -> Any:
        if not was:
            return gr.skip()
        return (
            '<div class="cs-summary cs-stopped" role="status">Stopped: the comparison was cancelled. '
            "Press Compare to run it again.</div>"
        )

    tab.stop.click(was_running, None, stop_state, cancels=[running], **PRIVATE_UI).then(
        stopped,
        stop_state,
        tab.summary,
        api_visibility="private",
        show_progress="hidden",
        concurrency_limit=None,
    )
    tab.api_button.click(
        compare,
        [tab.video, tab.task, tab.query],
        tab.api_out,
        api_name="compare",
        api_description="Run caption or find on every compared variant: {task, query, results: {variant: "
        "result}, agreement: {'a|b': {...}}} plus scores when the clip is a bundled example, and errors: "
        "{variant: sentence} when a variant failed (the others' results are still returned)",
        **GPU_EVENT,
    )
