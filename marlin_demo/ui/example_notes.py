"""Honest labels for cached examples: their figures were measured once, when the answer was cached.

A cached example appears in a fraction of a second, yet its metrics are those of the run that made
the cache (a cold load, a 20 s latency). While an example's answer is being made for the cache,
``caching()`` is on, and the metrics badge says when it was measured and that it is a stored run.
"""

from __future__ import annotations

import contextlib
import html
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

_CACHING: ContextVar[bool] = ContextVar("marlin_example_caching", default=False)


@contextlib.contextmanager
def caching() -> Iterator[None]:
    """Mark the outputs made inside as an example's cached answer (see ``cached_badge``)."""
    token = _CACHING.set(True)
    try:
        yield
    finally:
        _CACHING.reset(token)


def cached_badge(metrics: Mapping[str, Any], cold: bool, variant: str) -> str | None:
    """The run badge of a cached example's metrics, or None for a live request."""
    if not _CACHING.get():
        return None
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = metrics.get("load_s")
    how = (
        f"a cold run: {variant} was loaded for it ({load:.2f} s)"
        if cold and load is not None
        else ("a cold run" if cold else f"a warm run: {variant} was already loaded")
    )
    return (
        f'<span class="md-badge md-cached" data-cached="1">Cached example: these figures were measured '
        f"{html.escape(stamp)}, when this answer was cached ({html.escape(how)}); it is now shown from "
        "the cache, without running the model.</span>"
    )


def one_progress_area(demo: Any, examples: Any, target: Any) -> None:
    """An example that runs the model (its first click) shows its progress on ``target`` only.

    Gradio's example event otherwise puts a spinner on every output of the tab (six at once).
    """
    event = getattr(examples, "cache_event", None)
    block_fn = demo.fns.get(event.get("id")) if event is not None else None
    if block_fn is not None:
        block_fn.show_progress_on = [target]
