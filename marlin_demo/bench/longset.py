"""Synthetic long clips from the rendered examples, with exact ground truth (tests and bench): the
examples back to back, so each segment's truth shifts by its start (docs/BENCHMARK.md, the long set)."""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marlin_demo.datasets import load_dataset
from marlin_demo.exits import fail
from marlin_demo.models.tiny import default_cache_dir
from marlin_demo.settings import EXAMPLES_DIR

LONG_SET = "long"
LONG_SET_VERSION = 1
LONG_SET_DURATIONS = (150.0, 360.0)
"""Two clips: 3 caption / 6 find windows, and the issue's 6-minute clip (6 / 15 windows)."""


def rendered(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered set only: same size and fps, so the concat filter keeps their times exact."""
    return [e for e in examples if e.get("set", "rendered") == "rendered"]


def long_clip_truth(examples: list[dict[str, Any]], target_s: float, start: int = 0) -> dict[str, Any]:
    """The concatenation's segments, events and multi-span queries (pure); ``start`` rotates the cycle."""
    order = sorted(examples, key=lambda e: e["video"])
    order = order[start % len(order) :] + order[: start % len(order)]
    segments: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    queries: dict[str, list[list[float]]] = {}
    t = 0.0
    k = 0
    while t < target_s:
        ex = order[k % len(order)]
        segments.append({"video": ex["video"], "start": t, "end": t + ex["duration"]})
        events += [{**e, "start": e["start"] + t, "end": e["end"] + t} for e in ex["events"]]
        for q in ex["queries"]:
            queries.setdefault(q["query"], []).append([q["span"][0] + t, q["span"][1] + t])
        t += ex["duration"]
        k += 1
    return {
        "duration": t,
        "segments": segments,
        "events": events,
        "queries": [{"query": q, "spans": s} for q, s in queries.items()],
    }


def build_long_clip(
    out_path: str | Path, target_s: float = 360.0, examples_dir: str | Path = EXAMPLES_DIR
) -> dict[str, Any]:
    """Write the concatenated clip (H.264) and ``<out>.json`` with its truth; returns the truth."""
    truth = long_clip_truth(rendered([ex.to_dict() for ex in load_dataset(examples_dir)]), target_s)
    _encode(Path(examples_dir), truth, Path(out_path))
    return truth


def _encode(ex_dir: Path, truth: dict[str, Any], out: Path) -> None:
    """Concatenate the truth's segments into ``out`` and write ``<out>.json`` with the truth."""
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    for seg in truth["segments"]:
        argv += ["-i", str(ex_dir / seg["video"])]
    n = len(truth["segments"])
    graph = "".join(f"[{i}:v:0]" for i in range(n)) + f"concat=n={n}:v=1:a=0[v]"
    argv += ["-filter_complex", graph, "-map", "[v]", "-c:v", "libx264", "-preset", "ultrafast",
             "-pix_fmt", "yuv420p", str(out)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"ffmpeg failed to build the long clip: {proc.stderr.strip()[-300:]}")
    truth["video"] = out.name
    out.with_suffix(".json").write_text(json.dumps(truth, indent=1))


def default_long_set_dir() -> Path:
    """``<user cache>/long-set-v<N>``: the tiny model's cache folder (``MARLIN_CACHE_DIR`` overrides it)."""
    return default_cache_dir() / f"long-set-v{LONG_SET_VERSION}"


def long_set_entry(
    examples: list[dict[str, Any]], target_s: float, start: int = 0, queries_per_example: int | None = None
) -> dict[str, Any]:
    """One examples.json entry of the long set (pure): the first ``queries_per_example`` queries (None: all)
    of each example with every true span; each distinct example's scene once, as the answer joins windows'."""
    truth = long_clip_truth(examples, target_s, start)
    by_video = {e["video"]: e for e in examples}
    used = [by_video[seg["video"]] for seg in truth["segments"]]
    scenes = dict.fromkeys(ex["scene"] for ex in used if ex.get("scene"))  # each once, in order
    keep = {q["query"] for ex in used for q in ex["queries"][:queries_per_example]}
    return {
        "video": f"long_{target_s:g}s.mp4",
        "title": f"{len(truth['segments'])} rendered examples back to back ({truth['duration']:g} s)",
        "set": LONG_SET,
        "duration": truth["duration"],
        "scene": " ".join(scenes),
        "events": truth["events"],
        "queries": [
            {"query": q["query"], "spans": q["spans"]} for q in truth["queries"] if q["query"] in keep
        ],
        "segments": truth["segments"],
    }


def build_long_set(
    out_dir: str | Path | None = None,
    durations: Sequence[float] = LONG_SET_DURATIONS,
    queries_per_example: int | None = None,
    examples_dir: str | Path = EXAMPLES_DIR,
) -> Path:
    """Write the long set's clips (clip k starts its cycle at example k) and ``examples.json``."""
    examples = rendered([ex.to_dict() for ex in load_dataset(examples_dir)])
    root = Path(out_dir) if out_dir is not None else default_long_set_dir()
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for k, target in enumerate(durations):
        entry = long_set_entry(examples, float(target), k, queries_per_example)
        clip = root / entry["video"]
        truth = long_clip_truth(examples, float(target), k)
        stamp = clip.with_suffix(".json")
        known = json.loads(stamp.read_text()) if stamp.is_file() and clip.is_file() else None
        if not known or known.get("segments") != truth["segments"]:
            _encode(Path(examples_dir), truth, clip)
        entries.append(entry)
    (root / "examples.json").write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    return root


def resolve_data(data: str | None) -> Path | None:
    """``bench --data long``: the long set's folder (built when missing); None for any other value."""
    return build_long_set(durations=LONG_SET_DURATIONS) if data == LONG_SET else None


def add_long_set_parser(sub: Any) -> None:
    """``build-long-set [--out DIR] [--durations 150,360] [--queries-per-example N]``."""
    p = sub.add_parser(
        "build-long-set",
        help="build the long-video set (concatenated rendered examples, exact truth) for bench --data",
        description=(
            "Concatenate the rendered examples into long clips with exact ground truth (events, and "
            "every occurrence of each query) and write OUT/examples.json for `bench --data OUT`. "
            "`bench --data long` builds the default set into the user cache and runs it."
        ),
    )
    p.add_argument("--out", default=None, help=f"folder to write (default {default_long_set_dir()})")
    p.add_argument(
        "--durations",
        default=",".join(f"{d:g}" for d in LONG_SET_DURATIONS),
        help="comma-separated clip lengths in seconds (default %(default)s)",
    )
    p.add_argument(
        "--queries-per-example", type=int, default=None, help="keep the first N queries of each example"
    )
    p.set_defaults(func=cmd_build_long_set)


def cmd_build_long_set(args: argparse.Namespace) -> int:
    try:
        durations = [float(x) for x in args.durations.split(",") if x.strip()]
    except ValueError:
        durations = []
    if not durations or any(d <= 0 for d in durations):
        return fail(f"--durations {args.durations!r}: give clip lengths in seconds, e.g. 150,360.")
    if args.queries_per_example is not None and args.queries_per_example < 1:
        return fail("--queries-per-example must be at least 1.")
    root = build_long_set(args.out, durations, args.queries_per_example)
    print(f"Wrote {root / 'examples.json'}: {len(durations)} long clip(s); run `bench --data {root}`.")
    return 0
