"""Agreement between variants and scores against ground truth (pure Python), one module for the Compare tab,
``/compare`` and the benchmark (each task's ``Answer.agree`` / ``score``); see tests/test_compare.py."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from functools import lru_cache
from itertools import combinations
from pathlib import Path
from typing import Any

from marlin_demo.datasets import read_examples
from marlin_demo.settings import EXAMPLES_DIR, EXAMPLES_FILE
from marlin_demo.tasks import get_task
from marlin_demo.video.digest import cached_file_digest

DEFAULT_EXAMPLES_JSON = EXAMPLES_DIR / EXAMPLES_FILE


def agreement(task: str, results: Mapping[str, Any], min_iou: float = 0.3) -> dict[str, dict[str, float]]:
    """Pairwise agreement for every pair of variants, keyed ``"a|b"`` in the given order."""
    compare = get_task(task).answer.agree
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
    video_path: str | os.PathLike[str] | None, examples_json: str | os.PathLike[str] = DEFAULT_EXAMPLES_JSON
) -> dict[str, Any] | None:
    """The example whose clip this is, by content hash, else by file name only when the reference clip is
    missing (so another upload called ``ball_rolls.mp4`` is not scored against the ball's truth)."""
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


def compare_payload(
    task: str, query: str | None, results: Mapping[str, Any], example: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``/compare`` JSON: results per variant, pairwise agreement, and scores when truth exists."""
    payload: dict[str, Any] = {
        "task": task,
        "query": query if get_task(task).query else None,
        "results": {name: dict(r) if isinstance(r, Mapping) else r.to_dict() for name, r in results.items()},
        "agreement": agreement(task, results),
    }
    if example is not None:
        score = get_task(task).answer.score
        scores = {name: score(r, example, query) for name, r in results.items()}
        if any(scores.values()):
            payload["scores"] = scores
    return payload
