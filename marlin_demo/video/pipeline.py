"""sample and prepare: pick the decoder, decode once, return frames and qwen-vl-utils' metadata; and synthetic
clips planned as a decoded file would be (no file, no decoder: the GPU check's and ZeroGPU's warm-up's)."""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from marlin_demo.model_io import VideoParams
from marlin_demo.video.decode import PreparedVideo, _decode_pyav, _decode_torchcodec, _metadata, _resize
from marlin_demo.video.info import (
    BACKENDS,
    Backend,
    Limits,
    VideoError,
    VideoInfo,
    _short,
    _undecodable,
    probe,
    validate,
)
from marlin_demo.video.parallel_decode import _decode_fast, fast_supported, pick_backend
from marlin_demo.video.sampling import SamplingPlan, plan_sampling

log = logging.getLogger(__name__)


def sample(
    path: str | os.PathLike[str],
    plan: SamplingPlan,
    backend: Backend = "reference",
    info: VideoInfo | None = None,
) -> PreparedVideo:
    """Decode the planned frames once, resized as qwen-vl-utils does: ``reference`` (torchcodec, else PyAV),
    ``auto`` (``pick_backend``) or ``fast`` (other pixels; else the reference); the metadata names it."""
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be 'auto', 'reference', 'torchcodec', 'pyav' or 'fast', not {backend!r}"
        )
    p = str(Path(path))
    info = info or probe(p)
    if backend == "auto":  # the per-clip choice, as MARLIN_VIDEO_BACKEND=auto means
        backend = pick_backend(info, plan)
    t0 = time.perf_counter()
    if backend == "fast" and not fast_supported(info):
        backend = "reference"  # >8-bit: PyAV's RGB conversion differs from the reference's; decode as it does
    if backend == "fast":
        try:
            fast_frames, pts, n_decoded = _decode_fast(p, plan, info.stream_index, info.num_frames)
        except Exception as exc:  # e.g. an odd stream PyAV numbers differently: use the reference
            log.warning("fast video decode failed on %s (%s); using the reference decoder", p, _short(exc))
        else:
            decode_s, meta = time.perf_counter() - t0, _metadata(plan, "fast")
            return PreparedVideo(
                fast_frames, meta, plan, info, decode_s, frame_pts=pts, frames_decoded=n_decoded
            )
        backend = "reference"
    frames: Any = None
    if backend == "reference" and info.metadata_source != "torchcodec":
        backend = "pyav"  # torchcodec could not open it at probe time; the plan counts frames as PyAV does
    if backend in ("reference", "torchcodec"):
        try:
            frames = _decode_torchcodec(p, plan.indices)
        except Exception as exc:
            if backend == "torchcodec":
                raise _undecodable(f"torchcodec failed: {_short(exc)}") from exc
    used = "pyav" if frames is None else "torchcodec"
    if frames is None:
        frames = _decode_pyav(p, plan.indices, info.stream_index)
    if tuple(frames.shape[-2:]) != (plan.source_height, plan.source_width) and plan.source_height:
        raise VideoError(
            f"The decoded frames are {frames.shape[-1]}x{frames.shape[-2]} but the plan expected "
            f"{plan.source_width}x{plan.source_height}: the file changed between probe and decode."
        )
    frames = _resize(frames, plan.height, plan.width)
    return PreparedVideo(frames, _metadata(plan, used), plan, info, time.perf_counter() - t0)


def prepare(
    path: str | os.PathLike[str],
    params: VideoParams | None = None,
    limits: Limits = Limits(),  # noqa: B008 - frozen, never mutated
    backend: Backend = "reference",
) -> PreparedVideo:
    """validate + plan_sampling + sample: the one call the engine needs (``backend="fast"``: see sample)."""
    info = validate(path, limits)
    plan = plan_sampling(info, params)
    return sample(path, plan, backend=backend, info=info)


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
    plan = plan_sampling(info, VideoParams())
    frames = np.zeros((plan.nframes, 3, height, width), dtype=np.uint8)
    side = max(4, min(64, width // 4, height // 4))
    for k, idx in enumerate(plan.indices):
        x = int((width - side) * idx / max(total - 1, 1))
        frames[k, 0] = 40
        frames[k, :, height // 2 - side // 2 : height // 2 + side // 2, x : x + side] = 220
    resized = _resize(torch.from_numpy(frames), plan.height, plan.width)
    return PreparedVideo(frames=resized, metadata=_metadata(plan, "synthetic"), plan=plan, info=info)


def full_window_clip(params: VideoParams | None = None) -> PreparedVideo:
    """The largest window the model is given: the frame budget at the pixel budget (a square of exactly
    ``max_pixels``), so its prefill has ``largest_window_tokens()`` video tokens."""
    p = params or VideoParams()
    side = math.isqrt(p.max_pixels) // p.factor * p.factor
    return synthetic_clip(p.max_frames / p.fps, side, side)
