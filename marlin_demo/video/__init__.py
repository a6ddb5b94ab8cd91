"""Video input: qwen-vl-utils' ``fetch_video`` in steps (probe, validate, plan, decode), so the UI shows the
plan first and bad uploads fail early (docs/VIDEO_PREP.md). A private helper is patched where it is used."""

from __future__ import annotations

from marlin_demo.video.decode import PreparedVideo
from marlin_demo.video.export import export_clip, ffmpeg_available
from marlin_demo.video.info import Backend, Limits, VideoError, VideoInfo, check_duration, probe, validate
from marlin_demo.video.parallel_decode import fast_supported, frame_pts, pick_backend
from marlin_demo.video.pipeline import full_window_clip, prepare, sample, synthetic_clip
from marlin_demo.video.sampling import SamplingPlan, largest_window_tokens, plan_sampling

__all__ = [
    "Backend",
    "Limits",
    "PreparedVideo",
    "SamplingPlan",
    "VideoError",
    "VideoInfo",
    "check_duration",
    "export_clip",
    "fast_supported",
    "ffmpeg_available",
    "frame_pts",
    "full_window_clip",
    "largest_window_tokens",
    "pick_backend",
    "plan_sampling",
    "prepare",
    "probe",
    "sample",
    "synthetic_clip",
    "validate",
]
