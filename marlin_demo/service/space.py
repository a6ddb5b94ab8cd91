"""Hugging Face Space helpers: ZeroGPU calls and GPU-time estimates, no-ops everywhere else.

A ``spaces.GPU`` call asking for too little is killed, one asking for much more lowers the visitor's
queue priority: so each window is its own call (``gpu_call``) sized from the measured speeds
(``capacity``), the page streams between calls and a Stop between them holds no GPU. Each call runs in
a forked process. Off ZeroGPU nothing here imports ``spaces`` (``app.py`` imports it before CUDA).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

from marlin_demo.engine import EngineError
from marlin_demo.service import capacity, zerogpu
from marlin_demo.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_GPU_S = capacity.MAX_GPU_S

#: Extra seconds for the first GPU call of this process: Triton compiles fla's and GPTQ's kernels at their
#: first launch (49 s on an H200, docs/GPU_CHECK.md) and keeps them on disk; a find alone asks for 15 s.
FIRST_CALL_COMPILE_S = 60
_warm = threading.Event()


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


def estimate_gpu_seconds(video_s: float, settings: Settings, runs: int = 1, task: str = "caption") -> int:
    """Seconds a request's calls ask ZeroGPU for, added up: one full window's call per window, ``runs``
    variants in turn (each only its call's admission check; a call is charged the time it uses)."""
    return runs * capacity.request_gpu_s(task, video_s, settings, capacity.speeds()["h200"])


def call_seconds(task: str, settings: Settings, share: float = 1.0) -> int:
    """Seconds one window's (or one short clip's) call asks for; ``share``: its frames' share of a full
    window's prefill (``capacity.prefill_share``)."""
    return capacity.gpu_call_s(task, settings, capacity.speeds()["h200"], share)


def asked_seconds(seconds: int, device: str) -> int:
    """What a call sized for ``seconds`` asks for: until one call has run here, room for the first launch's
    compile as well (on CUDA only: a CPU launches no Triton kernel), as far as a visitor's day without an
    account allows, so the first visitor after a restart is not refused for it."""
    if device != "cuda" or _warm.is_set():
        return seconds
    day = int(zerogpu.daily_quota_s("unauthenticated") / zerogpu.duration_factor())
    return max(seconds, min(seconds + FIRST_CALL_COMPILE_S, day, MAX_GPU_S))


class GpuRefused(EngineError):
    """ZeroGPU refused (or stopped) a call: the message is the visitor's one sentence, ``refusal`` what
    ``spaces`` said; a request with windows answered before it returns them instead (``partial``)."""

    def __init__(self, refusal: zerogpu.Refusal) -> None:
        super().__init__(zerogpu.refusal_sentence(refusal))
        self.refusal = refusal


Work = Callable[[Callable[[str], None] | None, Callable[[Any], None] | None], T]


def gpu_call(
    work: Work[T],
    seconds: int,
    on_text: Callable[[str], None] | None,
    on_stage: Callable[[Any], None] | None,
) -> T:
    """Run ``work(on_text, on_stage)`` as one ``spaces.GPU`` call of ``seconds``.

    The arguments cross to the forked process pickled (the engine by reference, ``Engine.__reduce__``).
    A generator, so text and stages stream back; a caller that stops listening (``on_text`` raises)
    closes the call and the GPU with it. A refusal becomes ``GpuRefused`` with its sentence.
    """
    result: Any = None
    try:
        with contextlib.closing(gpu_function()(work, seconds)) as items:
            for kind, value in items:
                if kind == "text" and on_text is not None:
                    on_text(value)
                elif kind == "stage" and on_stage is not None:
                    on_stage(value)
                elif kind == "done":
                    result = value
    except Exception as exc:
        refusal = zerogpu.read_refusal(exc)
        if refusal is None:
            raise
        log.warning("ZeroGPU refused a %s s call: %s", seconds, refusal)
        raise GpuRefused(refusal) from None
    _warm.set()  # Triton's kernels are on disk now: later calls ask for their own time only
    return result  # type: ignore[no-any-return]


_DECORATED: list[Callable[..., Generator[tuple[str, Any], None, None]]] = []


def gpu_function() -> Callable[..., Generator[tuple[str, Any], None, None]]:
    """The one ``spaces.GPU`` function, decorated once: the app does it at start-up, before launch, as
    ZeroGPU requires (it reports the decorated functions when the app launches)."""
    if not _DECORATED:
        import spaces

        _DECORATED.append(spaces.GPU(duration=_call_seconds)(_in_gpu_call))
    return _DECORATED[0]


def _call_seconds(work: Work[Any], seconds: int) -> int:
    """``spaces.GPU``'s dynamic duration: the seconds the caller sized this call for."""
    return seconds


def _in_gpu_call(work: Work[Any], seconds: int) -> Iterator[tuple[str, Any]]:
    """Inside the GPU call (ZeroGPU's forked process): ``work`` in a thread, its callbacks turned into
    items: ("text", t), ("stage", s), ("done", r)."""
    items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def target() -> None:
        try:
            items.put(("done", work(lambda t: items.put(("text", t)), lambda s: items.put(("stage", s)))))
        except BaseException as exc:
            items.put(("error", exc))

    threading.Thread(target=target, daemon=True, name="marlin-gpu-call").start()
    while True:
        kind, value = items.get()
        if kind == "error":
            raise value
        yield kind, value
        if kind == "done":
            return
