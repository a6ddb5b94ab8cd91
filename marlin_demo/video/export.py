"""Export a frame-accurate clip with ffmpeg (the Find tab's download)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path

from marlin_demo.video.info import VideoError, VideoInfo, probe


def ffmpeg_available() -> bool:
    """True when the ffmpeg binary is on PATH (needed only for export_clip)."""
    return shutil.which("ffmpeg") is not None


def export_clip(
    path: str | os.PathLike[str],
    start: float,
    end: float,
    out_path: str | os.PathLike[str],
    *,
    info: VideoInfo | None = None,
) -> Path:
    """Cut [start, end) seconds (clamped) into an H.264 MP4, re-encoded: a stream copy cuts only at
    keyframes. ``info``: the file's ``probe`` result when the caller already has it."""
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
    s, e = (min(max(0.0, t), info.duration_s) for t in (start_f, end_f))
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
    timeout_s = 600.0
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"ffmpeg took longer than {timeout_s:g} s to export the clip.") from exc
    if proc.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no message"]
        raise RuntimeError(f"ffmpeg failed to export the clip (exit {proc.returncode}): {tail[0]}")
    return out
