"""Long videos above the engine: each window answered through the engine's public ``run_clip``,
the answers merged into one result.

``plan`` holds the pure rules (the window plan, mapping, merging) and ``video.windows`` the
per-window sampling plans and one-pass decoding; this module runs the windows of one request in
order, each under its own time limit, and reports each finished window already merged (``WindowDone``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from marlin_demo.contract import CaptionParse, SpanParse
from marlin_demo.engine import Engine
from marlin_demo.engine.core import ClipRun
from marlin_demo.engine.generation import Generation
from marlin_demo.longvideo import policy
from marlin_demo.results import (
    CaptionResult,
    FindResult,
    Loaded,
    Metrics,
    Prepared,
    Progress,
    Result,
    RunInfo,
    Stage,
    VideoInfo,
    Window,
    WindowDone,
)
from marlin_demo.settings import Variant
from marlin_demo.tasks import Task, get_task
from marlin_demo.video import PreparedVideo, VideoError
from marlin_demo.video.windows import WindowPlan, plan_window

OnText = Callable[[str], None] | None
OnStage = Callable[[Stage], None] | None
#: one window's model work, given where its text and stages go: what the engine answered
WindowWork = Callable[[OnText, OnStage], tuple[Generation, Metrics, RunInfo]]
#: runs one window's work: directly, or in the scheduler's turn and a GPU call (``service``)
Execute = Callable[[WindowWork, OnText, OnStage], tuple[Generation, Metrics, RunInfo]]


def direct(work: WindowWork, on_text: OnText, on_stage: OnStage) -> tuple[Generation, Metrics, RunInfo]:
    """Run a window's work here and now (no other request to take turns with)."""
    return work(on_text, on_stage)


#: a time range asked about: (start, end) in the video's seconds, either None (from 0, to the end)
Span = tuple[float | None, float | None]


def window_plans(
    engine: Engine, video: str | Path | PreparedVideo, task: str | Task, span: Span | None = None
) -> list[WindowPlan] | None:
    """Each window's sampling plan for a video longer than one ``task`` window; None: answered whole.

    Too many windows is a ``WindowLimitError`` (a user error), raised before anything is decoded.
    ``span``: only that time range is planned (``range_plans``), always as windows, even one.
    """
    if span is not None:
        return range_plans(engine, video, task, span)
    if isinstance(video, PreparedVideo):
        return None
    path = Path(video)
    if not path.is_file() or path.stat().st_size / 1e6 > engine.settings.max_upload_mb:
        return None  # the engine says what is wrong, in its own words
    info = engine.info(path)
    windows = policy.plan_for(task, info.duration_s, engine.settings)
    if len(windows) == 1:
        return None
    return [plan_window(info, w, engine.params) for w in windows]


def range_plans(
    engine: Engine, video: str | Path | PreparedVideo, task: str | Task, span: Span
) -> list[WindowPlan]:
    """The windows of a time range of a file, each sampled as if the range were cut as its own file (the
    same fps and pixel rules), on the video's own timeline. The file's checks (size, resolution) apply to
    the file; the duration limit and the window limit to the range. Bad ranges: ``plan.RangeError``."""
    if isinstance(video, PreparedVideo):
        raise ValueError("A time range needs the video file, not frames decoded beforehand.")
    path = Path(video)
    if not path.exists():
        raise VideoError(f"No file at {path.name}: upload a video file.")
    info = engine.info(path, whole=False)
    start, end = policy.check_range(span[0], span[1], info.duration_s, engine.settings.max_duration_s)
    windows = policy.range_windows(task, start, end, engine.settings)
    return [plan_window(info, w, engine.params) for w in windows]


def plans_range(plans: list[WindowPlan]) -> tuple[float, float]:
    """The time range a list of window plans covers (the first window's start to the last one's end)."""
    return plans[0].window.start, plans[-1].window.end


@dataclass
class WindowRun:
    """One window's answer: its plan and the engine's run on its frames."""

    plan: WindowPlan
    run: ClipRun
    started: float  # the request's start (after any first-use load, which is ``load_s``)


def run_windows(
    engine: Engine,
    path: Path,
    plans: list[WindowPlan],
    variant: Variant,
    prompt: str,
    max_new_tokens: int,
    on_text: OnText,
    on_stage: OnStage,
    logprobs: bool = False,
    execute: Execute = direct,
) -> Iterator[WindowRun]:
    """Each window through ``Engine.run_clip``, in order; yields each answered window.

    Stages: Prepared (the whole video, the first window's plan, the windows), Loaded, then per window
    a ``Progress("", k, n)`` when it starts (its text follows as Progress with the same k). The time
    limit applies to each window's own work (``MARLIN_REQUEST_TIMEOUT_S``), never to the time spent
    waiting for other requests' windows; ``execute`` runs each window's work (``direct``, or the
    service's turn on the model and GPU call).
    """
    n = len(plans)
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
    for k, (wp, pv, hit) in enumerate(itertools.chain([first], frames), 1):
        if on_stage is not None:
            on_stage(Progress("", k, n))
        work = functools.partial(_window_work, engine, pv, variant, prompt, max_new_tokens, hit, logprobs)
        gen, metrics, info = execute(work, on_text, None)
        yield WindowRun(wp, ClipRun(gen, metrics, info, pv), started)


def _window_work(
    engine: Engine,
    frames: PreparedVideo,
    variant: Variant,
    prompt: str,
    max_new_tokens: int,
    cached: bool,
    logprobs: bool,
    on_text: OnText,
    on_stage: OnStage,
) -> tuple[Generation, Metrics, RunInfo]:
    """One window on the engine; only what can cross a process boundary comes back (no frames)."""
    run = engine.run_clip(
        frames, variant, prompt, max_new_tokens, on_text, on_stage, cached=cached, logprobs=logprobs
    )
    return run.gen, run.metrics, run.info


def combined(runs: list[WindowRun], whole: VideoInfo, started: float) -> tuple[Metrics, RunInfo]:
    """The request's metrics and run details from its windows' (latency from ``started``)."""
    ms = [r.run.metrics for r in runs]
    tokens = sum(m.output_tokens for m in ms)
    decode_time = sum(m.output_tokens / m.tokens_per_s for m in ms if m.tokens_per_s)
    metrics = Metrics(
        latency_s=time.perf_counter() - started,
        ttft_s=ms[0].ttft_s,
        output_tokens=tokens,
        tokens_per_s=tokens / decode_time if decode_time > 0 else None,
        video_tokens=sum(m.video_tokens for m in ms),
        peak_memory_mb=max(m.peak_memory_mb for m in ms),
        memory_kind=ms[0].memory_kind,
        load_s=ms[0].load_s,
        device=ms[0].device,
    )
    infos = [r.run.info for r in runs]
    prefills = [i.prefill_s for i in infos]
    info = dataclasses.replace(
        infos[0],
        duration_s=whole.duration_s,
        video=whole,
        decode_s=sum(r.run.prepared.decode_s for r in runs if not r.run.info.cached_video),
        prefill_s=None if None in prefills else sum(p or 0.0 for p in prefills),
        first_text_s=infos[0].first_text_s,
        cached_video=all(i.cached_video for i in infos),
        reused_prefix=all(i.reused_prefix for i in infos),
        windows=infos,
    )
    return metrics, info


def raw_text(runs: list[WindowRun], n: int) -> str:
    """Each window's answer under a header naming the window (the model's words, unchanged)."""
    return "\n\n".join(
        f"[window {k}/{n}: {r.plan.window.start:g}-{r.plan.window.end:g} s]\n{r.run.gen.text}"
        for k, r in enumerate(runs, 1)
    )


def caption_part(task: Task, r: WindowRun) -> tuple[Window, CaptionParse]:
    """One finished window's caption, parsed and mapped to global time (once per window)."""
    parsed = task.parse(r.run.gen.text)
    return r.plan.window, policy.map_caption(
        parsed, r.plan.window, offset=r.plan.offset_s, repair=task.repair
    )


def caption_result(
    engine: Engine,
    variant: Variant,
    runs: list[WindowRun],
    parts: list[tuple[Window, CaptionParse]],
    n: int,
    whole: VideoInfo,
    started: float,
) -> CaptionResult:
    """The windows answered so far (``parts``: their mapped captions) as one caption on one timeline."""
    merged = policy.merge_captions(parts)
    metrics, info = combined(runs, whole, started)
    info.repairs = [*merged.repairs, *merged.joined]
    return CaptionResult(
        variant=variant,
        model=engine.model_label,
        scene=merged.scene,
        events=list(merged.events),
        raw=raw_text(runs, n),
        repaired=merged.repaired,
        metrics=metrics,
        format_ok=merged.format_ok,
        info=info,
        windows=list(merged.windows),
    )


def find_answer(
    task: Task, engine: Engine, variant: Variant, r: WindowRun
) -> tuple[Window, SpanParse, float | None]:
    """One finished window's span, mapped to global time and scored (once per window)."""
    parsed = task.parse(r.run.gen.text)
    mapped = policy.map_span(parsed, r.plan.window, offset=r.plan.offset_s, repair=task.repair)
    return r.plan.window, mapped, engine.score(r.run.gen, variant)


def find_result(
    engine: Engine,
    variant: Variant,
    query: str,
    runs: list[WindowRun],
    answers: list[tuple[Window, SpanParse, float | None]],
    n: int,
    whole: VideoInfo,
    started: float,
) -> FindResult:
    """The windows searched so far (``answers``: their mapped, scored spans) as one answer."""
    moments = policy.merge_moments(answers, max(1, engine.settings.top_k))
    metrics, info = combined(runs, whole, started)
    info.repairs = [note for _, p, _ in answers for note in p.repairs]
    return FindResult(
        variant=variant,
        model=engine.model_label,
        query=query,
        span=policy.best_span(moments),
        format_ok=all(p.format_ok for _, p, _ in answers),
        raw=raw_text(runs, n),
        metrics=metrics,
        repaired=any(p.repaired for _, p, _ in answers),
        info=info,
        moments=moments,
    )


def answer_windows(
    engine: Engine,
    task: str | Task,
    path: Path,
    plans: list[WindowPlan],
    variant: Variant,
    query: str | None,
    on_text: OnText,
    on_stage: OnStage,
    execute: Execute = direct,
    span: tuple[float, float] | None = None,
) -> Result:
    """A long video's answer to ``task``, window by window; each finished window is a ``WindowDone`` stage.
    ``span``: the time range the windows cover, when only that was asked (the result's ``range_s``)."""
    n = len(plans)
    entry = get_task(task)
    clean, prompt = entry.ask(query, engine.settings)
    limit, logprobs = entry.tokens(engine.settings), entry.scored
    runs: list[WindowRun] = []
    parts: list[tuple[Window, CaptionParse]] = []
    answers: list[tuple[Window, SpanParse, float | None]] = []
    result: Result | None = None
    whole = engine.info(path, whole=False)
    for wr in run_windows(engine, path, plans, variant, prompt, limit, on_text, on_stage, logprobs, execute):
        runs.append(wr)  # each window is parsed, mapped (and scored) once; only the merge is redone
        if entry.result is FindResult:  # spans merged into moments, else events into one timeline
            answers.append(find_answer(entry, engine, variant, wr))
            result = find_result(engine, variant, clean or "", runs, answers, n, whole, wr.started)
        else:
            parts.append(caption_part(entry, wr))
            result = caption_result(engine, variant, runs, parts, n, whole, wr.started)
        result.range_s = span
        if on_stage is not None:
            on_stage(WindowDone(len(runs), n, result))
    assert result is not None  # plans is never empty
    return result
