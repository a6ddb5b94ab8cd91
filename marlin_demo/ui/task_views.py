"""The page's view of each task, found by the task's name (never by its answer's type)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from marlin_demo.tasks import TASKS, Task, get_task
from marlin_demo.ui import caption, compare_html, find, run_tab
from marlin_demo.ui.context import UIContext
from marlin_demo.ui.run_tab import RunTab
from marlin_demo.ui.shared_clip import Clip


@dataclass(frozen=True)
class View:
    """How the page shows one task: its tab's label and layout, its Compare choice and card."""

    title: str
    choice: str
    render: Callable[[UIContext, Clip], Any]
    card: compare_html.Card


VIEWS: dict[str, View] = {
    "caption": View("Caption · what happens", "What happens (caption)", caption.render,
                    compare_html.caption_card),
    "find": View("Find · when", "When does it happen (find)", find.render, compare_html.find_card),
}  # fmt: skip


def view_of(task: str | Task) -> View:
    """The task's own view, else the generic one (its answer's text and JSON, in its tab and its cards)."""
    entry = get_task(task)
    return VIEWS.get(entry.name) or View(
        entry.name.capitalize(),
        f"{entry.help[:1].upper()}{entry.help[1:]} ({entry.name})",
        functools.partial(run_tab.render_answer, task=entry),
        lambda result, *_: run_tab.answer_html(entry, result),
    )


def render(ctx: UIContext, clip: Clip) -> dict[str, RunTab]:
    """A tab per task (inside the caller's ``gr.Tabs``) in the registry's order, each laid out by its view."""
    tabs = {}
    for name in TASKS:
        view = view_of(name)
        with gr.Tab(view.title, id=name, elem_id=f"tab-{name}"), run_tab.page():
            tabs[name] = view.render(ctx, clip)
    return tabs
