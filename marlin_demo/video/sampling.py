"""The sampling plan: which frames qwen-vl-utils' ``fetch_video`` would take, at what size, at what cost."""

from __future__ import annotations

from typing import Any

from marlin_demo.model_io import VideoParams
from marlin_demo.results import SamplingPlan
from marlin_demo.video.info import TEMPORAL_PATCH_SIZE, VideoError, VideoInfo


def plan_sampling(
    info: VideoInfo,
    params: VideoParams | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> SamplingPlan:
    """Reproduce qwen-vl-utils' ``fetch_video`` arithmetic without decoding, with its own functions and
    index rule (torch float32, so ties round as it does); ``start_s``/``end_s``: ``video_start``/``_end``."""
    import torch
    from qwen_vl_utils import vision_process as vp

    params = params or VideoParams()
    if info.num_frames <= 0 or info.fps <= 0:
        raise VideoError("The video has zero duration (no frames were found): upload a clip with frames.")
    ele: dict[str, Any] = {
        "fps": params.fps,
        "max_frames": params.max_frames,
        "min_frames": params.min_frames,
        "max_pixels": params.max_pixels,
        "video_start": start_s,  # None reads as a missing key: the whole video
        "video_end": end_s,
    }
    try:
        start_frame, end_frame, total = vp.calculate_video_frame_range(ele, info.num_frames, info.fps)
    except ValueError as exc:
        raise VideoError(
            f"The range {start_s}-{end_s} s holds no frames; choose a range within 0-{info.duration_s:.1f} s."
        ) from exc
    try:
        nframes = vp.smart_nframes(ele, total_frames=total, video_fps=info.fps)
    except ValueError as exc:
        raise VideoError(
            f"The video has only {total} frame(s); at least {vp.FRAME_FACTOR} frames are needed."
        ) from exc
    indices = torch.linspace(start_frame, end_frame, nframes).round().long().tolist()
    sample_fps = nframes / max(total, 1e-6) * info.fps

    factor = params.patch_size * vp.SPATIAL_MERGE_SIZE  # qwen-vl-utils hard-codes merge 2
    min_pixels = vp.VIDEO_MIN_TOKEN_NUM * factor * factor
    frame_max_pixels = vp.VIDEO_MAX_TOKEN_NUM * factor * factor
    total_pixels = vp.MODEL_SEQ_LEN * factor * factor * 0.9
    max_pixels = max(min(frame_max_pixels, total_pixels / nframes * vp.FRAME_FACTOR), int(min_pixels * 1.05))
    max_pixels = min(params.max_pixels, max_pixels)
    if max_pixels < min_pixels:  # qwen-vl-utils would fail an assert here
        raise ValueError(f"max_pixels={params.max_pixels} is below the per-frame minimum {min_pixels}.")
    src_h, src_w = info.display_height, info.display_width
    try:
        height, width = vp.smart_resize(
            src_h, src_w, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels
        )
    except ValueError as exc:  # aspect ratio over 200
        raise VideoError(
            f"The video is {src_w}x{src_h}; its aspect ratio must be below {vp.MAX_RATIO}:1."
        ) from exc
    tokens = (nframes // TEMPORAL_PATCH_SIZE) * (height // params.factor) * (width // params.factor)
    return SamplingPlan(
        indices=indices,
        timestamps=[i / info.fps for i in indices],
        nframes=nframes,
        sample_fps=sample_fps,
        height=height,
        width=width,
        video_tokens=tokens,
        source_fps=info.fps,
        total_frames=total,
        source_height=src_h,
        source_width=src_w,
        min_pixels=min_pixels,
        max_pixels=int(max_pixels),
    )


def largest_window_tokens(params: VideoParams | None = None) -> int:
    """Video tokens of the largest window (the frame budget at the pixel budget): a full window's prefill."""
    p = params or VideoParams()
    return (p.max_frames // TEMPORAL_PATCH_SIZE) * (p.max_pixels // (p.factor * p.factor))
