"""Every variant run once on a synthetic clip (ZeroGPU's start-up call), so no visitor pays the compile."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marlin_demo.engine import graphs
from marlin_demo.engine.core import USER_ERRORS, ClipRun, Engine
from marlin_demo.models import pick_device
from marlin_demo.tasks import get_task
from marlin_demo.video import PreparedVideo, full_window_clip, synthetic_clip

log = logging.getLogger(__name__)

#: tokens each variant generates, twice where it decodes in a step: replayed, then uncaptured (the check)
TOKENS = 24


@dataclass(frozen=True)
class Warmed:
    """One variant's warm-up run: how long it took, how it decoded, or why it failed."""

    variant: str
    seconds: float
    decode: str = ""
    capture_s: float = 0.0
    error: str = ""
    verdict: graphs.Verdict | None = None  # the start-up check of its captured step (None: not checked)

    def line(self) -> str:
        """ "gptq: 3.1 s, graphs (capture 0.4 s)" or "gptq failed: why"."""
        if self.error:
            return f"{self.variant} failed: {self.error}"
        return f"{self.variant}: {self.seconds:.1f} s, {self.decode} (capture {self.capture_s:.2f} s)"


@functools.lru_cache(maxsize=1)
def warm_clip(device: str) -> PreparedVideo:
    """A full window on CUDA (the largest a visitor's call reaches), 2 s on a CPU; cached so the forked call
    finds it built (``warm_clip.cache_clear()`` frees its frames)."""
    return full_window_clip() if device == "cuda" else synthetic_clip(2.0, 64, 64)


def run(engine: Engine, variants: Sequence[str]) -> list[Warmed]:
    """Each of ``variants`` once on the warm-up clip (a failure kept, not raised), checked where its decoding
    runs a step (``check``); the synthetic clip's prefixes are dropped afterwards."""
    prompt = get_task("caption").ask(None, engine.settings)[1]
    clip = warm_clip(pick_device(engine.settings.device))
    out: list[Warmed] = []
    for variant in variants:
        t0 = time.perf_counter()
        try:
            done, verdict = warm(engine, clip, variant, prompt)
        except USER_ERRORS as exc:
            out.append(Warmed(variant, time.perf_counter() - t0, error=str(exc)))
            continue
        out.append(
            Warmed(variant, time.perf_counter() - t0, done.gen.decode, done.gen.capture_s, "", verdict)
        )
        log.info("warm-up: %s", out[-1].line())
    with engine.gpu_lock:
        engine.prefixes.clear()
    return out


def warm(
    engine: Engine, clip: PreparedVideo, variant: str, prompt: str
) -> tuple[ClipRun, graphs.Verdict | None]:
    """One variant's warm-up run, traced, and the check of its step where it decoded in one (else None)."""
    with graphs.tracing(False, TOKENS) as trace:  # the first run replays: it is the check's first half
        done = engine.run_clip(clip, variant, prompt, TOKENS)
    if done.gen.decode not in ("graphs", "static"):
        return done, None
    return done, check(engine, clip, variant, prompt, (trace, done.gen))


def check(
    engine: Engine, clip: PreparedVideo, variant: str, prompt: str, replayed: tuple[graphs.Trace, Any]
) -> graphs.Verdict:
    """The warm-up's ``TOKENS`` again from the clip's prefix, run uncaptured on the same buffers;
    ``graphs.judge`` compares every step's logits with the ``replayed`` run's."""
    t0 = time.perf_counter()
    with graphs.tracing(True, TOKENS) as trace:
        again = engine.run_clip(clip, variant, prompt, TOKENS).gen
    return graphs.judge(variant, [replayed, (trace, again)], time.perf_counter() - t0)
