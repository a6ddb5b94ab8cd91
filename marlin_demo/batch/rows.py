"""One item -> one row of ``OUT/results.jsonl`` (append + flush + fsync each), in a local loop or on Ray Data
(an actor pool of ``BatchWorker`` on ``library.cluster``'s runtime, as ``index --ray``); the driver's one
``ResultsWriter`` writes both, so the rows are the same; also sidecars, run.json and summary.json."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from marlin_demo.library.cluster import EngineWorker, rows_on_ray
from marlin_demo.library.inputs import Item, failure
from marlin_demo.out_folder import RUN_FILE, append_jsonl, now, open_out, read_jsonl, write_json
from marlin_demo.subtitles import to_srt, to_webvtt
from marlin_demo.tasks import get_task

RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
SIDECAR_DIR = "sidecars"


def run_item(engine: Any, item: Item, task: str, variant: str) -> dict[str, Any]:
    """The API's caption/find JSON plus id, video, task, status (and error, reason) and duration_s."""
    from marlin_demo import service  # the one request path (imported late: the CLI's --help stays fast)

    row: dict[str, Any] = {"id": item.id, "video": item.video, "task": task}
    asks = get_task(task).query
    try:
        query = item.query if asks else None
        result = service.run(engine, task, item.path, variant, query, start_s=item.start, end_s=item.end)
    except Exception as exc:
        reason, sentence = failure(exc)
        row.update(status="error", reason=reason, error=sentence, variant=variant)
        if asks:
            row["query"] = item.query
        return row
    row["status"] = "ok"
    row.update(result.to_dict())
    row["duration_s"] = round(float(result.info.duration_s), 3)
    return row


def record(row: dict[str, Any], writer: Any, bar: Any) -> None:
    """Write one row (on disk before the next starts) and move the progress bar; a failure's line too."""
    writer.write(row)
    if row["status"] == "error":
        bar.write(f"{row['id']}: {row['error']}", file=sys.stderr)
    bar.update(1)


def run_local(engine: Any, items: list[Item], task: str, variant: str, writer: Any, bar: Any) -> None:
    """One process, items in order."""
    for item in items:
        record(run_item(engine, item, task, variant), writer, bar)


class BatchWorker(EngineWorker):
    """``batch --ray``'s actor: each item's row for ``task``."""

    def __init__(self, settings: Any, task: str, variant: str) -> None:
        super().__init__(settings, variant)
        self.task = task

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        return run_item(self.engine, Item(**record), self.task, self.variant)


def run_ray(
    settings: Any,
    items: list[Item],
    task: str,
    variant: str,
    writer: Any,
    bar: Any,
    address: str | None,
    workers: int,
    gpus_per_worker: float | None,
) -> None:
    kwargs = {"settings": settings, "task": task, "variant": variant}
    records = [dataclasses.asdict(i) for i in items]
    for row in rows_on_ray(BatchWorker, kwargs, records, address, workers, gpus_per_worker):
        record(row, writer, bar)


class BatchError(ValueError):
    """An unusable --out: one line for the user."""


def read_rows(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Rows on disk, and whether a torn last line (killed mid-write) was cut off the file."""
    data = path.read_bytes() if path.exists() else b""
    cut = data.rfind(b"\n") + 1
    repaired = cut < len(data)
    if repaired:
        with path.open("r+b") as fh:
            fh.truncate(cut)
            fh.flush()
            os.fsync(fh.fileno())
    return [rec for rec in read_jsonl(path) if "id" in rec], repaired


def safe_name(item_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._#-]+", "_", item_id).strip("._") or "item"


class ResultsWriter:
    """Owns --out: checks the settings fingerprint, resumes, appends rows, writes the summary."""

    def __init__(self, out: Path, fingerprint: dict[str, Any], fresh: bool = False, sidecars: bool = False):
        self.out = out
        self.sidecars = sidecars
        run = open_out(out, fingerprint, fresh, RESULTS_FILE, (SUMMARY_FILE,), BatchError)
        if run is None:
            run = {"created": now(), "fingerprint": fingerprint, "sessions": []}
            write_json(out / RUN_FILE, run)
        self.run = run
        rows, self.repaired = read_rows(out / RESULTS_FILE)
        self.done: dict[str, dict[str, Any]] = {r["id"]: r for r in rows}
        self._started = time.perf_counter()
        self._written = 0

    def pending(self, items: list[Any]) -> list[Any]:
        """Items without a row; a row whose id now names another video is a mismatch."""
        for item in items:
            row = self.done.get(item.id)
            if row is not None and row.get("video") != item.video:
                raise BatchError(
                    f"{RESULTS_FILE} row {item.id!r} is for {row.get('video')}, not {item.video}: "
                    "use a new --out, or --fresh to start over there."
                )
        return [item for item in items if item.id not in self.done]

    def write(self, row: dict[str, Any]) -> None:
        append_jsonl(self.out / RESULTS_FILE, row)
        self.done[row["id"]] = row
        self._written += 1
        if self.sidecars and row.get("status") == "ok":
            self._sidecars(row)

    def _sidecars(self, row: dict[str, Any]) -> None:
        folder = self.out / SIDECAR_DIR
        folder.mkdir(exist_ok=True)
        stem = folder / safe_name(row["id"])
        if "span" in row:  # a span's answer: one cue, named by its query
            span = row.get("span")
            events = [] if span is None else [{"start": span[0], "end": span[1], "description": row["query"]}]
        else:
            events = row.get("events", [])
        stem.with_name(stem.name + ".json").write_text(json.dumps(row, indent=2, ensure_ascii=False) + "\n")
        stem.with_name(stem.name + ".vtt").write_text(to_webvtt(events), encoding="utf-8")
        stem.with_name(stem.name + ".srt").write_text(to_srt(events), encoding="utf-8")

    def finish(self, items: list[Any], mode: str, workers: int) -> dict[str, Any]:
        """Record this session and write summary.json (recomputed from every row on disk)."""
        wall = round(time.perf_counter() - self._started, 3)
        session = dict(finished=now(), wall_s=wall, rows=self._written, mode=mode, workers=workers)
        self.run.setdefault("sessions", []).append(session)
        write_json(self.out / RUN_FILE, self.run)
        summary = summarize(list(self.done.values()), items, self.run["sessions"])
        write_json(self.out / SUMMARY_FILE, summary)
        return summary


def _pct(values: list[float], q: float) -> float | None:
    import numpy as np

    return round(float(np.percentile(values, q)), 3) if values else None


def summarize(rows: list[dict[str, Any]], items: list[Any], sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, failures by reason, throughput over the sessions that wrote rows, latency, duration."""
    ok = [r for r in rows if r.get("status") == "ok"]
    failures = Counter(r.get("reason", "error") for r in rows if r.get("status") == "error")
    ids = {r["id"] for r in rows}
    active = [s for s in sessions if s.get("rows")]
    wall = sum(s["wall_s"] for s in active)
    written = sum(s["rows"] for s in active)
    latencies = [r["metrics"]["latency_s"] for r in ok if r.get("metrics")]
    return {
        "items": len(items),
        "rows": len(rows),
        "ok": len(ok),
        "error": len(rows) - len(ok),
        "pending": sum(1 for i in items if i.id not in ids),
        "failures": dict(sorted(failures.items())),
        "videos_per_hour": round(written / wall * 3600, 1) if wall > 0 else None,
        "latency_s": {"p50": _pct(latencies, 50), "p95": _pct(latencies, 95)},
        "total_video_duration_s": round(sum(float(r.get("duration_s") or 0) for r in ok), 3),
        "wall_s": round(wall, 3),
        "sessions": len(sessions),
    }
