"""Every request's windows above the engine (the pure rules are ``policy``'s): each answered by
``Engine.run`` in a turn, shifted to the video's timeline and merged."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import itertools
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marlin_demo.engine import Cancelled, Engine
from marlin_demo.engine.graphs import GraphsUnavailable
from marlin_demo.longvideo import policy
from marlin_demo.model_io import clock_span
from marlin_demo.results import Loaded, Prepared, Progress, Result, Stage, VideoInfo, Window, WindowDone
from marlin_demo.settings import Variant
from marlin_demo.tasks import Task
from marlin_demo.tasks.registry import Made
from marlin_demo.video import PreparedVideo, VideoError, plan_sampling
from marlin_demo.video.windows import WindowPlan, plan_window

#: one clip's model work (the whole video, or a window): ``Engine.run`` with its arguments, given ``on_text``
ClipWork = Callable[..., Any]
#: what a clip's work gives as it runs: ("text", t)..., then ("done", result) or ("error", exception)
Item = tuple[str, Any]
#: one clip's work run in a turn, as a context around its items (``threaded``, or a ZeroGPU call's)
Execute = Callable[[ClipWork], contextlib.AbstractContextManager[Iterator[Item]]]
#: a time range asked about: (start, end) in the video's seconds, either None (from 0, to the end)
Span = tuple[float | None, float | None]


@dataclass(frozen=True)
class Request:
    """One request, made once (``service.request``) and read by every layer below: task entry, cleaned query,
    checked range (None: whole video), windows and an opaque visitor key (None: no visitor)."""

    task: Task
    video: str | Path | PreparedVideo
    variant: Variant
    query: str | None
    plans: tuple[WindowPlan, ...]
    span: tuple[float, float] | None = None
    visitor: str | None = None

    @property
    def whole(self) -> bool:
        """A short clip asked about whole: its one window is the engine's answer, as it is."""
        one = self.plans[0]  # (a library search's one window of a longer clip is not)
        whole_clip = (one.first_frame, one.num_frames) == (0, one.source_frames)
        return self.span is None and len(self.plans) == 1 and whole_clip


def window_plans(
    engine: Engine, video: str | Path | PreparedVideo, task: str | Task, span: Span | None = None
) -> list[WindowPlan]:
    """Each window's sampling plan (a short clip: one, the whole clip); too many: ``WindowLimitError`` before
    any decoding. ``span``: sampled as if cut as its own file; the limits apply to the range."""
    if isinstance(video, PreparedVideo):  # frames made elsewhere (the GPU check's clip): answered whole
        if span is not None:
            raise ValueError("A time range needs the video file, not frames decoded beforehand.")
        info = video.info
        return [
            WindowPlan(Window(0, 0.0, info.duration_s), 0, info.num_frames, info, video.plan, info.num_frames)
        ]
    if not Path(video).exists():
        raise VideoError(f"No file at {Path(video).name}: upload a video file.")
    info = engine.info(Path(video), whole=span is None)
    if span is not None:
        start, end = policy.check_range(span[0], span[1], info.duration_s, engine.settings.max_duration_s)
        windows = policy.range_windows(task, start, end, engine.settings)
    else:
        windows = policy.plan_for(task, info.duration_s, engine.settings)
    if span is None and len(windows) == 1:  # answered whole: the clip's own plan
        plan = plan_sampling(info, engine.params)
        return [WindowPlan(windows[0], 0, info.num_frames, info, plan, info.num_frames)]
    return [plan_window(info, w, engine.params) for w in windows]


def threaded(
    work: ClipWork, within: Callable[[], contextlib.AbstractContextManager[Any]], seconds: int = 0
) -> Generator[Item, None, None]:
    """The one place ``generate``'s callbacks become items: ``work`` in a thread in a copy of the caller's
    context (where ``spaces`` finds the visitor), inside ``within()`` so no ``yield`` splits its context
    variables; closing stops the work at its next token (on ZeroGPU: the ``spaces.GPU`` function itself)."""
    items: queue.Queue[Item] = queue.Queue()
    stop = threading.Event()

    def on_text(text: str) -> None:
        if stop.is_set():
            raise Cancelled()
        items.put(("text", text))

    def target() -> None:
        try:
            with within():
                items.put(("done", work(on_text=on_text)))
        except BaseException as exc:
            items.put(("error", exc))

    threading.Thread(target=contextvars.copy_context().run, args=(target,), daemon=True).start()
    try:
        while True:
            item = items.get()
            yield item
            if item[0] != "text":
                return
    finally:
        stop.set()


@dataclass
class WindowRun:
    """One window's answer: its plan, the engine's answer on its frames (window time), the frames."""

    plan: WindowPlan
    result: Result
    prepared: PreparedVideo
    started: float  # the request's start (after any first-use load, which is ``load_s``)


def combined(
    engine: Engine, variant: Variant, query: str, runs: list[WindowRun], n: int, whole: VideoInfo
) -> Made:
    """The windows answered so far: their words (a header per window if several), metrics, run details."""
    ms = [r.result.metrics for r in runs]
    tokens = sum(m.output_tokens for m in ms)
    decode_time = sum(m.output_tokens / m.tokens_per_s for m in ms if m.tokens_per_s)
    metrics = dataclasses.replace(
        ms[0],  # its first token, memory kind, load and device
        latency_s=time.perf_counter() - runs[0].started,
        output_tokens=tokens,
        tokens_per_s=tokens / decode_time if decode_time > 0 else None,
        video_tokens=sum(m.video_tokens for m in ms),
        peak_memory_mb=max(m.peak_memory_mb for m in ms),
    )
    infos = [r.result.info for r in runs]
    prefills = [i.prefill_s for i in infos]
    info = dataclasses.replace(
        infos[0],
        duration_s=whole.duration_s,
        video=whole,
        decode_s=sum(r.prepared.decode_s for r in runs if not r.result.info.cached_video),
        prefill_s=None if None in prefills else sum(p or 0.0 for p in prefills),
        cached_video=all(i.cached_video for i in infos),
        reused_prefix=all(i.reused_prefix for i in infos),
        windows=infos,
    )
    raw = "\n\n".join(
        f"[window {k}/{n}: {clock_span(r.plan.window.start, r.plan.window.end)}]\n{r.result.raw}"
        if n > 1
        else r.result.raw
        for k, r in enumerate(runs, 1)
    )
    return Made(variant, engine.model_label, raw, metrics, info, query, engine.settings)


def prepare(
    engine: Engine, req: Request
) -> tuple[Prepared, Iterator[tuple[WindowPlan, PreparedVideo, bool]]]:
    """The request's ``Prepared`` stage and its frames, window by window (a short clip: its own, whole),
    the first decoded now: a decode failure is raised here, before any model is loaded."""
    path = Path(str(req.video))
    if req.whole:
        frames = iter([(req.plans[0], *engine.store.prepare(req.video))])
    else:
        frames = engine.window_frames(path, list(req.plans))
    first = next(frames)
    whole = first[1].info if req.whole else engine.info(path, whole=False)
    shown = () if req.whole else tuple(wp.window for wp in req.plans)
    stage = Prepared(whole, first[1].plan if req.whole else first[0].plan, first[2], shown)
    return stage, itertools.chain([first], frames)


def answer(engine: Engine, req: Request, execute: Execute) -> Generator[Stage, None, Result]:
    """``req``'s stages (Prepared before any turn, Loaded, per window ``Progress`` and ``WindowDone``), each
    window in one ``execute``; returns the answer. The time limit covers each window's work, not the wait."""
    t0, n = time.perf_counter(), len(req.plans)
    stage, frames = prepare(engine, req)
    yield stage
    prep_s = time.perf_counter() - t0
    cold = not engine.is_loaded(req.variant)
    loaded = engine.load(req.variant)
    yield Loaded(req.variant, cold, loaded.load_s)
    started, runs = time.perf_counter(), []
    for k, (wp, pv, hit) in enumerate(frames, 1):
        at = (None, None) if req.whole else (k, n)
        if not req.whole:
            yield Progress("", k, n)
        length = None if req.whole else wp.window.end - wp.offset_s
        work = functools.partial(engine.run, req.task, pv, req.variant, req.query, cached=hit, length=length)
        for again in (True, False):  # a call sized for graphs the variant cannot capture: once more, eager
            try:
                with execute(work) as items:
                    for kind, value in items:
                        if kind == "text":
                            yield Progress(value, *at)
                        elif kind == "error":
                            raise value
                        else:  # (a ZeroGPU call's answer: how it decoded, told to the process that asked)
                            engine.note_decode(req.variant, value.info.decode)
                            runs.append(WindowRun(wp, value, pv, started))
                break
            except GraphsUnavailable:
                if not again:
                    raise
            except GeneratorExit:  # the caller went away: its generation stops at the next token
                engine.note_cancelled()
                raise
        if req.whole:
            runs[0].result.metrics.latency_s += prep_s
            return runs[0].result
        made = combined(engine, req.variant, req.query or "", runs, n, stage.video)
        res = req.task.answer.merge([(r.result, r.plan.window, r.plan.offset_s) for r in runs], made)
        res.range_s = req.span
        yield WindowDone(k, n, res)
    return res
