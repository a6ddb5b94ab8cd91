"""What leaving out unreferenced AV1 frames buys, side by side in one process.

    python benchmarks/bench_av1_drop.py [--reps 3] [clip.mkv ...]

The fast path (``video.sample(..., backend="fast")``) on each clip three ways, interleaved
(the order alternates between repetitions): ``partial`` (the app: whole temporal units that
refresh no reference slot and the unreferenced last frames of the others are not decoded),
``whole`` (only whole units left out) and ``none`` (every packet decoded). Prints the median
wall and CPU seconds, the pictures decoded and each mode's speed-up over ``none``, and checks
that the three give the same frames. Without a clip it uses the realistic 2-minute AV1 720p clip
of bench_video_prep.py (made once from ../shared/media/real into its cache).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(path: Path, reps: int) -> dict[str, Any]:
    import torch

    from marlin_demo import video
    from marlin_demo.model_io import VideoParams
    from marlin_demo.video import av1

    info = video.probe(path)
    plan = video.plan_sampling(info, VideoParams())
    full: Callable[[bytes, Any], int | None] = av1.unreferenced_from

    def whole_only(data: bytes, seq: Any) -> int | None:
        return 0 if full(data, seq) == 0 else None

    modes = {
        "partial": (frozenset({"libdav1d"}), full),
        "whole": (frozenset({"libdav1d"}), whole_only),
        "none": (frozenset(), full),
    }
    runs: dict[str, list[tuple[float, float, int]]] = {m: [] for m in modes}
    frames: dict[str, Any] = {}
    try:
        for rep in range(reps):
            for mode in list(modes) if rep % 2 == 0 else list(reversed(modes)):
                video.parallel_decode.FAST_DROP_AV1, av1.unreferenced_from = modes[mode]
                t, c = time.perf_counter(), cpu_s()
                got = video.sample(path, plan, backend="fast", info=info)
                runs[mode].append((time.perf_counter() - t, cpu_s() - c, got.frames_decoded or 0))
                frames.setdefault(mode, got.frames)
    finally:
        video.parallel_decode.FAST_DROP_AV1, av1.unreferenced_from = modes["partial"]
    same = all(torch.equal(frames["none"], f) for f in frames.values())
    med = {m: statistics.median(r[0] for r in v) for m, v in runs.items()}
    cpu = {m: statistics.median(r[1] for r in v) for m, v in runs.items()}
    return {
        "clip": path.name,
        "reps": reps,
        "median_s": med,
        "median_cpu_s": cpu,
        "pictures_decoded": {m: v[0][2] for m, v in runs.items()},
        "speedup_over_none": {m: med["none"] / med[m] for m in runs},
        "same_frames": same,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "clips", nargs="*", type=Path, help="AV1 clips (default: the realistic 2-minute 720p clip)"
    )
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    clips = args.clips
    if not clips:
        import bench_video_prep

        clips = [bench_video_prep.make_real_clip(bench_video_prep.cache_dir(None), "av1_720p30")]
    print(f"{'clip':28s} {'mode':8s} {'wall s':>7s} {'cpu s':>6s} {'pictures':>9s} {'vs none':>8s}")
    for clip in clips:
        r = measure(clip, args.reps)
        for mode, s in r["median_s"].items():
            print(
                f"{r['clip']:28s} {mode:8s} {s:7.2f} {r['median_cpu_s'][mode]:6.2f} "
                f"{r['pictures_decoded'][mode]:9d} {r['speedup_over_none'][mode]:7.2f}x"
            )
        print(f"{'':28s} same frames in every mode: {r['same_frames']}")
        if not r["same_frames"]:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
