"""Every request's windows above the engine (the pure rules are ``policy``'s): each answered by
``Engine.run`` under its own time limit, shifted to the video's timeline and merged into one result."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from marlin_demo.contract import clock_span
from marlin_demo.engine import Engine
from marlin_demo.longvideo import policy
from marlin_demo.results import Loaded, Prepared, Progress, Result, Stage, VideoInfo, WindowDone
from marlin_demo.settings import Variant
from marlin_demo.tasks import Task, get_task
from marlin_demo.tasks.registry import Made
from marlin_demo.video import PreparedVideo, VideoError
from marlin_demo.video.windows import WindowPlan, plan_window

OnText = Callable[[str], None] | None
OnStage = Callable[[Stage], None] | None
#: one clip's model work (the whole video, or a window), given where its text and stages go
ClipWork = Callable[[OnText, OnStage], Result]
#: runs one clip's work: directly, or in the scheduler's turn and a GPU call (``service``)
Execute = Callable[[ClipWork, OnText, OnStage], Result]


#: a time range asked about: (start, end) in the video's seconds, either None (from 0, to the end)
Span = tuple[float | None, float | None]


def window_plans(
    engine: Engine, video: str | Path | PreparedVideo, task: str | Task, span: Span | None = None
) -> list[WindowPlan] | None:
    """Each window's sampling plan for a video longer than one ``task`` window (None: answered whole);
    too many is a ``WindowLimitError`` before anything is decoded. ``span``: always windows, even one,
    sampled as if the range were cut as its own file, on the video's timeline; the duration and window
    limits apply to the range (bad ranges: ``policy.RangeError``)."""
    if span is not None:
        if isinstance(video, PreparedVideo):
            raise ValueError("A time range needs the video file, not frames decoded beforehand.")
        path = Path(video)
        if not path.exists():
            raise VideoError(f"No file at {path.name}: upload a video file.")
        info = engine.info(path, whole=False)
        start, end = policy.check_range(span[0], span[1], info.duration_s, engine.settings.max_duration_s)
        windows = policy.range_windows(task, start, end, engine.settings)
    elif isinstance(video, PreparedVideo):
        return None
    else:
        path = Path(video)
        if not path.is_file() or path.stat().st_size / 1e6 > engine.settings.max_upload_mb:
            return None  # the engine says what is wrong, in its own words
        info = engine.info(path)
        windows = policy.plan_for(task, info.duration_s, engine.settings)
        if len(windows) == 1:
            return None
    return [plan_window(info, w, engine.params) for w in windows]


@dataclass
class WindowRun:
    """One window's answer: its plan, the engine's answer on its frames (window time), the frames."""

    plan: WindowPlan
    result: Result
    prepared: PreparedVideo
    started: float  # the request's start (after any first-use load, which is ``load_s``)


def _clip_work(
    engine: Engine,
    task: str,
    video: str | Path | PreparedVideo,
    variant: Variant,
    query: str | None,
    cached: bool | None,
    length: float | None,
    on_text: OnText,
    on_stage: OnStage,
) -> Result:
    """One clip on the engine; module-level, so a ZeroGPU call takes it pickled (only the answer returns).
    The callbacks go by keyword (the bench tests' stand-in engines take them so)."""
    return engine.run(
        task, video, variant, query, on_text=on_text, on_stage=on_stage, cached=cached, length=length
    )


def combined(
    engine: Engine, variant: Variant, query: str, runs: list[WindowRun], n: int, whole: VideoInfo
) -> Made:
    """What the windows answered so far share: each one's words under a header naming its window (the
    model's words, unchanged), the request's metrics (latency from its start) and run details."""
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
        for k, r in enumerate(runs, 1)
    )
    return Made(variant, engine.model_label, raw, metrics, info, query, engine.settings)


def answer(
    engine: Engine,
    task: str | Task,
    video: str | Path | PreparedVideo,
    plans: list[WindowPlan] | None,
    variant: Variant,
    query: str | None,
    on_text: OnText,
    on_stage: OnStage,
    execute: Execute,
    span: tuple[float, float] | None = None,
    *,
    decode_first: bool = False,
) -> Result:
    """``task`` on ``video`` in the windows of ``plans``, each in one ``execute`` turn. ``plans`` None: one
    whole-clip window, the engine's answer and stages as they are (``decode_first``: its frames made before
    the turn, so ZeroGPU's call holds only model work; that time is added to the latency). ``span``: the
    range the windows cover, when only that was asked (``range_s``)."""
    entry = get_task(task)
    clean, _ = entry.ask(query, engine.settings)  # a bad query fails before anything is decoded
    if plans is None:
        cached: bool | None = None
        prep_s = 0.0
        if decode_first and not isinstance(video, PreparedVideo):
            t0 = time.perf_counter()
            video, cached = engine.store.prepare(video)
            prep_s = time.perf_counter() - t0
        work = functools.partial(_clip_work, engine, entry.name, video, variant, query, cached, None)
        res = execute(work, on_text, on_stage)
        res.metrics.latency_s += prep_s
        return res
    # the windowed path: Prepared (the whole video, the windows), Loaded, ``Progress("", k, n)`` as window k
    # starts, ``WindowDone`` after it; the time limit covers each window's own work, never the wait
    n, path = len(plans), Path(str(video))
    frames = engine.window_frames(path, plans)
    first = next(frames)  # a decode failure is raised here, before any model is loaded
    whole = engine.info(path, whole=False)  # checked by window_plans (a range: the range's duration)
    if on_stage is not None:
        on_stage(Prepared(whole, first[0].plan, first[2], tuple(wp.window for wp in plans)))
    cold = not engine.is_loaded(variant)
    loaded = engine.load(variant)
    if on_stage is not None:
        on_stage(Loaded(variant, cold, loaded.load_s))
    started = time.perf_counter()
    runs: list[WindowRun] = []
    for k, (wp, pv, hit) in enumerate(itertools.chain([first], frames), 1):
        if on_stage is not None:
            on_stage(Progress("", k, n))
        length = wp.window.end - wp.offset_s
        work = functools.partial(_clip_work, engine, entry.name, pv, variant, query, hit, length)
        # each window is parsed, repaired (and scored) once; only the merge is redone
        runs.append(WindowRun(wp, execute(work, on_text, None), pv, started))
        made = combined(engine, variant, clean or "", runs, n, whole)
        res = entry.answer.merge([(r.result, r.plan.window, r.plan.offset_s) for r in runs], made)
        res.range_s = span
        if on_stage is not None:
            on_stage(WindowDone(k, n, res))
    return res
