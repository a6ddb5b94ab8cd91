"""Fair queue: how long a short caption waits behind a long video, against its time alone (one run).

Over the Gradio client on loopback: a short clip's caption alone (median of a few), the long video's
caption alone (its windows' length), then the long video again with short captions sent one after
another once its first window has started (every run warm: the long video's windows are decoded
by a first, unmeasured run; with --start the app keeps no prefix, so every window prefills its video
as a server answering many different videos does). Prints each figure and the ratio of the short captions'
wait behind the long one to the goal (1.5x the short alone plus one window of the long one): at most
1.0 meets it. Before the scheduler, a short caption waited for every window of the long video.

    python scripts/fair_queue.py --start            # starts `app.py --model tiny` on a free port
    python scripts/fair_queue.py --url http://127.0.0.1:7860
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_test import ROOT, require_loopback, start_server, wait_ready

EXAMPLES = ROOT / "examples"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def long_clip(folder: Path, seconds: float) -> Path:
    """A long video from the project's examples (bench.longset), built once into ``folder``."""
    sys.path.insert(0, str(ROOT))
    from marlin_demo.bench.longset import build_long_clip

    out = folder / f"long{int(seconds)}.mp4"
    if not out.exists():
        build_long_clip(out, target_s=seconds)
    return out


def timed_caption(client: Any, video: Path) -> float:
    from gradio_client import handle_file

    t0 = time.perf_counter()
    client.predict(handle_file(str(video)), "gptq", api_name="/caption")
    return time.perf_counter() - t0


def long_alone(client: Any, video: Path) -> tuple[float, list[float]]:
    """The long caption's total time and each window's time (between window starts)."""
    from gradio_client import handle_file

    starts: list[float] = []
    t0 = time.perf_counter()
    job = client.submit(handle_file(str(video)), "gptq", api_name="/caption_stream")
    seen = 0
    for msg in job:
        if msg.get("window") and msg["window"] > seen:
            seen = msg["window"]
            starts.append(time.perf_counter())
    total = time.perf_counter() - t0
    ends = [*starts[1:], t0 + total]
    return total, [e - s for s, e in zip(starts, ends, strict=True)]


def behind_long(client: Any, video: Path, short: Path, n: int) -> tuple[list[float], float]:
    """Short captions sent one after another once the long one's first window started."""
    from gradio_client import handle_file

    t0 = time.perf_counter()
    job = client.submit(handle_file(str(video)), "gptq", api_name="/caption_stream")
    for msg in job:  # the stream is read until window 1 is being written
        if msg.get("window"):
            break
    waits = [timed_caption(client, short) for _ in range(n)]
    for _ in job:
        pass
    return waits, time.perf_counter() - t0


def measure(url: str, long_s: float, shorts: int, work: Path) -> dict[str, Any]:
    from gradio_client import Client

    require_loopback(url)
    client = Client(url, verbose=False)
    short = EXAMPLES / "blue_square.mp4"
    video = long_clip(work, long_s)
    timed_caption(client, short)  # warm-up: the variant is loaded, the clip decoded
    long_alone(client, video)  # warm-up: the long video's windows decoded
    alone = [timed_caption(client, short) for _ in range(shorts)]
    long_total, windows = long_alone(client, video)  # warm, as it runs behind the shorts below
    behind, long_behind = behind_long(client, video, short, shorts)
    short_alone, window = statistics.median(alone), max(windows)
    goal = 1.5 * short_alone + window
    return {
        "short_alone_s": round(short_alone, 3),
        "long_alone_s": round(long_total, 3),
        "long_windows": len(windows),
        "longest_window_s": round(window, 3),
        "short_behind_long_s": [round(w, 3) for w in behind],
        "long_with_shorts_s": round(long_behind, 3),
        "goal_s": round(goal, 3),
        "worst_wait_over_goal": round(max(behind) / goal, 3),
        "before_scheduler_estimate_s": round(long_total + short_alone, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="a running app (loopback only)")
    parser.add_argument("--start", action="store_true", help="start `app.py --model tiny` for the run")
    parser.add_argument("--long-s", type=float, default=200.0, help="length of the long video (s)")
    parser.add_argument("--shorts", type=int, default=3, help="short captions alone and behind the long one")
    parser.add_argument("--json", default="", help="also write the figures here")
    args = parser.parse_args(argv)
    if bool(args.url) == bool(args.start):
        parser.error("give --url or --start")
    with tempfile.TemporaryDirectory(prefix="marlin-fair-") as tmp:
        work = Path(tmp)
        proc = None
        url = args.url
        if args.start:
            # every window prefills its video again (as a server answering many videos does): no reuse
            os.environ.setdefault("MARLIN_PREFIX_CACHE", "0")
            port = free_port()
            proc = start_server(port, work, queue_size=16)
            url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url)
            report = measure(url, args.long_s, args.shorts, work)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=60)
    print(json.dumps(report, indent=2))
    worst = max(report["short_behind_long_s"])
    print(
        f"short caption: {report['short_alone_s']:.2f} s alone, worst {worst:.2f} s "
        f"behind a {report['long_windows']}-window caption (goal {report['goal_s']:.2f} s = 1.5x alone + one "
        f"{report['longest_window_s']:.2f} s window): {report['worst_wait_over_goal']:.2f}x the goal"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["worst_wait_over_goal"] <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
