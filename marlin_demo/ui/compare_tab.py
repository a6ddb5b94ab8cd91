"""The Compare tab's layout and wiring (``compare_html`` renders what it shows): one video, one
task, run on GPTQ and bnb4 (and bf16 on request) side by side."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from marlin_demo import service
from marlin_demo.results import memory_label
from marlin_demo.tasks import TASKS, get_task
from marlin_demo.ui import timeline
from marlin_demo.ui.compare_html import (
    CHARTS,
    COLD_WARM_COLUMNS,
    FIGURES_JS,
    METRIC_COLUMNS,
    PEAK_SCOPE,
    SESSION_COLUMNS,
    cards_html,
    chart_frame,
    cold_warm_frame,
    metrics_frame,
    progress_html,
    scores_frame,
    session_rows,
    summary_html,
    titled,
    write_session_csv,
)
from marlin_demo.ui.context import PRIVATE_UI, STAMP_JS, UIContext, variant_label
from marlin_demo.ui.example_runs import example_labels, short_name
from marlin_demo.ui.inputs import require_upload, session_of
from marlin_demo.ui.run_tab import query_words
from marlin_demo.ui.running import Run, RunState, StageView, Updates, follow, streamed, wire_run_and_stop
from marlin_demo.ui.shared_clip import Clip
from marlin_demo.ui.status import error_html
from marlin_demo.ui.task_views import view_of
from marlin_demo.variants import colors

EMPTY_CARDS = '<div class="cc-empty">Run a comparison: each variant gets a column here.</div>'
CHART_HEADROOM = 1.15


@dataclass
class CompareTab:
    clip: Clip  # the page's: its range (a comparison asks about that part only) and its report number
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


def render(ctx: UIContext, clip: Clip) -> CompareTab:
    """Lay out the tab (its clip is the page's)."""
    with gr.Row(equal_height=False, elem_classes="mr-tab"):
        with gr.Column(scale=4, min_width=300, elem_classes="mr-inputs"):
            choices = [(view_of(name).choice, name) for name in TASKS]
            first = next(iter(TASKS.values()))
            task = gr.Radio(choices, value=first.name, label="Task", elem_id="compare-task")
            words = query_words(first)
            query = gr.Textbox("", max_length=ctx.settings.max_query_chars, elem_id="compare-query", **words)
            include_bf16 = gr.Checkbox(
                False,
                label="Also run bf16 (16-bit reference: more memory, slower to load)",
                visible="bf16" in ctx.variants,
                elem_id="compare-bf16",
            )
            with gr.Row(elem_classes="mr-buttons"):
                run = gr.Button(run_label(ctx, False), variant="primary", elem_id="compare-run")
                stop = gr.Button("Stop", variant="stop", visible=False, elem_id="compare-stop")
            gr.Markdown(
                "Each variant runs in turn on the same frames and prompt. A variant's first run is *cold*: "
                "it includes loading the model, shown apart from *warm* runs.",
                elem_classes=["cs-help"],
            )
            with gr.Column(elem_classes="mr-examples"):  # on a phone: after the result (style.css)
                _examples(ctx, [clip.video, task, query])
        with gr.Column(scale=8, min_width=420, elem_classes="mr-results"):
            summary = gr.HTML("", js_on_load=FIGURES_JS, elem_id="compare-summary")
            cards = gr.HTML(EMPTY_CARDS, js_on_load=timeline.TIMELINE_JS, elem_id="compare-cards")
    metrics_table = gr.Dataframe(
        titled(pd.DataFrame(columns=METRIC_COLUMNS)),
        label="Cost of each variant on this request",
        interactive=False,
        wrap=True,  # titles wrap between words, so all eleven columns fit a desktop page
        visible=False,  # empty outputs stay hidden until a comparison has run
        elem_id="compare-metrics",
    )
    plots = _plots(ctx)
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
    # "hidden", not False: the table stays mounted, so the rows that come with the reveal are drawn
    with gr.Accordion(
        "This session's runs", open=True, elem_id="compare-session-acc", visible="hidden"
    ) as acc:
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
        clip,
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
        acc,
    )


def _examples(ctx: UIContext, inputs: list[Any]) -> None:
    """The examples fill the inputs only, each clip with the next task in turn: nothing runs until asked."""
    entries = list(TASKS.values())
    turns = [(e, entries[i % len(entries)]) for i, e in enumerate(ctx.examples)]
    rows = [(e, task.name, q) for e, task in turns for q in task.examples(e)[:1]]
    if not rows:
        return
    gr.Examples(
        examples=[[str(ctx.clip(e)), task, q or ""] for e, task, q in rows],
        inputs=inputs,
        example_labels=example_labels(
            [
                f"▶ {e.get('title') or short_name(e)} · {task}" + (f" “{q}”" if q else "")
                for e, task, q in rows
            ]
        ),
        label="Examples",
        elem_id="compare-examples",
    )
    gr.HTML('<p class="mx-note">Click one to fill the inputs, then press Compare.</p>')


def _plots(ctx: UIContext) -> list[gr.BarPlot]:
    plots = []
    for row in (CHARTS[:4], CHARTS[4:]):
        with gr.Row():
            for key, title in row:
                plots.append(
                    gr.BarPlot(
                        None,
                        x="variant",
                        y=key,
                        color="variant",
                        color_map=colors(tuple(ctx.variants)),
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
    return plots


def _chart_update(
    frame: Any, key: str, memory_kind: str = "cuda_peak_allocated", any_cold: bool = True
) -> Any:
    """A chart's new data with headroom; hidden when it says nothing (a warm latency with no cold run)."""
    top = float(frame[key].max()) if len(frame) else 0.0
    if not len(frame) or (key == "load_s" and top <= 0) or (key == "warm_latency_s" and not any_cold):
        return gr.update(visible=False)
    extra: dict[str, Any] = {}
    if key == "peak_memory_mb":
        if memory_kind != "cuda_peak_allocated":
            return gr.update(visible=False)
        extra["title"] = (
            f"Peak memory of the run: {memory_label(memory_kind)} (MB, {PEAK_SCOPE[memory_kind]})"
        )
    return gr.update(value=frame, visible=True, y_lim=[0, top * CHART_HEADROOM if top > 0 else 1], **extra)


def run_label(ctx: UIContext, include_bf16: bool) -> str:
    """The Compare button names the variants it will run."""
    return "Compare: " + " vs ".join(variant_label(v) for v in ctx.compare_variants(include_bf16))


class CompareView(StageView[Updates]):
    """The Compare tab while the variants run in turn: the progress area and a card per variant."""

    def __init__(
        self,
        ctx: UIContext,
        tab: CompareTab,
        variants: list[str],
        path: str,
        task: str,
        query: str,
    ) -> None:
        self.ctx, self.tab, self.variants = ctx, tab, variants
        self.path, self.task, self.query = path, task, query
        self.results: dict[str, Any] = {}  # a variant's result, or its error message
        self.cold: dict[str, bool] = {}
        self.live: dict[str, str] = {}
        self.duration: float = 0.0
        self.truth: Any = None  # the example's reference answer (find: the true span), if any
        self.card = view_of(task).card
        self.example: dict[str, Any] | None = None
        self.i, self.v = 0, ""  # the variant running now
        self.rerun = False  # it runs again, warm (``service.WarmRerun``)
        self.comparison: service.Comparison | None = None
        self.req: service.Request | None = None  # made as the comparison starts (``updates``)

    def updates(
        self, rows: list[dict[str, Any]], start: float | None, end: float | None, visitor: str
    ) -> Iterator[Updates]:
        """The comparison as it runs (closing it, Stop, stops the model), then its tables and charts."""
        yield {self.tab.summary: progress_html(None, 0, len(self.variants), "Reading the video…")}
        engine = self.ctx.engine  # the request made as every tab makes it (its query cleaned once)
        self.req = service.request(engine, self.task, self.path, "", self.query, start, end, visitor=visitor)
        events = service.compare(engine, self.req, None, self.variants, live=True, warm_reruns=True)
        yield from follow(events, self, self.ctx.settings.stream_every_s)
        yield self.finished(rows)

    def cards(self, live: dict[str, str] | None = None, stopped: bool = False) -> str:
        """A card per variant (``live``: the texts being written)."""
        args = (self.variants, self.results, self.cold, self.duration, self.truth, live, stopped)
        return cards_html(self.ctx, self.card, *args)

    def show(self, step: str, chars: int = 0) -> Updates:
        """The progress area at ``step`` of the running variant, and the cards."""
        cards = self.cards(self.live)
        n = len(self.variants)
        if self.rerun:  # every variant has answered: this only times one again
            step = f"{self.v}: timing its answer again, warm (its run was not comparable) · {step}"
            summary = progress_html(None, n, n, step, chars)
        else:
            summary = progress_html(self.v, self.i, n, step, chars)
        return {self.tab.summary: summary, self.tab.cards: cards}

    def prepared(self, run: RunState) -> Updates | None:
        assert run.prepared is not None
        self.duration = run.prepared.video.duration_s
        self.example = self.ctx.ground_truth(self.path)
        req = self.req
        assert req is not None  # (``updates`` made it before the comparison's first stage)
        self.truth = None if self.example is None else req.task.answer.truth(self.example, req.query)
        return None

    def loaded(self, run: RunState) -> Updates | None:
        self.live[self.v] = ""
        return self.show("Reading the frames (prefill)…")

    def writing(self, run: RunState) -> Updates | None:
        if not run.text:
            return None
        self.live[self.v] = run.text
        step = f"Writing window {run.window} of {run.windows}…" if run.windowed else "Writing…"
        return self.show(step, len(run.text))

    def other(self, run: RunState, event: Any) -> Updates | None:
        if isinstance(event, service.VariantStarted):
            self.i, self.v = event.index, event.variant
            self.cold[self.v] = event.cold
            step = f"Loading {self.v} (its first use)…" if event.cold else "Starting…"
            return self.show(step)
        if isinstance(event, service.WarmRerun):
            self.v, self.rerun = event.variant, True
            return self.show("Starting…")
        if isinstance(event, service.VariantFinished):  # its card shows its answer or why it gave none
            self.live.pop(event.variant, None)
            self.results[event.variant] = event.result if event.result is not None else event.error
            return {self.tab.cards: self.cards(self.live)}
        if isinstance(event, service.Comparison):
            self.comparison = event
        return None

    def finished(self, rows: list[dict[str, Any]]) -> Updates:
        """Every output once the comparison is over; the session's runs grow by its rows."""
        run = self.comparison
        assert run is not None
        run.require_answer()
        ok = run.results
        payload = run.payload(self.example)
        frame = metrics_frame(ok, self.cold, payload)
        new_rows = session_rows(rows, self.path, self.task, run.query, ok, self.cold, payload, run.reruns)
        has_scores = "scores" in payload
        kinds = {r.metrics.memory_kind for r in ok.values()}
        kind = kinds.pop() if len(kinds) == 1 else "mixed"
        any_cold = any(self.cold.get(v) for v in ok)
        t = self.tab
        charts = zip(t.plots, CHARTS, strict=True)
        return {
            t.summary: summary_html(payload),
            t.cards: self.cards(),
            t.metrics_table: gr.update(value=titled(frame), visible=True),
            **{
                plot: _chart_update(chart_frame(frame, key), key, kind, any_cold) for plot, (key, _) in charts
            },
            t.scores: gr.update(
                value=scores_frame(self.task, payload) if has_scores else None, visible=has_scores
            ),
            t.cold_warm: gr.update(value=cold_warm_frame(new_rows), visible=True),
            t.session: new_rows,
            t.session_table: titled(pd.DataFrame(new_rows, columns=SESSION_COLUMNS)),
            t.session_csv: gr.update(value=write_session_csv(self.ctx, new_rows), visible=True),
            t.session_box: gr.update(visible=True),
        }


def cleared_outputs(tab: CompareTab) -> Updates:
    """Nothing of an earlier comparison (new clip, or Stop ended the next one); the session's runs stay."""
    return {
        tab.summary: "",
        tab.cards: EMPTY_CARDS,
        tab.metrics_table: gr.update(visible=False),
        # "hidden", not False: an unmounted chart's resize handler reads a width that is gone and throws
        **{plot: gr.update(visible="hidden") for plot in tab.plots},
        tab.scores: gr.update(visible=False),
    }


STOPPED_HTML = (
    '<div class="cs-summary cs-stopped" role="status">Stopped: you cancelled the comparison. '
    "Press Compare to run it again.</div>"
)


def listen(ctx: UIContext, tab: CompareTab) -> None:
    """Wire the streaming UI comparison (Stop shown only while it runs; ``api`` has ``/compare``)."""
    running_in: dict[str, CompareView] = {}  # the sessions whose comparison is running (for Stop)
    buttons = [tab.run, tab.stop]

    def begin(request: gr.Request, values: tuple[Any, ...]) -> Run:
        video, task, query, include_bf16, rows, start, end, stamp = values
        session, path = session_of(request), require_upload(video, ctx)
        view = CompareView(ctx, tab, ctx.compare_variants(include_bf16), path, task, query)

        def updates() -> Generator[Updates, None, None]:
            running_in[session] = view
            try:
                yield from view.updates(rows, start, end, session)
            finally:
                running_in.pop(session, None)

        return Run(path, {}, updates(), stamp=stamp)

    # Stop closes the request; the last comparison's tables must not stand under "Stopped" as its own
    def stopped(request: gr.Request) -> Updates:
        view = running_in.get(session_of(request))
        if view is None:
            return {tab.summary: gr.skip()}
        return {
            **cleared_outputs(tab),
            tab.summary: STOPPED_HTML,
            tab.cards: view.cards(view.live, stopped=True),
        }

    tab.task.change(lambda t: gr.update(**query_words(get_task(t))), tab.task, tab.query, **PRIVATE_UI)
    tab.include_bf16.change(
        lambda on: gr.update(value=run_label(ctx, bool(on))), tab.include_bf16, tab.run, **PRIVATE_UI
    )
    wire_run_and_stop(
        [tab.run.click],
        streamed(
            ctx, "compare", buttons, begin, {tab.summary: ""}, lambda said: {tab.summary: error_html(said)}
        ),
        [
            tab.clip.video,
            tab.task,
            tab.query,
            tab.include_bf16,
            tab.session,
            tab.clip.start,
            tab.clip.end,
            tab.clip.stamp,
        ],
        [*tab.outputs, *buttons],
        buttons,
        None,  # the progress area (summary) and the cards say what runs
        stopped,
        js=STAMP_JS,
    )
