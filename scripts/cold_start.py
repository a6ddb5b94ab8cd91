"""The app's cold start, environment against environment: process start to the first page served.

    python scripts/cold_start.py --python lean=/path/to/python --python full=/other/python [--runs 3]

Each run starts ``PYTHON app.py --model tiny`` on a free loopback port (the tiny checkpoint already built in
MARLIN_CACHE_DIR, so only imports and the start-up are timed), polls ``GET /`` until it answers 200, and
stops the server. The environments take turns run by run, so a busy moment of the machine falls on both.
Prints one JSON object: each environment's seconds per run and median.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cold_start(python: str, timeout_s: float = 300.0) -> float:
    """Seconds from starting the process to ``GET /`` answering 200."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "GRADIO_ANALYTICS_ENABLED": "False",
            "HF_HUB_OFFLINE": "1",
            "GRADIO_TEMP_DIR": str(Path(tmp) / "uploads"),
            "GRADIO_EXAMPLES_CACHE": str(Path(tmp) / "examples-cache"),
            "MARLIN_OUTPUT_DIR": str(Path(tmp) / "out"),
        }
        env.pop("SPACE_ID", None)
        argv = [python, "app.py", "--model", "tiny", "--host", "127.0.0.1", "--port", str(port)]
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            while time.monotonic() - start < timeout_s:
                if proc.poll() is not None:
                    raise RuntimeError(f"{python} app.py exited with {proc.returncode}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as reply:
                        if reply.status == 200:
                            return time.monotonic() - start
                except (urllib.error.URLError, OSError):
                    pass
                time.sleep(0.05)  # readiness polling of a starting server
            raise TimeoutError(f"no page within {timeout_s:.0f} s")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", action="append", required=True, help="NAME=PATH of a python (repeat)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    pythons = dict(item.split("=", 1) for item in args.python)
    seconds: dict[str, list[float]] = {name: [] for name in pythons}
    for _ in range(args.runs):
        for name, python in pythons.items():
            seconds[name].append(round(cold_start(python), 2))
    out = {name: {"runs_s": s, "median_s": statistics.median(s)} for name, s in seconds.items()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
