"""Every task's tab has one skeleton (``RunTab``, ``RunView``; ``AnswerTab`` for a task without a view)."""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import gradio as gr
from gradio.blocks import Block
from gradio.helpers import Examples

from marlin_demo import service
from marlin_demo.results import Result
from marlin_demo.tasks import Task, get_task
from marlin_demo.ui import example_runs, timeline
from marlin_demo.ui.context import STAMP_JS, UIContext
from marlin_demo.ui.example_runs import EXAMPLE_TIMING, example_labels, short_name
from marlin_demo.ui.inputs import pick_variant, require_upload, session_of, user_errors
from marlin_demo.ui.running import (
    BarView,
    Run,
    RunState,
    Updates,
    follow,
    run_buttons,
    scroll_mark,
    streamed,
    waiting_updates,
    wire_run_and_stop,
)
from marlin_demo.ui.shared_clip import Clip
from marlin_demo.ui.status import metrics_html, notice_html, status_html


def asked(req: service.Request) -> tuple[str, str, str | None]:
    """(clip, variant, cleaned query): what an accepted request's answer is kept under."""
    return str(req.video), req.variant, req.query


@dataclass(kw_only=True)
class RunTab:
    """What a run tab has: the page's clip, a variant, Run/Stop, a progress bar, every answer's outputs."""

    name: ClassVar[str]  # the task; also the tab's key for the clip its results belong to
    placeholder: ClassVar[str]  # the empty timeline's sentence
    ghost: ClassVar[tuple[tuple[float, float], ...]]  # and its faint bars
    stopped: ClassVar[str]  # what the answer's place says after Stop
    answer_id: ClassVar[str] = "answer"  # the answer's place: its element's id after the task's name
    view_type: ClassVar[type[RunView]]  # what the tab shows while its request runs
    throttle: ClassVar[bool] = True  # the streamed text redrawn at most every ``stream_every_s`` (else each)
    clip: Clip  # the page's clip, its status line, its range (a run asks about that part only), its stamp
    variant: gr.Radio
    run: gr.Button
    stop: gr.Button
    progress: gr.HTML
    answer: gr.HTML  # where the answer's first line goes (and "Stopped")
    timeline: gr.HTML
    notice: gr.HTML
    metrics: gr.HTML
    raw: gr.Textbox
    examples: Examples | None = None
    query: gr.Textbox | None = None  # a task that takes a query: where it is typed
    query_status: gr.HTML | None = None  # and where a bad one is said (None: under the clip)

    @property
    def buttons(self) -> list[Block]:
        return [self.run, self.stop]

    @property
    def example_inputs(self) -> list[Any]:
        """What an example fills, in ``ask``'s order."""
        return [self.clip.video, *([] if self.query is None else [self.query]), self.variant]

    @property
    def results(self) -> list[Block]:
        """What an answer fills (``cleared`` empties them: a clip change, a new run, a failure)."""
        return [self.answer, self.timeline, self.notice, self.metrics, self.raw, self.progress]

    @property
    def outputs(self) -> list[Block]:
        """Everything a run changes (also what a kept example answer shows again)."""
        return [*self.results, self.clip.status]

    def cleared(self) -> Updates:
        """Nothing of an earlier answer (its clip changed, or the run failed); made in events only."""
        parts: list[Block] = [self.answer, self.notice, self.metrics, self.raw, self.progress]
        return {**dict.fromkeys(parts, ""), self.timeline: timeline.placeholder(self.placeholder, self.ghost)}

    def ask(
        self, ctx: UIContext, values: Sequence[Any], span: Sequence[Any] | None = None, visitor: str = ""
    ) -> service.Request | Updates:
        """The request the inputs make (``span``: From, To), or what says under its input why not."""
        video, *query, variant = values
        said = self.clip.status
        try:
            with user_errors():
                path, v = require_upload(video, ctx), pick_variant(variant, ctx)
                text, (start, end) = (query or [None])[0], span or (None, None)
                try:  # the service's own checks, made once: a bad query is said under the query
                    return service.request(ctx.engine, self.name, path, v, text, start, end, visitor=visitor)
                except service.QueryError:
                    said = self.query_status or said
                    raise
        except gr.Error as exc:
            return {said: status_html(exc.message, error=True)}

    def failed(self, message: str) -> Updates:
        """A run that failed: its sentence under the clip, no answer."""
        said = status_html(message, error=True)
        return {**self.cleared(), self.timeline: timeline.placeholder("No result."), self.clip.status: said}

    def final(self, ctx: UIContext, result: Any, path: str, cold: bool) -> Updates:
        """Every output of a finished answer (also a kept example answer shown again)."""
        raise NotImplementedError

    def answered(self, ctx: UIContext, result: Result, cold: bool) -> Updates:
        """What every finished answer shows alike: its notes, its cost, the raw text; the bar goes."""
        reuse = ctx.reuse_note(result.variant, result.info, result.metrics.ttft_s)
        return {
            self.notice: notice_html(ctx, result, self.name),
            self.metrics: metrics_html(result.to_dict()["metrics"], cold, result.variant, result.info, reuse),
            self.raw: result.raw,
            self.progress: "",
        }

    def after_run(self, ctx: UIContext, end: Any) -> None:
        """A follow-up step chained on the end of each run (none by default)."""

    def listen(self, ctx: UIContext) -> None:
        """Run/Stop (``wire_run_and_stop``), an example's click (kept answer, or a run), ``after_run``."""
        buttons = self.buttons

        def runs(example: bool) -> Callable[..., Iterator[Updates]]:
            begin = functools.partial(start_run, ctx, self, example=example)
            return streamed(ctx, self.name, buttons, begin, {self.progress: ""}, self.failed)

        def first_step(request: gr.Request, *values: Any) -> Updates:
            return kept_or_waiting(ctx, self, values, request)

        example = None if self.examples is None else (self.examples.load_input_event, first_step, runs(True))
        ends = wire_run_and_stop(
            [self.run.click, *([] if self.query is None else [self.query.submit])],
            runs(example=False),
            # what a run reads (``run_updates``): the example's inputs, then the clip's range and its stamp
            [*self.example_inputs, self.clip.start, self.clip.end, self.clip.stamp],
            [*self.outputs, *buttons],
            buttons,
            self.progress,
            lambda request: {self.answer: self.stopped},
            example,
            js=STAMP_JS,
        )
        for end in ends:
            self.after_run(ctx, end)


class RunView(BarView):
    """A run tab while its request runs: the bar, the tab's stages, the answer (kept for an example)."""

    def __init__(self, ctx: UIContext, tab: RunTab, req: service.Request, **bar: Any) -> None:
        super().__init__(tab.progress, req.variant, lambda: not ctx.engine.is_loaded(req.variant), **bar)
        self.ctx, self.tab, self.path = ctx, tab, str(req.video)
        self.result: Result | None = None
        self.cold = False

    def start(self) -> Updates:
        """The last answer is cleared as the request starts."""
        return {**self.tab.cleared(), **self.reading()}

    def done(self, run: RunState, result: Result) -> Updates:
        self.result, self.cold = result, run.cold
        return self.tab.final(self.ctx, result, self.path, run.cold)

    def writing(self, run: RunState) -> Updates:
        return {self.tab.raw: run.text, **super().writing(run)}


def start_run(
    ctx: UIContext, tab: RunTab, request: gr.Request | None, values: Sequence[Any], example: bool
) -> Run:
    """What a click runs: the request its inputs make (an example: the whole clip), else why nothing runs."""
    *own, start, end, stamp = values
    req = tab.ask(ctx, own, None if example else (start, end), session_of(request))  # an example: all
    if not isinstance(req, service.Request):
        return Run("", {tab.progress: "", **req})
    key, kept = ctx.kept_answer(tab.name, *asked(req)) if example else (None, None)
    if kept is not None:
        return Run("", {})  # the first step showed it
    view = tab.view_type(ctx, tab, req)
    every = ctx.settings.stream_every_s if tab.throttle else None
    updates = follow(service.stream(ctx.engine, req), view, every)

    def keep() -> None:
        if key is not None and view.result is not None:
            ctx.answers.keep(key, view.result, view.cold)

    # (a run it waited for put Run back)
    return Run(view.path, {**view.start(), **run_buttons(tab.buttons, True)}, updates, keep, stamp)


def kept_or_waiting(ctx: UIContext, tab: RunTab, values: Sequence[Any], request: gr.Request) -> Updates:
    """An example's first step: its kept answer at once (the model does not run), else the wait."""
    *own, _start, _end, stamp = values  # an example is the whole clip: its range is not read
    req = tab.ask(ctx, own)
    kept = ctx.kept_answer(tab.name, *asked(req))[1] if isinstance(req, service.Request) else None
    if kept is None or not isinstance(req, service.Request):
        return waiting_updates(tab.buttons, tab.progress)
    # the clip's own change event may come after this answer (a newer clip's before it: then it is not shown)
    if not ctx.results_clip.start(tab.name, session_of(request), str(req.video), stamp):
        return {tab.progress: gr.skip()}
    with example_runs.replaying(kept):
        return tab.final(ctx, kept.result, str(req.video), kept.cold)


Tab = TypeVar("Tab", bound=RunTab)


def lay_out(
    ctx: UIContext,
    kind: type[Tab],
    clip: Clip,
    label: str,
    raw_lines: int,
    results: Sequence[str],
    inputs: Mapping[str, Any] | None = None,
    run: dict[str, Any] | None = None,
    **own: Any,
) -> Tab:
    """The tab: its ``inputs``, the variant, Run, the examples, and the outputs named in ``results``."""
    ids = {"answer": kind.answer_id, "notice": "notice", "metrics": "metrics", "progress": "progress"}
    outputs: dict[str, Any] = {
        **{
            part: gr.HTML("", elem_id=f"{kind.name}-{id_}", elem_classes=f"mr-{part}", render=False)
            for part, id_ in ids.items()
        },
        "timeline": gr.HTML(
            timeline.placeholder(kind.placeholder, kind.ghost),
            js_on_load=timeline.TIMELINE_JS,
            elem_id=f"{kind.name}-timeline",
            render=False,
        ),
        "raw": gr.Textbox(
            label="Exactly what the model wrote",
            lines=raw_lines,
            interactive=False,
            buttons=["copy"],
            elem_id=f"{kind.name}-raw",
            render=False,
        ),
    }
    with gr.Row(equal_height=False, elem_classes="mr-tab"):
        with gr.Column(scale=5, min_width=320, elem_classes="mr-inputs"):
            for part in (inputs or {}).values():
                part.render()
            variant = gr.Radio(
                ctx.variant_choices(),
                value=ctx.default_variant,
                label="Variant",
                info=ctx.status.withheld_note or None,  # a variant this machine cannot run: why
                elem_id=f"{kind.name}-variant",
                elem_classes="mr-variant",
            )
            with gr.Row(elem_classes="mr-buttons"):
                button = gr.Button(label, variant="primary", elem_id=f"{kind.name}-run", **(run or {}))
                stop = gr.Button(
                    "Stop", variant="stop", visible=False, elem_id=f"{kind.name}-stop", elem_classes="mr-stop"
                )
            tab = kind(clip=clip, variant=variant, run=button, stop=stop, **outputs, **(inputs or {}), **own)
            tab.examples = examples(ctx, tab)
        with gr.Column(scale=7, min_width=360, elem_classes="mr-results"):
            for name in results:
                if name == "raw":
                    raw_output(tab)
                else:
                    getattr(tab, name).render()
    return tab


def raw_output(tab: RunTab) -> None:
    """The model's own text, folded under the tab's results."""
    with gr.Accordion("Raw model output", open=False, elem_id=f"{tab.name}-raw-acc"):
        tab.raw.render()


def examples(ctx: UIContext, tab: RunTab) -> Examples | None:
    """The tab's examples, a clip each (with its first query): a click fills the inputs, then runs."""
    rows: list[tuple[list[Any], str]] = []
    for e in ctx.examples:
        clip, title = str(ctx.clip(e)), f"▶ {e.get('title') or short_name(e)}"
        for asked in ([] if q is None else [q] for q in get_task(tab.name).examples(e)[:1]):
            rows.append(([clip, *asked, ctx.default_variant], title + "".join(f" · “{q}”" for q in asked)))
    with gr.Column(elem_classes=["mr-examples", "mr-run-examples"]):
        if not rows:
            return None
        found = gr.Examples(
            examples=[values for values, _ in rows],
            inputs=tab.example_inputs,
            example_labels=example_labels([label for _, label in rows]),
            label="Examples (tiny stand-in answers)" if ctx.settings.is_tiny else "Examples",
            examples_per_page=8,
            elem_id=f"{tab.name}-examples",
        )
        note = f"A click fills the inputs and runs it: {EXAMPLE_TIMING[ctx.cache_mode]}."
        gr.HTML(f'<p class="mx-note">{note}</p>', elem_id=f"{tab.name}-examples-note")
    return found


def page() -> gr.Column:
    """A tab's one column: on a phone its parts are reordered inside it (style.css)."""
    return gr.Column(elem_classes="mr-page")


def answer_html(task: Task, result: Result) -> str:
    """An answer as a task without a view of its own shows it: its text (as the CLI prints it), its JSON."""
    text = "\n".join(task.answer.text(result)).strip("\n")
    data = json.dumps(task.answer.to_json(result), ensure_ascii=False, indent=2)
    pre = '<pre style="white-space: pre-wrap">'  # long lines wrap in the answer's column
    return (
        f'<div class="mg-answer"{scroll_mark()}>{pre}{html.escape(text)}</pre>'
        f"<details open><summary>JSON</summary>{pre}{html.escape(data)}</pre></details></div>"
    )


@dataclass(kw_only=True)
class AnswerTab(RunTab):
    """The tab of a task without a view of its own: the answer's text and JSON."""

    placeholder = "This task's answer has no timeline: its text and JSON appear above."
    ghost = ()
    stopped = '<div class="mg-answer"><p>Stopped before the answer was finished. Run it again.</p></div>'
    view_type = RunView  # halfway while it is written

    def final(self, ctx: UIContext, result: Result, path: str, cold: bool) -> Updates:
        return {**self.answered(ctx, result, cold), self.answer: answer_html(get_task(self.name), result)}


def query_words(task: Task) -> dict[str, Any]:
    """The query box as its task words it: its label and the hint in it (hidden for a task without one)."""
    return {
        "label": task.query_label or "Query",
        "placeholder": task.query_placeholder,
        "visible": task.query,
    }


def render_answer(ctx: UIContext, clip: Clip, task: Task) -> AnswerTab:
    """Lay out a task's generic tab (inside the caller's ``gr.Tab``): its own ``AnswerTab`` class, named."""
    kind = type(f"{task.name.title()}Tab", (AnswerTab,), {"name": task.name})
    words = query_words(task)
    query = gr.Textbox(elem_id=f"{task.name}-query", render=False, **words) if task.query else None
    shown = ("progress", "answer", "notice", "metrics", "timeline", "raw")
    return lay_out(ctx, kind, clip, f"Run {task.name}", 4, shown, {"query": query} if query else None)
