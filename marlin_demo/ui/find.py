"""Find tab: "when does this happen": the span on the timeline, the player jumping there, the clip cut."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import gradio as gr

from marlin_demo.longvideo import policy
from marlin_demo.metrics import temporal_iou
from marlin_demo.results import FindResult
from marlin_demo.tasks import get_task
from marlin_demo.tasks.find import truth_span
from marlin_demo.ui import run_tab, timeline
from marlin_demo.ui.context import CLIP_ID, PRIVATE_UI, UIContext, clip_stem
from marlin_demo.ui.run_tab import RunTab, RunView
from marlin_demo.ui.running import RunState, Updates, scroll_mark
from marlin_demo.ui.shared_clip import Clip
from marlin_demo.ui.status import error_html, status_html
from marlin_demo.ui.timeline import clock
from marlin_demo.video import VideoError, export_clip

PLACEHOLDER = "Describe an event and run Find: its span appears here; click it to play it."
GHOST = ((0.41, 0.63),)  # the empty timeline's faint bars: one span
STOPPED_HTML = (
    '<div class="mf-head mf-none"><div class="mf-v">Stopped</div><div class="mf-h">You stopped this '
    "search before it finished. Run it again for an answer.</div></div>"
)
#: after a run the player seeks to the best moment in the page: an update could land after a clip change
SEEK_JS = f"""(start) => {{ const v = document.querySelector('#{CLIP_ID} video');
  if (v && start !== null && start !== undefined) v.currentTime = start; }}"""


class FindView(RunView):
    """The Find tab while the model searches (a span is a few tokens: the bar is halfway while written)."""

    tab: FindTab

    def start(self) -> Updates:
        """The query's old message goes too."""
        t = self.tab
        return {
            **super().start(),
            t.answer: '<div class="mf-head mf-wait">Looking for the event…</div>',
            t.timeline: timeline.placeholder("The span appears here when the model answers."),
            t.query_status: "",
        }

    def loaded(self, run: RunState) -> Updates | None:
        assert run.prepared is not None
        return self.bar(0.2, f"Reading the video ({run.prepared.plan.video_tokens} video tokens)…")


@dataclass(kw_only=True)
class FindTab(RunTab):
    name = "find"
    placeholder = PLACEHOLDER
    ghost = GHOST
    stopped = STOPPED_HTML
    answer_id = "headline"
    view_type = FindView
    throttle = False  # each text, unthrottled: a span is a few tokens
    query: gr.Textbox
    query_status: gr.HTML
    suggestions: gr.Radio
    jump_to: gr.Number

    @property
    def results(self) -> list[Any]:
        return [*super().results, self.jump_to]

    @property
    def outputs(self) -> list[Any]:
        return [*super().outputs, self.query_status]

    def cleared(self) -> Updates:
        return {**super().cleared(), self.jump_to: None}

    def after_run(self, ctx: UIContext, end: Any) -> None:
        end.then(None, self.jump_to, None, js=SEEK_JS, **PRIVATE_UI)

    def listen(self, ctx: UIContext) -> None:
        """Also the query's suggestions and the line under it."""
        super().listen(ctx)

        def suggest(video: str | None) -> Any:
            example = ctx.ground_truth(video)
            queries = [q for q in get_task(self.name).examples(example or {}) if q]
            return gr.update(choices=queries, value=None, visible=bool(queries))

        def ready(text: str | None) -> Updates:
            n = len((text or "").strip())
            return {
                self.run: gr.update(interactive=0 < n <= ctx.settings.max_query_chars),
                self.query_status: query_hint(ctx, text),
            }

        self.clip.video.change(suggest, self.clip.video, self.suggestions, **PRIVATE_UI)
        self.query.change(ready, self.query, [self.run, self.query_status], **PRIVATE_UI)
        self.suggestions.select(lambda q: q or gr.skip(), self.suggestions, self.query, **PRIVATE_UI)

    def final(self, ctx: UIContext, result: FindResult, video: str, cold: bool) -> Updates:
        """Every output of a finished find; the player jumps to the best moment, each is cut as a clip."""
        example = ctx.ground_truth(video)
        truth = None if example is None else truth_span(example, result.query)
        duration = result.info.duration_s
        clips: list[str | None] = []
        problems = ""
        folder = ctx.new_run_dir("find") if result.moments else ctx.output_dir  # (no moment: unused)
        for k, m in enumerate(result.moments, 1):
            out = folder / f"{clip_stem(video)}.moment{k}_{m.start:.1f}-{m.end:.1f}s.mp4"
            try:
                clips.append(str(export_clip(video, m.start, m.end, out, info=result.info.video)))
            except (VideoError, RuntimeError) as exc:
                clips.append(None)
                problems += error_html(f"Moment {k} could not be cut as a clip: {exc}")
        tl = timeline.timeline_html(
            duration,
            span=result.span,
            reference=truth,
            player=f"#{CLIP_ID}",
            no_span_text="No span: the answer gave no usable time range." if result.span is None else None,
            span_label=f"best {result.moments[0].score:.2f}" if len(result.moments) > 1 else "Marlin",
            windows=_windows(ctx, duration),
            moments=result.moments,
            clips=clips,
        )
        updates = self.answered(ctx, result, cold)
        return {
            **updates,
            self.notice: updates[self.notice] + problems,
            self.answer: headline_html(result, truth),
            self.timeline: tl,
            self.jump_to: None if result.span is None else float(result.span[0]),
            self.query_status: "",
        }


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
    try:
        return [(w.start, w.end) for w in policy.plan_for("find", duration, ctx.engine.settings)]
    except ValueError:
        return []


def render(ctx: UIContext, clip: Clip) -> FindTab:
    """Lay out the tab: the query, its line and an example's queries above the variant."""
    task = get_task(FindTab.name)
    inputs = {
        "query": gr.Textbox(
            **run_tab.query_words(task),
            lines=1,
            elem_id="find-query",
            render=False,
        ),
        "query_status": gr.HTML(
            query_hint(ctx, ""), elem_id="find-query-status", elem_classes="mr-slim", render=False
        ),
        "suggestions": gr.Radio(
            choices=[],
            value=None,
            label="This example clip has queries with ground truth: pick one",
            visible=False,
            interactive=True,
            elem_id="find-suggestions",
            render=False,
        ),
        "jump_to": gr.Number(None, visible=False, render=False),  # not a State: read by the page's seek step
    }
    shown = ("progress", "answer", "timeline", "notice", "metrics", "raw")
    return run_tab.lay_out(
        ctx, FindTab, clip, "Find when it happens", 2, shown, inputs, {"interactive": False}
    )


def query_hint(ctx: UIContext, text: str | None) -> str:
    """Under the query: why Find waits (no words), the length near the limit, or too long (never cut)."""
    limit = ctx.settings.max_query_chars
    n = len((text or "").strip())
    if n == 0:
        return '<div class="ms-status ms-hint">Find waits for a query: describe one event.</div>'
    if n > limit:
        return status_html(
            f"This query is {n:,} characters long; at most {limit:,} are read. Shorten it to run Find.",
            error=True,
        )
    return f'<div class="ms-status ms-hint">{n:,} / {limit:,} characters</div>' if n > 0.8 * limit else ""
