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
H.264 pictures nothing references are skipped unless planned (``FAST_SKIP_NONREF``). That
decode is now most of the cost. Pixels differ from the
reference by 0.01-0.2 levels on average (tests/test_speed.py,
benchmarks/bench_video_prep.py); sources above 8 bits keep the reference path.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from marlin_demo.contract import VideoParams

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

Backend = Literal["auto", "torchcodec", "pyav", "fast"]
BACKENDS: tuple[str, ...] = ("auto", "torchcodec", "pyav", "fast")

log = logging.getLogger(__name__)

ALLOWED = "upload an MP4, WebM, MOV or MKV clip"
TEMPORAL_PATCH_SIZE = 2  # Qwen3.5 vision tower merges two frames per temporal patch.


class VideoError(ValueError):
    """A user-facing problem with an uploaded video: one sentence, what is wrong and what is allowed."""


# ---------------------------------------------------------------------------
# Probe
# ---------------------------------------------------------------------------


@dataclass
class VideoInfo:
    """What the file holds, as the sampler will see it.

    ``fps`` and ``num_frames`` are the numbers sampling uses: torchcodec's
    ``average_fps`` / ``num_frames`` when torchcodec can open the file
    (``metadata_source == "torchcodec"``), otherwise the same quantities from a
    PyAV packet scan. ``width``/``height`` are as stored; ``display_*`` after
    applying ``rotation`` (degrees counter-clockwise, 0/90/180/270).
    """

    path: str
    size_bytes: int
    container: str
    duration_s: float
    fps: float
    num_frames: int
    width: int
    height: int
    display_width: int
    display_height: int
    rotation: int
    codec: str
    pix_fmt: str | None = None
    bit_depth: int | None = None
    audio_streams: int = 0
    video_streams: int = 1
    stream_index: int = 0
    metadata_source: str = "pyav"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_MAGIC: list[tuple[int, bytes, str]] = [
    (0, b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (0, b"\xff\xd8\xff", "a JPEG image"),
    (0, b"GIF87a", "a GIF image"),
    (0, b"GIF89a", "a GIF image"),
    (0, b"%PDF", "a PDF document"),
    (0, b"PK\x03\x04", "a ZIP archive"),
    (0, b"ID3", "MP3 audio"),
    (0, b"fLaC", "FLAC audio"),
    (0, b"OggS", "an Ogg file"),
]
_IMAGE_BRANDS = (b"heic", b"heix", b"mif1", b"msf1", b"avif")


def _sniff(head: bytes) -> str | None:
    """Name what a file looks like from its first bytes (None: nothing recognised)."""
    for offset, magic, name in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "WAV audio"
    if head[4:8] == b"ftyp" and head[8:12] in _IMAGE_BRANDS:
        return "a HEIC/AVIF image"
    if head[:2] == b"BM" and len(head) > 14 and head[6:10] == b"\x00\x00\x00\x00":
        return "a BMP image"
    if head and b"\x00" not in head:
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and all(ch.isprintable() or ch in "\r\n\t\f" for ch in text):
            return "a text file"
    return None


def _looks_like_video_container(head: bytes) -> bool:
    """True for MP4/MOV (ftyp/moov/mdat...), Matroska/WebM (EBML) and AVI headers."""
    return (
        head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")
        or head[:4] == b"\x1a\x45\xdf\xa3"
        or (head[:4] == b"RIFF" and head[8:12] == b"AVI ")
    )


def _not_a_video(what: str | None) -> VideoError:
    if what is None:
        return VideoError(f"This file is not a video (its format was not recognised): {ALLOWED}.")
    return VideoError(f"This file is not a video (it looks like {what}): {ALLOWED}.")


def _short(exc: BaseException, limit: int = 160) -> str:
    """First line of an exception message, shortened, for a one-sentence error."""
    text = (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).strip().splitlines()[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _undecodable(why: str) -> VideoError:
    return VideoError(f"The video could not be decoded ({why}): re-export it or {ALLOWED}.")


@functools.lru_cache(maxsize=1)
def _torchcodec_decoder_cls() -> Any:
    """torchcodec's VideoDecoder, or None when torchcodec or FFmpeg's shared libraries are missing."""
    try:
        from torchcodec.decoders import VideoDecoder
    except Exception:  # ImportError, or RuntimeError when libavcodec cannot load
        return None
    return VideoDecoder


def _torchcodec_decoder(path: str) -> Any:
    cls = _torchcodec_decoder_cls()
    if cls is None:
        raise RuntimeError("torchcodec is not usable (not installed or FFmpeg libraries missing)")
    threads = int(os.environ.get("TORCHCODEC_NUM_THREADS", "8"))  # same knob and default as qwen-vl-utils
    return cls(path, num_ffmpeg_threads=threads)


def _torchcodec_metadata(path: str) -> Any:
    """torchcodec's stream metadata (exact scan), or None when torchcodec cannot open the file."""
    try:
        return _torchcodec_decoder(path).metadata
    except Exception:  # any failure means "use PyAV"
        return None


def _scan_packets(container: Any, stream: Any) -> tuple[int, float | None, float | None]:
    """Count packets and find the pts range like torchcodec's exact scan (demux only, no decoding)."""
    count = 0
    begin: float | None = None
    end: float | None = None
    tb = float(stream.time_base)
    for packet in container.demux(stream):
        ts = packet.pts if packet.pts is not None else packet.dts
        if ts is None or packet.size == 0:
            continue
        count += 1
        start = ts * tb
        stop = (ts + (packet.duration or 0)) * tb
        begin = start if begin is None else min(begin, start)
        end = stop if end is None else max(end, stop)
    return count, begin, end


def _container_name(path: Path, fmt: Any) -> str:
    """Short container name: the file's extension when the demuxer accepts it, else the demuxer name."""
    names = set(fmt.name.split(","))
    exts = getattr(fmt, "extensions", None) or set()
    if isinstance(exts, str):
        exts = set(exts.split(","))
    ext = path.suffix.lower().lstrip(".")
    if ext and (ext in names or ext in exts or (ext in ("mp4", "m4v", "mov") and "mp4" in names)):
        return ext
    return fmt.name.split(",")[0]


def probe(path: str | os.PathLike[str]) -> VideoInfo:
    """Read a file's video facts, or raise VideoError saying why it cannot be used.

    Opens with PyAV, decodes the first frame (so undecodable files fail here,
    not in the middle of a request) and takes frame count / fps / duration from
    torchcodec's exact scan when available, because that is what
    qwen-vl-utils samples from.
    """
    import av

    p = Path(path)
    if not p.is_file():
        raise VideoError(f"The file {p.name} does not exist or is not a regular file: {ALLOWED}.")
    size = p.stat().st_size
    if size == 0:
        raise VideoError(f"The file is empty (0 bytes): {ALLOWED}.")
    with p.open("rb") as fh:
        head = fh.read(4096)
    sniffed = _sniff(head)
    # FFmpeg happily opens images (png_pipe) and text (tty demuxer) as one-frame "videos": reject first.
    if sniffed is not None and (
        "image" in sniffed or "text" in sniffed or "PDF" in sniffed or "ZIP" in sniffed
    ):
        raise _not_a_video(sniffed)

    try:
        container = av.open(str(p))
    except PermissionError as exc:
        raise VideoError(f"The file {p.name} cannot be read (permission denied): {ALLOWED}.") from exc
    except (av.error.FFmpegError, EOFError, OSError) as exc:
        if _looks_like_video_container(head):
            raise _undecodable("the file looks truncated or damaged") from exc
        raise _not_a_video(sniffed) from exc

    with container:
        fmt_name = container.format.name
        container_name = _container_name(p, container.format)
        if fmt_name.endswith("_pipe") or fmt_name in ("image2", "tty"):
            raise _not_a_video("an image" if fmt_name != "tty" else "a text file")
        videos = [
            s for s in container.streams.video if not (s.disposition & av.stream.Disposition.attached_pic)
        ]
        audio_streams = len(container.streams.audio)
        if not videos:
            what = "it contains only audio" if audio_streams else "it contains no audio or video"
            raise VideoError(
                f"This file has no video stream ({what}): "
                "upload a clip with a video track (MP4, WebM, MOV or MKV)."
            )

        tc_meta = _torchcodec_metadata(str(p))
        stream = None
        if tc_meta is not None:
            stream = next((s for s in videos if s.index == tc_meta.stream_index), None)
            if stream is None:  # torchcodec chose a stream we do not count as video: trust PyAV alone
                tc_meta = None
        if stream is None:
            try:
                stream = container.streams.best("video")
            except Exception:
                stream = None
            if stream is None or stream not in videos:
                stream = videos[0]
        stream_index = int(stream.index)  # read now: the stream is freed when the container closes
        ctx = stream.codec_context
        codec = getattr(ctx.codec, "canonical_name", None) or ctx.codec.name
        pix_fmt = ctx.pix_fmt
        bit_depth = None
        if stream.format is not None and stream.format.components:
            bit_depth = max(c.bits for c in stream.format.components)
        width, height = int(ctx.width or 0), int(ctx.height or 0)

        # Decode the first frame: proves the codec works and gives the display rotation.
        stream.thread_type = "AUTO"
        try:
            first = next(iter(container.decode(stream)), None)
        except av.error.FFmpegError as exc:
            raise _undecodable(f"{codec} frames failed to decode: {_short(exc)}") from exc
        if first is None:
            raise VideoError(
                "The video has zero duration (no frames could be decoded): upload a clip with frames."
            )
        tc_rotation = getattr(tc_meta, "rotation", None) if tc_meta is not None else None
        rotation = round(
            float(tc_rotation if tc_rotation is not None else getattr(first, "rotation", 0) or 0)
        )
        rotation %= 360
        width = width or first.width
        height = height or first.height

        header_frames = int(stream.frames or 0)
        header_duration = float(stream.duration * stream.time_base) if stream.duration else None
        container_duration = container.duration / 1e6 if container.duration else None
        if tc_meta is not None:
            num_frames = int(tc_meta.num_frames or 0)
            fps = float(tc_meta.average_fps or 0.0)
            duration = float(tc_meta.duration_seconds or 0.0)
            scanned = tc_meta.num_frames_from_content
            header_frames = int(tc_meta.num_frames_from_header or header_frames or 0)
            source = "torchcodec"
        else:
            try:
                container.seek(0)
                scanned, begin, end = _scan_packets(container, stream)
            except av.error.FFmpegError as exc:
                raise _undecodable(f"reading packets failed: {_short(exc)}") from exc
            num_frames = scanned
            if begin is not None and end is not None and end > begin:
                duration = end - begin
            else:
                duration = header_duration or container_duration or 0.0
            fps = (
                num_frames / duration
                if duration > 0
                else float(stream.average_rate or stream.guessed_rate or 0)
            )
            source = "pyav"

    if scanned is not None and header_frames > 0 and scanned < header_frames - 1:
        raise _undecodable(f"the file looks truncated: {scanned} of {header_frames} frames are present")
    if num_frames <= 0 or duration <= 0 or fps <= 0:
        raise VideoError("The video has zero duration (no frames were found): upload a clip with frames.")

    swap = rotation in (90, 270)
    return VideoInfo(
        path=str(p),
        size_bytes=size,
        container=container_name,
        duration_s=duration,
        fps=fps,
        num_frames=num_frames,
        width=width,
        height=height,
        display_width=height if swap else width,
        display_height=width if swap else height,
        rotation=rotation,
        codec=codec,
        pix_fmt=pix_fmt,
        bit_depth=bit_depth,
        audio_streams=audio_streams,
        video_streams=len(videos),
        stream_index=stream_index,
        metadata_source=source,
    )


# ---------------------------------------------------------------------------
# Validate
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """What the demo accepts. Resolution limits apply in either orientation (portrait phones)."""

    max_file_mb: float = 200.0
    max_duration_s: float = 600.0
    max_width: int = 3840
    max_height: int = 2160


def validate(path: str | os.PathLike[str], limits: Limits = Limits()) -> VideoInfo:
    """Probe and check against ``limits``; the size check runs before any decoding."""
    p = Path(path)
    if p.is_file():
        size_mb = p.stat().st_size / 1e6
        if size_mb > limits.max_file_mb:
            raise VideoError(f"The file is {size_mb:.1f} MB; at most {limits.max_file_mb:g} MB is allowed.")
    info = probe(p)
    if info.duration_s > limits.max_duration_s:
        raise VideoError(
            f"The video is {info.duration_s:.1f} s long; at most {limits.max_duration_s:g} s is allowed."
        )
    long_side, short_side = max(info.width, info.height), min(info.width, info.height)
    if long_side > max(limits.max_width, limits.max_height) or short_side > min(
        limits.max_width, limits.max_height
    ):
        raise VideoError(
            f"The video is {info.display_width}x{info.display_height}; "
            f"at most {limits.max_width}x{limits.max_height} (either orientation) is allowed."
        )
    return info


# ---------------------------------------------------------------------------
# Sampling plan (what qwen-vl-utils' fetch_video would do)
# ---------------------------------------------------------------------------


@dataclass
class SamplingPlan:
    """Which frames are sampled, at what size, and what they cost in vision tokens.

    ``indices`` are absolute source-frame indices; ``timestamps[i] = indices[i] / source_fps``.
    ``total_frames`` is the number of frames in the sampled range (the whole video
    unless ``start_s``/``end_s`` were given), as qwen-vl-utils reports it.
    ``source_height``/``source_width`` are the upright decoded size the resize starts from.
    """

    indices: list[int]
    timestamps: list[float]
    nframes: int
    sample_fps: float
    height: int
    width: int
    video_tokens: int
    source_fps: float
    total_frames: int
    source_height: int = 0
    source_width: int = 0
    min_pixels: int = 0
    max_pixels: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _qwen_element(params: VideoParams, start_s: float | None, end_s: float | None) -> dict[str, Any]:
    ele: dict[str, Any] = {
        "fps": params.fps,
        "max_frames": params.max_frames,
        "min_frames": params.min_frames,
        "max_pixels": params.max_pixels,
    }
    if start_s is not None:
        ele["video_start"] = start_s
    if end_s is not None:
        ele["video_end"] = end_s
    return ele


def plan_sampling(
    info: VideoInfo,
    params: VideoParams | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> SamplingPlan:
    """Reproduce qwen-vl-utils' ``fetch_video`` arithmetic without decoding anything.

    Uses its own ``smart_nframes``, ``smart_resize`` and
    ``calculate_video_frame_range`` and the same ``torch.linspace(...).round()``
    index rule (computed with torch, float32, so ties round exactly as it does).
    ``start_s``/``end_s`` mirror the element's ``video_start``/``video_end``.
    """
    import torch
    from qwen_vl_utils import vision_process as vp

    params = params or VideoParams()
    if info.num_frames <= 0 or info.fps <= 0:
        raise VideoError("The video has zero duration (no frames were found): upload a clip with frames.")
    ele = _qwen_element(params, start_s, end_s)
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
    merge = params.merge_size
    tokens = (
        (nframes // TEMPORAL_PATCH_SIZE)
        * (height // (params.patch_size * merge))
        * (width // (params.patch_size * merge))
    )
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


# ---------------------------------------------------------------------------
# Decode
# ---------------------------------------------------------------------------


@dataclass
class PreparedVideo:
    """Frames ready for the processor.

    ``frames``: uint8 tensor (T, C, H, W), RGB, already resized to the plan's
    size. qwen-vl-utils returns the same values as float32 (``frames.float()``);
    the HF video processor gives identical output for both.
    ``metadata``: the dict qwen-vl-utils returns (``fps``, ``frames_indices``,
    ``total_num_frames``, ``video_backend``): pass it as ``video_metadata`` so
    the prompt's ``<t seconds>`` timestamps are right.
    """

    frames: torch.Tensor
    metadata: dict[str, Any]
    plan: SamplingPlan
    info: VideoInfo
    decode_s: float = 0.0
    backend: str = field(default="")
    #: presentation time (s) of each returned frame, when the decoder reported it (the fast path does)
    frame_pts: list[float] | None = None
    #: content key the engine's caches use ("" until the engine sets or computes it)
    digest: str = ""
    #: pictures the fast path decoded (planned or not); None on the reference paths
    frames_decoded: int | None = None

    def __post_init__(self) -> None:
        if not self.backend:
            self.backend = str(self.metadata.get("video_backend", ""))


def _video_stream(container: Any, stream_index: int | None) -> Any:
    """The stream ``probe`` chose (by index), else the best video stream, else the first one."""
    stream = next((s for s in container.streams.video if s.index == stream_index), None)
    if stream is None:
        stream = container.streams.best("video") or container.streams.video[0]
    return stream


def _rotation_k(frame: Any) -> int:
    """Quarter turns (counter-clockwise) that make a decoded frame upright, from its display rotation."""
    return (round(float(getattr(frame, "rotation", 0) or 0)) // 90) % 4


def _upright_chw(rgb: Any, k: int) -> torch.Tensor:
    """An (h, w, 3) uint8 array rotated by ``k`` quarter turns, as a (3, h, w) tensor."""
    import numpy as np
    import torch

    if k:
        rgb = np.rot90(rgb, k=k, axes=(0, 1))
    return torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)


def _positions(indices: list[int]) -> dict[int, list[int]]:
    """Frame index -> the positions in ``indices`` that hold it (a plan may repeat an index)."""
    positions: dict[int, list[int]] = {}
    for pos, idx in enumerate(indices):
        positions.setdefault(idx, []).append(pos)
    return positions


def _check_complete(indices: list[int], out: list[Any]) -> None:
    """Raise the "truncated" error when a planned frame was never decoded."""
    missing = [indices[i] for i, t in enumerate(out) if t is None]
    if missing:
        raise _undecodable(f"frames {missing[:3]} could not be read, the file may be truncated")


def _decode_torchcodec(path: str, indices: list[int]) -> torch.Tensor:
    decoder = _torchcodec_decoder(path)
    return decoder.get_frames_at(indices=indices).data


def _decode_pyav(path: str, indices: list[int], stream_index: int | None) -> torch.Tensor:
    """Decode frames by presentation order index with PyAV, applying the display rotation like torchcodec.

    Sequential decode (no seeking), so it is slower than torchcodec on long clips;
    it is the fallback, not the default.
    """
    import av
    import torch

    wanted = _positions(indices)
    out: list[Any] = [None] * len(indices)
    last = max(indices)
    with av.open(path) as container:
        stream = _video_stream(container, stream_index)
        stream.thread_type = "AUTO"
        n = -1
        try:
            for frame in container.decode(stream):
                n += 1
                if n in wanted:
                    tensor = _upright_chw(frame.to_ndarray(format="rgb24"), _rotation_k(frame))
                    for pos in wanted[n]:
                        out[pos] = tensor
                if n >= last:
                    break
        except av.error.FFmpegError as exc:
            raise _undecodable(f"PyAV failed after frame {n}: {_short(exc)}") from exc
    _check_complete(indices, out)
    return torch.stack(out)


# The fast path's two swscale steps per planned frame: (1) YUV -> planar RGB at the stored size
# with the same unscaled converter the reference's RGB conversion uses (bit-identical for 8-bit
# sources), (2) planar RGB at the plan's size, bicubic (swscale widens the kernel when shrinking,
# i.e. it antialiases), packed by numpy. Step 2 replaces torchvision's bicubic+antialias resize,
# the reference's most expensive step on large sources: mean |diff| 0.02-0.2 levels on the
# example clips, the shared media and a 1080p clip (docs/SPEED.md). Scaling straight from YUV in
# one step is cheaper by ~2 ms a frame but ~1.1-1.4 levels off (swscale scales the YUV planes).
FAST_PLANAR = "gbrp"
FAST_SCALER = "BICUBIC"
#: the fast path is used for sources of at most this many bits per component; above it PyAV's
#: bundled FFmpeg converts to RGB differently from torchcodec's (~2.7 levels on a 10-bit clip)
FAST_MAX_BIT_DEPTH = 8
#: codecs whose unplanned non-reference pictures the fast path does not decode. In H.264 a
#: picture with ``nal_ref_idc == 0`` is never used to predict another (the standard's
#: definition), so dropping it cannot change any other picture: FFmpeg's
#: ``skip_frame=NONREF`` is set for exactly the packets that hold no planned frame. On a
#: default x264 encode (B-frames) that skips ~40% of the decode; on all-P streams nothing.
#: Not HEVC: its "sub-layer non-reference" pictures may still be referenced from higher
#: temporal layers.
FAST_SKIP_NONREF = frozenset({"h264"})
#: ``pick_backend`` uses the fast path when a source frame has at least this many times the
#: plan's pixels: below it the reference resize is cheap and the fast path saves ~nothing
FAST_MIN_AREA_RATIO = 2.0


@dataclass
class _PacketIndex:
    """The packets of one stream, as torchcodec's exact mode numbers frames (sorted by pts)."""

    pts: list[int]  # presentation order: frame index i has pts[i] (stream time base)
    keyframes: list[int]  # frame indices whose packet is flagged as a keyframe, ascending
    time_base: float


def _packet_index(path: str, stream_index: int | None) -> _PacketIndex | None:
    """Scan packets (demux only). None when pts are missing or repeated: then frames are counted."""
    import av

    pts: list[int] = []
    key_pts: list[int] = []
    with av.open(path) as container:
        stream = _video_stream(container, stream_index)
        tb = float(stream.time_base)
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            if packet.pts is None:
                return None
            pts.append(int(packet.pts))
            if packet.is_keyframe:
                key_pts.append(int(packet.pts))
    pts.sort()
    if not pts or len(set(pts)) != len(pts):
        return None
    where = {p: i for i, p in enumerate(pts)}
    return _PacketIndex(pts=pts, keyframes=sorted(where[p] for p in key_pts), time_base=tb)


def _fast_workers() -> int:
    """Decoder threads for the fast path: one single-threaded decoder per available core (at most 16)."""
    env = os.environ.get("MARLIN_DECODE_THREADS", "").strip()
    if env:
        return max(1, int(env))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(16, cores))


def _segments(index: _PacketIndex, wanted: list[int], workers: int) -> list[tuple[int, list[int]]]:
    """Split the wanted frame indices into runs that each start at a keyframe.

    A run is decoded from its keyframe up to its last wanted frame; GOPs holding no wanted frame
    are skipped. Runs are balanced by the number of frames they decode, at most ``workers`` of
    them unless gaps force more.
    """
    keys = index.keyframes
    if not keys or keys[0] > min(wanted):
        return [(0, sorted(set(wanted)))]
    import bisect

    gops: dict[int, list[int]] = {}  # keyframe index -> wanted indices in its GOP
    for w in sorted(set(wanted)):
        gops.setdefault(keys[bisect.bisect_right(keys, w) - 1], []).append(w)
    starts = sorted(gops)
    rank = {k: r for r, k in enumerate(keys)}
    budget = sum(gops[k][-1] - k + 1 for k in starts) / max(1, workers)  # frames to decode per worker
    runs: list[tuple[int, list[int]]] = []
    run_start, run_wanted = starts[0], list(gops[starts[0]])
    for prev, k in itertools.pairwise(starts):
        contiguous = rank[k] == rank[prev] + 1  # no wanted-free GOP between them
        if contiguous and gops[k][-1] - run_start + 1 <= budget * 1.05:
            run_wanted += gops[k]
        else:
            runs.append((run_start, run_wanted))
            run_start, run_wanted = k, list(gops[k])
    runs.append((run_start, run_wanted))
    return runs


def _decode_fast(
    path: str, plan: SamplingPlan, stream_index: int | None, num_frames: int | None = None
) -> tuple[torch.Tensor, list[float], int]:
    """Decode the planned frames with one single-threaded decoder per core, converting only those frames.

    The clip is split at keyframes into runs (``_segments``) decoded in parallel threads (PyAV
    releases the GIL while decoding and scaling). A single-threaded decoder spends ~20-30% less
    CPU than FFmpeg's frame threading, and the runs use every core. Frames are identified by
    their pts against the packet index, which is how torchcodec's exact mode numbers them;
    files whose packets lack unique pts fall back to one sequential decode that counts frames
    like ``_decode_pyav``. Each planned frame is converted to planar RGB at its stored size and
    scaled to the plan's size by swscale, then rotated upright (as torchcodec rotates).
    H.264 pictures that nothing references (``nal_ref_idc`` 0, e.g. most B-frames) are not
    decoded unless planned: see ``FAST_SKIP_NONREF``.
    Returns the frames, their pts in seconds and how many pictures were decoded.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import av
    import torch

    index = _packet_index(path, stream_index)
    if index is not None and num_frames is not None and len(index.pts) != num_frames:
        index = None  # the packets do not match torchcodec's count: count decoded frames instead
    positions = _positions(plan.indices)
    out: list[Any] = [None] * len(plan.indices)
    times: list[float] = [float("nan")] * len(plan.indices)
    decoded = [0]  # pictures the decoders returned (wanted or not), summed over the runs
    lock = threading.Lock()

    def keep(idx: int, frame: Any, small: torch.Tensor) -> None:
        t = float(frame.time) if frame.time is not None else float("nan")
        with lock:
            for pos in positions[idx]:
                out[pos] = small
                times[pos] = t

    def run(start: int, want: list[int], threads: int) -> None:
        todo = set(want)
        by_pts = None if index is None else {index.pts[i]: i for i in todo}
        converter = _FastConverter(plan)
        with av.open(path) as container:
            stream = _video_stream(container, stream_index)
            codec = stream.codec_context
            if threads > 1:
                stream.thread_type = "AUTO"
            else:
                codec.thread_count = 1
            # Skipping non-reference pictures needs the packet -> frame mapping (pts) and a decoder
            # that decodes each packet as it is sent (one thread); H.264 only, see FAST_SKIP_NONREF.
            skip = by_pts is not None and threads == 1 and codec.name in FAST_SKIP_NONREF
            mode = codec.skip_frame
            if index is not None and start > 0:
                container.seek(index.pts[start], stream=stream, backward=True, any_frame=False)
            n = -1
            try:
                for packet in container.demux(stream):
                    if skip:
                        want_mode = "DEFAULT" if packet.pts is None or packet.pts in by_pts else "NONREF"
                        if want_mode != mode:
                            codec.skip_frame = mode = want_mode
                    for frame in codec.decode(packet):
                        n += 1
                        if by_pts is None:
                            idx = n
                        else:
                            found = by_pts.get(frame.pts) if frame.pts is not None else None
                            if found is None:
                                continue
                            idx = found
                        if idx in todo:
                            keep(idx, frame, converter(frame, idx))
                            todo.discard(idx)
                    if not todo:
                        break
            except av.error.FFmpegError as exc:
                raise _undecodable(f"the fast decoder failed after frame {n}: {_short(exc)}") from exc
            with lock:
                decoded[0] += n + 1

    wanted = sorted(positions)
    workers = _fast_workers()
    if index is None:
        run(0, wanted, threads=workers)  # one decoder, frame-threaded, counting frames
    else:
        runs = _segments(index, wanted, workers)
        if len(runs) == 1 or workers == 1:
            for start, want in runs:
                run(start, want, threads=1)
        else:
            with ThreadPoolExecutor(max_workers=min(workers, len(runs)), thread_name_prefix="decode") as pool:
                for fut in [pool.submit(run, start, want, 1) for start, want in runs]:
                    fut.result()
    _check_complete(plan.indices, out)
    return torch.stack(out), times, decoded[0]


class _FastConverter:
    """One planned frame -> uint8 CHW RGB at the plan's size (two cached swscale contexts per thread)."""

    def __init__(self, plan: SamplingPlan) -> None:
        from av.video.reformatter import Interpolation, VideoReformatter

        self.plan = plan
        self.interpolation = Interpolation[FAST_SCALER]
        self.to_planar, self.to_small = VideoReformatter(), VideoReformatter()

    def __call__(self, frame: Any, idx: int) -> torch.Tensor:
        plan = self.plan
        k = _rotation_k(frame)
        src = (frame.height, frame.width) if k % 2 else (frame.width, frame.height)
        if plan.source_height and src != (plan.source_width, plan.source_height):
            want = f"{plan.source_width}x{plan.source_height}"
            raise RuntimeError(f"frame {idx} is {src[0]}x{src[1]}, the plan expected {want}")
        # scale in the stored orientation, then rotate the small frame upright
        w, h = (plan.height, plan.width) if k % 2 else (plan.width, plan.height)
        planar = self.to_planar.reformat(frame, format=FAST_PLANAR, threads=1)
        small = self.to_small.reformat(
            planar, width=w, height=h, format=FAST_PLANAR, interpolation=self.interpolation, threads=1
        )
        # PyAV returns planar gbrp as (h, w, 3) in R, G, B order
        return _upright_chw(small.to_ndarray(), k)


def frame_pts(path: str | os.PathLike[str], stream_index: int | None = None) -> list[float]:
    """Every frame's presentation time (s) in presentation order, from the packets alone (no decoding).

    This is how torchcodec's exact mode numbers frames (scan the packets, sort by pts), so
    ``frame_pts(path)[i]`` is the time of the frame torchcodec returns for index ``i``: the
    benchmark and the tests use it to check that the fast path returned the same frames.
    """
    import av

    times: list[float] = []
    with av.open(str(path)) as container:
        stream = _video_stream(container, stream_index)
        tb = float(stream.time_base)
        for packet in container.demux(stream):
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is None or packet.size == 0:
                continue
            times.append(ts * tb)
    return sorted(times)


def fast_supported(info: VideoInfo) -> bool:
    """True when the fast path reproduces the reference's RGB conversion (8-bit sources)."""
    return not (info.bit_depth and info.bit_depth > FAST_MAX_BIT_DEPTH)


def pick_backend(info: VideoInfo, plan: SamplingPlan) -> Backend:
    """The engine's default choice: ``"fast"`` where it pays and is near-exact, else the reference.

    Fast when the source is 8-bit and a source frame has at least ``FAST_MIN_AREA_RATIO``
    times the plan's pixels (there the reference's full-size RGB conversion and bicubic
    resize dominate); otherwise ``"auto"`` (the reference, bit-exact, and about as fast).
    """
    src = max(plan.source_height, 1) * max(plan.source_width, 1)
    if fast_supported(info) and src >= FAST_MIN_AREA_RATIO * plan.height * plan.width:
        return "fast"
    return "auto"


def _resize(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """qwen-vl-utils' resize: on the uint8 tensor, bicubic with antialias (output stays uint8)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F

    return F.resize(frames, [height, width], interpolation=InterpolationMode.BICUBIC, antialias=True)


def _metadata(plan: SamplingPlan, backend: str) -> dict[str, Any]:
    """The metadata dict qwen-vl-utils returns for ``plan``, plus the decoder that made the frames."""
    return {
        "fps": plan.source_fps,
        "frames_indices": list(plan.indices),
        "total_num_frames": plan.total_frames,
        "video_backend": backend,
    }


def sample(
    path: str | os.PathLike[str],
    plan: SamplingPlan,
    backend: Backend = "auto",
    info: VideoInfo | None = None,
) -> PreparedVideo:
    """Decode the planned frames once and resize them exactly as qwen-vl-utils does.

    ``backend="auto"`` uses torchcodec (the reference) and falls back to PyAV
    when torchcodec cannot load FFmpeg's libraries or fails on this file; the
    backend actually used is ``metadata["video_backend"]``.

    ``backend="fast"`` keeps the plan and changes only the pixels slightly (see the
    module docstring): one decode that scales just the planned frames with swscale.
    If it fails on a file, the reference path above runs instead and says so in
    ``metadata["video_backend"]``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'auto', 'torchcodec', 'pyav' or 'fast', not {backend!r}")
    p = str(Path(path))
    if info is None:
        info = probe(p)
    t0 = time.perf_counter()
    if backend == "fast" and not fast_supported(info):
        backend = "auto"  # >8-bit: PyAV's RGB conversion differs from the reference's; decode as it does
    if backend == "fast":
        try:
            frames, pts, n_decoded = _decode_fast(p, plan, info.stream_index, info.num_frames)
        except Exception as exc:  # e.g. an odd stream PyAV numbers differently: use the reference
            log.warning("fast video decode failed on %s (%s); using the reference decoder", p, _short(exc))
        else:
            return PreparedVideo(
                frames=frames,
                metadata=_metadata(plan, "fast"),
                plan=plan,
                info=info,
                decode_s=time.perf_counter() - t0,
                frame_pts=pts,
                frames_decoded=n_decoded,
            )
        backend = "auto"
    frames = None
    used = backend
    if backend == "auto" and info.metadata_source != "torchcodec":
        backend = "pyav"  # torchcodec could not open it at probe time; the plan counts frames as PyAV does
    if backend in ("auto", "torchcodec"):
        try:
            frames = _decode_torchcodec(p, plan.indices)
            used = "torchcodec"
        except Exception as exc:
            if backend == "torchcodec":
                raise _undecodable(f"torchcodec failed: {_short(exc)}") from exc
            frames = None
    if frames is None:
        frames = _decode_pyav(p, plan.indices, info.stream_index)
        used = "pyav"
    if tuple(frames.shape[-2:]) != (plan.source_height, plan.source_width) and plan.source_height:
        raise VideoError(
            f"The decoded frames are {frames.shape[-1]}x{frames.shape[-2]} but the plan expected "
            f"{plan.source_width}x{plan.source_height}: the file changed between probe and decode."
        )
    frames = _resize(frames, plan.height, plan.width)
    decode_s = time.perf_counter() - t0
    return PreparedVideo(
        frames=frames, metadata=_metadata(plan, used), plan=plan, info=info, decode_s=decode_s
    )


def prepare(
    path: str | os.PathLike[str],
    params: VideoParams | None = None,
    limits: Limits = Limits(),
    backend: Backend = "auto",
) -> PreparedVideo:
    """validate + plan_sampling + sample: the one call the engine needs (``backend="fast"``: see sample)."""
    info = validate(path, limits)
    plan = plan_sampling(info, params)
    return sample(path, plan, backend=backend, info=info)


# ---------------------------------------------------------------------------
# Export a clip
# ---------------------------------------------------------------------------


def ffmpeg_available() -> bool:
    """True when the ffmpeg binary is on PATH (needed only for export_clip)."""
    return shutil.which("ffmpeg") is not None


def export_clip(
    path: str | os.PathLike[str],
    start: float,
    end: float,
    out_path: str | os.PathLike[str],
    timeout_s: float = 600.0,
    *,
    info: VideoInfo | None = None,
) -> Path:
    """Cut [start, end) seconds into an H.264/yuv420p MP4 (faststart, audio kept), frame-accurately.

    Re-encodes (a stream copy can only cut at keyframes). The range is clamped
    to the video; a range shorter than one frame raises VideoError. ``info``: the
    file's ``probe`` result when the caller already has it (else it is probed here).
    """
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise RuntimeError(
            "ffmpeg was not found on PATH: install it (e.g. apt-get install ffmpeg) to export clips."
        )
    info = info if info is not None else probe(path)
    try:
        start_f, end_f = float(start), float(end)
    except (TypeError, ValueError) as exc:
        raise VideoError(f"The clip range {start!r}-{end!r} is not a pair of numbers of seconds.") from exc
    if not (math.isfinite(start_f) and math.isfinite(end_f)):
        raise VideoError(
            f"The clip range {start}-{end} s is not finite; use seconds within 0-{info.duration_s:.1f}."
        )
    s = min(max(0.0, start_f), info.duration_s)
    e = min(max(0.0, end_f), info.duration_s)
    if e - s < 1.0 / info.fps:
        raise VideoError(
            f"The clip range {start_f:.2f}-{end_f:.2f} s is empty; choose an end after the start "
            f"within 0-{info.duration_s:.1f} s."
        )
    out = Path(out_path)
    if out.resolve() == Path(path).resolve():
        raise ValueError("out_path must differ from the source video.")
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        exe, "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
        "-accurate_seek", "-ss", f"{s:.6f}", "-i", str(path), "-t", f"{e - s:.6f}",
        "-map", f"0:{info.stream_index}", "-map", "0:a?", "-sn", "-dn",
        "-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2",
        "-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-pix_fmt", "yuv420p",
        "-c:a", "aac", "-b:a", "128k", "-movflags", "+faststart", str(out),
    ]  # fmt: skip
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"ffmpeg took longer than {timeout_s:g} s to export the clip.") from exc
    if proc.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no message"]
        raise RuntimeError(f"ffmpeg failed to export the clip (exit {proc.returncode}): {tail[0]}")
    return out
