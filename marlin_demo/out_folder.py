"""The files a command keeps on disk in its --out folder (bench, batch; the data in them is
``results``'): run.json, the set-up a resume must match, and JSONL records appended one at a time, so
that a kill loses at most the line being written."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"


def now() -> str:
    """The time stamp of run.json, every record and every library entry: UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


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


def write_json(path: Path, data: Any) -> Path:
    """Write through a temporary file and a rename: a kill leaves the old file or the new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def open_out(
    out: Path,
    fingerprint: dict[str, Any],
    fresh: bool,
    records: str,
    others: Sequence[str],
    error: type[Exception],
) -> dict[str, Any] | None:
    """Create --out or check it against its run.json (returned; None: a new run). ``fresh`` deletes the run's
    files first; a file, a bad run.json, another set-up or records alone raise ``error``."""
    if out.exists() and not out.is_dir():
        raise error(f"--out {out} is a file: give a folder.")
    if fresh and out.is_dir():
        for name in (RUN_FILE, records, *others):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    run_path = out / RUN_FILE
    if run_path.exists():
        try:
            previous: dict[str, Any] = json.loads(run_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            raise error(f"{run_path} is damaged: use a new --out, or --fresh to start over.") from None
        old = previous.get("fingerprint", {})
        diffs = [f"{k}: {old.get(k)!r} -> {v!r}" for k, v in fingerprint.items() if old.get(k) != v]
        if diffs:
            raise error(
                f"{out} holds results of a different set-up ({'; '.join(diffs)}): "
                "use a new --out, or --fresh to start over there."
            )
        return previous
    if (out / records).exists():
        raise error(
            f"{out} has {records} but no {RUN_FILE}: use a new --out, or --fresh to start over there."
        )
    return None
