"""Probe and validate an upload: what the file is, and one clear sentence when it is not usable."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from marlin_demo.results import VideoInfo

#: "auto" chooses per clip (fast.pick_backend), as MARLIN_VIDEO_BACKEND=auto does; "reference" is
#: torchcodec with the PyAV fallback (qwen-vl-utils' pixels); "torchcodec"/"pyav" force one reader
Backend = Literal["auto", "reference", "torchcodec", "pyav", "fast"]
BACKENDS: tuple[str, ...] = ("auto", "reference", "torchcodec", "pyav", "fast")


ALLOWED = "upload an MP4, WebM, MOV or MKV clip"
TEMPORAL_PATCH_SIZE = 2  # Qwen3.5 vision tower merges two frames per temporal patch.


class VideoError(ValueError):
    """A user-facing problem with an uploaded video: one sentence, what is wrong and what is allowed."""


#: a file's first bytes -> what it is
_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF87a": "a GIF image",
    b"GIF89a": "a GIF image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a ZIP archive",
    b"ID3": "MP3 audio",
    b"fLaC": "FLAC audio",
    b"OggS": "an Ogg file",
}
_RIFF = {b"WEBP": "a WebP image", b"WAVE": "WAV audio"}  # what a RIFF file holds (bytes 8-12)
_IMAGE_BRANDS = (b"heic", b"heix", b"mif1", b"msf1", b"avif")


def _sniff(head: bytes) -> str | None:
    """Name what a file looks like from its first bytes (None: nothing recognised)."""
    for magic, name in _MAGIC.items():
        if head.startswith(magic):
            return name
    if head[:4] == b"RIFF" and head[8:12] in _RIFF:
        return _RIFF[head[8:12]]
    if head[4:8] == b"ftyp" and head[8:12] in _IMAGE_BRANDS:
        return "a HEIC/AVIF image"
    if head[:2] == b"BM" and len(head) > 14 and head[6:10] == b"\x00\x00\x00\x00":
        return "a BMP image"
    if head and b"\x00" not in head:
        with contextlib.suppress(UnicodeDecodeError):
            if all(ch.isprintable() or ch in "\r\n\t\f" for ch in head.decode("utf-8")):
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
    why = "its format was not recognised" if what is None else f"it looks like {what}"
    return VideoError(f"This file is not a video ({why}): {ALLOWED}.")


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


def _shown_packets(container: Any, stream: Any) -> Iterator[Any]:
    """The stream's packets as torchcodec's scan counts frames: not empty, and not hidden by an
    edit list (``is_discard``: decoded as references, never shown; e.g. a clip cut with ``-c copy``)."""
    for packet in container.demux(stream):
        if packet.size and not packet.is_discard:
            yield packet


def _packet_times(container: Any, stream: Any) -> list[tuple[float, float]]:
    """(start, end) s of each shown, timestamped packet (pts, else dts), demuxed as torchcodec counts."""
    tb = float(stream.time_base)
    stamped = ((p, p.pts if p.pts is not None else p.dts) for p in _shown_packets(container, stream))
    return [(ts * tb, (ts + (p.duration or 0)) * tb) for p, ts in stamped if ts is not None]


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


@dataclass
class _Counts:
    """Frames, rate and duration for sampling; the rest tells a cut-short file (``_check_counts``)."""

    num_frames: int
    fps: float
    duration: float
    scanned: int | None
    header_frames: int
    header_duration: float | None
    content_end: float | None
    source: str


def probe(path: str | os.PathLike[str]) -> VideoInfo:
    """A file's video facts, or VideoError saying why it cannot be used; the first frame is decoded so a bad
    file fails here; counts come from torchcodec's exact scan when available (what qwen-vl-utils samples)."""
    p = Path(path)
    size, head, sniffed = _read_head(p)
    with _open_container(p, head, sniffed) as container:
        demuxer = container.format.name  # an image or text past the sniffing opens with an image/tty one
        if demuxer.endswith("_pipe") or demuxer in ("image2", "tty"):
            raise _not_a_video("an image" if demuxer != "tty" else "a text file")
        videos, audio_streams = _video_streams(container)
        stream, tc_meta = _pick_stream(container, videos, _torchcodec_metadata(str(p)))
        ctx = stream.codec_context
        codec = getattr(ctx.codec, "canonical_name", None) or ctx.codec.name
        components = stream.format.components if stream.format is not None else ()
        bit_depth = max((c.bits for c in components), default=None)
        width, height = int(ctx.width or 0), int(ctx.height or 0)  # as stored, before any decoding
        first = _first_frame(container, stream, codec)
        tc_rotation = getattr(tc_meta, "rotation", None)
        rotation = (
            round(float(tc_rotation if tc_rotation is not None else getattr(first, "rotation", 0) or 0)) % 360
        )
        width, height = width or first.width, height or first.height
        counts = _frame_counts(container, stream, tc_meta)
        _check_counts(counts)
        swap = rotation in (90, 270)
        return VideoInfo(
            path=str(p),
            size_bytes=size,
            container=_container_name(p, container.format),
            duration_s=counts.duration,
            fps=counts.fps,
            num_frames=counts.num_frames,
            width=width,
            height=height,
            display_width=height if swap else width,
            display_height=width if swap else height,
            rotation=rotation,
            codec=codec,
            pix_fmt=ctx.pix_fmt,
            bit_depth=bit_depth,
            interlaced=bool(getattr(first, "interlaced_frame", False)),
            audio_streams=audio_streams,
            video_streams=len(videos),
            stream_index=int(stream.index),
            metadata_source=counts.source,
        )


def _read_head(p: Path) -> tuple[int, bytes, str | None]:
    """Size, first bytes and their kind; plainly not a video is refused (FFmpeg opens images as videos)."""
    if not p.is_file():
        raise VideoError(f"The file {p.name} does not exist or is not a regular file: {ALLOWED}.")
    size = p.stat().st_size
    if size == 0:
        raise VideoError(f"The file is empty (0 bytes): {ALLOWED}.")
    with p.open("rb") as fh:
        head = fh.read(4096)
    sniffed = _sniff(head)
    if sniffed is not None and any(kind in sniffed for kind in ("image", "text", "PDF", "ZIP")):
        raise _not_a_video(sniffed)
    return size, head, sniffed


def _open_container(p: Path, head: bytes, sniffed: str | None) -> Any:
    """PyAV's container, or the sentence for why FFmpeg could not open it (damaged vs not a video)."""
    import av

    try:
        return av.open(str(p))
    except PermissionError as exc:
        raise VideoError(f"The file {p.name} cannot be read (permission denied): {ALLOWED}.") from exc
    except (av.error.FFmpegError, EOFError, OSError) as exc:
        if _looks_like_video_container(head):
            raise _undecodable("the file looks truncated or damaged") from exc
        raise _not_a_video(sniffed) from exc


def _video_streams(container: Any) -> tuple[list[Any], int]:
    """The real video streams (cover art excluded) and the audio stream count; none is an error."""
    import av

    videos = [s for s in container.streams.video if not (s.disposition & av.stream.Disposition.attached_pic)]
    audio_streams = len(container.streams.audio)
    if not videos:
        what = "it contains only audio" if audio_streams else "it contains no audio or video"
        raise VideoError(
            f"This file has no video stream ({what}): "
            "upload a clip with a video track (MP4, WebM, MOV or MKV)."
        )
    return videos, audio_streams


def _pick_stream(container: Any, videos: list[Any], tc_meta: Any) -> tuple[Any, Any]:
    """torchcodec's stream (else FFmpeg's best, else the first) and its metadata if it counts as video."""
    stream = next((s for s in videos if tc_meta is not None and s.index == tc_meta.stream_index), None)
    if stream is not None:
        return stream, tc_meta
    try:  # no torchcodec, or it chose a stream we do not count as video: trust PyAV alone
        best = container.streams.best("video")
    except Exception:
        best = None
    return (best if best in videos else videos[0]), None


def _first_frame(container: Any, stream: Any, codec: str) -> Any:
    """Decode the first frame: proves the codec works and gives the display rotation."""
    import av

    stream.thread_type = "AUTO"
    try:
        first = next(iter(container.decode(stream)), None)
    except av.error.FFmpegError as exc:
        raise _undecodable(f"{codec} frames failed to decode: {_short(exc)}") from exc
    if first is None:
        raise VideoError(
            "The video has zero duration (no frames could be decoded): upload a clip with frames."
        )
    return first


def _frame_counts(container: Any, stream: Any, tc_meta: Any) -> _Counts:
    """Frame count, fps and duration from torchcodec's exact scan, else a PyAV scan that counts the same."""
    header_frames = int(stream.frames or 0)
    header_duration = float(stream.duration * stream.time_base) if stream.duration else None
    if tc_meta is not None:
        return _Counts(
            num_frames=int(tc_meta.num_frames or 0),
            fps=float(tc_meta.average_fps or 0.0),
            duration=float(tc_meta.duration_seconds or 0.0),
            scanned=tc_meta.num_frames_from_content,
            header_frames=int(tc_meta.num_frames_from_header or header_frames or 0),
            header_duration=getattr(tc_meta, "duration_seconds_from_header", None) or header_duration,
            content_end=getattr(tc_meta, "end_stream_seconds_from_content", None),
            source="torchcodec",
        )
    return _scan_counts(container, stream, header_frames, header_duration)


def _scan_counts(container: Any, stream: Any, header_frames: int, header_duration: float | None) -> _Counts:
    """The PyAV fallback: count the packets torchcodec would; the duration from their pts, else headers."""
    import av

    container_duration = container.duration / 1e6 if container.duration else None
    try:
        container.seek(0)
        times = _packet_times(container, stream)
    except av.error.FFmpegError as exc:
        raise _undecodable(f"reading packets failed: {_short(exc)}") from exc
    scanned = len(times)
    begin, end = min((t[0] for t in times), default=None), max((t[1] for t in times), default=None)
    if begin is not None and end is not None and end > begin:
        duration = end - begin
    else:
        duration = header_duration or container_duration or 0.0
    fps = scanned / duration if duration > 0 else float(stream.average_rate or stream.guessed_rate or 0)
    return _Counts(scanned, fps, duration, scanned, header_frames, header_duration, end, "pyav")


def _check_counts(c: _Counts) -> None:
    """Refuse a file with nothing to sample, or cut short: fewer frames than its header counts, ending before
    its duration (a clip trimmed without re-encoding counts hidden frames, but its shown ones reach it)."""
    fewer = c.scanned is not None and c.header_frames > 0 and c.scanned < c.header_frames - 1
    slack = max(0.1, 2.0 / c.fps) if c.fps > 0 else 0.1  # two frames, or 0.1 s
    early = c.content_end is None or not c.header_duration or c.content_end < c.header_duration - slack
    if fewer and early:
        raise _undecodable(f"the file looks truncated: {c.scanned} of {c.header_frames} frames are present")
    if c.num_frames <= 0 or c.duration <= 0 or c.fps <= 0:
        raise VideoError("The video has zero duration (no frames were found): upload a clip with frames.")


@dataclass(frozen=True)
class Limits:
    """What the demo accepts. Resolution limits apply in either orientation (portrait phones)."""

    max_file_mb: float = 200.0
    max_duration_s: float = 600.0
    max_width: int = 3840
    max_height: int = 2160


def check_duration(info: VideoInfo, limits: Limits) -> None:
    """The duration limit, for a request about the whole video (a time range is held to it instead)."""
    if info.duration_s > limits.max_duration_s:
        raise VideoError(
            f"The video is {info.duration_s:.1f} s long; at most {limits.max_duration_s:g} s is allowed."
        )


def validate(path: str | os.PathLike[str], limits: Limits = Limits()) -> VideoInfo:
    """Probe and check against ``limits``; the size check runs before any decoding."""
    p = Path(path)
    if p.is_file():
        size_mb = p.stat().st_size / 1e6
        if size_mb > limits.max_file_mb:
            raise VideoError(f"The file is {size_mb:.1f} MB; at most {limits.max_file_mb:g} MB is allowed.")
    info = probe(p)
    check_duration(info, limits)
    short, long = sorted((info.width, info.height))  # either orientation
    short_max, long_max = sorted((limits.max_width, limits.max_height))
    if short > short_max or long > long_max:
        raise VideoError(
            f"The video is {info.display_width}x{info.display_height}; "
            f"at most {limits.max_width}x{limits.max_height} (either orientation) is allowed."
        )
    return info
