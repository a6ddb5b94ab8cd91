"""What a bench run asks (one request per variant, task, clip, query, repeat) and the files it keeps in --out
(append-only JSONL records for a resume, run.json for the set-up)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marlin_demo.bench.environment import environment
from marlin_demo.datasets import Example, Query
from marlin_demo.out_folder import RUN_FILE, now, open_out
from marlin_demo.settings import EXAMPLES_DIR, Variant
from marlin_demo.tasks import TASKS, get_task

SCHEMA = 1
DEFAULT_VARIANTS = "gptq,bnb4"
DEFAULT_REPEATS = 3
DEFAULT_OUT = "bench-out"
DEFAULT_DATA = EXAMPLES_DIR
REQUESTS_FILE = "requests.jsonl"
VARIANTS_FILE = "variants.jsonl"
RESULT_FILES = tuple(
    "results.json results.csv summary.md quality.png latency.png memory.png latency_distribution.png "
    "sets.png".split()
)


class BenchError(ValueError):
    """Bad arguments or an unusable --out: one line for the user."""


@dataclass(frozen=True)
class Request:
    variant: Variant
    task: str
    example: Example
    query: Query | None
    repeat: int

    @property
    def key(self) -> tuple[str, str, str, str | None, int]:
        query = self.query.query if self.query else None
        return (self.variant, self.task, self.example.name, query, self.repeat)


def record_key(rec: dict[str, Any]) -> tuple[str, str, str, str | None, int]:
    return (rec["variant"], rec["task"], rec["video"], rec.get("query"), int(rec["repeat"]))


def asks(example: Example, task: str) -> list[Query | None]:
    """What a task asks of one example (its entry's ``examples``): a query with its true spans, every one
    the example lists (find's), else the one its answer's ``truth`` gives."""
    entry, data, listed = get_task(task), example.to_dict(), {q.query: q for q in example.queries}
    return [
        q if q is None else listed.get(q) or Query(q, entry.answer.truth(data, q))
        for q in entry.examples(data)
    ]


def plan_requests(
    examples: Sequence[Example], variant: str, tasks: Sequence[str], repeats: int
) -> list[Request]:
    """Repeats are whole passes over the data (not back-to-back copies of one request)."""
    return [
        Request(variant, name, ex, q, rep)
        for rep in range(repeats)
        for ex in examples
        for name in (t for t in TASKS if t in tasks)
        for q in asks(ex, name)
    ]


def prepare_out(out: Path, fp: dict[str, Any], fresh: bool) -> dict[str, Any]:
    """Create/validate --out; returns the run.json content (old one when resuming)."""
    previous = open_out(out, fp, fresh, REQUESTS_FILE, (VARIANTS_FILE, *RESULT_FILES), BenchError)
    if previous is not None:
        return previous
    run = {"schema": SCHEMA, "created": now(), "fingerprint": fp, "environment": environment()}
    (out / RUN_FILE).write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    return run
