"""Find in chosen parts of a video (the caption windows a library search's full-text stage chose): the
seam its stage 2 runs through, in the scheduler's turns like every windowed request."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from marlin_demo import service
from marlin_demo.engine import Engine
from marlin_demo.longvideo import policy
from marlin_demo.results import FindResult, Window
from marlin_demo.settings import Settings, Variant
from marlin_demo.video.windows import plan_window


def find_bounds(
    windows: Sequence[Window], duration_s: float, settings: Settings
) -> list[tuple[float, float]]:
    """The find windows (start, end) inside ``windows`` of a video of ``duration_s``, in time order: what a
    search asks, one GPU call each on ZeroGPU (so also what it costs, before it runs)."""
    bounds: set[tuple[float, float]] = set()
    for w in windows:
        start, end = max(0.0, float(w.start)), min(float(w.end), duration_s)
        if end <= start:
            continue
        for fw in policy.plan_for("find", end - start, settings, limit=False):
            bounds.add((round(start + fw.start, 6), round(start + fw.end, 6)))
    return sorted(bounds)


def find_in_windows(
    engine: Engine,
    path: str | Path,
    query: str,
    variant: Variant,
    windows: Sequence[Window],
    stop: threading.Event | None = None,
    visitor: str | None = None,
) -> FindResult:
    """Find ``query`` only in ``windows`` (global seconds) of the video at ``path``, in time order; moments
    best first on the video's timeline; ``stop`` set: no further window."""
    p = Path(path)
    info = engine.info(p)
    bounds = find_bounds(windows, info.duration_s, engine.settings)
    if not bounds:
        raise ValueError(f"No window to search: the windows lie outside the video's {info.duration_s:g} s.")
    plans = [plan_window(info, Window(i, s, e), engine.params) for i, (s, e) in enumerate(bounds)]
    return cast(
        FindResult,
        service.run(
            engine,
            service.request(engine, "find", p, variant, query, plans=plans, visitor=visitor),
            stop=stop,
        ),
    )
