"""The `auto` video backend's rule, measured: reference vs fast per codec, frame rate, size and bit depth.

    python benchmarks/bench_video_auto.py [--reps 3] [--json docs/video_auto_rule.json]

Makes (once, into ``--cache-dir``/matrix, never committed) 20-second clips from real footage
(``../shared/media/real/tears_of_steel_battle.webm``) in H.264, HEVC, VP9 and AV1 at 360p to
1080p, 30 and 60 fps, 8 and 10 bits, then times ``video.prepare`` with ``backend="reference"``
and ``backend="fast"`` side by side (interleaved, alternating which goes first; the median of
``--reps``), checks that both give the same plan (indices, size, tokens, metadata) and the same
source frames (pts), and reports what ``auto`` (``video.pick_backend``) picks and whether that
is the faster one. Absolute times on a shared machine are noise; the per-clip ratio is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CACHE = ".cache/marlin-demo/prep-bench"

X264 = ["-c:v", "libx264", "-preset", "veryfast"]
X265 = ["-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error"]
VP9 = ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-row-mt", "1"]  # quick to make
SVT = ["-c:v", "libsvtav1", "-preset", "10", "-crf", "35", "-svtav1-params", "verbosity=0"]
P8, P10 = ["-pix_fmt", "yuv420p"], ["-pix_fmt", "yuv420p10le"]
#: name -> (width, height, fps, encoder options)
MATRIX: dict[str, tuple[int, int, int, list[str]]] = {
    "h264_360p30.mp4": (640, 360, 30, [*X264, *P8]),
    "h264_540p30.mp4": (960, 540, 30, [*X264, *P8]),
    "h264_720p30.mp4": (1280, 720, 30, [*X264, *P8]),
    "h264_1080p30.mp4": (1920, 1080, 30, [*X264, *P8]),
    "h264_1080p60.mp4": (1920, 1080, 60, [*X264, "-profile:v", "high", "-bf", "3", *P8]),
    "h264_720p30_10bit.mp4": (1280, 720, 30, [*X264, *P10]),
    "hevc_360p30.mp4": (640, 360, 30, [*X265, *P8]),
    "hevc_720p30.mp4": (1280, 720, 30, [*X265, *P8]),
    "hevc_720p30_10bit.mp4": (1280, 720, 30, [*X265, *P10]),
    "hevc_1080p30.mp4": (1920, 1080, 30, [*X265, *P8]),
    "vp9_360p30.webm": (640, 360, 30, [*VP9, "-b:v", "800k"]),
    "vp9_720p30.webm": (1280, 720, 30, [*VP9, "-b:v", "1500k"]),
    "av1_360p30.mkv": (640, 360, 30, SVT),
    "av1_720p30.mkv": (1280, 720, 30, SVT),
}


def make(root: Path, name: str, source: Path, seconds: int = 20) -> Path:
    out = root / name
    if out.is_file() and out.stat().st_size > 0:
        return out
    w, h, fps, codec = MATRIX[name]
    tmp = out.with_name(out.stem + ".part" + out.suffix)
    vf = f"scale={w}:{h},framerate=fps={fps}"
    argv = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i", str(source),
            "-t", str(seconds), "-vf", vf, "-an", *codec, str(tmp)]  # fmt: skip
    print(f"making {name} ...", flush=True)
    subprocess.run(argv, check=True)
    tmp.rename(out)
    return out


def measure(path: Path, reps: int) -> dict[str, Any]:
    from marlin_demo import video

    limits = video.Limits(max_file_mb=1e6, max_duration_s=1e6, max_width=10**5, max_height=10**5)
    times: dict[str, list[float]] = {"reference": [], "fast": []}
    got: dict[str, Any] = {}
    for rep in range(reps):
        for backend in ("reference", "fast") if rep % 2 == 0 else ("fast", "reference"):
            t0 = time.perf_counter()
            pv = video.prepare(path, limits=limits, backend=backend)  # type: ignore[arg-type]
            times[backend].append(time.perf_counter() - t0)
            got.setdefault(backend, pv)
    ref, fast = got["reference"], got["fast"]
    info, plan = fast.info, fast.plan
    strip = {k: v for k, v in fast.metadata.items() if k != "video_backend"}
    same_plan = (
        ref.plan.indices == plan.indices
        and tuple(ref.frames.shape) == tuple(fast.frames.shape)
        and ref.plan.video_tokens == plan.video_tokens
        and strip == {k: v for k, v in ref.metadata.items() if k != "video_backend"}
    )
    pts_err = None
    if fast.frame_pts is not None:
        all_pts = video.frame_pts(path, info.stream_index)
        pts_err = max(abs(a - all_pts[i]) for a, i in zip(fast.frame_pts, plan.indices, strict=True))
    diff = (fast.frames.int() - ref.frames.int()).abs().float()
    med = {k: statistics.median(v) for k, v in times.items()}
    auto = video.pick_backend(info, plan)
    faster = "fast" if med["fast"] < med["reference"] else "reference"
    return {
        "clip": path.name,
        "codec": info.codec,
        "size": f"{info.width}x{info.height}",
        "fps": round(info.fps, 3),
        "bit_depth": info.bit_depth,
        "plan": f"{plan.width}x{plan.height} x {plan.nframes}",
        "area_ratio": round(info.width * info.height / (plan.width * plan.height), 2),
        "reference_s": med["reference"],
        "fast_s": med["fast"],
        "fast_backend_ran": fast.backend,
        "reference_backend_ran": ref.backend,
        "speedup_fast": med["reference"] / med["fast"],
        "frames_decoded_fast": fast.frames_decoded,
        "source_frames": info.num_frames,
        "same_plan": same_plan,
        "max_pts_error_s": pts_err,
        "pixel_mean_abs_diff": float(diff.mean()),
        "auto": auto,
        "faster": faster,
        "runs": times,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--clips", default=",".join(MATRIX), help="comma-separated names from the matrix")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    base = (
        args.cache_dir
        or os.environ.get("MARLIN_BENCH_CACHE")
        or Path.home() / ".cache/marlin-demo/prep-bench"
    )
    root = Path(base) / "matrix"
    root.mkdir(parents=True, exist_ok=True)
    media = Path(
        os.environ.get("MARLIN_REAL_MEDIA") or Path(__file__).resolve().parents[2] / "shared/media/real"
    )
    source = media / "tears_of_steel_battle.webm"
    if not source.is_file():
        raise SystemExit(f"{source} is absent (set MARLIN_REAL_MEDIA)")
    rows = []
    for name in [c.strip() for c in args.clips.split(",") if c.strip()]:
        row = measure(make(root, name, source), args.reps)
        rows.append(row)
        ok = "ok" if row["auto"] == row["faster"] or row["fast_backend_ran"] != "fast" else "MISS"
        print(
            f"{row['clip']:24s} {row['size']:>9s} {row['fps']:>5g} fps {row['bit_depth']}-bit "
            f"plan {row['plan']:16s} ref {row['reference_s']:5.2f} s fast {row['fast_s']:5.2f} s "
            f"x{row['speedup_fast']:.2f} ({row['fast_backend_ran']}) decoded {row['frames_decoded_fast']}/"
            f"{row['source_frames']} mean|d| {row['pixel_mean_abs_diff']:.3f} plan same {row['same_plan']} "
            f"auto={row['auto']} {ok}",
            flush=True,
        )
    if args.json:
        with tempfile.NamedTemporaryFile("w", delete=False, dir=Path(args.json).parent) as f:
            json.dump({"load_average": os.getloadavg(), "rows": rows}, f, indent=2)
        os.replace(f.name, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
