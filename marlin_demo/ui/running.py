"""A tab's request while it runs: Run/Stop, the wait, the bar and ``follow`` (stages to ``Updates``)."""

from __future__ import annotations

import contextlib
import html
import itertools
import math
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import gradio as gr
from gradio.blocks import Block

from marlin_demo.results import Done, Loaded, Prepared, Progress, Result, WindowDone
from marlin_demo.ui.assets import asset
from marlin_demo.ui.context import GPU_EVENT, PRIVATE_UI, UIContext
from marlin_demo.ui.inputs import session_of, user_errors

Updates = dict[Block, Any]
"""What a listener yields: the components it changes, each with its new value or ``gr.update``."""

S = TypeVar("S")
T = TypeVar("T")


def run_buttons(buttons: Sequence[Block], running: bool) -> Updates:
    """The (run, stop) ``buttons`` while a request runs or when it is over: Stop only while it runs."""
    run, stop = buttons
    return {run: gr.update(visible=not running), stop: gr.update(visible=running)}


def _nothing() -> Generator[Updates, None, None]:
    yield from ()


@dataclass
class Run:
    """A request for ``streamed``: ``first``, then ``updates`` for the clip at ``path`` ("": none)."""

    path: str
    first: Updates
    updates: Generator[Updates, None, None] = field(default_factory=_nothing)
    keep: Callable[[], None] = lambda: None
    stamp: float | None = None


def streamed(
    ctx: UIContext,
    tab: str,
    buttons: Sequence[Block],
    begin: Callable[[gr.Request, tuple[Any, ...]], Run],
    gone: Updates,
    failed: Callable[[str], Updates],
) -> Callable[..., Iterator[Updates]]:
    """The one listener every tab's request runs in; Run is put back here, not in a ``.then`` step, so a
    stopped request's late end cannot reset the next one's buttons."""

    def run_ui(request: gr.Request, *values: Any) -> Iterator[Updates]:
        session, taken = session_of(request), False
        try:
            with user_errors():
                run = begin(request, values)
                with contextlib.closing(run.updates) as updates:
                    shown = not run.path or ctx.results_clip.start(tab, session, run.path, run.stamp)
                    for update in itertools.chain([run.first] if run.first else [], updates) if shown else ():
                        if run.path and not ctx.results_clip.shows(session, run.path):
                            shown = False
                            break
                        yield update
                    if not shown:
                        taken = ctx.results_clip.taken(tab, session, run.path)
                        if not taken:
                            yield gone
                    else:
                        run.keep()
        except gr.Error as exc:
            yield failed(exc.message)
        if not taken:
            yield run_buttons(buttons, False)

    return run_ui


def waiting_updates(buttons: Sequence[Block], progress: Block | None) -> Updates:
    """What a Run click shows at once, before the request leaves the queue: Stop and the wait."""
    wait = progress_html(0.0, "Waiting for its turn (one request runs at a time)…", scroll=True)
    return {**run_buttons(buttons, True), **({} if progress is None else {progress: wait})}


def wire_run_and_stop(
    triggers: list[Any],
    fn: Any,
    inputs: list[Any],
    outputs: list[Any],
    buttons: list[Any],
    progress: Block | None,
    stopped: Callable[[gr.Request], Updates],
    example: tuple[Any, Any, Any] | None = None,
    js: str | None = None,
) -> list[Any]:
    """Run and Stop, and an example's click; the events a follow-up step chains on."""
    run_options: dict[str, Any] = {
        "js": js,
        "api_visibility": "private",
        "show_progress": "hidden",  # the tab's own progress bar says where it is (and no "Error" pill)
        **GPU_EVENT,
    }
    bar = [] if progress is None else [progress]
    gr.on(triggers, lambda: waiting_updates(buttons, progress), None, [*buttons, *bar], **PRIVATE_UI)
    # a run right after a Stop is not dropped while the stopped one ends
    main = gr.on(triggers, fn, inputs, outputs, trigger_mode="multiple", **run_options)
    runs, ends = [main], [main]
    if example is not None:
        loaded, first_fn, example_fn = example
        # "always_last": an example clicked while another runs waits for it (the default drops the click)
        last = {"trigger_mode": "always_last"}
        first = loaded.then(first_fn, inputs, outputs, js=js, **last, **PRIVATE_UI)
        runs.append(first.then(example_fn, inputs, outputs, **last, **run_options))
        ends += [first, runs[-1]]
    # what Stop says is said in a queued step after it, so a message the stopped run sent cannot land after it
    said: dict[str, Updates] = {}

    def stop(request: gr.Request) -> Updates:
        said[session_of(request)] = {**dict.fromkeys(bar, ""), **stopped(request)}
        return run_buttons(buttons, False)

    def say_stopped(request: gr.Request) -> Updates:
        return said.pop(session_of(request), None) or gr.skip()

    buttons[1].click(stop, None, buttons, cancels=runs, **PRIVATE_UI).then(
        say_stopped,
        None,
        outputs,
        api_visibility="private",
        show_progress="hidden",
        concurrency_limit=None,  # never waits behind another session's step
    )
    return ends


def scroll_mark(target: str = "") -> str:
    """Attributes bringing an element (or ``target``) into view once, when it first appears (``PAGE_JS``)."""
    to = f' data-mr-target="{html.escape(target)}"' if target else ""
    return f' data-mr-scroll="{uuid.uuid4().hex[:12]}"{to}'


def progress_html(fraction: float, text: str, scroll: bool = False) -> str:
    """The tab's own progress bar; ``scroll``: brought into view (a run starts)."""
    pct = max(0.0, min(100.0, 100.0 * fraction))
    mark = scroll_mark() if scroll else ""
    return (
        f'<div class="mp-progress" role="progressbar" aria-valuenow="{pct:.0f}" aria-valuemin="0" '
        f'aria-valuemax="100"{mark}><div class="mp-bar" style="width:{pct:.1f}%"></div>'
        f'<span class="mp-text">{html.escape(text)}</span></div>'
    )


class Throttle(Generic[S]):
    """A request's texts at most every ``every`` s; a held one is passed before its window ends."""

    def __init__(self, every: float) -> None:
        self.every, self.last = every, -math.inf  # the first text always passes (monotonic time may start
        self.held: S | None = None  # near 0 after a boot)

    def passed(self, stage: S) -> list[S]:
        """What to show now that ``stage`` came: nothing, it, or the held text and it."""
        if isinstance(stage, Progress) and stage.text:
            now = time.monotonic()
            if now - self.last < self.every:
                self.held = stage
                return []
            self.last = now
        elif isinstance(stage, Progress) and stage.window is None:
            return []  # no text, no new window: nothing to show
        elif isinstance(stage, (Progress, WindowDone)) and self.held is not None:
            held, self.held = self.held, None
            return [held, stage]  # a long video's next window starts, or this one is answered
        self.held = None
        return [stage]


@dataclass
class RunState:
    """What ``follow`` knows so far of the request it follows (the stage hooks read it)."""

    prepared: Prepared | None = None
    cold: bool = False
    text: str = ""
    window: int | None = None
    windows: int | None = None

    @property
    def windowed(self) -> bool:
        """A long video: the text is window ``window`` of ``windows``'s answer so far."""
        return self.window is not None and bool(self.windows)


class StageView(Generic[T]):
    """What a tab shows at each stage of a request; ``None`` (the default): nothing changes then."""

    def prepared(self, run: RunState) -> T | None:
        """The video is checked, planned and decoded (``run.prepared``)."""

    def loaded(self, run: RunState) -> T | None:
        """The variant is in memory (``run.cold``: it was loaded for this request)."""

    def window_starts(self, run: RunState) -> T | None:
        """A long video's window ``run.window`` of ``run.windows`` starts (the one before is answered)."""

    def writing(self, run: RunState) -> T | None:
        """The model wrote more: ``run.text`` so far (of the current window on a long video)."""

    def window_done(self, run: RunState, merged: Result) -> T | None:
        """A long video's window ``run.window`` is answered: ``merged`` holds windows 1..k, merged."""

    def done(self, run: RunState, result: Result) -> T | None:
        """The finished result."""

    def other(self, run: RunState, event: Any) -> T | None:
        """Anything else the stream carries (Compare's per-variant events)."""


def follow(
    stages: Generator[Any, None, None], view: StageView[T], every: float | None
) -> Generator[T, None, None]:
    """What ``view`` shows at each stage (``Throttle``d); closing this closes ``stages``, so the request."""
    run, throttle = RunState(), None if every is None else Throttle[Any](every)
    with contextlib.closing(stages):
        for stage in stages:
            for passed in [stage] if throttle is None else throttle.passed(stage):
                shown = _show(view, run, passed)
                if shown:  # None or {}: nothing new (Gradio refuses an empty dict of updates)
                    yield shown


def _show(view: StageView[T], run: RunState, stage: Any) -> T | None:
    if isinstance(stage, Prepared):
        run.prepared = stage
        return view.prepared(run)
    if isinstance(stage, Loaded):
        run.cold = stage.cold
        return view.loaded(run)
    if isinstance(stage, Progress):
        run.text, run.window, run.windows = stage.text, stage.window, stage.windows
        return view.window_starts(run) if run.windowed and not stage.text else view.writing(run)
    if isinstance(stage, WindowDone):
        return view.window_done(run, stage.result)
    if isinstance(stage, Done):
        return view.done(run, stage.result)
    return view.other(run, stage)


class BarView(StageView[Updates]):
    """The progress bar every run tab shares; ``written(text)``: how much of the answer (0-1) it is."""

    def __init__(
        self,
        progress: Block,
        variant: str,
        will_load: Callable[[], bool],
        written: Callable[[str], float] = lambda text: 0.5,
        window_step: str = "",
    ) -> None:
        self.progress, self.v = progress, variant
        self.will_load, self.written, self.window_step = will_load, written, window_step

    def bar(self, fraction: float, text: str) -> Updates:
        return {self.progress: progress_html(fraction, text)}

    def reading(self) -> Updates:
        """The request's first line, before any stage."""
        return self.bar(0.02, "Reading the video…")

    def prepared(self, run: RunState) -> Updates | None:
        if self.will_load():  # asked now: another request may have loaded it meanwhile
            return self.bar(0.1, f"Loading {self.v} (first use of this variant)…")
        return None

    def window_starts(self, run: RunState) -> Updates:
        k, n = run.window or 0, run.windows or 1
        return self.bar((k - 1) / n, f"Window {k} of {n}")

    def writing(self, run: RunState) -> Updates:
        written = self.written(run.text)
        if run.windowed:
            k, n = run.window or 0, run.windows or 1
            return self.bar((k - 1 + written) / n, f"Window {k} of {n}{self.window_step}")
        return self.bar(0.2 + 0.8 * written, "Writing")


PAGE_JS = asset("page.js")
"""``js_on_load`` of the header (always on the page): results and progress come into view."""
