"""Load test: N concurrent gradio_client requests against the app on 127.0.0.1 (bounded in count and time).

    python scripts/load_test.py --start --requests 200 --concurrency 8     # starts `app.py --model tiny`
    python scripts/load_test.py --url http://127.0.0.1:7860 --server-pid PID --temp-dir DIR

Every request must end in a result or the clear "queue is full" error, never a server error;
a fresh probe request must be answered promptly throughout; after warm-up, the server's
memory and its temporary-file folder must stop growing. Only loopback addresses are accepted.
Prints one JSON report and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def require_loopback(url: str) -> None:
    """Load is only ever sent to this machine."""
    host = urlparse(url).hostname or ""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        addresses = set()
    if not addresses or not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        raise SystemExit(f"error: {url} is not a loopback address; the load test only targets 127.0.0.1")


def folder_size(folder: Path | None) -> tuple[int, int]:
    if folder is None or not folder.exists():
        return 0, 0
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        import psutil

        proc = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20
    except Exception:
        return None


def start_server(port: int, temp_dir: Path, queue_size: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        GRADIO_TEMP_DIR=str(temp_dir / "gradio"),
        GRADIO_EXAMPLES_CACHE=str(temp_dir / "examples-cache"),
        MARLIN_OUTPUT_DIR=str(temp_dir / "outputs"),
        GRADIO_ANALYTICS_ENABLED="False",
    )
    cmd = [sys.executable, "app.py", "--model", "tiny", "--port", str(port), "--queue-size", str(queue_size)]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def wait_ready(url: str, timeout_s: float = 300.0) -> None:
    import httpx

    require_loopback(url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)  # readiness polling, not synchronisation
    raise SystemExit(f"error: {url} did not come up within {timeout_s:.0f} s")


def run_load(
    url: str,
    requests: int = 200,
    concurrency: int = 8,
    warmup: int = 10,
    max_seconds: float = 1200.0,
    server_pid: int | None = None,
    temp_dirs: list[Path] | None = None,
) -> dict[str, Any]:
    """Fire the requests, probe responsiveness, sample memory and temp folders; return the figures."""
    import httpx
    from gradio_client import Client, handle_file

    require_loopback(url)
    clips = sorted(EXAMPLES.glob("*.mp4"))
    local = threading.local()
    started = time.monotonic()

    def one(i: int) -> tuple[str, float, str]:
        # one client (one session) per thread, as each visitor has their own; the samples name the
        # exception's type, since some (a client's CancelledError, an httpx read error) have no text
        if not hasattr(local, "client"):
            local.client = Client(url, verbose=False)
        client = local.client
        clip = handle_file(str(clips[i % len(clips)]))
        t0 = time.perf_counter()
        try:
            if i % 3 == 0:
                out = client.predict(clip, "gptq", api_name="/caption")
                ok = "events" in out
            else:
                variant = ["gptq", "bnb4"][i % 2]
                out = client.predict(clip, f"something happens {i}", variant, api_name="/find")
                ok = "span" in out
            return ("ok" if ok else "bad-shape", time.perf_counter() - t0, "")
        except Exception as exc:
            text = str(exc)
            kind = "queue-full" if "queue is full" in text.lower() else "error"
            return (kind, time.perf_counter() - t0, f"{type(exc).__name__}: {text}"[:200])

    for i in range(warmup):  # warm-up: models loaded, caches filled
        one(i)
    base_rss = rss_mb(server_pid)
    base_tmp = [folder_size(d) for d in temp_dirs or []]

    probes: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                httpx.get(url + "/gradio_api/info", timeout=30)
                probes.append(time.perf_counter() - t0)
            except httpx.HTTPError:
                probes.append(float("inf"))
            stop.wait(1.0)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    results: list[tuple[str, float, str]] = []
    samples: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for wave in range(0, requests, concurrency):
            if time.monotonic() - started > max_seconds:
                break
            results += list(pool.map(one, range(wave, min(wave + concurrency, requests))))
            samples.append(
                {
                    "done": len(results),
                    "rss_mb": rss_mb(server_pid),
                    "temp": [folder_size(d) for d in temp_dirs or []],
                }
            )
    stop.set()
    prober.join(timeout=5)

    kinds = [r[0] for r in results]
    lat = sorted(r[1] for r in results if r[0] == "ok")
    half = samples[len(samples) // 2] if samples else {}
    end = samples[-1] if samples else {}
    report = {
        "url": url,
        "requests": len(results),
        "concurrency": concurrency,
        "ok": kinds.count("ok"),
        "queue_full": kinds.count("queue-full"),
        "errors": kinds.count("error") + kinds.count("bad-shape"),
        "error_samples": [r[2] for r in results if r[0] in ("error", "bad-shape")][:5],
        "latency_s": {
            "p50": round(statistics.median(lat), 3) if lat else None,
            "p95": round(lat[int(0.95 * (len(lat) - 1))], 3) if lat else None,
            "max": round(lat[-1], 3) if lat else None,
        },
        "probe_s": {"n": len(probes), "max": round(max(probes), 3) if probes else None},
        "rss_mb": {"after_warmup": base_rss, "halfway": half.get("rss_mb"), "end": end.get("rss_mb")},
        "temp_files": {"after_warmup": base_tmp, "halfway": half.get("temp"), "end": end.get("temp")},
        "rss_trend_mb": [round(x["rss_mb"]) for x in samples if x.get("rss_mb") is not None],
        "wall_s": round(time.monotonic() - started, 1),
    }
    report["checks"] = checks(report)
    return report


def checks(r: dict[str, Any]) -> dict[str, bool]:
    """Pass/fail per goal; growth is judged from halfway to the end, after warm-up effects settle."""
    rss = r["rss_mb"]
    mem_ok = rss["halfway"] is None or rss["end"] is None or rss["end"] <= rss["halfway"] * 1.10 + 50
    tmp = r["temp_files"]
    tmp_ok = tmp["halfway"] is None or all(
        end[0] <= half[0] and end[1] <= half[1] * 1.05 + 1_000_000
        for half, end in zip(tmp["halfway"], tmp["end"] or [], strict=False)
    )
    probe_ok = r["probe_s"]["max"] is not None and r["probe_s"]["max"] < 5.0
    return {
        "no_server_errors": r["errors"] == 0,
        "every_request_answered": r["ok"] + r["queue_full"] == r["requests"],
        "prompt_probe": probe_ok,
        "memory_flat": mem_ok,
        "temp_files_flat": tmp_ok,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="a running app (loopback only)")
    parser.add_argument("--start", action="store_true", help="start `app.py --model tiny` for the test")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--queue-size", type=int, default=16, help="with --start: the app's queue size")
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--server-pid", type=int, default=None)
    parser.add_argument("--temp-dir", action="append", default=[], help="folders that must not grow")
    args = parser.parse_args(argv)
    if args.requests > 2000 or args.concurrency > 64:
        parser.error("bounded: at most 2000 requests and 64 concurrent")
    proc = None
    temp_dirs = [Path(t) for t in args.temp_dir]
    url = args.url
    if args.start:
        scratch = Path(tempfile.mkdtemp(prefix="marlin-load-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = start_server(port, scratch, args.queue_size)
        url = f"http://127.0.0.1:{port}"
        args.server_pid = proc.pid
        temp_dirs += [scratch / "gradio", scratch / "outputs"]
    if not url:
        parser.error("give --url or --start")
    require_loopback(url)  # before any traffic: only this machine is ever a target
    try:
        wait_ready(url)
        report = run_load(url, args.requests, args.concurrency, args.warmup, args.max_seconds,
                          args.server_pid, temp_dirs)  # fmt: skip
    finally:
        if proc is not None:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)
    print(json.dumps(report, indent=2))
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
