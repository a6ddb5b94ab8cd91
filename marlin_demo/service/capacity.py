"""What a request can cost and which videos the app can finish: the limits derived from measured speeds.

``speeds.json`` holds per-device figures (decode rate, prefill, video preparation, overhead), taken from
the GPU check and a CPU run of the tiny stand-in. From them and the settings this module derives how
long one window can take, what a ZeroGPU call must ask for, and the longest video each task can finish;
start-up refuses settings that contradict them (``conflicts``), so a video the limits accept is one the
app can answer. The request time limit applies per window (a window's model work, not the time spent
waiting for other requests).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from marlin_demo.longvideo.plan import plan_for
from marlin_demo.results import Task
from marlin_demo.settings import Settings, env_name

SPEEDS_FILE = Path(__file__).with_name("speeds.json")

#: ZeroGPU: the shortest and longest duration one ``spaces.GPU`` call asks for
MIN_GPU_S = 15
MAX_GPU_S = 300
#: a GPU call asks for this much more than the estimate (slower pages, a longer answer than typical)
GPU_MARGIN = 1.25


@dataclass(frozen=True)
class Speed:
    """One device's measured figures (``speeds.json``)."""

    name: str
    decode_tokens_per_s: float
    prefill_s: float  # prefill of one full window (240 frames at the pixel budget)
    prepare_s: float  # decoding and resizing one window's frames on the CPU
    overhead_s: float  # everything else of one call (moving tensors, parsing, scoring)
    source: str = ""


@functools.lru_cache(maxsize=1)
def speeds() -> dict[str, Speed]:
    raw = json.loads(SPEEDS_FILE.read_text(encoding="utf-8"))
    return {name: Speed(name=name, **fig) for name, fig in raw.items() if not name.startswith("_")}


def speed_for(settings: Settings, device: str) -> Speed | None:
    """The figures for this device and model: the H200's on any GPU (the one measured), the tiny
    stand-in's on a CPU; None for the real model on a CPU (not measured: nothing derived)."""
    if device == "cuda":
        return speeds()["h200"]
    return speeds()["cpu-tiny"] if settings.is_tiny else None


def max_new_tokens(task: Task, settings: Settings) -> int:
    return settings.caption_max_new_tokens if task == "caption" else settings.find_max_new_tokens


def model_s(task: Task, settings: Settings, speed: Speed) -> float:
    """The longest one window's model work can take: prefill, every allowed token, overhead."""
    return speed.overhead_s + speed.prefill_s + max_new_tokens(task, settings) / speed.decode_tokens_per_s


def window_s(task: Task, settings: Settings, speed: Speed) -> float:
    """The longest one window can take, its frames' preparation included (what the time limit covers)."""
    return speed.prepare_s + model_s(task, settings, speed)


def gpu_call_s(task: Task, settings: Settings, speed: Speed) -> int:
    """Seconds one window's ``spaces.GPU`` call asks for (model work only: frames are made before)."""
    return int(min(MAX_GPU_S, max(MIN_GPU_S, math.ceil(GPU_MARGIN * model_s(task, settings, speed)))))


def request_gpu_s(task: Task, duration_s: float, settings: Settings, speed: Speed) -> int:
    """What a whole request asks ZeroGPU for: one call per window of the video."""
    try:
        n = len(plan_for(task, max(duration_s, 0.0), settings, limit=False))
    except ValueError:  # no usable duration: sized as one clip
        n = 1
    return n * gpu_call_s(task, settings, speed)


def window_limited_s(task: Task, settings: Settings) -> float:
    """The longest video ``max_windows`` windows cover."""
    if task == "caption":
        return settings.max_windows * settings.caption_window_s
    step = settings.find_window_s - settings.find_overlap_s
    return (settings.max_windows - 1) * step + settings.find_window_s


def longest_video_s(task: Task, settings: Settings) -> float:
    """The longest video ``task`` accepts and can finish under these settings: the duration limit, or
    less where ``max_windows`` windows cover less (a longer one is refused naming that length)."""
    return min(settings.max_duration_s, window_limited_s(task, settings))


def limits_line(settings: Settings) -> str:
    """ "captions up to 30 min, find up to 30 min": what the header tells a visitor."""
    return (
        f"captions up to {_minutes(longest_video_s('caption', settings))}, "
        f"find up to {_minutes(longest_video_s('find', settings))}"
    )


def _minutes(seconds: float) -> str:
    """600 -> "10 min", 130 -> "130 s"."""
    return f"{seconds / 60:g} min" if seconds >= 120 and seconds % 60 == 0 else f"{seconds:g} s"


def conflicts(settings: Settings, device: str, zero_gpu: bool = False) -> list[str]:
    """One sentence per way these settings contradict the measured speeds (empty: they agree)."""
    out: list[str] = []
    speed = speed_for(settings, device)
    for task in ("caption", "find"):
        tokens = env_name(f"{task}_max_new_tokens")
        if speed is not None and window_s(task, settings, speed) > settings.request_timeout_s:
            need = math.ceil(window_s(task, settings, speed))
            out.append(
                f"{env_name('request_timeout_s')}={settings.request_timeout_s:g} is shorter than one {task} "
                f"window can take here ({need} s at {speed.decode_tokens_per_s:g} tokens/s on {speed.name}, "
                f"service/speeds.json): raise it to at least {need} or lower {tokens}."
            )
        if zero_gpu and speed is not None and GPU_MARGIN * model_s(task, settings, speed) > MAX_GPU_S:
            out.append(
                f"{tokens}={max_new_tokens(task, settings)} makes one {task} window ask ZeroGPU for more "
                f"than the {MAX_GPU_S} s one call may have ({speed.decode_tokens_per_s:g} tokens/s on "
                f"{speed.name}): lower it."
            )
    return out
