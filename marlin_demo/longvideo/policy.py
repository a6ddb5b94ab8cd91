"""Long videos: the window plan (``plan_for``) and the time ranges asked about. Pure Python (no torch),
so the service, runner, UI, ZeroGPU estimate and bench share one set of rules (docs/LONG_VIDEOS.md)."""

from __future__ import annotations

import math

from marlin_demo.model_io import clock, clock_part, clock_span
from marlin_demo.results import Window
from marlin_demo.settings import Settings
from marlin_demo.tasks import Task, get_task

MIN_LAST_WINDOW_S = 2.0  # public Marlin CLI: a last window shorter than this joins the previous one


class WindowLimitError(ValueError):
    """A video needs more windows than allowed: one sentence naming the limit and what is allowed."""


def plan_windows(
    duration: float,
    length: float,
    overlap: float = 0.0,
    *,
    max_windows: int | None = None,
) -> list[Window]:
    """Windows [k*step, min(k*step + length, duration)], step = length - overlap; none inside another,
    and a last one shorter than ``MIN_LAST_WINDOW_S`` joins the one before (a short video: [0, duration])."""
    duration, length, overlap = float(duration), float(length), float(overlap)
    if not (math.isfinite(duration) and duration > 0):
        raise ValueError(f"duration must be a positive number of seconds, got {duration!r}.")
    if not (math.isfinite(length) and length > 0):
        raise ValueError(f"the window length must be a positive number of seconds, got {length!r}.")
    if not (0 <= overlap < length):
        raise ValueError(f"the window overlap must be at least 0 and below the length, got {overlap!r}.")
    step = length - overlap
    bounds = [(0.0, min(length, duration))]
    while bounds[-1][1] < duration:
        start = len(bounds) * step
        bounds.append((start, min(start + length, duration)))
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < MIN_LAST_WINDOW_S:
        bounds.pop()
        bounds[-1] = (bounds[-1][0], duration)
    if max_windows is not None and len(bounds) > max_windows:
        allowed = max_windows * step + overlap
        raise WindowLimitError(
            f"The video is {duration:.1f} s long and needs {len(bounds)} windows of {length:g} s, "
            f"but at most {max_windows} windows are allowed: use a clip of at most {allowed:g} s."
        )
    return [Window(i, round(s, 6), round(e, 6)) for i, (s, e) in enumerate(bounds)]


def plan_for(task: str | Task, duration: float, settings: Settings, *, limit: bool = True) -> list[Window]:
    """The windows ``task`` answers a video of ``duration`` s in (one: answered whole); too many is a
    ``WindowLimitError`` unless ``limit=False`` (sizing a request that is refused anyway)."""
    length, overlap = get_task(task).windows(settings)
    return plan_windows(duration, length, overlap, max_windows=settings.max_windows if limit else None)


# ----------------- a time range: part of a video, answered as if cut as its own file, on the video's timeline

#: the shortest range asked about (a second holds Marlin's minimum of 4 frames at any usual frame rate)
MIN_RANGE_S = 1.0
#: how far past the probed end an end may be and still mean "the end" (a rounded duration typed back)
END_TOLERANCE_S = 0.05


class RangeError(ValueError):
    """A time range that cannot be asked about: one sentence saying what is wrong and what is allowed."""


def seconds(value: object, name: str) -> float | None:
    """A time as typed or sent (a number, or its text; None or blank: not given), else a ``RangeError``
    naming it: an API or MCP caller may send anything, and ``float`` would accept ``True`` or ``"nan"``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        number = math.nan if isinstance(value, bool) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise RangeError(f"The range's {name} must be a number of seconds, got {value!r}.")
    return number


def _typed(t: float) -> str:
    """A time a visitor typed, as ``clock`` writes it, or plainly when far too large to read as a clock."""
    return clock(t) if t < 1e6 else f"{t:g} s"


def check_range(start: object, end: object, duration: float, max_duration: float) -> tuple[float, float]:
    """The range (start, end) in seconds (None: 0, the end), else ``RangeError``; the limit is the range's."""
    whole = f"the video is {clock(duration)} long"
    first, last = seconds(start, "start"), seconds(end, "end")
    s = 0.0 if first is None else first
    e = duration if last is None else last
    if s < 0:
        raise RangeError(f"The range starts at {s:g} s; a start must be 0 s or later ({whole}).")
    if e <= 0:
        raise RangeError(f"The range ends at {e:g} s; an end must be after 0 s ({whole}).")
    if s >= duration:
        raise RangeError(
            f"The range starts at {_typed(s)}, at or after the video's end: {whole}; start before it."
        )
    if e > duration + END_TOLERANCE_S:
        raise RangeError(
            f"The range ends at {_typed(e)}, after the video's end: {whole}; end at {clock(duration)} at "
            "most, or leave the end empty."
        )
    e = min(e, duration)
    if e <= s:
        raise RangeError(
            f"The range {clock_span(s, e)} does not end after it starts: the end must be after the start."
        )
    if e - s < MIN_RANGE_S:
        raise RangeError(
            # the typed times as typed: rounded to tenths, 3-3.96 s would read "3–4 s (1 s long)"
            f"The range {s:g}–{e:g} s is {e - s:.2f} s long; a range must be at least {clock(MIN_RANGE_S)}."
        )
    if e - s > max_duration:
        raise RangeError(
            f"The range {clock_part(s, e)} is too long: at most {clock(max_duration)} is allowed: "
            "choose a shorter range."
        )
    return s, e


def range_windows(task: str | Task, start: float, end: float, settings: Settings) -> list[Window]:
    """``plan_for`` on the range's length, shifted to its start; too many windows: ``RangeError``."""
    try:
        local = plan_for(task, end - start, settings)
    except WindowLimitError:
        allowed = get_task(task).covered_s(settings.max_windows, settings)
        raise RangeError(
            f"The range {clock_part(start, end)} needs more than the {settings.max_windows} windows "
            f"allowed; choose a range of at most {clock(allowed)}."
        ) from None
    return [Window(w.index, round(w.start + start, 6), round(w.end + start, 6)) for w in local]
