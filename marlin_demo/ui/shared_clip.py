"""The page's one clip component above the tabs, and its wiring (``context.ResultsClip`` decides
whose results stay shown): one component, so no copy between tabs can race a clear."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr
from gradio.blocks import Block

from marlin_demo.tasks import TASKS
from marlin_demo.ui.context import CLIP_ID, PRIVATE_UI, STAMP_JS, UIContext
from marlin_demo.ui.credits import credit_line
from marlin_demo.ui.inputs import session_of
from marlin_demo.ui.running import Updates
from marlin_demo.ui.status import STATUS_JS, clip_status

HINT = (
    "{tabs} and Compare all work on this clip: upload one, or click an example in any tab. "
    "Clearing it (×) clears it for every tab. From and To (optional) ask about that part of it only."
)


@dataclass
class Clip:
    video: gr.Video
    status: gr.HTML  # the line under it: a refused clip or a failed run, said once
    credit: gr.HTML  # an example's credit
    start: gr.Number  # the part of the clip asked about (both empty: all of it)
    end: gr.Number
    stamp: gr.Number  # never shown: the browser's number for each report of the clip (``STAMP_JS``)
    tab: gr.State  # the id of the tab selected: what the status line prices (``status.clip_status``)


def render(ctx: UIContext) -> Clip:
    """The clip beside its lines; on a phone they stack (video first)."""
    with gr.Row(equal_height=False, elem_id="clip-row"):
        with gr.Column(scale=4, min_width=300, elem_id="clip-column"):
            video = gr.Video(label="Video", sources=["upload"], elem_id=CLIP_ID, height=240)
        with gr.Column(scale=8, min_width=300):
            tabs = ", ".join(name.title() for name in TASKS)  # every task's tab, in order
            gr.HTML(f'<p class="mx-note">{HINT.format(tabs=tabs)}</p>', elem_id="clip-hint")
            with gr.Row(elem_id="clip-range", elem_classes="mr-range"):
                # no ``minimum``: Gradio would refuse a negative From, the run left waiting
                start = gr.Number(
                    None, label="From (s)", show_label=False, placeholder="From (s)",
                    elem_id="clip-start", min_width=80, visible=False,
                )  # fmt: skip
                end = gr.Number(
                    None, label="To (s)", show_label=False, placeholder="To (s)",
                    elem_id="clip-end", min_width=80, visible=False,
                )  # fmt: skip
            status = gr.HTML("", js_on_load=STATUS_JS, elem_id="clip-status", elem_classes="mr-slim")
            credit = gr.HTML("", elem_id="clip-credit")  # an example's credit_line
    stamp = gr.Number(0, visible=False, elem_id="clip-stamp")
    return Clip(video, status, credit, start, end, stamp, gr.State(next(iter(TASKS))))  # the first tab


def listen(
    ctx: UIContext,
    clip: Clip,
    tabs: Mapping[str, tuple[list[Block], Callable[[], Updates]]],
    page_tabs: gr.Tabs,
    compare_choices: Sequence[gr.components.Component] = (),
) -> None:
    """The credit and the status line follow the clip; a new clip clears ``tabs``' results of another."""
    ids = {t.label: t.id for t in page_tabs.children if isinstance(t, gr.Tab)}

    def selected(evt: gr.SelectData) -> Any:
        return ids.get(evt.value, gr.skip())  # the tab's id, from its label (what a select event carries)

    # a new clip starts whole, in the component form (Gradio drops a None value from gr.update)
    def chosen(video: str | None) -> list[Any]:
        return [credit_line(ctx, video), *(gr.Number(value=None, visible=bool(video)) for _ in range(2))]

    clip.video.change(chosen, clip.video, [clip.credit, clip.start, clip.end], **PRIVATE_UI)
    # one event for the inputs, the last change's line last (two changes' lines never cross)
    inputs = [clip.video, clip.start, clip.end, clip.tab, *compare_choices]
    changes = [clip.video.change, clip.start.change, clip.end.change]
    changes += [c.change for c in compare_choices]  # type: ignore[attr-defined]
    status = functools.partial(clip_status, ctx)
    gr.on(changes, status, inputs, clip.status, trigger_mode="always_last", **PRIVATE_UI)

    # a State set by an event does not fire its own change: the line follows the select itself
    page_tabs.select(selected, None, clip.tab, **PRIVATE_UI).then(status, inputs, clip.status, **PRIVATE_UI)
    outputs = list({block: None for blocks, _ in tabs.values() for block in blocks})

    def clear(video: str | None, stamp: float | None, request: gr.Request) -> Updates:
        updates: Updates = {}
        for tab in ctx.results_clip.seen(session_of(request), video, stamp):
            updates.update(tabs[tab][1]())
        return updates or {outputs[0]: gr.skip()}  # Gradio refuses an empty dict of updates

    clip.video.change(clear, [clip.video, clip.stamp], outputs, js=STAMP_JS, **PRIVATE_UI)
