"""Video preparation: qwen-vl-utils' own torchcodec path vs ours, side by side in one process.

    python benchmarks/bench_video_prep.py                      # the realistic 2-minute clips
    python benchmarks/bench_video_prep.py --reps 3 --long --json docs/video_prep_bench.json
    python benchmarks/bench_video_prep.py --clips hevc_1080p30,default --backend fast
    python benchmarks/bench_video_prep.py --long --clips ""                # the long-video case alone

Clips are made once with ffmpeg and kept in ``--cache-dir`` (default: $MARLIN_BENCH_CACHE or
``~/.cache/marlin-demo/prep-bench``; never committed):

- **realistic** (``REAL_CLIPS``), from the real footage in ``../shared/media/real`` (a film, an
  animation, two camera shots; 177 s in all, each scaled to the clip's size and brought to its
  rate by blending neighbours, cut at 2 minutes): H.264 1080p30 (High, veryfast), H.264 1080p60
  High with 3 B-frames (what a phone records), HEVC 1080p30 (x265), VP9 720p (libvpx, alt-ref
  frames: what a web site serves), AV1 720p (SVT-AV1), and ``h264_1080p30_10min``: the 2-minute
  H.264 clip five times over (stream copy), for ``--long``.
- **synthetic** (``ENCODINGS``), 2-minute 1080p30 ``testsrc2``: ``default`` (libx264's defaults,
  B-frames: the first goal's clip) and ``ultrafast`` (P-frames only: every picture is a
  reference, the worst case for the fast path).

Each clip is measured in a process of its own. Each repetition runs both paths back to
back, alternating which goes first, so a busy machine slows both alike; the ratio of the
medians is the figure reported (best-of and CPU seconds are printed too).

"ours" is the engine's whole preparation: ``video.prepare`` (validate + probe, plan, decode
and resize) with ``--backend`` (default ``auto``: the app's default, ``pick_backend``). The
reference is ``qwen_vl_utils.process_vision_info`` with FORCE_QWENVL_VIDEO_READER=torchcodec,
the pipeline Marlin was trained on. After timing, the script checks that both give the same
plan (frame indices, size, token count, metadata), that the frames are the same source
frames (presentation times within one source frame) and reports the pixel difference.

``--long`` adds the long-video case: the 10-minute clip and its 2-minute source prepared for a
windowed caption as the engine does it (60 s windows, ``video.windows.decode_windows``: one scan
for every window), interleaved, and the ratio of their medians.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ["FORCE_QWENVL_VIDEO_READER"] = "torchcodec"  # read once when qwen_vl_utils is imported

GOAL = 2.5


def cache_dir(arg: str | None) -> Path:
    root = Path(arg or os.environ.get("MARLIN_BENCH_CACHE") or Path.home() / ".cache/marlin-demo/prep-bench")
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


#: the real footage the realistic clips are made from (../shared/media/real), in this order,
#: each scaled to the clip's size and brought to its frame rate, then cut at the clip's length
#: (177 s of footage in all, so a 2-minute clip repeats nothing):
#: a film (Tears of Steel), an animation (Big Buck Bunny), two camera shots (Intel sample videos)
REAL_SOURCES = (
    "tears_of_steel_battle.webm",
    "bbb_opening_30s.webm",
    "intel_parking_cars.mp4",
    "intel_people_table.mp4",
)

#: realistic clips: name -> (size, fps, seconds, encoder options, container). Sources below the
#: clip's rate are brought to it by blending neighbours (ffmpeg ``framerate``), so no frame is a
#: plain duplicate. ``h264_1080p30_10min`` is the 2-minute H.264 1080p30 clip joined five times
#: (stream copy: no second encode), the long-video case.
X265_FAST = ["-c:v", "libx265", "-preset", "ultrafast"]
X264_HIGH = ["-c:v", "libx264", "-preset", "veryfast", "-profile:v", "high"]
REAL_CLIPS: dict[str, tuple[str, int, int, list[str], str]] = {
    "h264_1080p30": ("1920x1080", 30, 120, X264_HIGH, "mp4"),
    "h264_1080p60_high_b3": ("1920x1080", 60, 120, [*X264_HIGH, "-bf", "3", "-b_strategy", "1"], "mp4"),
    "hevc_1080p30": ("1920x1080", 30, 120, [*X265_FAST, "-tag:v", "hvc1"], "mp4"),
    "vp9_720p30": (
        "1280x720", 30, 120,
        ["-c:v", "libvpx-vp9", "-deadline", "good", "-cpu-used", "5", "-row-mt", "1", "-b:v", "1.5M",
         "-auto-alt-ref", "1", "-lag-in-frames", "25"], "webm",
    ),
    "av1_720p30": ("1280x720", 30, 120, ["-c:v", "libsvtav1", "-preset", "10", "-crf", "35"], "mkv"),
    "h264_1080p30_10min": ("1920x1080", 30, 600, [], "mp4"),
}  # fmt: skip


def real_media_dir() -> Path:
    """``$MARLIN_REAL_MEDIA``, else ``../shared/media/real`` beside the checkout."""
    return Path(os.environ.get("MARLIN_REAL_MEDIA") or ROOT.parent / "shared/media/real")


def make_real_clip(root: Path, name: str) -> Path:
    """A realistic benchmark clip (made once into ``root``, never committed): see REAL_CLIPS."""
    size, rate, seconds, codec, ext = REAL_CLIPS[name]
    out = root / f"real_{name}.{ext}"
    if out.is_file() and out.stat().st_size > 0:
        return out
    tmp = out.with_name(out.stem + ".part." + ext)
    base = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    if name.endswith("_10min"):  # the 2-minute clip five times over, without re-encoding
        two = make_real_clip(root, name.removesuffix("_10min"))
        argv = [*base, "-stream_loop", str(seconds // 120 - 1), "-i", str(two), "-c", "copy", str(tmp)]
    else:
        src = real_media_dir()
        files = [src / f for f in REAL_SOURCES]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise SystemExit(f"real footage missing in {src}: {', '.join(missing)} (set MARLIN_REAL_MEDIA)")
        w, h = size.split("x")
        parts = [
            f"[{i}:v:0]scale={w}:{h}:flags=bicubic,setsar=1,format=yuv420p,framerate=fps={rate}[v{i}]"
            for i in range(len(files))
        ]
        chain = ";".join(parts) + ";" + "".join(f"[v{i}]" for i in range(len(files)))
        chain += f"concat=n={len(files)}:v=1:a=0,trim=duration={seconds}[out]"  # 177 s of footage
        inputs = [a for f in files for a in ("-i", str(f))]
        argv = [*base, *inputs, "-filter_complex", chain, "-map", "[out]", "-an", *codec,
                "-pix_fmt", "yuv420p", "-r", str(rate), str(tmp)]  # fmt: skip
    print(f"making {out.name} with ffmpeg (once) ...", flush=True)
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


#: the clips measured by default: the realistic set (2-minute clips; add `default` for the synthetic one)
DEFAULT_CLIPS = "h264_1080p30,h264_1080p60_high_b3,hevc_1080p30,vp9_720p30,av1_720p30"
#: goals per clip (x over qwen-vl-utils, median): H.264 and HEVC 2.5x, VP9 and AV1 1.5x
GOALS = {"vp9_720p30": 1.5, "av1_720p30": 1.5}


def clip_path(root: Path, name: str, args: argparse.Namespace) -> Path:
    """The clip ``name`` (a REAL_CLIPS name or a synthetic ENCODINGS name), made once into ``root``."""
    if name in REAL_CLIPS:
        return make_real_clip(root, name)
    return make_clip(root, args.size, args.rate, args.seconds, name)


def measure_windows(path: Path, backend: str) -> dict[str, Any]:
    """A long video's preparation for a windowed caption, as the engine does it (one scan for all windows).

    validate, one plan per 60 s caption window (``video.windows.plan_window``), then every window's
    frames from ``decode_windows``; the seconds until the first window is ready (the model can start
    there: the scan goes on in the background) and until the last.
    """
    from marlin_demo.longvideo.policy import plan_for
    from marlin_demo.settings import Settings
    from marlin_demo.video import Limits, validate
    from marlin_demo.video.windows import decode_windows, plan_window

    gc.collect()
    t0, c0 = time.perf_counter(), cpu_s()
    limits = Limits(max_file_mb=1e6, max_duration_s=1e6, max_width=10**5, max_height=10**5)
    info = validate(path, limits)
    plans = [plan_window(info, w) for w in plan_for("caption", info.duration_s, Settings())]
    decoded, used, first = 0, "", None
    for _, pv, so_far in decode_windows(str(path), plans, backend=backend):  # type: ignore[arg-type]
        decoded, used = so_far, pv.backend
        first = first if first is not None else time.perf_counter() - t0
    total = time.perf_counter() - t0
    return {"s": total, "cpu_s": cpu_s() - c0, "first_window_s": first, "windows": len(plans),
            "pictures_decoded": decoded, "source_frames": info.num_frames, "decoder": used}  # fmt: skip


def measure_long(root: Path, reps: int, backend: str) -> dict[str, Any]:
    """The 10-minute clip vs its 2-minute source, both prepared for a windowed caption, interleaved."""
    two, ten = make_real_clip(root, "h264_1080p30"), make_real_clip(root, "h264_1080p30_10min")
    runs: dict[str, list[dict[str, Any]]] = {"2min": [], "10min": []}
    for rep in range(reps):
        order = (("2min", two), ("10min", ten)) if rep % 2 == 0 else (("10min", ten), ("2min", two))
        for key, path in order:
            r = measure_windows(path, backend)
            runs[key].append(r)
            print(
                f"  run {rep + 1} {key:5s}: {r['s']:6.2f} s ({r['cpu_s']:.1f} cpu-s), "
                f"first window {r['first_window_s']:5.2f} s "
                f"({r['windows']} windows, {r['pictures_decoded']}/{r['source_frames']} pictures, "
                f"{r['decoder']})",
                flush=True,
            )
    med = {k: statistics.median(r["s"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
    first = {k: statistics.median(r["first_window_s"] for r in v) for k, v in runs.items()}
    pictures = {k: v[0]["pictures_decoded"] for k, v in runs.items()}
    per_picture = {k: 1000 * cpu[k] / max(1, pictures[k]) for k in runs}  # the decode's unit cost
    print(
        f"  10 min / 2 min: {med['10min'] / med['2min']:.2f}x wall, {cpu['10min'] / cpu['2min']:.2f}x cpu, "
        f"{pictures['10min'] / max(1, pictures['2min']):.2f}x pictures to decode; cpu per picture "
        f"{per_picture['2min']:.2f} vs {per_picture['10min']:.2f} ms",
        flush=True,
    )
    return {
        "clips": {"2min": two.name, "10min": ten.name},
        "backend": backend,
        "runs": runs,
        "median_s": med,
        "median_first_window_s": first,
        "ratio_10min_to_2min": med["10min"] / med["2min"],
        "median_cpu_s": cpu,
        "ratio_cpu_10min_to_2min": cpu["10min"] / cpu["2min"],
        "ratio_pictures_10min_to_2min": pictures["10min"] / max(1, pictures["2min"]),
        "cpu_ms_per_picture": per_picture,
    }


def _measure_in_child(argv: list[str] | None, encoding: str, root: Path) -> tuple[dict[str, Any], bool]:
    """Run this script for one clip in a fresh process (same options) and read its figures."""
    rest = list(sys.argv[1:] if argv is None else argv)
    rest = [a for a in rest if a != "--long"]
    for flag in ("--clips", "--encodings", "--json"):  # drop ours, keep every other option
        while flag in rest:
            i = rest.index(flag)
            del rest[i : i + 2]
        rest = [a for a in rest if not a.startswith(flag + "=")]
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [sys.executable, __file__, *rest, "--clips", encoding, "--json", str(out)]
        code = subprocess.run(cmd, check=False).returncode
        if not out.is_file():
            raise SystemExit(f"the {encoding} run failed (exit {code})")
        return json.loads(out.read_text())[encoding], code == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="interleaved runs of each path (median reported)")
    ap.add_argument("--size", default="1920x1080", help="synthetic clips' size")
    ap.add_argument("--rate", type=int, default=30, help="synthetic clips' frame rate")
    ap.add_argument("--seconds", type=int, default=120, help="synthetic clips' length")
    names = [*REAL_CLIPS, *ENCODINGS]
    ap.add_argument("--clips", default=DEFAULT_CLIPS, help=f"clips to measure, of {', '.join(names)}")
    ap.add_argument("--encodings", default=None, help="(old name of --clips)")
    ap.add_argument("--long", action="store_true", help="also: 10-minute vs 2-minute clip, windowed caption")
    ap.add_argument("--backend", default="auto", help="ours: auto (the app's default), fast or reference")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    chosen = [e.strip() for e in (args.encodings or args.clips).split(",") if e.strip()]
    unknown = [e for e in chosen if e not in names or e.endswith("_10min")]
    if unknown or not (chosen or args.long):  # --long --clips '': the long-video case alone
        ap.error(f"--clips takes {', '.join(n for n in names if not n.endswith('_10min'))}, not {unknown!r}")

    import torch

    from marlin_demo.model_io import VideoParams

    params = VideoParams()
    root = cache_dir(args.cache_dir)
    clips = {e: clip_path(root, e, args) for e in chosen}
    results: dict[str, Any] = {}
    ok = True
    for name, path in clips.items():
        if len(clips) == 1:
            print(f"\n== {name}: {path} ({path.stat().st_size / 1e6:.0f} MB)", flush=True)
            print(f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}", flush=True)
            figures, ok_plan = measure(path, params, args.reps, args.backend)
        else:  # each clip in a process of its own: one clip's heap must not slow the other's runs
            print(f"\n== {name}: {path.name} ({path.stat().st_size / 1e6:.0f} MB)", flush=True)
            figures, ok_plan = _measure_in_child(argv, name, root)
        results[name] = figures
        ok = ok and ok_plan
    if args.long:
        print("\n== long video: 10 minutes vs 2 minutes (H.264 1080p30), windowed caption", flush=True)
        results["long"] = measure_long(root, max(2, args.reps), args.backend)
    print(f"\nload average {os.getloadavg()[0]:.1f} (2 cores shared with other jobs: compare ratios only)")
    print(
        f"{'clip':22s} {'qwen-vl-utils':>13s} {'ours':>7s} {'ratio':>6s} {'cpu':>6s} {'goal':>5s}  "
        "decoder  decoded"
    )
    for name, f in results.items():
        if name == "long":
            continue
        goal = GOALS.get(name, GOAL)
        f["goal"] = goal
        print(
            f"{name:22s} {f['qwen_vl_utils_s']['median']:11.1f} s {f['ours_s']['median']:5.1f} s "
            f"{f['ratio_median']:5.2f}x {f['ratio_cpu']:5.2f}x {goal:4.1f}x  {f['backend']:7s}  "
            f"{f['frames_decoded']}/{f['source_frames']}"
        )
    if "long" in results:
        lg = results["long"]
        print(
            f"windowed caption, 10 min vs 2 min: {lg['median_s']['10min']:.1f} s vs "
            f"{lg['median_s']['2min']:.1f} s, "
            f"ratio {lg['ratio_10min_to_2min']:.2f} (cpu {lg['ratio_cpu_10min_to_2min']:.2f}; goal <= 2); "
            f"first window ready after "
            f"{lg['median_first_window_s']['10min']:.1f} s vs {lg['median_first_window_s']['2min']:.1f} s"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
