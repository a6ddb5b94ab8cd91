"""Reuse on one video: first find vs second find (another query), end to end, on the tiny checkpoint.

    python benchmarks/bench_reuse.py                      # bf16 variant, 2-minute 640x360 clip (240 frames)
    python benchmarks/bench_reuse.py --variant gptq --json out.json

The clip is made once with ffmpeg (testsrc2, libx264 ultrafast) in ``--cache-dir``
(default: $MARLIN_BENCH_CACHE or <tmp>/marlin-bench); 640x360 is enough, the frames are
resized to Marlin's 200,704-pixel budget anyway, and two minutes give the full 240 frames.

The variant is loaded first (load time is not part of a request). Then, on one engine:
the first find (decodes the video, runs the vision tower and the prefix, generates), the
second find with a different query (cached frames, cached prefix: prefills only its own
text). Each is timed around ``Engine.find`` (end to end). The second answer is checked
token for token against a cold run: a fresh engine (nothing cached), and an engine with
prefix reuse off (the plain one-pass ``generate``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_video_prep import cache_dir, make_clip

GOAL = 0.4
QUERIES = ("the ball stops rolling", "a red square appears in the corner", "the lamp turns on")


def timed_find(engine: Any, clip: Path, query: str, variant: str) -> tuple[Any, float]:
    t0 = time.perf_counter()
    res = engine.find(clip, query, variant)
    return res, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="bf16", help="gptq, bnb4 or bf16 (tiny checkpoint)")
    ap.add_argument("--size", default="640x360")
    ap.add_argument("--rate", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from marlin_demo.engine import Engine
    from marlin_demo.settings import Settings

    clip = make_clip(cache_dir(args.cache_dir), args.size, args.rate, args.seconds, "ultrafast")
    settings = Settings(model="tiny")
    engine = Engine(settings)
    engine.load(args.variant)
    first, t_first = timed_find(engine, clip, QUERIES[0], args.variant)
    second, t_second = timed_find(engine, clip, QUERIES[1], args.variant)
    third, t_third = timed_find(engine, clip, QUERIES[2], args.variant)
    prepared = engine.prepare(clip)
    print(
        f"clip: {clip.name}: {prepared.plan.nframes} frames at {prepared.plan.width}x{prepared.plan.height}, "
        f"{prepared.plan.video_tokens} video tokens, decode backend {prepared.backend}",
        flush=True,
    )
    for name, res, t in (("first", first, t_first), ("second", second, t_second), ("third", third, t_third)):
        i = res.info
        print(
            f"  {name:6s} find {t:7.2f} s end to end (latency_s {res.metrics.latency_s:.2f}, "
            f"ttft {res.metrics.ttft_s:.2f}, first text {getattr(i, 'first_text_s', None) or 0:.2f}): "
            f"cached video {i.cached_video}, reused prefix {i.reused_prefix}, "
            f"prefix prefill {i.prefill_s or 0:.2f} s -> {res.raw!r}",
            flush=True,
        )

    # the same video decoded but no prefix yet: what prefix reuse alone saves
    engine.prefixes.clear()
    _, t_cold_prefix = timed_find(engine, clip, QUERIES[1], args.variant)

    # cold runs of the second query: a fresh engine, and one with reuse off (one-pass generate)
    fresh = Engine(settings)
    fresh.load(args.variant)
    cold, t_cold = timed_find(fresh, clip, QUERIES[1], args.variant)
    del fresh
    off = Engine(settings, prefix_cache_size=0)
    off.load(args.variant)
    plain, t_plain = timed_find(off, clip, QUERIES[1], args.variant)
    del off

    same_cold = second.raw == cold.raw and second.metrics.output_tokens == cold.metrics.output_tokens
    same_plain = second.raw == plain.raw and second.metrics.output_tokens == plain.metrics.output_tokens
    ratio = t_second / t_first
    figures = {
        "variant": args.variant,
        "clip": clip.name,
        "video_tokens": prepared.plan.video_tokens,
        "first_s": t_first,
        "second_s": t_second,
        "third_s": t_third,
        "second_over_first": ratio,
        "first_with_cached_video_s": t_cold_prefix,
        "second_over_first_with_cached_video": t_second / t_cold_prefix,
        "cold_fresh_engine_s": t_cold,
        "cold_no_reuse_s": t_plain,
        "second_equals_cold_fresh_engine": same_cold,
        "second_equals_no_reuse": same_plain,
        "prefix_cache_entries": engine.prefix_cache_len(),
        "prefix_cache_mb": engine.prefixes.nbytes() / 2**20,
    }
    print(
        f"  first find with the video already decoded (prefix not cached): {t_cold_prefix:.2f} s; "
        f"second/that = {figures['second_over_first_with_cached_video']:.3f}"
    )
    print(f"  cold runs of the second query: fresh engine {t_cold:.2f} s, reuse off {t_plain:.2f} s")
    print(f"answers: second == cold fresh engine: {same_cold}; second == reuse off (one-pass): {same_plain}")
    print(
        f"reuse: first find {t_first:.2f} s, second find {t_second:.2f} s, ratio {ratio:.3f}x "
        f"(goal <= {GOAL}x), answers identical to a cold run: {same_cold and same_plain}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if same_cold and same_plain and ratio <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
