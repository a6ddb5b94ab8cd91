"""Synthetic long clips from the rendered examples, with exact ground truth (tests and bench).

Examples are concatenated in a cycle (sorted by name) until ``target_s`` is reached and re-encoded
once (concat filter, same size and fps as the examples), so segment k starts exactly at the sum of
the previous examples' durations; events and query spans are shifted by that offset. A query that
recurs gets one span per occurrence ("every time it happens"). Generated media is never committed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from marlin_demo.settings import EXAMPLES_DIR, EXAMPLES_FILE


def rendered(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered set only: same size and fps, so the concat filter keeps their times exact."""
    return [e for e in examples if e.get("set", "rendered") == "rendered"]


def long_clip_truth(examples: list[dict[str, Any]], target_s: float) -> dict[str, Any]:
    """Segments, events and multi-span queries of the concatenation (pure: no media touched)."""
    order = sorted(examples, key=lambda e: e["video"])
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
    ex_dir = Path(examples_dir)
    examples = rendered(json.loads((ex_dir / EXAMPLES_FILE).read_text()))
    truth = long_clip_truth(examples, target_s)
    out = Path(out_path)
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
    return truth
