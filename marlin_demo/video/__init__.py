"""Video input: probe, validate, plan sampling, decode, export a clip.

Marlin-2B was fine-tuned on frames produced by qwen-vl-utils' ``fetch_video``
with the torchcodec reader. This module reproduces that pipeline exactly (the
same frame indices, the same resized size, the same pixel values), but split
into steps so the UI can show the plan (frames, tokens) before decoding and
so bad uploads fail early with one clear sentence.

Facts this module relies on (checked against qwen-vl-utils 0.0.14 and
torchcodec 0.17):

- torchcodec picks the "best" video stream (``av_find_best_stream``), counts
  frames by scanning packets (``seek_mode="exact"``) and reports
  ``average_fps = num_frames / duration_from_content``; qwen-vl-utils uses
  those two numbers for sampling.
- torchcodec applies the display-matrix rotation while decoding, so
  qwen-vl-utils resizes *upright* frames: a 320x240 clip tagged rotate=90 is
  planned as 240 wide x 320 high.
- qwen-vl-utils resizes the uint8 frames (bicubic, antialias) and only then
  calls ``.float()``: its float32 output holds whole numbers 0..255, so the
  uint8 frames returned here are exactly ``qwen_frames.to(torch.uint8)`` and
  the HF video processor gives identical ``pixel_values_videos`` for either.

The fast path (``backend="fast"``, docs/SPEED.md) keeps the plan (frame indices,
size, token count, metadata) exactly and changes only how pixels are made: the clip
is split at keyframes into runs decoded in parallel by single-threaded decoders (one
per core), only the planned frames are converted (to planar RGB at full size, by the
same converter the reference uses) and shrunk by swscale's bicubic scaler instead of
torchvision's bicubic-antialias resize, the reference's most expensive step on large
sources. Every reference picture up to the last planned one in its GOP is still decoded;
H.264 and HEVC pictures nothing references are skipped unless planned (``FAST_SKIP_NONREF``),
and so are AV1 temporal units that refresh no reference slot (``FAST_DROP_AV1``, ``av1``). That
decode is now most of the cost. Pixels differ from the
reference by 0.01-0.2 levels on average (tests/test_speed.py,
benchmarks/bench_video_prep.py); sources above 8 bits keep the reference path.

The package splits the job by step: ``info`` (probe, validate), ``plan`` (the sampling plan),
``decode`` (the reference decode), ``fast`` (the fast decode), ``av1`` (which AV1 packets
nothing references), ``pipeline`` (sample, prepare) and ``export`` (clip export). The public names
are re-exported here; a private helper is imported from the module that defines it, and patched in
the module that uses it.
"""

from __future__ import annotations

from marlin_demo.video.decode import PreparedVideo
from marlin_demo.video.export import export_clip, ffmpeg_available
from marlin_demo.video.fast import (
    AUTO_REFERENCE_CODECS,
    FAST_DROP_AV1,
    FAST_MAX_BIT_DEPTH,
    FAST_PLANAR,
    FAST_SCALER,
    FAST_SKIP_NONREF,
    fast_supported,
    frame_pts,
    pick_backend,
)
from marlin_demo.video.info import (
    ALLOWED,
    BACKENDS,
    TEMPORAL_PATCH_SIZE,
    Backend,
    Limits,
    VideoError,
    VideoInfo,
    check_duration,
    probe,
    validate,
)
from marlin_demo.video.pipeline import prepare, sample
from marlin_demo.video.sampling import SamplingPlan, largest_window_tokens, plan_sampling

__all__ = [
    "ALLOWED",
    "AUTO_REFERENCE_CODECS",
    "BACKENDS",
    "FAST_DROP_AV1",
    "FAST_MAX_BIT_DEPTH",
    "FAST_PLANAR",
    "FAST_SCALER",
    "FAST_SKIP_NONREF",
    "TEMPORAL_PATCH_SIZE",
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
    "largest_window_tokens",
    "pick_backend",
    "plan_sampling",
    "prepare",
    "probe",
    "sample",
    "validate",
]
