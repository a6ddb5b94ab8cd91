"""Windows on the source file: each window sampled as if cut as its own file; one-pass decoding.

A window [s, e) holds the source frames i with s <= i / fps < e (the global time of frame i is
``i / fps``, the convention ``plan_sampling`` uses for timestamps). Cut as its own file it would
have n = i1 - i0 + 1 frames at the same average fps, duration n / fps: its plan is
``plan_sampling`` on that ``VideoInfo``; local indices j map to source index i0 + j and the
timestamps start at 0. ``offset_s = i0 / fps`` is the global time of the window's first frame
(pass it to ``windows.map_*``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from marlin_demo.contract import VideoParams
from marlin_demo.video import PreparedVideo, SamplingPlan, VideoInfo, plan_sampling
from marlin_demo.video.decode import _resize, _rotation_k, _upright_chw, _video_stream
from marlin_demo.windows import Window


@dataclass
class WindowPlan:
    """One window's plan: ``plan`` is in the window's own frame numbering (as a cut file)."""

    window: Window
    first_frame: int
    num_frames: int
    info: VideoInfo
    plan: SamplingPlan

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
    return WindowPlan(
        window=window, first_frame=i0, num_frames=n, info=local, plan=plan_sampling(local, params)
    )


def decode_windows(path: str, plans: Sequence[WindowPlan]) -> Iterator[tuple[WindowPlan, PreparedVideo, int]]:
    """One sequential PyAV scan of the source; yields (plan, frames, pictures decoded so far) per window.

    Each window is yielded as soon as the scan passes its last planned frame. Frames are converted
    to RGB and resized as the reference PyAV path does (rotation applied, bicubic + antialias).
    """
    import av
    import torch

    need: dict[int, list[tuple[int, int]]] = {}
    for w, wp in enumerate(plans):
        for pos, idx in enumerate(wp.source_indices):
            need.setdefault(idx, []).append((w, pos))
    outs: list[list[Any]] = [[None] * len(wp.plan.indices) for wp in plans]
    last = [max(wp.source_indices) for wp in plans]
    nxt = 0
    n = -1
    with av.open(path) as container:
        stream = _video_stream(container, plans[0].info.stream_index)
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            n += 1
            if n in need:
                chw = _upright_chw(frame.to_ndarray(format="rgb24"), _rotation_k(frame))
                for w, pos in need[n]:
                    p = plans[w].plan
                    outs[w][pos] = _resize(chw, p.height, p.width)
            while nxt < len(plans) and n >= last[nxt]:
                wp = plans[nxt]
                meta = {
                    "fps": wp.plan.source_fps,
                    "frames_indices": list(wp.plan.indices),
                    "total_num_frames": wp.plan.total_frames,
                    "video_backend": "pyav",
                }
                yield (
                    wp,
                    PreparedVideo(torch.stack(outs[nxt]), meta, wp.plan, wp.info, frames_decoded=n + 1),
                    n + 1,
                )
                outs[nxt] = []
                nxt += 1
            if nxt == len(plans):
                return
    if nxt < len(plans):
        raise ValueError(
            f"the video ended after {n + 1} frames, before window {nxt + 1}'s last planned frame."
        )
