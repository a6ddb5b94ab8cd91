"""How long the tiny stand-in's captions are, per clip: output tokens, whether it ended, latency.

    python benchmarks/tiny_captions.py --checkpoint v3=~/.cache/marlin-demo/tiny-v3/gptq \
        --checkpoint v4=~/.cache/marlin-demo/tiny-v4/gptq --out docs/tiny_captions.json

Each checkpoint is loaded as an extra variant of ``--model tiny`` and captions every clip of
``examples/``, ``../shared/media`` and ``../shared/media/real`` (those that exist), the
checkpoints taking turns clip by clip so that their latencies are measured side by side under
the same machine load. Token counts are deterministic (greedy decoding); latencies are not.
Prints a Markdown table (the one in docs/TINY.md) and writes the raw rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VIDEO_SUFFIXES = {".mp4", ".webm", ".mkv", ".mov"}


def clips() -> list[Path]:
    """Every clip of the examples and of the shared media folders (skipped when absent)."""
    folders = [ROOT / "examples", ROOT.parent / "shared" / "media", ROOT.parent / "shared" / "media" / "real"]
    found: list[Path] = []
    for folder in folders:
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES)
    return found


def label(clip: Path) -> str:
    """``examples/x.mp4`` or ``shared/media/...``: the same names in every checkout."""
    return str(clip.relative_to(ROOT if clip.is_relative_to(ROOT) else ROOT.parent))


def print_table(rows: list[dict], names: list[str], max_new_tokens: int) -> None:
    """The Markdown table of docs/TINY.md."""
    print("| clip | " + " | ".join(f"{n} tokens | {n} format | {n} s" for n in names) + " |")
    print("|---|" + "---:|:---:|---:|" * len(names))
    by_clip: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_clip.setdefault(row["clip"], {})[row["checkpoint"]] = row
    for clip, per in by_clip.items():
        cells = []
        for n in names:
            mark = "" if per[n]["ended"] else " (limit)"
            fmt = "Scene/Events" if per[n]["format_ok"] else "no"
            cells += [f"{per[n]['output_tokens']}{mark}", fmt, f"{per[n]['latency_s']:.1f}"]
        print(f"| {clip} | " + " | ".join(cells) + " |")
    cells = []
    for n in names:
        mine = [r for r in rows if r["checkpoint"] == n]
        cells += [
            f"median {statistics.median(r['output_tokens'] for r in mine):g}",
            f"{sum(r['format_ok'] for r in mine)} of {len(mine)}",
            f"median {statistics.median(r['latency_s'] for r in mine):.1f}",
        ]
    print("| **all clips** | " + " | ".join(cells) + " |")
    for n in names:
        mine = [r for r in rows if r["checkpoint"] == n]
        ended = sum(r["ended"] for r in mine)
        print(f"\n{n}: {ended} of {len(mine)} captions ended before the {max_new_tokens}-token limit")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", action="append", required=True, help="NAME=DIR of a tiny checkpoint")
    parser.add_argument("--max-new-tokens", type=int, default=768)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--table-from", type=Path, help="print the table of rows saved by --out, run nothing")
    args = parser.parse_args(argv)
    names = [c.partition("=")[0] for c in args.checkpoint]
    if args.table_from:
        print_table(json.loads(args.table_from.read_text()), names, args.max_new_tokens)
        return 0

    from marlin_demo.engine import Engine
    from marlin_demo.settings import Settings

    settings = Settings(
        model="tiny",
        variants="",
        extra_variants=",".join(args.checkpoint),
        caption_max_new_tokens=args.max_new_tokens,
        prefix_cache_size=0,
    )
    engine = Engine(settings)
    for name in names:
        engine.load(name)
    rows = []
    for clip in clips():
        engine.prepare(clip)  # decode once, outside the timed runs, for every checkpoint alike
        for name in names:
            r = engine.caption(clip, name)
            m = r.metrics
            row = {
                "clip": label(clip),
                "checkpoint": name,
                "output_tokens": m.output_tokens,
                "ended": m.output_tokens < args.max_new_tokens,
                "latency_s": round(m.latency_s, 2),
                "events": len(r.events),
                "repaired": r.repaired,
                "format_ok": r.format_ok,
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")

    print_table(rows, names, args.max_new_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
