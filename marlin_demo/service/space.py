"""Hugging Face Space helpers: ZeroGPU decoration and GPU-time estimates, no-ops everywhere else.

On a ZeroGPU Space a GPU is attached only while a function decorated with
``spaces.GPU`` runs, for at most its ``duration``; asking for less than needed
kills the request, asking for much more lowers the visitor's queue priority.
So the duration is estimated per request from the clip's length. Off ZeroGPU
the decorator returns the function unchanged and ``spaces`` is never imported
(it must be imported before CUDA is initialised, which ``app.py`` ensures by
importing this module first).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from marlin_demo.longvideo.plan import plan_for
from marlin_demo.results import Task
from marlin_demo.settings import Settings

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

MIN_GPU_S = 30
MAX_GPU_S = 300


def on_space() -> bool:
    """True when running as a Hugging Face Space (the platform sets SPACE_ID)."""
    return bool(os.environ.get("SPACE_ID"))


def zero_gpu() -> bool:
    """True on ZeroGPU hardware (``spaces.config.Config.zero_gpu``; env SPACES_ZERO_GPU)."""
    if not on_space() and not os.environ.get("SPACES_ZERO_GPU"):
        return False
    try:
        from spaces.config import Config
    except ImportError:
        return False
    return bool(Config.zero_gpu)


def video_seconds(path: str | os.PathLike[str] | None) -> float:
    """The clip's duration for sizing a GPU slot; 0.0 when it cannot be read (bad input fails later).

    Remembered per file (resolved path, size, mtime): a repeat request does not probe it again.
    """
    if not path or not Path(path).is_file():
        return 0.0
    try:
        p = Path(path).resolve()
        st = p.stat()
        return _probe_seconds(str(p), st.st_size, st.st_mtime_ns)
    except Exception:
        return 0.0


@functools.lru_cache(maxsize=64)
def _probe_seconds(path: str, size: int, mtime_ns: int) -> float:
    """``probe(path).duration_s``; size and mtime only key the cache (an edited file is probed again)."""
    from marlin_demo.video import probe

    return float(probe(path).duration_s)


def _first_path(args: Iterable[Any]) -> str | None:
    for value in args:
        if isinstance(value, str | os.PathLike) and Path(value).suffix:
            return str(value)
    return None


def estimate_gpu_seconds(video_s: float, settings: Settings, runs: int = 1, task: Task = "caption") -> int:
    """Seconds of GPU to ask for: a fixed part (load, prefill) plus generation that grows with the clip.

    Marlin samples at most 240 frames (2 minutes at 2 fps), so one clip's length stops mattering
    beyond 120 s. Captions write up to 768 tokens; find answers are one short line. A long video is
    answered in the windows ``longvideo.plan.plan_for`` gives for these settings, each window costing
    what a clip of its length does.
    """
    video_s = max(video_s, 0.0)
    try:
        lengths = [w.end - w.start for w in plan_for(task, video_s, settings, limit=False)] or [video_s]
    except ValueError:  # no usable duration: size it as one clip
        lengths = [video_s]
    fixed = 25.0 if task == "caption" else 10.0
    per_run = sum(fixed + 0.25 * min(n, 120.0) for n in lengths)
    return int(min(MAX_GPU_S, max(MIN_GPU_S, 15.0 + runs * per_run)))


def duration_for(task: Task, settings: Settings, runs: int | Callable[..., int] = 1) -> Callable[..., int]:
    """A ``spaces.GPU(duration=...)`` callable: it receives the handler's own arguments."""

    def estimate(*args: Any, **kwargs: Any) -> int:
        path = _first_path([*args, *kwargs.values()])
        n = runs(*args, **kwargs) if callable(runs) else runs
        return estimate_gpu_seconds(video_seconds(path), settings, n, task)

    return estimate


def gpu(duration_fn: Callable[..., int]) -> Callable[[F], F]:
    """Decorate a model-running handler with ``spaces.GPU`` on ZeroGPU; return it unchanged elsewhere."""

    def wrap(fn: F) -> F:
        if not zero_gpu():
            return fn
        import spaces

        return spaces.GPU(duration=duration_fn)(fn)  # type: ignore[return-value]

    return wrap
