"""Video preparation: qwen-vl-utils' own torchcodec path vs ours, side by side in one process.

    python benchmarks/bench_video_prep.py                  # 2-minute 1080p30 clips, 3 interleaved runs each
    python benchmarks/bench_video_prep.py --reps 5 --json out.json
    python benchmarks/bench_video_prep.py --encodings default

Two 2-minute 1080p30 H.264 clips are made once with ffmpeg from testsrc2 and kept in
``--cache-dir`` (default: $MARLIN_BENCH_CACHE or <tmp>/marlin-bench):

- ``default``: what ``ffmpeg -i SRC out.mp4`` makes (libx264's defaults: preset medium,
  CRF 23, B-frames). This is the goal's clip: its reference time matches the issue's
  (qwen-vl-utils 27-30 s on 2 cores).
- ``ultrafast``: libx264 ``-preset ultrafast`` (P-frames only, no deblocking): the worst
  case for the fast path, since every picture is a reference and must be decoded.

Each clip is measured in a process of its own. Each repetition runs both paths back to
back, alternating which goes first, so a busy machine slows both alike; the ratio of the
medians is the figure reported (best-of and CPU seconds are printed too).

"ours" is the engine's whole preparation: ``video.prepare`` (validate + probe, plan, decode
and resize) with the chosen backend. The reference is
``qwen_vl_utils.process_vision_info`` with FORCE_QWENVL_VIDEO_READER=torchcodec, the
pipeline Marlin was trained on. After timing, the script checks that both give the same
plan (frame indices, size, token count, metadata), that the frames are the same source
frames (presentation times within one source frame) and reports the pixel difference.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ["FORCE_QWENVL_VIDEO_READER"] = "torchcodec"  # read once when qwen_vl_utils is imported

GOAL = 2.5


def cache_dir(arg: str | None) -> Path:
    root = Path(arg or os.environ.get("MARLIN_BENCH_CACHE") or Path(tempfile.gettempdir()) / "marlin-bench")
    root.mkdir(parents=True, exist_ok=True)
    return root


#: libx264 options per encoding (``default`` passes none: ffmpeg's own defaults)
ENCODINGS: dict[str, list[str]] = {"default": [], "ultrafast": ["-preset", "ultrafast"]}


def make_clip(root: Path, size: str, rate: int, seconds: int, encoding: str = "default") -> Path:
    """A benchmark clip (made once): ffmpeg testsrc2, H.264 (libx264 with ENCODINGS[encoding]), yuv420p."""
    suffix = "" if encoding == "ultrafast" else f"_{encoding}"  # the ultrafast name predates the others
    out = root / f"testsrc2_{size}_{rate}fps_{seconds}s{suffix}.mp4"
    if out.is_file() and out.stat().st_size > 0:
        return out
    tmp = out.with_suffix(".part.mp4")
    argv = [
        "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
        "-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}", "-t", str(seconds),
        "-c:v", "libx264", *ENCODINGS[encoding], "-pix_fmt", "yuv420p", str(tmp),
    ]  # fmt: skip
    print(f"making {out.name} with ffmpeg (once; a few minutes for the default encoding) ...", flush=True)
    subprocess.run(argv, check=True)
    tmp.rename(out)
    return out


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_reference(path: Path, params: Any) -> tuple[Any, dict[str, Any]]:
    from qwen_vl_utils import process_vision_info
    from qwen_vl_utils import vision_process as vp

    vp.get_video_reader_backend.cache_clear()
    element = {
        "type": "video",
        "video": str(path),
        "fps": params.fps,
        "max_frames": params.max_frames,
        "min_frames": params.min_frames,
        "max_pixels": params.max_pixels,
    }
    _, videos, _ = process_vision_info(
        [{"role": "user", "content": [element]}],
        return_video_kwargs=True,
        return_video_metadata=True,
        image_patch_size=params.patch_size,
    )
    frames, metadata = videos[0]
    if metadata.get("video_backend") != "torchcodec":
        raise SystemExit(f"qwen-vl-utils did not use torchcodec ({metadata.get('video_backend')})")
    return frames, metadata


def run_ours(path: Path, params: Any, backend: str) -> Any:
    from marlin_demo.video import Limits, prepare

    limits = Limits(max_file_mb=1e6, max_duration_s=1e6, max_width=10**5, max_height=10**5)
    return prepare(path, params, limits, backend=backend)  # type: ignore[arg-type]


def pixel_diff(ours: Any, ref: Any) -> tuple[Any, list[float]]:
    """Histogram of |ours - reference| (0..255) over all pixels, and each frame's mean, frame by frame."""
    import torch

    hist = torch.zeros(256, dtype=torch.long)
    per_frame = []
    for a, b in zip(ours, ref, strict=True):
        d = (a.to(torch.int16) - b.round().to(torch.int16)).abs().flatten()
        hist += torch.bincount(d.long(), minlength=256)
        per_frame.append(float(d.float().mean()))
    return hist, per_frame


def timed(fn: Any) -> tuple[Any, float, float]:
    gc.collect()
    t0, c0 = time.perf_counter(), cpu_s()
    out = fn()
    return out, time.perf_counter() - t0, cpu_s() - c0


def measure(path: Path, params: Any, reps: int, backend: str) -> tuple[dict[str, Any], bool]:
    """Both paths on one clip, interleaved: the figures, and whether plan and frames were the same."""
    import torch

    from marlin_demo.video import frame_pts

    ref_t: list[float] = []
    ref_c: list[float] = []
    our_t: list[float] = []
    our_c: list[float] = []
    ref_frames = ref_meta = ours = None
    for rep in range(reps):
        order = ("ref", "ours") if rep % 2 == 0 else ("ours", "ref")
        for which in order:
            if which == "ref":
                (frames, meta), t, c = timed(lambda: run_reference(path, params))
                ref_t.append(t)
                ref_c.append(c)
                if ref_frames is None:
                    ref_frames, ref_meta = frames, meta
                del frames
            else:
                prepared, t, c = timed(lambda: run_ours(path, params, backend))
                our_t.append(t)
                our_c.append(c)
                if ours is None:
                    ours = prepared
                del prepared
            print(f"  run {rep + 1} {which:4s}: {t:6.2f} s wall, {c:6.2f} s cpu", flush=True)
    assert ref_frames is not None and ref_meta is not None and ours is not None

    # --- same plan, same frames
    t_, _, h, w = ref_frames.shape
    plan = ours.plan
    tokens_ref = (t_ // 2) * (h // 32) * (w // 32)
    same_indices = plan.indices == list(ref_meta["frames_indices"])
    same_size = (plan.height, plan.width) == (h, w) and tuple(ours.frames.shape) == tuple(ref_frames.shape)
    same_tokens = plan.video_tokens == tokens_ref
    strip = {k: v for k, v in ours.metadata.items() if k != "video_backend"}
    same_meta = strip == {k: v for k, v in ref_meta.items() if k != "video_backend"}
    all_pts = frame_pts(path, ours.info.stream_index)
    want_pts = [all_pts[i] for i in plan.indices]
    got_pts = ours.frame_pts or want_pts  # the reference backends do not report pts: same decoder
    pts_err = max(abs(a - b) for a, b in zip(got_pts, want_pts, strict=True))
    one_frame = 1.0 / plan.source_fps
    hist, per_frame = pixel_diff(ours.frames, ref_frames)
    total = int(hist.sum())
    mean_diff = float((hist * torch.arange(256)).sum()) / total
    p99 = int(torch.searchsorted(hist.cumsum(0), 0.99 * total))
    max_diff = int(hist.nonzero().max())
    figures = {
        "clip": path.name,
        "frames": plan.nframes,
        "source_frames": plan.total_frames,
        "frames_decoded": ours.frames_decoded,
        "size": [plan.height, plan.width],
        "video_tokens": plan.video_tokens,
        "backend": ours.backend,
        "reps": reps,
        "qwen_vl_utils_s": {
            "median": statistics.median(ref_t),
            "best": min(ref_t),
            "runs": ref_t,
            "cpu": ref_c,
        },
        "ours_s": {"median": statistics.median(our_t), "best": min(our_t), "runs": our_t, "cpu": our_c},
        "ratio_median": statistics.median(ref_t) / statistics.median(our_t),
        "ratio_best": min(ref_t) / min(our_t),
        "ratio_cpu": statistics.median(ref_c) / statistics.median(our_c),
        "same_indices": same_indices,
        "same_size": same_size,
        "same_tokens": same_tokens,
        "same_metadata": same_meta,
        "max_pts_error_s": pts_err,
        "one_source_frame_s": one_frame,
        "pixel_mean_abs_diff": mean_diff,
        "pixel_worst_frame_mad": max(per_frame),
        "pixel_p99_abs_diff": p99,
        "pixel_max_abs_diff": max_diff,
    }
    ok_plan = same_indices and same_size and same_tokens and same_meta and pts_err < one_frame
    print()
    print(
        f"plan: indices {'same' if same_indices else 'DIFFERENT'} ({plan.nframes} frames), "
        f"size {'same' if same_size else 'DIFFERENT'} ({plan.width}x{plan.height}), "
        f"tokens {'same' if same_tokens else 'DIFFERENT'} ({plan.video_tokens}), "
        f"metadata {'same' if same_meta else 'DIFFERENT'}"
    )
    print(
        f"frames: max presentation-time error {pts_err * 1000:.3f} ms "
        f"(one source frame = {one_frame * 1000:.1f} ms); "
        f"pictures decoded {ours.frames_decoded} of {plan.total_frames}"
    )
    print(
        f"pixels ({ours.backend} vs reference, 0-255): mean |diff| {figures['pixel_mean_abs_diff']:.3f}, "
        f"worst frame {figures['pixel_worst_frame_mad']:.3f}, p99 {p99}, max {max_diff}"
    )
    print(
        f"cpu seconds: qwen-vl-utils {statistics.median(ref_c):.1f}, ours {statistics.median(our_c):.1f}, "
        f"ratio {figures['ratio_cpu']:.2f}x"
    )
    return figures, ok_plan


def _measure_in_child(argv: list[str] | None, encoding: str, root: Path) -> tuple[dict[str, Any], bool]:
    """Run this script for one encoding in a fresh process (same options) and read its figures."""
    rest = list(sys.argv[1:] if argv is None else argv)
    for flag in ("--encodings", "--json"):  # drop ours, keep every other option
        while flag in rest:
            i = rest.index(flag)
            del rest[i : i + 2]
        rest = [a for a in rest if not a.startswith(flag + "=")]
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [sys.executable, __file__, *rest, "--encodings", encoding, "--json", str(out)]
        code = subprocess.run(cmd, check=False).returncode
        if not out.is_file():
            raise SystemExit(f"the {encoding} run failed (exit {code})")
        return json.loads(out.read_text())[encoding], code == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="interleaved runs of each path (median reported)")
    ap.add_argument("--size", default="1920x1080")
    ap.add_argument("--rate", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument(
        "--encodings", default="default,ultrafast", help=f"clips to measure, of {', '.join(ENCODINGS)}"
    )
    ap.add_argument("--backend", default="fast", help="fast, reference, auto, pyav or torchcodec")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    encodings = [e.strip() for e in args.encodings.split(",") if e.strip()]
    unknown = [e for e in encodings if e not in ENCODINGS]
    if unknown or not encodings:
        ap.error(f"--encodings takes {', '.join(ENCODINGS)}, not {args.encodings!r}")

    import torch

    from marlin_demo.contract import VideoParams

    params = VideoParams()
    root = cache_dir(args.cache_dir)
    clips = {e: make_clip(root, args.size, args.rate, args.seconds, e) for e in encodings}
    results: dict[str, Any] = {}
    ok = True
    for encoding, path in clips.items():
        if len(clips) == 1:
            print(f"\n== {encoding}: {path} ({path.stat().st_size / 1e6:.0f} MB)", flush=True)
            print(f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}", flush=True)
            figures, ok_plan = measure(path, params, args.reps, args.backend)
        else:  # each clip in a process of its own: one clip's heap must not slow the other's runs
            figures, ok_plan = _measure_in_child(argv, encoding, root)
        results[encoding] = figures
        ok = ok and ok_plan
    print()
    for encoding, f in results.items():
        role = "the goal's clip" if encoding == "default" else "worst case: every picture is a reference"
        print(
            f"video prep, {encoding} H.264 ({role}): qwen-vl-utils {f['qwen_vl_utils_s']['median']:.1f} s, "
            f"ours {f['ours_s']['median']:.1f} s, ratio {f['ratio_median']:.2f}x "
            f"(goal >= {GOAL}x; best-of {f['ratio_best']:.2f}x; median of {args.reps})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
