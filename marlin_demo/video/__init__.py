"""Video input: probe, validate, plan sampling, decode, export a clip.

Reproduces qwen-vl-utils' ``fetch_video`` with torchcodec (Marlin-2B's training frames: same
indices, size and pixels) in steps, so the UI shows the plan before decoding and bad uploads fail
early with one sentence. Facts relied on (qwen-vl-utils 0.0.14, torchcodec 0.17): torchcodec picks
the best stream, counts frames by a packet scan and reports ``average_fps = num_frames /
duration_from_content``; it rotates while decoding, so frames are planned upright; qwen-vl-utils
resizes uint8 frames before ``.float()``, so the uint8 frames here give identical pixel values.
The fast path keeps the plan and changes pixels by 0.01-0.2 levels (docs/SPEED.md).
Public names are re-exported here; a private helper is imported from the module that defines it,
and patched in the module that uses it.
"""

from __future__ import annotations

from marlin_demo.video.decode import PreparedVideo
from marlin_demo.video.export import export_clip, ffmpeg_available
from marlin_demo.video.fast import fast_supported, frame_pts, pick_backend
from marlin_demo.video.info import Backend, Limits, VideoError, VideoInfo, check_duration, probe, validate
from marlin_demo.video.pipeline import prepare, sample
from marlin_demo.video.sampling import SamplingPlan, largest_window_tokens, plan_sampling
from marlin_demo.video.synthetic import full_window_clip, synthetic_clip

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
