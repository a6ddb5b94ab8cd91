"""Edge-case media made with the ffmpeg binary, for the hardening tests (nothing is committed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

LAVFI_VIDEO = "testsrc2=size={w}x{h}:rate={fps}"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def examples_subset(out: Path, names: tuple[str, ...]) -> Path:
    """A folder holding some of the app's examples and their examples.json entries, in the file's order:
    short clips make a data or calibration folder whose requests cost seconds, not minutes."""
    entries = json.loads((EXAMPLES / "examples.json").read_text(encoding="utf-8"))
    chosen = [e for e in entries if e["video"] in names]
    assert len(chosen) == len(names), f"not all of {names} in examples.json"
    out.mkdir(parents=True)
    for e in chosen:
        shutil.copy(EXAMPLES / e["video"], out / e["video"])
    (out / "examples.json").write_text(json.dumps(chosen), encoding="utf-8")
    return out


def run_ffmpeg(*args: str) -> subprocess.CompletedProcess:
    """The ffmpeg binary, quiet, overwriting; the caller reads the return code."""
    return subprocess.run(
        ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def ffmpeg(*args: str) -> None:
    """The ffmpeg binary, which must succeed (its error output is the failure message)."""
    res = run_ffmpeg(*args)
    assert res.returncode == 0, res.stderr


def make(kind: str, out_dir: Path) -> Path:
    """One file per edge case; the name says what it is."""
    out_dir.mkdir(parents=True, exist_ok=True)
    v = ["-f", "lavfi", "-i"]
    a = ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000"]
    x264 = ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]
    p = out_dir / f"{kind}.mp4"
    if kind == "single_frame":
        ffmpeg(*v, LAVFI_VIDEO.format(w=320, h=240, fps=10), "-frames:v", "1", *x264, str(p))
    elif kind == "short_0_3s":
        ffmpeg(*v, LAVFI_VIDEO.format(w=320, h=240, fps=30), "-t", "0.3", *x264, str(p))
    elif kind == "uhd_4k":
        ffmpeg(*v, LAVFI_VIDEO.format(w=3840, h=2160, fps=5), "-t", "1", *x264, str(p))
    elif kind == "over_4k":
        ffmpeg(*v, LAVFI_VIDEO.format(w=4096, h=2304, fps=2), "-t", "1", *x264, str(p))
    elif kind == "long_20s":
        ffmpeg(*v, LAVFI_VIDEO.format(w=160, h=120, fps=5), "-t", "20", *x264, str(p))
    elif kind == "rotated_90":
        src = out_dir / "rot_src.mp4"
        ffmpeg(*v, LAVFI_VIDEO.format(w=320, h=180, fps=10), "-t", "3", *x264, str(src))
        ffmpeg("-i", str(src), "-c", "copy", "-metadata:s:v", "rotate=90", str(p))
    elif kind == "vfr":
        # 1 s at 30 fps then 2 s at 5 fps in one stream: variable frame durations
        graph = (
            "testsrc2=size=320x240:rate=30:duration=1[a];testsrc2=size=320x240:rate=5:duration=2[b];"
            "[a][b]concat=n=2:v=1[v]"
        )
        ffmpeg("-filter_complex", graph, "-map", "[v]", "-fps_mode", "vfr", *x264, str(p))
    elif kind == "ten_bit":
        ffmpeg(
            *v,
            LAVFI_VIDEO.format(w=320, h=240, fps=10),
            "-t",
            "2",
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-pix_fmt",
            "yuv420p10le",
            str(p),
        )
    elif kind == "hevc":
        ffmpeg(
            *v,
            LAVFI_VIDEO.format(w=320, h=240, fps=10),
            "-t",
            "2",
            "-c:v",
            "libx265",
            "-preset",
            "ultrafast",
            "-pix_fmt",
            "yuv420p",
            "-x265-params",
            "log-level=error",
            str(p),
        )
    elif kind == "av1":
        p = out_dir / "av1.mkv"
        ffmpeg(
            *v,
            LAVFI_VIDEO.format(w=320, h=240, fps=10),
            "-t",
            "2",
            "-c:v",
            "libaom-av1",
            "-cpu-used",
            "8",
            "-row-mt",
            "1",
            "-b:v",
            "200k",
            str(p),
        )
    elif kind == "no_audio":
        ffmpeg(*v, LAVFI_VIDEO.format(w=320, h=240, fps=10), "-t", "2", *x264, "-an", str(p))
    elif kind == "two_audio":
        ffmpeg(
            *v,
            LAVFI_VIDEO.format(w=320, h=240, fps=10),
            *a,
            *a,
            "-t",
            "2",
            "-map",
            "0:v",
            "-map",
            "1:a",
            "-map",
            "2:a",
            *x264,
            "-c:a",
            "aac",
            "-shortest",
            str(p),
        )
    elif kind == "audio_only":
        p = out_dir / "audio_only.mp3"
        ffmpeg(*a, "-t", "2", str(p))
    elif kind == "png":
        p = out_dir / "picture.png"
        ffmpeg(*v, LAVFI_VIDEO.format(w=64, h=64, fps=1), "-frames:v", "1", str(p))
    elif kind == "truncated":
        full = out_dir / "full.mp4"
        ffmpeg(*v, LAVFI_VIDEO.format(w=320, h=240, fps=10), "-t", "3", *x264, str(full))
        data = full.read_bytes()
        p.write_bytes(data[: len(data) // 2])
    elif kind == "text_named_mp4":
        p.write_text("this is not a video\n" * 20)
    elif kind == "zero_bytes":
        p.write_bytes(b"")
    elif kind == "random_bytes":
        p.write_bytes(bytes((i * 7919 + 13) % 256 for i in range(50_000)))
    else:
        raise ValueError(kind)
    return p
