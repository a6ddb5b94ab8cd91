"""``search``: full-text ranking of the caption windows, then find in the best only (docs/LIBRARY.md)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from marlin_demo import model_io
from marlin_demo.library.database import Hit, Store
from marlin_demo.results import FindResult, Window
from marlin_demo.settings import Settings, Variant

DEFAULT_TOP_K = 10
#: The find score's share of the combined score; the rest is the window's relevance beside the best one's
FIND_WEIGHT = 0.5


@dataclass
class SearchAnswer:
    """The answer; ``to_dict`` is the ``/search`` JSON. ``skipped``: videos changed since indexing."""

    query: str
    videos: int
    windows: int
    searched_windows: int
    moments: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "library": {"videos": self.videos, "windows": self.windows},
            "searched_windows": self.searched_windows,
            "moments": list(self.moments),
        }


def combined_score(find: float, retrieval: float, best_retrieval: float) -> float:
    """The documented ranking of moments across videos (both parts in [0, 1])."""
    rel = retrieval / best_retrieval if best_retrieval > 0 else 0.0
    return FIND_WEIGHT * min(1.0, max(0.0, find)) + (1 - FIND_WEIGHT) * min(1.0, max(0.0, rel))


def _window_of(start: float, end: float, hits: list[Hit]) -> Hit:
    """The chosen caption window a moment belongs to: the one holding its midpoint (else most overlap)."""
    mid = (start + end) / 2
    inside = [h for h in hits if h.start <= mid <= h.end]
    if inside:
        return max(inside, key=lambda h: h.retrieval)
    return max(hits, key=lambda h: min(end, h.end) - max(start, h.start))


def moments_of(result: FindResult, hits: list[Hit], best: float) -> list[dict[str, Any]]:
    """The answer's moments of one video, each with its caption window and combined score."""
    out = []
    for m in result.moments:
        h = _window_of(m.start, m.end, hits)
        out.append(
            {
                "video": h.name,
                "id": h.video,
                "start": round(m.start, 3),
                "end": round(m.end, 3),
                "score": round(combined_score(m.score, h.retrieval, best), 4),
                "retrieval_score": round(h.retrieval, 4),
                "window": [round(h.start, 3), round(h.end, 3)],
                "thumbnail": h.thumbnail,
            }
        )
    return out


def search_windows(store: Store, query: str, settings: Settings) -> int:
    """How many find windows a search for ``query`` would ask (stage 1 only): its cost, before it runs."""
    clean = model_io.sanitize_query(query, settings.max_query_chars)
    chosen = _by_video(store.stage1(clean, settings.search_candidates))
    return sum(_find_windows(hits, settings) for hits in chosen)


def _find_windows(hits: list[Hit], settings: Settings) -> int:
    """The find windows one video's chosen caption windows are asked in (a long caption window is several)."""
    from marlin_demo.service.library_find import find_bounds  # the request path (late: --help stays fast)

    return len(find_bounds([Window(h.k, h.start, h.end) for h in hits], max(h.end for h in hits), settings))


def _by_video(hits: list[Hit]) -> list[list[Hit]]:
    """Stage 1's hits grouped by video, in order of each video's best hit."""
    by_video: dict[str, list[Hit]] = {}
    for h in hits:
        by_video.setdefault(h.video, []).append(h)
    return list(by_video.values())


def search(
    store: Store,
    query: str,
    settings: Settings,
    engine: Callable[[], Any],
    variant: Variant,
    *,
    top_k: int = DEFAULT_TOP_K,
    progress: Callable[[int, int], None] | None = None,
    stop: threading.Event | None = None,
    visitor: str | None = None,
) -> SearchAnswer:
    """Both stages (``engine`` called only when stage 1 found windows); ``stop`` set: no further window."""
    clean = model_io.sanitize_query(query, settings.max_query_chars)
    if top_k < 1:
        raise ValueError(f"--top-k must be at least 1, got {top_k}.")
    if settings.search_candidates < 1:
        raise ValueError(f"search_candidates must be at least 1, got {settings.search_candidates}.")
    videos, windows = store.counts()
    hits = store.stage1(clean, settings.search_candidates)
    answer = SearchAnswer(clean, videos, windows, 0, [])
    if not hits:
        return answer
    from marlin_demo.service.library_find import find_in_windows  # the request path (late: --help stays fast)

    best = max(h.retrieval for h in hits)
    groups = _by_video(hits)
    total = sum(_find_windows(group, settings) for group in groups)
    if progress is not None:
        progress(0, total)
    model = engine()
    for group in groups:
        if stop is not None and stop.is_set():
            break
        path = group[0].path
        if not os.path.isfile(path):
            answer.skipped.append(f"{group[0].name}: the file is gone since it was indexed (rerun index).")
            continue
        wins = [Window(h.k, h.start, h.end) for h in group]
        try:
            result = find_in_windows(model, path, clean, variant, wins, stop, visitor)
        except ValueError as exc:  # the video (not the query: it is clean) cannot be read now
            answer.skipped.append(f"{group[0].name}: {exc}")
            continue
        answer.moments += moments_of(result, group, best)
        answer.searched_windows += _find_windows(group, settings)
        if progress is not None:
            progress(answer.searched_windows, total)
    answer.moments = sorted(answer.moments, key=lambda m: (-m["score"], m["video"], m["start"]))[:top_k]
    return answer
