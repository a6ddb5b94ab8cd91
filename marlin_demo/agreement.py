"""Agreement between variants and scores against ground truth (pure Python: no gradio, no torch).

One module for the Compare tab, ``/compare`` and the benchmark, so a visitor sees the benchmark's
numbers. Pairs are keyed ``"a|b"`` in the order the results were given; find compares spans by
temporal IoU (a missing span counts as 0.0), caption by matched events (``min_iou`` 0.3) and
ROUGE-L. Results may be result objects or their ``to_dict()`` shapes (stored benchmark rows).
Conventions tested in ``tests/test_compare.py``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from functools import lru_cache
from itertools import combinations
from pathlib import Path
from typing import Any

from marlin_demo import metrics
from marlin_demo.datasets import read_examples
from marlin_demo.results import CaptionResult, FindResult
from marlin_demo.settings import EXAMPLES_DIR, EXAMPLES_FILE
from marlin_demo.tasks import get_task
from marlin_demo.video.digest import cached_file_digest

__all__ = [
    "DEFAULT_EXAMPLES_JSON",
    "agreement",
    "compare_payload",
    "ground_truth_for",
    "load_examples",
    "normalize_query",
    "score_against_truth",
    "truth_span",
]

DEFAULT_EXAMPLES_JSON = EXAMPLES_DIR / EXAMPLES_FILE


def _get(result: Any, name: str, default: Any = None) -> Any:
    return result.get(name, default) if isinstance(result, Mapping) else getattr(result, name, default)


def _span(result: Any) -> tuple[float, float] | None:
    span = _get(result, "span")
    return None if span is None else (float(span[0]), float(span[1]))


def _events(result: Any) -> list[Any]:
    return list(_get(result, "events", []) or [])


def _to_dict(result: Any) -> dict[str, Any]:
    return dict(result) if isinstance(result, Mapping) else result.to_dict()


def _span_agreement(a: Any, b: Any, min_iou: float) -> dict[str, float]:
    return {"span_iou": metrics.temporal_iou(_span(a), _span(b))}


def _event_agreement(a: Any, b: Any, min_iou: float) -> dict[str, float]:
    ev_a, ev_b = _events(a), _events(b)
    scores = metrics.event_scores(ev_a, ev_b, min_iou=min_iou)
    text_a = metrics.caption_text(str(_get(a, "scene", "") or ""), ev_a)
    text_b = metrics.caption_text(str(_get(b, "scene", "") or ""), ev_b)
    return {
        "event_iou": float(scores["mean_matched_iou"]),
        "event_f1": float(scores["f1"]),
        "rouge_l": metrics.rouge_l(text_a, text_b),
    }


#: how two variants' answers are compared, by the task's result type (``tasks.Task.result``)
COMPARISONS: dict[type, Callable[[Any, Any, float], dict[str, float]]] = {
    FindResult: _span_agreement,
    CaptionResult: _event_agreement,
}


def agreement(task: str, results: Mapping[str, Any], min_iou: float = 0.3) -> dict[str, dict[str, float]]:
    """Pairwise agreement for every pair of variants, keyed ``"a|b"`` in the given order."""
    compare = COMPARISONS[get_task(task).result]
    return {
        f"{name_a}|{name_b}": compare(a, b, min_iou)
        for (name_a, a), (name_b, b) in combinations(results.items(), 2)
    }


@lru_cache(maxsize=16)
def _parsed_examples(path: str, size: int, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    del size, mtime_ns  # part of the cache key only: a changed file is read again
    return tuple(example.to_dict() for example in read_examples(path))


def _cached_examples(examples_json: str | os.PathLike[str]) -> tuple[dict[str, Any], ...]:
    """The parsed examples, read again only when the file's size or mtime changed: never mutate them."""
    path = Path(examples_json)
    try:
        st = path.stat()
    except OSError:
        return ()
    return _parsed_examples(str(path.resolve()), st.st_size, st.st_mtime_ns)


def load_examples(examples_json: str | os.PathLike[str] = DEFAULT_EXAMPLES_JSON) -> list[dict[str, Any]]:
    """The ground-truth list, or [] when the file is absent or unreadable (examples are optional)."""
    return copy.deepcopy(list(_cached_examples(examples_json)))


def _file_digest(path: Path) -> str | None:
    try:
        return cached_file_digest(path)
    except OSError:
        return None


def ground_truth_for(
    video_path: str | os.PathLike[str] | None,
    examples_json: str | os.PathLike[str] = DEFAULT_EXAMPLES_JSON,
) -> dict[str, Any] | None:
    """The example whose clip this is, matched by content hash, else by file name: a name counts
    only when the reference clip is missing, so another upload called ``ball_rolls.mp4`` is not
    scored against the ball's ground truth."""
    if not video_path:
        return None
    path = Path(video_path)
    examples = _cached_examples(examples_json)
    if not examples or not path.is_file():
        return None
    folder = Path(examples_json).parent
    size = path.stat().st_size
    by_name = None
    for example in examples:
        ref = folder / str(example["video"])
        if not ref.is_file():
            if Path(str(example["video"])).name == path.name:
                by_name = example
            continue
        # Sizes first: an upload is only hashed when some reference clip has its exact size.
        if ref.stat().st_size == size and _file_digest(ref) == _file_digest(path):
            return copy.deepcopy(example)
    return None if by_name is None else copy.deepcopy(by_name)


def normalize_query(query: str | None) -> str:
    """Casefolded, whitespace-collapsed, without trailing punctuation or quotes: for matching queries."""
    text = " ".join(str(query or "").casefold().split())
    return text.strip(" .!?\"'\u201c\u201d")


def truth_span(example: Mapping[str, Any], query: str | None) -> tuple[float, float] | None:
    """The reference span of ``query`` in an example, or None when the example has no such query."""
    wanted = normalize_query(query)
    if not wanted:
        return None
    for item in example.get("queries", []) or []:
        if normalize_query(item.get("query")) == wanted and item.get("span") is not None:
            return float(item["span"][0]), float(item["span"][1])
    return None


def score_against_truth(
    task: str, result: Any, example: Mapping[str, Any], query: str | None = None
) -> dict[str, Any]:
    """Score one result against an example's ground truth; {} when there is nothing to score against."""
    if get_task(task).result is FindResult:
        ref = truth_span(example, query if query is not None else _get(result, "query"))
        if ref is None:
            return {}
        scores: dict[str, Any] = dict(metrics.grounding_scores([_span(result)], [ref]))
        scores["ref_span"] = [ref[0], ref[1]]
        return scores
    ref_events = list(example.get("events", []) or [])
    ref_scene = str(example.get("scene", "") or "")
    if not ref_events and not ref_scene:
        return {}
    return metrics.caption_scores(
        str(_get(result, "scene", "") or ""), _events(result), ref_scene, ref_events
    )


def compare_payload(
    task: str,
    query: str | None,
    results: Mapping[str, Any],
    example: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``/compare`` JSON: results per variant, pairwise agreement, and scores when truth exists."""
    payload: dict[str, Any] = {
        "task": task,
        "query": query if get_task(task).query else None,
        "results": {name: _to_dict(r) for name, r in results.items()},
        "agreement": agreement(task, results),
    }
    if example is not None:
        scores = {name: score_against_truth(task, r, example, query) for name, r in results.items()}
        if any(scores.values()):
            payload["scores"] = scores
    return payload
