"""A second find on the same long video: first vs second query, side by side, on one engine.

    python benchmarks/bench_long_find.py                 # tiny checkpoint, bf16, 6-minute clip
    python benchmarks/bench_long_find.py --target-s 150 --variant gptq --json out.json

The clip is the examples concatenated (``bench.longset.build_long_clip``), built once in
``--out-dir`` (default <tmp>/marlin-long). The variant is loaded first (load time is not part
of a request). Then two finds with different queries on one engine, each timed around
``Engine.find`` end to end: the first decodes every window, runs the vision tower and each
window's video prefill; the second reuses each window's frames and prefill (counted per window
from ``RunInfo.windows``, not inferred from the times).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marlin_demo import service
from marlin_demo.bench.longset import build_long_clip
from marlin_demo.engine import Engine
from marlin_demo.settings import Settings
from marlin_demo.video import probe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target-s", type=float, default=360.0)
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--out-dir", default=str(Path(tempfile.gettempdir()) / "marlin-long"))
    ap.add_argument("--json", default="", help="also write the figures here")
    args = ap.parse_args()

    clip = Path(args.out_dir) / f"long{int(args.target_s)}.mp4"
    if not clip.exists():
        build_long_clip(clip, target_s=args.target_s)
    engine = Engine(Settings(model=args.model, request_timeout_s=3600.0))  # a CPU run of 15 windows is slow
    engine.load(args.variant)
    rows = []
    for query in ("the ball rolls across the floor", "the lamp turns on"):
        t0 = time.perf_counter()
        res = service.run(engine, "find", str(clip), args.variant, query)
        wall = time.perf_counter() - t0
        wins = res.info.windows
        rows.append(
            {
                "query": query,
                "wall_s": round(wall, 2),
                "windows": len(wins),
                "video_cache_hits": sum(w.cached_video for w in wins),
                "prefix_hits": sum(w.reused_prefix for w in wins),
                "decode_s": round(res.info.decode_s, 2),
                "prefill_s": None if res.info.prefill_s is None else round(res.info.prefill_s, 2),
                "video_tokens": res.metrics.video_tokens,
                "moments": len(res.moments),
            }
        )
    first, second = rows
    print(f"clip {clip.name}: {probe(clip).duration_s:.1f} s, variant {args.variant}")
    print(f"{'':22}{'first find':>12}{'second find':>13}")
    for key in ("wall_s", "windows", "video_cache_hits", "prefix_hits", "decode_s", "prefill_s", "moments"):
        print(f"{key:22}{first[key]!s:>12}{second[key]!s:>13}")
    print(f"second / first (wall): {second['wall_s'] / first['wall_s']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"clip": clip.name, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
