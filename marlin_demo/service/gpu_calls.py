"""How this app makes its ZeroGPU calls (``zerogpu_rules`` holds what ZeroGPU allows): each sized
per window from the measured speeds (too little is killed, too much lowers the queue priority:
docs/DESIGN.md); no-ops and no ``spaces`` import elsewhere."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import math
import os
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

from marlin_demo.engine import Engine, EngineError, graphs, warmup
from marlin_demo.longvideo import runner
from marlin_demo.models import pick_device
from marlin_demo.service import capacity, zerogpu_rules
from marlin_demo.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_GPU_S = capacity.MAX_GPU_S

#: Seconds for Triton's first-launch compile of the kernels (docs/GPU_CHECK.md), asked for by the start-up
#: call (``warm_up``), or by the first visitor's call when that failed.
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


def call_seconds(task: str, settings: Settings, share: float = 1.0, decode: str = "eager") -> int:
    """Seconds one window's (or short clip's) call asks for; ``share``: its frames' share of a full window's
    prefill; ``decode``: how its variant decodes (``Engine.decode_expected``)."""
    speed = capacity.for_decode(capacity.speeds()["h200"], decode)
    return capacity.gpu_call_s(task, settings, speed, share)


def asked_seconds(seconds: int, device: str) -> int:
    """What a call sized for ``seconds`` asks for: until a call has run here, room for the first launch's
    compile too (CUDA only), so the first visitor after a restart is not refused for it."""
    if device != "cuda" or _warm.is_set():
        return seconds
    day = int(zerogpu_rules.daily_quota_s("unauthenticated") / zerogpu_rules.duration_factor())
    return max(seconds, min(seconds + FIRST_CALL_COMPILE_S, day, MAX_GPU_S))


def first_call_note(device: str) -> str:
    """What a visitor reads when the start-up call did not warm the kernels, while it changes what their
    call asks (``asked_seconds``: on CUDA, until a call has run here); "" otherwise."""
    more = asked_seconds(0, device)
    if not more:
        return ""
    left = capacity.charged_s(more, zerogpu_rules.duration_factor())
    return (
        f"The next GPU call asks ZeroGPU for up to {more} s more than its own work, to compile the GPU "
        f"kernels (the Space could not do it at start-up), so it needs up to {left} s more of your daily "
        "GPU quota left to start; it is still charged only the time it uses."
    )


class GpuRefused(EngineError):
    """ZeroGPU refused (or stopped) a call: the message is the visitor's one sentence, ``refusal`` what
    ``spaces`` said; a request with windows answered before it returns them instead (``partial``)."""

    def __init__(self, refusal: zerogpu_rules.Refusal, asked_s: int | None = None) -> None:
        super().__init__(zerogpu_rules.refusal_sentence(refusal, asked_s, capacity.MIN_GPU_S))
        self.refusal = refusal


@contextlib.contextmanager
def gpu_call(
    work: Callable[..., Any], seconds: int, decode: str = "eager"
) -> Iterator[Iterator[runner.Item]]:
    """``work`` as one ``spaces.GPU`` call of ``seconds``: its items ``runner.threaded``'s in the call's
    process, streamed back over its pipe; a refusal raises ``GpuRefused``; closing the items ends the call."""
    within = graphs.required if decode == "graphs" else contextlib.nullcontext
    try:
        with contextlib.closing(gpu_function()(work, within, seconds=seconds)) as items:
            yield items
    except Exception as exc:
        refusal = zerogpu_rules.read_refusal(exc)
        if refusal is None:
            raise
        log.warning("ZeroGPU refused a %s s call: %s", seconds, refusal)
        raise GpuRefused(refusal, seconds) from None
    _warm.set()  # Triton's kernels are on disk now: later calls ask for their own time only


_DECORATED: list[Callable[..., Generator[runner.Item, None, None]]] = []


def gpu_function() -> Callable[..., Generator[runner.Item, None, None]]:
    """The one ``spaces.GPU`` function, ``runner.threaded`` decorated once: the app does it at start-up,
    before launch, as ZeroGPU requires (it reports the decorated functions when the app launches)."""
    if not _DECORATED:
        import spaces

        # the dynamic duration: the seconds the caller sized the call for
        _DECORATED.append(spaces.GPU(duration=lambda work, within, seconds: seconds)(runner.threaded))
    return _DECORATED[0]


def uncharged(work: Callable[[], None], name: str) -> threading.Thread:
    """``work`` in a daemon thread in an empty context: its ZeroGPU calls are charged to no visitor."""
    thread = threading.Thread(target=contextvars.Context().run, args=(work,), name=name, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- the start-up call


def warm_up_seconds(settings: Settings, variants: int) -> int:
    """What the start-up call asks for: the first compile, then per variant one full window's work and its
    step's check at ``warmup.TOKENS`` tokens, at the eager rate, within one call's longest."""
    speed = capacity.speeds()["h200"]
    one = capacity.model_s("caption", settings.with_(caption_max_new_tokens=warmup.TOKENS), speed)
    one += warmup.TOKENS / speed.decode_tokens_per_s  # the check: no prefill, the prefix is reused
    return int(min(MAX_GPU_S, math.ceil(FIRST_CALL_COMPILE_S + variants * capacity.GPU_MARGIN * one)))


def warm_up(engine: Engine) -> str:
    """The start-up call: each loaded variant once on ``warmup``'s clip, so kernels compile before any
    visitor and graphs run only where ``warmup.check`` passed; "" if it ran, else the page's (no raise)."""
    variants = [v for v in engine.variants if engine.is_loaded(v)]
    if not variants:
        return ""
    seconds = warm_up_seconds(engine.settings, len(variants))
    # built here: the call's forked process finds it built, and no GPU time is spent on it
    warmup.warm_clip(pick_device(engine.settings.device))
    done: list[warmup.Warmed] = []
    try:
        work = functools.partial(_warm_up_work, engine, tuple(variants))
        with gpu_call(work, seconds) as items:
            kind, last = list(items)[-1]  # its answer, or the exception it raised
        if kind == "error":
            raise last
        done = last
        failed = [w.line() for w in done if w.error]
    except Exception as exc:  # refused, the call's process died...: the app starts all the same
        failed = [f"{type(exc).__name__}: {exc}"]
    finally:
        warmup.warm_clip.cache_clear()  # its frames: 144 MB for a full window
    for w in done:
        engine.note_decode(w.variant, w.decode)
    _keep_verdicts(engine, variants, done, "; ".join(failed))
    if failed:
        _warm.clear()  # the first visitor's call asks for the compile, as it did before the start-up call
        log.warning("the start-up GPU call (%s s) did not warm every variant: %s", seconds, "; ".join(failed))
        return first_call_note(pick_device(engine.settings.device))  # the why is the owner's, in the log
    log.info("start-up GPU call (%s s asked) warmed %s", seconds, "; ".join(w.line() for w in done))
    return ""


def _keep_verdicts(engine: Engine, variants: list[str], done: list[Any], failed: str) -> None:
    """Where graphs are asked for, each variant's start-up check goes to the engine (later calls capture
    only where it passed) and to the log; a variant without one decodes eagerly, and the log says why."""
    settings = engine.settings
    if graphs.wanted(settings.decode, pick_device(settings.device), settings.compile) not in (
        "graphs",
        "static",
    ):
        return
    warmed = {w.variant: w for w in done}
    verdicts: dict[str, graphs.Verdict] = {}
    for variant in variants:
        w = warmed.get(variant)
        if w is not None and w.verdict is not None:
            verdicts[variant] = w.verdict
            continue
        why = (
            f"the start-up GPU call failed ({failed[:200]})"
            if w is None
            else w.error or f"it decoded {w.decode}"
        )
        verdicts[variant] = graphs.Verdict(variant, False, f"no verdict: {why}")
    engine.check_graphs(verdicts)
    for verdict in verdicts.values():
        level = logging.INFO if verdict.passed else logging.WARNING
        log.log(level, "start-up check of the decode step: %s, %.1f s", verdict.line(), verdict.seconds)


def _warm_up_work(engine: Engine, variants: tuple[str, ...], on_text: Any) -> list[Any]:
    """The start-up call's work (module-level: the call takes it pickled, the engine by reference)."""
    return warmup.run(engine, variants)
