"""The tiny stand-in's caption and find in bfloat16 and float32, side by side in one run.

    python benchmarks/bench_compute_dtype.py --out docs/compute_dtype_native.json
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/bench_compute_dtype.py \
        --out docs/compute_dtype_avx2.json    # the same machine held to AVX2, as an AVX2-only CPU

For each compute type, every variant is loaded with ``MARLIN_COMPUTE_DTYPE`` set to it, warmed up
once, then asked for a caption and a find on each clip (several clips: the figures depend on the
video's tokens), ``--repeats`` times, alternating the types so a busy machine slows both alike. It
prints the median latency per (variant, task, type) and the float32 speed-up, and what torch reports
of the CPU (``models.compute``). Prefix reuse is off: every request prefills its video.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLIPS = ("examples/blue_square.mp4", "examples/ball_rolls.mp4", "examples/people_table.mp4")
QUERY = "the ball rolls across the floor"
DTYPES = ("bfloat16", "float32")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="gptq,bnb4,bf16")
    parser.add_argument("--clips", default=",".join(CLIPS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    from marlin_demo.engine import Engine
    from marlin_demo.models import compute
    from marlin_demo.settings import Settings

    names = [v for v in args.variants.split(",") if v]
    clips = [ROOT / c if not Path(c).is_absolute() else Path(c) for c in args.clips.split(",") if c]
    engines = {
        dt: Engine(Settings(model="tiny", variants=args.variants, compute_dtype=dt), prefix_cache_size=0)
        for dt in DTYPES
    }
    for engine in engines.values():
        for name in names:
            engine.load(name)
    prepared = {c: engines[DTYPES[0]].prepare(c) for c in clips}  # frames shared: the model is timed
    rows = []
    for rep in range(args.repeats + 1):  # repeat 0 warms every path up and is not counted
        for clip in clips:
            for name in names:
                for task in ("caption", "find"):
                    for dt in DTYPES if rep % 2 else DTYPES[::-1]:
                        t0 = time.perf_counter()
                        res = engines[dt].ask(task, prepared[clip], name, query=QUERY)
                        took = time.perf_counter() - t0
                        if rep:
                            rows.append(
                                {
                                    "clip": clip.name,
                                    "variant": name,
                                    "task": task,
                                    "dtype": res.info.runtime.compute_dtype,
                                    "latency_s": round(took, 3),
                                    "output_tokens": res.metrics.output_tokens,
                                    "video_tokens": res.metrics.video_tokens,
                                }
                            )
    table = []
    for clip in clips:
        for name in names:
            for task in ("caption", "find"):
                mine = {
                    dt: [
                        r
                        for r in rows
                        if (r["clip"], r["variant"], r["task"], r["dtype"]) == (clip.name, name, task, dt)
                    ]
                    for dt in DTYPES
                }
                med = {dt: statistics.median(r["latency_s"] for r in mine[dt]) for dt in DTYPES}
                tokens = {dt: statistics.median(r["output_tokens"] for r in mine[dt]) for dt in DTYPES}
                table.append(
                    {
                        "clip": clip.name,
                        "variant": name,
                        "task": task,
                        **{f"{dt}_s": round(med[dt], 3) for dt in DTYPES},
                        **{f"{dt}_tokens": tokens[dt] for dt in DTYPES},
                        "float32_speedup": round(med["bfloat16"] / med["float32"], 2),
                    }
                )
    report = {
        "cpu": compute.probe().describe(),
        "aten_capability_env": os.environ.get("ATEN_CPU_CAPABILITY", ""),
        "onednn_max_cpu_isa_env": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        "auto_choice": compute.choose("cpu", "bfloat16").dtype,
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "table": table,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"CPU: {report['cpu']}; auto picks {report['auto_choice']}; {report['threads']} threads")
    print("| clip | variant | task | bfloat16 (s) | float32 (s) | float32 speed-up | tokens bf16 / fp32 |")
    print("|---|---|---|---:|---:|---:|---:|")
    for t in table:
        print(
            f"| {t['clip']} | {t['variant']} | {t['task']} | {t['bfloat16_s']:.2f} | {t['float32_s']:.2f} | "
            f"{t['float32_speedup']:.2f}x | {t['bfloat16_tokens']:g} / {t['float32_tokens']:g} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
