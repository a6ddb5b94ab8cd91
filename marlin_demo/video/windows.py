"""Windows on the source file: each window sampled as if cut as its own file (source frames i with
s <= i / fps < e), all decoded in one pass (docs/LONG_VIDEOS.md, "Windows on the source file")."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from marlin_demo.model_io import VideoParams
from marlin_demo.results import Window
from marlin_demo.video import PreparedVideo, SamplingPlan, VideoInfo, plan_sampling
from marlin_demo.video.decode import _check_complete, _metadata, _needs, _resize, _scan_frames
from marlin_demo.video.info import Backend, _short
from marlin_demo.video.parallel_decode import (
    _Collected,
    _decode_run,
    _fast_workers,
    _index_for,
    _segments,
    fast_supported,
    pick_backend,
)

log = logging.getLogger(__name__)


@dataclass
class WindowPlan:
    """One window's plan: ``plan`` is in the window's own frame numbering (as a cut file)."""

    window: Window
    first_frame: int
    num_frames: int
    info: VideoInfo
    plan: SamplingPlan
    #: the source's frame count as probed (0: unknown), so windows of a time range need not reach the end
    source_frames: int = 0

    @property
    def offset_s(self) -> float:
        return self.first_frame / self.info.fps

    @property
    def source_indices(self) -> list[int]:
        return [self.first_frame + j for j in self.plan.indices]


def window_frames(info: VideoInfo, window: Window) -> tuple[int, int]:
    """(first source frame, frame count) of the window: frames with start <= i/fps < end."""
    i0 = max(0, math.ceil(window.start * info.fps - 1e-6))
    i1 = min(info.num_frames, math.ceil(window.end * info.fps - 1e-6))
    if window.end >= info.duration_s - 1e-9:
        i1 = info.num_frames
    return i0, max(0, i1 - i0)


def plan_window(info: VideoInfo, window: Window, params: VideoParams | None = None) -> WindowPlan:
    """The window's sampling plan, equal to qwen-vl-utils' plan on the window cut as its own file."""
    i0, n = window_frames(info, window)
    local = dataclasses.replace(info, num_frames=n, duration_s=n / info.fps)
    return WindowPlan(window, i0, n, local, plan_sampling(local, params), source_frames=info.num_frames)


def window_backend(plans: Sequence[WindowPlan], backend: Backend = "auto") -> str:
    """The windows' decoder: ``"fast"`` or ``"pyav"`` (the reference scan), as ``video.sample`` picks."""
    if not plans:
        return "pyav"
    info = plans[0].info
    if backend == "auto":
        backend = pick_backend(info, plans[0].plan)
    return "fast" if backend == "fast" and fast_supported(info) else "pyav"


def decode_windows(
    path: str, plans: Sequence[WindowPlan], backend: Backend = "auto"
) -> Iterator[tuple[WindowPlan, PreparedVideo, int]]:
    """One scan of the source for every window, each picture decoded once (docs/VIDEO_PREP.md), yielding
    (plan, frames, pictures decoded so far) as each window is complete; if the fast path cannot index the file
    or fails, the reference PyAV scan serves the windows not yet handed out."""
    if not plans:
        return
    done = 0
    if window_backend(plans, backend) == "fast":
        try:
            index = _index_for(path, plans[0].info.stream_index, _source_frames(plans))
            if index is not None:
                for item in _decode_windows_fast(path, plans, index):
                    yield item
                    done += 1
                return
        except Exception as exc:  # e.g. a seek that misses on an odd file: the scan is the fallback
            log.warning("fast window decode failed on %s (%s); scanning with PyAV", path, _short(exc))
    yield from itertools.islice(_decode_windows_scan(path, plans), done, None)  # none handed out twice


def _source_frames(plans: Sequence[WindowPlan]) -> int:
    """The source's frame count as probed, to check the packet index against the whole file; without
    it, where the windows end (smaller than the packet count unless they reach the end: no fast path)."""
    known = max(wp.source_frames for wp in plans)
    return known or max(wp.first_frame + wp.num_frames for wp in plans)


def _window_result(
    wp: WindowPlan, frames: list[Any], backend: str, decoded: int, pts: list[float] | None
) -> PreparedVideo:
    """The window's frames as ``video.sample`` returns them; the "truncated" error if one is missing."""
    import torch

    _check_complete(wp.plan.indices, frames)
    meta = _metadata(wp.plan, backend)
    return PreparedVideo(torch.stack(frames), meta, wp.plan, wp.info, frames_decoded=decoded, frame_pts=pts)


def _window_groups(index: Any, wanted: list[int], lasts: list[int]) -> list[list[int]]:
    """The wanted frames (sorted) grouped by the first window that needs them, in time order; a group
    runs to the end of its window's last GOP, so no GOP is split and each picture is decoded once."""
    import bisect

    keys = index.keyframes
    groups: list[list[int]] = []
    i = 0
    for last in lasts:
        k = bisect.bisect_right(keys, last)
        end = keys[k] if k < len(keys) else len(index.pts)  # where the next GOP starts
        j = bisect.bisect_left(wanted, end, lo=i)
        if j > i:
            groups.append(wanted[i:j])
            i = j
    if i < len(wanted):
        groups.append(wanted[i:])
    return groups


def _decode_windows_fast(
    path: str, plans: Sequence[WindowPlan], index: Any
) -> Iterator[tuple[WindowPlan, PreparedVideo, int]]:
    """Fast path for windows: the union of planned frames split into keyframe runs, decoded in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    got = _Collected([wp.plan for wp in plans], [wp.source_indices for wp in plans])
    stream_index = plans[0].info.stream_index
    workers = _fast_workers()
    last = [max(wp.source_indices) for wp in plans]
    # each window's new frames split across the workers, in time order, so that window 1 is
    # decoded by every worker at once and is ready first (the model starts on it meanwhile)
    runs = [
        run
        for group in _window_groups(index, sorted(got.need), last)
        for run in _segments(index, group, workers)
    ]
    nxt = decoded = 0
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(runs))), thread_name_prefix="decode-win")
    try:
        futures = [
            (max(want), pool.submit(_decode_run, path, stream_index, index, start, want, 1, got.keeper()))
            for start, want in runs
        ]
        for done_upto, fut in futures:  # in time order: every frame <= done_upto is in
            decoded += fut.result()
            while nxt < len(plans) and last[nxt] <= done_upto:
                pv = _window_result(plans[nxt], got.frames[nxt], "fast", decoded, got.times[nxt])
                got.frames[nxt] = []
                yield plans[nxt], pv, decoded
                nxt += 1
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if nxt < len(plans):  # pragma: no cover - every planned frame lies in some run
        raise ValueError(f"window {nxt + 1}'s frames were not decoded.")


def _decode_windows_scan(
    path: str, plans: Sequence[WindowPlan]
) -> Iterator[tuple[WindowPlan, PreparedVideo, int]]:
    """One sequential PyAV scan (frame-threaded), frames converted and resized as the reference PyAV path."""
    need = _needs([wp.source_indices for wp in plans])
    outs: list[list[Any]] = [[None] * len(wp.plan.indices) for wp in plans]
    last = [max(wp.source_indices) for wp in plans]
    nxt, n = 0, -1
    for n, chw in _scan_frames(path, plans[0].info.stream_index, need):
        resized: dict[tuple[int, int], Any] = {}
        for w, pos in need.get(n, ()):
            p = plans[w].plan
            size = (p.height, p.width)
            if size not in resized:
                resized[size] = _resize(chw, p.height, p.width)
            outs[w][pos] = resized[size]
        while nxt < len(plans) and n >= last[nxt]:
            yield plans[nxt], _window_result(plans[nxt], outs[nxt], "pyav", n + 1, None), n + 1
            outs[nxt] = []
            nxt += 1
        if nxt == len(plans):
            return
    raise ValueError(f"the video ended after {n + 1} frames, before window {nxt + 1}'s last planned frame.")
