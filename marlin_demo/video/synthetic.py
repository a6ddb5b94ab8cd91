"""Synthetic clips planned as a decoded file would be: for the GPU check and ZeroGPU's warm-up."""

from __future__ import annotations

import math

from marlin_demo import model_io
from marlin_demo.video.decode import PreparedVideo, _metadata, _resize
from marlin_demo.video.info import VideoInfo
from marlin_demo.video.sampling import plan_sampling


def synthetic_clip(seconds: float, width: int, height: int, fps: float = 25.0) -> PreparedVideo:
    """A square moving across a dark frame, ``seconds`` long at ``width`` x ``height``."""
    import numpy as np
    import torch

    total = int(seconds * fps)
    info = VideoInfo(
        path="synthetic.mp4",
        size_bytes=0,
        container="synthetic",
        duration_s=seconds,
        fps=fps,
        num_frames=total,
        width=width,
        height=height,
        display_width=width,
        display_height=height,
        rotation=0,
        codec="synthetic",
    )
    plan = plan_sampling(info, model_io.VideoParams())
    frames = np.zeros((plan.nframes, 3, height, width), dtype=np.uint8)
    side = max(4, min(64, width // 4, height // 4))
    for k, idx in enumerate(plan.indices):
        x = int((width - side) * idx / max(total - 1, 1))
        frames[k, 0] = 40
        frames[k, :, height // 2 - side // 2 : height // 2 + side // 2, x : x + side] = 220
    resized = _resize(torch.from_numpy(frames), plan.height, plan.width)
    return PreparedVideo(frames=resized, metadata=_metadata(plan, "synthetic"), plan=plan, info=info)


def full_window_clip(params: model_io.VideoParams | None = None) -> PreparedVideo:
    """The largest window the model is given: the frame budget at the pixel budget (a square of exactly
    ``max_pixels``), so its prefill has ``largest_window_tokens()`` video tokens."""
    p = params or model_io.VideoParams()
    side = math.isqrt(p.max_pixels) // p.factor * p.factor
    return synthetic_clip(p.max_frames / p.fps, side, side)
