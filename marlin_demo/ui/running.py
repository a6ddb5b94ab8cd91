"""A tab's request while it runs: Run/Stop buttons, the wait before the queue, the tab's progress bar."""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from marlin_demo.ui.common import GPU_EVENT, PRIVATE_UI


def run_buttons(running: bool) -> tuple[Any, Any]:
    """(run, stop) while a request runs or when it is over: the Stop button only while it runs."""
    return gr.update(visible=not running), gr.update(visible=running)


def with_buttons(outputs: Iterator[tuple[Any, ...]], n: int) -> Iterator[tuple[Any, ...]]:
    """A tab's streamed outputs plus its (run, stop) buttons, put back to "not running" at the end.

    Part of the request itself (not a ``.then`` step): a stopped request's late end then cannot
    reset the buttons of the next one. Closing this closes ``outputs`` (the request stops).
    """
    skip = gr.skip()
    with contextlib.closing(outputs):  # type: ignore[type-var]
        for out in outputs:
            yield (*out, skip, skip)
    yield (*(skip,) * n, *run_buttons(False))


def waiting_outputs() -> tuple[Any, Any, str]:
    """What a Run click shows at once, before the request leaves the queue: (run, stop, progress)."""
    return (*run_buttons(True), progress_html(0.0, "Waiting for its turn (one request runs at a time)…"))


def wire_run_and_stop(
    triggers: list[Any],
    fn: Any,
    inputs: list[Any],
    outputs: list[Any],
    buttons: list[Any],
    progress: Any,
    stopped: Callable[[], str],
    stopped_target: Any,
) -> Any:
    """Run (a streamed request with the tab's own progress bar) and Stop (cancels it) for a tab.

    ``outputs`` ends with the (run, stop) ``buttons`` (see ``with_buttons``); Stop shows
    ``stopped()`` in ``stopped_target``. Returns the main event, for its ``.then`` steps.
    """
    gr.on(triggers, waiting_outputs, None, [*buttons, progress], **PRIVATE_UI)
    main = gr.on(
        triggers,
        fn,
        inputs,
        outputs,
        api_visibility="private",
        show_progress="hidden",  # the tab's own progress bar says where it is (and no "Error" pill)
        trigger_mode="multiple",  # a run right after a Stop is not dropped while the stopped one ends
        **GPU_EVENT,
    )
    # Stop puts the buttons back at once and cancels the run; its sentence comes in a queued
    # step after it, over the page's one message stream, so a message the stopped run sent
    # before the cancel reached the server cannot land after it and overwrite "Stopped".
    buttons[1].click(lambda: run_buttons(False), None, buttons, cancels=[main], **PRIVATE_UI).then(
        lambda: (stopped(), progress_html(0, "Stopped: the model stops at its next token.")),
        None,
        [stopped_target, progress],
        api_visibility="private",
        show_progress="hidden",
        concurrency_limit=None,  # never waits behind another session's step
    )
    return main


def progress_html(fraction: float, text: str) -> str:
    """The tab's own progress bar (window k of n on a long video), yielded with the outputs."""
    pct = max(0.0, min(100.0, 100.0 * fraction))
    return (
        f'<div class="mp-progress" role="progressbar" aria-valuenow="{pct:.0f}" aria-valuemin="0" '
        f'aria-valuemax="100"><div class="mp-bar" style="width:{pct:.1f}%"></div>'
        f'<span class="mp-text">{html.escape(text)}</span></div>'
    )
