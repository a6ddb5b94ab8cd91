"""The run's files in --out: append-only JSONL records (resume) and run.json (the set-up)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from marlin_demo.bench.environment import environment
from marlin_demo.bench.matrix import SCHEMA, BenchError

RUN_FILE = "run.json"
REQUESTS_FILE = "requests.jsonl"
VARIANTS_FILE = "variants.jsonl"
RESULT_FILES = tuple(
    "results.json results.csv summary.md quality.png latency.png memory.png latency_distribution.png "
    "sets.png".split()
)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (interrupted write) is skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record and flush it to disk (a torn previous line gets its own line)."""
    needs_newline = False
    if path.exists() and path.stat().st_size:
        with path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            needs_newline = fh.read(1) != b"\n"
    with path.open("a", encoding="utf-8") as fh:
        if needs_newline:
            fh.write("\n")
        fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def prepare_out(out: Path, fp: dict[str, Any], fresh: bool) -> dict[str, Any]:
    """Create/validate --out; returns the run.json content (old one when resuming)."""
    if out.exists() and not out.is_dir():
        raise BenchError(f"--out {out} is a file: give a folder.")
    if fresh and out.is_dir():
        for name in (RUN_FILE, REQUESTS_FILE, VARIANTS_FILE, *RESULT_FILES):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    run_path = out / RUN_FILE
    if run_path.exists():
        try:
            previous = json.loads(run_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            raise BenchError(f"{run_path} is damaged: use a new --out, or --fresh to start over.") from None
        old = previous.get("fingerprint", {})
        diffs = [f"{k}: {old.get(k)!r} -> {v!r}" for k, v in fp.items() if old.get(k) != v]
        if diffs:
            raise BenchError(
                f"{out} holds results of a different set-up ({'; '.join(diffs)}): "
                "use a new --out, or --fresh to start over there."
            )
        return previous
    if (out / REQUESTS_FILE).exists():
        raise BenchError(
            f"{out} has {REQUESTS_FILE} but no {RUN_FILE}: use a new --out, or --fresh to start over there."
        )
    run = {"schema": SCHEMA, "created": _now(), "fingerprint": fp, "environment": environment()}
    run_path.write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    return run
