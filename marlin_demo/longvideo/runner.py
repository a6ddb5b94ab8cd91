"""Long videos on the engine: each window through ``Engine._run``, the answers merged.

``windows`` holds the pure rules (window plan, mapping, merging, the score) and
``window_video`` the per-window sampling plans and one-pass decoding; this module runs the
windows of one request in order, under one time limit, and builds the caption/find result.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from marlin_demo import contract
from marlin_demo.engine.generation import Generation
from marlin_demo.longvideo import plan as win
from marlin_demo.results import CaptionResult, FindResult, Loaded, Metrics, Prepared, Progress, RunInfo, Stage
from marlin_demo.settings import Variant
from marlin_demo.video import PreparedVideo
from marlin_demo.video.windows import WindowPlan, decode_windows

if TYPE_CHECKING:
    from marlin_demo.engine import Engine


def window_frames(
    engine: Engine, path: Path, plans: list[WindowPlan]
) -> Iterator[tuple[WindowPlan, PreparedVideo, bool]]:
    """(plan, frames, from the cache?) per window; a miss decodes all windows in one scan of the file.

    Each window's digest names the window, so the prefix cache keeps one state per window.
    """
    base = f"{engine._digest(path)}|{engine.params!r}|windows|{engine.video_backend}"
    key = (base, tuple((wp.window.start, wp.window.end) for wp in plans))
    with engine._video_lock:
        hit = engine._window_sets.get(key)
        if hit is not None:
            engine._window_sets.move_to_end(key)
    if hit is not None:
        for wp, pv in zip(plans, hit, strict=True):
            yield wp, pv, True
        return
    got: list[PreparedVideo] = []
    t0 = time.perf_counter()
    for wp, pv, _ in decode_windows(str(path), plans, backend=engine.video_backend):
        pv.digest = f"{base}|{wp.window.start:g}-{wp.window.end:g}"
        pv.decode_s = time.perf_counter() - t0
        got.append(pv)
        yield wp, pv, False
        t0 = time.perf_counter()
    with engine._video_lock:
        engine._window_sets[key] = got
        while len(engine._window_sets) > engine.video_cache_size:
            engine._window_sets.popitem(last=False)


def run_windows(
    engine: Engine,
    path: Path,
    plans: list[WindowPlan],
    variant: Variant,
    prompt: str,
    max_new_tokens: int,
    on_text: Callable[[str], None] | None,
    on_stage: Callable[[Stage], None] | None,
    logprobs: bool = False,
) -> tuple[list[tuple[WindowPlan, Generation, Metrics, RunInfo]], Metrics, RunInfo]:
    """Each window through ``Engine._run`` (today's path on that window's frames), in order, one time limit.

    Stages: Prepared (the whole video, the first window's plan), Loaded, then per window a
    ``Progress("", k, n)`` when it starts (its text follows as Progress with the same k).
    """
    n = len(plans)
    if engine._prefix_base > 0:  # room for every window's prefix: a second query reuses them all
        engine.prefixes.size = max(engine._prefix_base, n)
    frames = window_frames(engine, path, plans)
    first = next(frames)  # a decode failure is raised here, before any model is loaded
    whole = engine._info(path)
    if on_stage is not None:
        on_stage(Prepared(whole, first[0].plan, first[2]))
    cold = variant not in engine._models
    loaded = engine.load(variant)
    if on_stage is not None:
        on_stage(Loaded(variant, cold, loaded.load_s))
    t_start = time.perf_counter()
    deadline = t_start + engine.settings.request_timeout_s
    runs: list[tuple[WindowPlan, Generation, Metrics, RunInfo]] = []
    decode_s = 0.0
    for k, (wp, pv, hit) in enumerate(itertools.chain([first], frames), 1):
        if on_stage is not None:
            on_stage(Progress("", k, n))
        decode_s += pv.decode_s if not hit else 0.0
        gen, m, ri, _ = engine._run(
            pv, variant, prompt, max_new_tokens, on_text, None, cached=hit, deadline=deadline,
            logprobs=logprobs,
        )  # fmt: skip
        runs.append((wp, gen, m, ri))
    ms = [r[2] for r in runs]
    tokens = sum(m.output_tokens for m in ms)
    decode_time = sum(m.output_tokens / m.tokens_per_s for m in ms if m.tokens_per_s)
    metrics = Metrics(
        latency_s=time.perf_counter() - t_start,
        ttft_s=ms[0].ttft_s,
        output_tokens=tokens,
        tokens_per_s=tokens / decode_time if decode_time > 0 else None,
        video_tokens=sum(m.video_tokens for m in ms),
        peak_memory_mb=max(m.peak_memory_mb for m in ms),
        memory_kind=ms[0].memory_kind,
        load_s=loaded.load_s,
        device=loaded.device,
    )
    infos = [r[3] for r in runs]
    prefills = [i.prefill_s for i in infos]
    info = dataclasses.replace(
        infos[0],
        duration_s=whole.duration_s,
        video=whole,
        decode_s=decode_s,
        prefill_s=None if None in prefills else sum(p or 0.0 for p in prefills),
        first_text_s=infos[0].first_text_s,
        cached_video=all(i.cached_video for i in infos),
        reused_prefix=all(i.reused_prefix for i in infos),
        windows=infos,
    )
    return runs, metrics, info


def raw_text(runs: list[tuple[WindowPlan, Generation, Metrics, RunInfo]]) -> str:
    """Each window's answer under a header naming the window (the model's words, unchanged)."""
    n = len(runs)
    return "\n\n".join(
        f"[window {k}/{n}: {wp.window.start:g}-{wp.window.end:g} s]\n{gen.text}"
        for k, (wp, gen, _, _) in enumerate(runs, 1)
    )


def caption_windows(
    engine: Engine,
    path: Path,
    plans: list[WindowPlan],
    variant: Variant,
    on_text: Callable[[str], None] | None,
    on_stage: Callable[[Stage], None] | None,
) -> CaptionResult:
    """Caption each window, map its events to global time, merge them into one timeline."""
    runs, metrics, info = run_windows(engine,
        path, plans, variant, contract.CAPTION_PROMPT, engine.settings.caption_max_new_tokens, on_text,
        on_stage,
    )  # fmt: skip
    parts = []
    for wp, gen, _, _ in runs:
        parsed = contract.parse_caption(gen.text)
        parts.append((wp.window, win.map_caption(parsed, wp.window, offset=wp.offset_s)))
    merged = win.merge_captions(parts)
    info.repairs = [*merged.repairs, *merged.joined]
    return CaptionResult(
        variant=variant,
        model=engine.model_label,
        scene=merged.scene,
        events=list(merged.events),
        raw=raw_text(runs),
        repaired=merged.repaired,
        metrics=metrics,
        format_ok=merged.format_ok,
        info=info,
        windows=list(merged.windows),
    )


def find_windows(
    engine: Engine,
    path: Path,
    plans: list[WindowPlan],
    query: str,
    prompt: str,
    variant: Variant,
    on_text: Callable[[str], None] | None,
    on_stage: Callable[[Stage], None] | None,
) -> FindResult:
    """Find in each window, score and map each span, merge duplicates: the best top_k moments."""
    runs, metrics, info = run_windows(
        engine,
        path,
        plans,
        variant,
        prompt,
        engine.settings.find_max_new_tokens,
        on_text,
        on_stage,
        logprobs=True,
    )
    answers = []
    for wp, gen, _, _ in runs:
        mapped = win.map_span(contract.parse_span(gen.text), wp.window, offset=wp.offset_s)
        answers.append((wp.window, mapped, engine._score(gen, variant)))
    moments = win.merge_moments(answers, max(1, engine.settings.top_k))
    info.repairs = [note for _, p, _ in answers for note in p.repairs]
    return FindResult(
        variant=variant,
        model=engine.model_label,
        query=query,
        span=win.best_span(moments),
        format_ok=all(p.format_ok for _, p, _ in answers),
        raw=raw_text(runs),
        metrics=metrics,
        repaired=any(p.repaired for _, p, _ in answers),
        info=info,
        moments=moments,
    )
