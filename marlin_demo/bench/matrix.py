"""What a bench run asks: one request per (variant, task, clip, query, repeat)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marlin_demo.datasets import Example, Query
from marlin_demo.settings import EXAMPLES_DIR, Variant
from marlin_demo.tasks import TASKS, get_task

SCHEMA = 1
DEFAULT_VARIANTS = "gptq,bnb4"
DEFAULT_REPEATS = 3
DEFAULT_OUT = "bench-out"
DEFAULT_DATA = EXAMPLES_DIR


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
    """What a task asks of one example: each of its queries (a task that takes one), else one request
    where the example has events to score against."""
    if get_task(task).query:
        return list(example.queries)
    return [None] if example.has_caption_truth else []


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
