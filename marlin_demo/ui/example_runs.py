"""The examples as the tabs list them, and their answers: a first click's live run, kept for the next."""

from __future__ import annotations

import contextlib
import html
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

Key = tuple[str, str, str, str]
"""(task, example clip name, variant, query): one example's answer."""


@dataclass(frozen=True)
class Kept:
    """A finished example answer and how it was made."""

    result: Any  # CaptionResult | FindResult
    cold: bool
    stamp: str  # when it was measured (UTC)


_REPLAY: ContextVar[Kept | None] = ContextVar("marlin_example_replay", default=None)


class ExampleAnswers:
    """Every example's finished answer, per (task, clip, variant, query); thread-safe, bounded."""

    def __init__(self, limit: int = 256) -> None:
        self._items: dict[Key, Kept] = {}
        self._lock = threading.Lock()
        self.limit = limit

    @staticmethod
    def key(task: str, example: Mapping[str, Any], variant: str, query: str | None = None) -> Key:
        return (task, str(example["video"]), variant, (query or "").strip())

    def get(self, key: Key) -> Kept | None:
        with self._lock:
            return self._items.get(key)

    def keep(self, key: Key, result: Any, cold: bool) -> Kept:
        kept = Kept(result, cold, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        with self._lock:
            self._items[key] = kept
            while len(self._items) > self.limit:
                self._items.pop(next(iter(self._items)))
        return kept


@contextlib.contextmanager
def replaying(kept: Kept) -> Iterator[None]:
    """The outputs made inside show ``kept``: its metrics badge says they are a stored run's."""
    token = _REPLAY.set(kept)
    try:
        yield
    finally:
        _REPLAY.reset(token)


def cached_badge(metrics: Mapping[str, Any], cold: bool, variant: str) -> str | None:
    """The run badge of a kept example answer shown again, or None for a live request."""
    kept = _REPLAY.get()
    if kept is None:
        return None
    load = metrics.get("load_s")
    how = f"a warm run: {variant} was already loaded"
    if cold:
        how = "a cold run" if load is None else f"a cold run: {variant} was loaded for it ({load:.2f} s)"
    return (
        f'<span class="md-badge md-cached" data-cached="1">Cached example: the model did not run now. '
        f"This answer and its figures come from the run that first answered it, {html.escape(kept.stamp)} "
        f"({html.escape(how)}).</span>"
    )


def short_name(example: Mapping[str, Any]) -> str:
    """An example's clip name without extension or underscores, for example labels."""
    return str(example["video"]).rsplit(".", 1)[0].replace("_", " ")


#: what a click on an example does (the note under them), per ``MARLIN_CACHE_EXAMPLES``
EXAMPLE_TIMING = {
    "lazy": "the first click runs the model as Run does; later clicks show that answer at once",
    "eager": "answered at start-up, then shown at once; until then a click runs the model",
    "off": "each click runs the model",
}


def example_labels(labels: Sequence[str], limit: int = 60) -> list[str]:
    """Example labels cut at a word boundary (never mid-word), with an ellipsis when cut."""
    return [
        label if len(label) <= limit else label[: limit + 1].rsplit(" ", 1)[0].rstrip(' ·,;:“"') + "…"
        for label in labels
    ]
