"""The line before Run against the run it prices, on the tiny checkpoint, on this machine.

    python benchmarks/bench_estimates.py                  # examples/ clips, ../shared/media/real when present
    python benchmarks/bench_estimates.py --clips examples/flower.mp4 --json out.json

One process, side by side. The variants are loaded first (load time is not part of a request, as in
bench_reuse.py); the engine keeps no frames and each run's prefix is dropped before it, so every run
reads its clip afresh, as the line prices it (and its figures price the next line). For each clip, each
task of the registry and each variant set (the default variant, then Compare's variants in turn), on a CPU:

- cold: the line's first figure ("about X to read it", ``cost.estimate`` at ``capacity.expected``) as this
  process said it before answering anything (the table's figures as measured, without the limits' margin);
- after: the same figure just before the run, priced from the process's last fresh answer of each variant;
- took: the request's measured time (``service.run``, each variant in turn), and the ratios.

Exits 1 when a ratio falls outside 0.5-2x (issue 52's goal for the tiny, locally).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOW, HIGH = 0.5, 2.0


def clips(given: list[str]) -> list[Path]:
    """The clips asked for, or the examples' and the real test clips' (``../shared/media/real``)."""
    if given:
        return [Path(c) for c in given]
    examples = json.loads((ROOT / "examples" / "examples.json").read_text(encoding="utf-8"))
    found = [ROOT / "examples" / e["video"] for e in examples]
    real = ROOT.parent / "shared" / "media" / "real"
    if real.is_dir():
        found += sorted(p for p in real.glob("*") if p.suffix in (".mp4", ".webm", ".mkv"))
    return [p for p in found if p.exists()]


def line_first_s(engine: Any, task: str, clip: Path, variants: list[str]) -> float:
    """The line's first figure for these variants in turn, as ``cost.estimate_line`` prices it now."""
    from marlin_demo.service import capacity, cost
    from marlin_demo.video import plan_sampling

    info = engine.info(clip)
    plan = plan_sampling(info, engine.params)
    total = 0.0
    for v in variants:
        speed = capacity.expected(engine.settings, "cpu", v)
        assert speed is not None, "the tiny's figures are in speeds.json"
        total += cost.estimate(task, plan, info.duration_s, engine.settings, speed, engine.params).first_s
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clips", nargs="*", default=[], help="video files (default: examples/ and real clips)")
    ap.add_argument("--query", default="a person walks into the room", help="for tasks that take one")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from marlin_demo import service
    from marlin_demo.engine import Engine
    from marlin_demo.settings import Settings
    from marlin_demo.tasks import TASKS

    settings = Settings(model="tiny", device="cpu")
    engine = Engine(settings)
    engine.store.size = 0  # no frames kept, and each run's prefix dropped before it: every read afresh
    compare = [v for v in settings.variant_list if v != "bf16"]  # Compare's variants (bf16 only when asked)
    for v in compare:
        engine.load(v)
    sets = [compare[:1], compare]  # Caption's and Find's default variant, then Compare's
    work = [(clip, task, vs) for clip in clips(args.clips) for task in TASKS for vs in sets]
    cold = {(c, t, tuple(vs)): line_first_s(engine, t, c, vs) for c, t, vs in work}  # nothing answered yet
    rows, bad = [], 0
    heads = ("cold", "after", "took", "cold/t", "after/t")
    print(f"{'clip':28} {'task':8} {'variants':16} " + " ".join(f"{h:>7}" for h in heads))
    for clip, task, vs in work:
        after = line_first_s(engine, task, clip, vs)
        query = args.query if TASKS[task].query else None
        t0 = time.perf_counter()
        for v in vs:
            engine.prefixes.clear()
            service.run(engine, task, clip, v, query)
        took = time.perf_counter() - t0
        first = cold[(clip, task, tuple(vs))]
        row = {"clip": clip.name, "task": task, "variants": vs, "cold_s": first, "after_s": after}
        row["took_s"] = took
        row |= {"cold_ratio": first / took, "after_ratio": after / took}
        rows.append(row)
        out = [r for r in (row["cold_ratio"], row["after_ratio"]) if not LOW <= r <= HIGH]
        bad += bool(out)
        print(
            f"{clip.name[:28]:28} {task:8} {'+'.join(vs):16} {first:7.2f} {after:7.2f} {took:7.2f} "
            f"{row['cold_ratio']:7.2f} {row['after_ratio']:7.2f}{'  outside' if out else ''}"
        )
    print(f"{bad} of {len(rows)} rows outside {LOW}-{HIGH}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
