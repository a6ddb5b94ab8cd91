"""The run's files in --out: append-only JSONL records (resume) and run.json (the set-up)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from marlin_demo.bench.environment import environment
from marlin_demo.bench.matrix import SCHEMA, BenchError
from marlin_demo.records import RUN_FILE, now, open_out

REQUESTS_FILE = "requests.jsonl"
VARIANTS_FILE = "variants.jsonl"
RESULT_FILES = tuple(
    "results.json results.csv summary.md quality.png latency.png memory.png latency_distribution.png "
    "sets.png".split()
)


def prepare_out(out: Path, fp: dict[str, Any], fresh: bool) -> dict[str, Any]:
    """Create/validate --out; returns the run.json content (old one when resuming)."""
    previous = open_out(out, fp, fresh, REQUESTS_FILE, (VARIANTS_FILE, *RESULT_FILES), BenchError)
    if previous is not None:
        return previous
    run = {"schema": SCHEMA, "created": now(), "fingerprint": fp, "environment": environment()}
    (out / RUN_FILE).write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    return run
