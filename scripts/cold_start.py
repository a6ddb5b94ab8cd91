"""The app's cold start, environment against environment: process start to the first page served.

    python scripts/cold_start.py --python lean=/path/to/python --python full=/other/python [--runs 3]
    python scripts/cold_start.py --python app=.venv/bin/python --stub-rewrite [--runs 4]

Each run starts ``PYTHON app.py --model tiny`` on a free loopback port (the tiny checkpoint already built in
MARLIN_CACHE_DIR, so only imports and the start-up are timed), polls ``GET /`` until it answers 200, and
stops the server. The environments take turns run by run, so a busy moment of the machine falls on both.
``--stub-rewrite`` adds, for each python, an arm that imports Gradio before the app can skip its stub
rewrite (``ui.gradio_hooks.skip_stub_rewrite``), the app as it would start without that hook.
Prints one JSON object: each arm's wall seconds per run and median, and the server process's CPU seconds
at that moment (user + system: steadier than wall time on a shared machine).
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


#: ``python -c REWRITE app.py ...``: Gradio imported (its stubs rewritten) before app.py runs
REWRITE = (
    "import sys, runpy, gradio.component_meta; sys.argv = sys.argv[1:]; sys.path.insert(0, ''); "
    "runpy.run_path('app.py', run_name='__main__')"
)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process, threads included (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cold_start(python: str, prelude: tuple[str, ...] = (), timeout_s: float = 300.0) -> tuple[float, float]:
    """(wall seconds from starting the process to ``GET /`` answering 200, the server's CPU seconds then)."""
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
        argv = [python, *prelude, "app.py", "--model", "tiny", "--host", "127.0.0.1", "--port", str(port)]
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
                            return time.monotonic() - start, cpu_seconds(proc.pid)
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
    parser.add_argument(
        "--stub-rewrite", action="store_true", help="also each python with Gradio's stub rewrite"
    )
    args = parser.parse_args()
    arms: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, python in (item.split("=", 1) for item in args.python):
        arms[name] = (python, ())
        if args.stub_rewrite:
            arms[f"{name}+stub-rewrite"] = (python, ("-c", REWRITE))
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    for _ in range(args.runs):
        for name, (python, prelude) in arms.items():
            runs[name].append(cold_start(python, prelude))
    out = {
        name: {
            "runs_s": [round(wall, 2) for wall, _ in r],
            "median_s": round(statistics.median(wall for wall, _ in r), 2),
            "cpu_s": [round(cpu, 2) for _, cpu in r],
            "median_cpu_s": round(statistics.median(cpu for _, cpu in r), 2),
        }
        for name, r in runs.items()
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
