"""A third task with an answer of its own, as a contributor would add one: how many distinct events happen
in a clip. Its answer is a number (not caption's events or find's span), read by its own parser; the
module is all it takes besides registering ``COUNT`` (``tests/test_tasks.py`` does)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from marlin_demo.results import Metrics, Partial, Result, RunInfo, Window
from marlin_demo.tasks import Task
from marlin_demo.tasks.registry import Answer, Made, value

PROMPT = "How many distinct events happen in this video? Answer with one number."


@dataclass
class CountParse:
    """The number the answer gave (None: none could be read)."""

    count: int | None
    format_ok: bool
    repaired: bool = False
    repairs: list[str] = field(default_factory=list)


def parse_count(text: str) -> CountParse:
    """The first whole number in the text; in the asked format when the answer is that number alone."""
    found = re.search(r"\d+", text)
    return CountParse(None if found is None else int(found.group()), text.strip().isdigit())


def repair_count(parse: CountParse, duration: float | None) -> CountParse:
    """Events are told apart a second or more apart: a count above the clip's seconds is capped there."""
    most = None if duration is None else max(1, int(duration))
    if parse.count is None or most is None or parse.count <= most:
        return parse
    return CountParse(most, parse.format_ok, True, [*parse.repairs, f"capped {parse.count} events at {most}"])


@dataclass
class CountResult:
    variant: str
    model: str
    count: int | None
    raw: str
    metrics: Metrics
    format_ok: bool
    repaired: bool = False
    info: RunInfo = field(default_factory=RunInfo)
    #: each window's own count (one entry for a short clip)
    windows: list[int | None] = field(default_factory=list)
    partial: Partial | None = None
    range_s: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "model": self.model,
            "count": self.count,
            "windows": list(self.windows),
            "raw": self.raw,
            "format_ok": self.format_ok,
            "repaired": self.repaired,
            "metrics": self.metrics.to_dict(),
            "partial": None if self.partial is None else self.partial.to_dict(),
            "range": None if self.range_s is None else list(self.range_s),
        }


class CountAnswer(Answer):
    """A count: a long video's is the sum of its windows' counts."""

    form = "one number"
    returns = 'JSON {"variant": str, "model": str, "count": int or null, "windows": [int or null], ...}.'
    measures = (("same_count", "same count"),)

    def build(self, fixed: CountParse, made: Made) -> CountResult:
        return CountResult(
            made.variant, made.model, fixed.count, made.raw, made.metrics, fixed.format_ok, fixed.repaired,
            made.info, windows=[fixed.count],
        )  # fmt: skip

    def merge(self, windows: Sequence[tuple[Result, Window, float]], made: Made) -> CountResult:
        answers: list[Any] = [result for result, _, _ in windows]
        counts = [a.count for a in answers]
        made.info.repairs = [note for a in answers for note in a.info.repairs]
        total = None if all(c is None for c in counts) else sum(c or 0 for c in counts)
        ok, repaired = all(a.format_ok for a in answers), any(a.repaired for a in answers)
        return CountResult(
            made.variant, made.model, total, made.raw, made.metrics, ok, repaired, made.info, windows=counts
        )

    def text(self, result: Any) -> list[str]:
        said = "none could be read" if result.count is None else str(result.count)
        lines = [f"Events counted: {said}"]
        if len(result.windows) > 1:
            lines.append("Per window: " + ", ".join("?" if c is None else str(c) for c in result.windows))
        return lines

    def agree(self, a: Any, b: Any, min_iou: float) -> dict[str, float]:
        return {"same_count": float(value(a, "count") == value(b, "count"))}


COUNT = Task(
    name="count",
    help="how many distinct events happen in a video",
    prompt=lambda _query: PROMPT,
    parse=parse_count,
    repair=repair_count,
    answer=CountAnswer(),
    max_new_tokens="caption_max_new_tokens",
    window_s="caption_window_s",
    noun="a count",
    plural="counts",
)
