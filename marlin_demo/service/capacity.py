"""What a request can cost and which videos the app can finish, from the measured speeds (``speeds.json``,
docs/SPACE.md "Limits that agree"); start-up refuses settings that contradict them (``conflicts``)."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marlin_demo import variants
from marlin_demo.longvideo.policy import plan_for
from marlin_demo.model_io import VideoParams
from marlin_demo.models import ModelLoadError, compute, pick_device
from marlin_demo.results import Metrics, RunInfo
from marlin_demo.service import zerogpu_rules
from marlin_demo.settings import Settings, env_name
from marlin_demo.tasks import TASKS, get_task
from marlin_demo.video import largest_window_tokens

SPEEDS_FILE = Path(__file__).with_name("speeds.json")

#: ZeroGPU: the shortest and longest duration one ``spaces.GPU`` call asks for (why: ``gpu_call_s``)
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
    #: a CPU entry's instruction-set class (``cpu_isa``) and the threads it was measured with
    isa: str = ""
    threads: int = 0
    #: per variant, a CPU entry's measured figures (``peak_mb``, ``window_peak_mb``...) or its ``error``
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: decoding in CUDA graphs: the slowest rate and the longest capture (None: sized as eager decoding)
    graphs_decode_tokens_per_s: float | None = None
    graphs_capture_s: float = 0.0
    #: the figures as measured, without the limits' margin (``speed_for(margin=False)``; empty: no margin)
    expected: Mapping[str, float] = field(default_factory=dict)

    @property
    def compute_dtype(self) -> str:
        """What a CPU entry's variants computed in (bfloat16 where none says)."""
        found = {str(v["compute_dtype"]) for v in self.variants.values() if "compute_dtype" in v}
        return found.pop() if len(found) == 1 else "bfloat16"


@functools.lru_cache(maxsize=1)
def speeds() -> dict[str, Speed]:
    raw = json.loads(SPEEDS_FILE.read_text(encoding="utf-8"))
    return {name: Speed(name=name, **fig) for name, fig in raw.items() if not name.startswith("_")}


#: instruction-set classes, slowest first (a CPU uses the fastest measured class at or below its own)
ISA_ORDER = ("default", "avx2", "avx512", "avx512bf16")


def cpu_isa(caps: compute.CpuCaps | None = None) -> str:
    """This CPU's class for the speeds table: avx512bf16 (native bf16: AVX512-BF16 or AMX), avx512, avx2
    or default, as torch reports it (``compute.probe``; ATEN_CPU_CAPABILITY lowers it)."""
    caps = caps or compute.probe()
    aten = caps.aten.lower()
    if not caps.x86:
        return "arm-bf16" if caps.native("bfloat16") else "arm"
    if aten.startswith("avx512"):
        return "avx512bf16" if caps.native("bfloat16") else "avx512"
    return "avx2" if aten.startswith("avx2") else "default"


def cpu_key(isa: str, threads: int) -> str:
    """The speeds.json key of a CPU entry: ``cpu-avx512bf16-2t``."""
    return f"cpu-{isa}-{threads}t"


def cpu_speed(table: Mapping[str, Speed], isa: str, threads: int, dtype: str) -> tuple[Speed, float] | None:
    """The CPU entry for this class, threads and compute type (None: none qualifies), and its rate factor:
    scaled down pessimistically where only more threads were measured (decode grows less with cores)."""
    cpu = [s for s in table.values() if s.isa and s.compute_dtype == dtype]
    rank = {name: i for i, name in enumerate(ISA_ORDER)}
    same = [s for s in cpu if s.isa == isa]
    if not same and isa in rank:
        lower = [s for s in cpu if s.isa in rank and rank[s.isa] < rank[isa]]
        best = max((rank[s.isa] for s in lower), default=None)
        same = [s for s in lower if rank[s.isa] == best]
    if not same:
        return None
    under = [s for s in same if s.threads <= threads]
    if under:
        return max(under, key=lambda s: s.threads), 1.0
    fewest = min(same, key=lambda s: s.threads)
    return fewest, threads / fewest.threads


def scaled(speed: Speed, factor: float) -> Speed:
    """``speed`` with its rates times ``factor`` (prefill time divided by it); unchanged at 1."""
    if factor == 1.0:
        return speed
    return dataclasses.replace(
        speed,
        name=f"{speed.name} x{factor:.2g}",
        decode_tokens_per_s=speed.decode_tokens_per_s * factor,
        prefill_s=speed.prefill_s / factor,
    )


def for_decode(speed: Speed, decode: str) -> Speed:
    """``speed`` for calls whose variant decodes in ``decode``: graphs' measured rate plus one capture per
    call; eager's figures for any other mode, and for graphs until the GPU check has measured them."""
    if decode != "graphs" or not speed.graphs_decode_tokens_per_s:
        return speed
    return dataclasses.replace(
        speed,
        name=f"{speed.name} graphs",
        decode_tokens_per_s=speed.graphs_decode_tokens_per_s,
        overhead_s=speed.overhead_s + speed.graphs_capture_s,
    )


def device_of(settings: Settings) -> str | None:
    """The device these settings run on, or None where none can be picked (the load then says why)."""
    try:
        return pick_device(settings.device)
    except ModelLoadError:
        return None


def speed_for(settings: Settings, device: str, margin: bool = True) -> Speed | None:
    """The figures for this device and model (None: never measured). ``margin=False``: the measured figures,
    for saying how long a run takes; the limits keep the margin."""
    found = _table_speed(settings, device)
    if margin or found is None or not found.expected:
        return found
    e = found.expected
    return dataclasses.replace(
        found,
        name=f"{found.name} as measured",
        decode_tokens_per_s=e["decode_tokens_per_s"],
        prefill_s=e["prefill_s"],
        prepare_s=e["prepare_s"],
        overhead_s=e["overhead_s"],
        expected={},
    )


def _table_speed(settings: Settings, device: str) -> Speed | None:
    if device == "cuda":
        return speeds()["h200"]
    if settings.is_tiny:
        return speeds()["cpu-tiny"]
    import torch

    dtype = compute.choose("cpu", "bfloat16", settings.compute_dtype).dtype
    found = cpu_speed(speeds(), cpu_isa(), torch.get_num_threads(), dtype)  # the threads torch computes with
    return None if found is None else scaled(*found)


#: per device, model, compute type and variant: the figures this process's last fresh answer measured
_MEASURED: dict[tuple[str, ...], Speed] = {}


def _measured_key(settings: Settings, device: str, variant: str) -> tuple[str, ...]:
    return (device, settings.model, settings.compute_dtype, variant)


def observe(
    settings: Settings,
    device: str,
    variant: str,
    metrics: Metrics,
    info: RunInfo,
    params: VideoParams | None = None,
) -> None:
    """Keep how fast one fresh whole-clip answer read its clip here, so the next cost line prices at this
    pace: one pace for the whole reading, as a small clip's prefill is mostly fixed costs."""
    if info.cached_video or info.reused_prefix or not metrics.tokens_per_s or info.prefill_s is None:
        return
    p = params or VideoParams()
    frames = min(1.0, max(float(info.duration_s), 1e-3) * p.fps / p.max_frames)
    share = max(prefill_share(metrics.video_tokens, params), 1e-6)
    read = metrics.latency_s - metrics.queue_s - metrics.output_tokens / metrics.tokens_per_s
    base = speed_for(settings, device, margin=False) or Speed(
        name="",
        decode_tokens_per_s=float(metrics.tokens_per_s),
        prefill_s=float(info.prefill_s) / share,
        prepare_s=float(info.decode_s) / frames,
        overhead_s=max(0.0, read - info.decode_s - info.prefill_s),
    )
    pace = max(read, 1e-3) / max(base.prepare_s * frames + read_s(base, share), 1e-6)
    _MEASURED[_measured_key(settings, device, variant)] = dataclasses.replace(
        base,
        name="this machine's last answer",
        decode_tokens_per_s=base.decode_tokens_per_s / pace,
        prefill_s=base.prefill_s * pace,
        prepare_s=base.prepare_s * pace,
        overhead_s=base.overhead_s * pace,
    )


def measured(settings: Settings, device: str, variant: str) -> Speed | None:
    """``observe``'s figures for this device, model, compute type and variant (None: none answered yet)."""
    return _MEASURED.get(_measured_key(settings, device, variant))


def expected(settings: Settings, device: str, variant: str) -> Speed | None:
    """What the line before Run prices a run of ``variant`` at: this process's last answer with it, before
    one the table's figures as measured, without the limits' margin (None: never measured)."""
    return measured(settings, device, variant) or speed_for(settings, device, margin=False)


def total_memory_mb() -> float:
    """This machine's memory for one process: the smaller of the RAM and the container's limit (cgroup)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20  # /proc/meminfo's MemTotal
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 2**60:
            total = min(total, int(raw) / 2**20)
    return total


#: share of the memory a variant's peak may use: the page, the OS and the video's frames need the rest
MEMORY_SHARE = 0.9


def withheld(speed: Speed | None, total_mb: float) -> dict[str, str]:
    """{variant: why it is not offered} for a CPU entry: it failed, or its peak exceeds ``MEMORY_SHARE``."""
    if speed is None or not speed.isa:
        return {}
    out: dict[str, str] = {}
    for name, fig in speed.variants.items():
        label = variants.label(name)
        if "error" in fig:
            out[name] = f"{label} cannot run on this CPU: {str(fig['error']).rstrip('.')}."
            continue
        peak = float(fig.get("window_peak_mb") or fig.get("peak_mb") or 0.0)
        if peak > MEMORY_SHARE * total_mb:
            out[name] = (
                f"{label} is not offered on this machine: a full window needs about {peak / 1024:.1f} GB of "
                f"memory at its peak (measured on {speed.name}) and this machine has "
                f"{total_mb / 1024:.1f} GB."
            )
    return out


def prefill_share(video_tokens: float, params: VideoParams | None = None) -> float:
    """A clip's video tokens over the speeds table's full window's, at most 1: its share of that prefill."""
    return min(1.0, max(0.0, video_tokens / largest_window_tokens(params)))


def read_s(speed: Speed, share: float = 1.0) -> float:
    """One window's model work before its first token: overhead and its frames' prefill (``share``); on
    ZeroGPU at least what one call is charged for."""
    return speed.overhead_s + speed.prefill_s * share


def model_s(task: str, settings: Settings, speed: Speed, share: float = 1.0) -> float:
    """The longest one window's model work can take: ``read_s``, then every allowed token. On ZeroGPU the
    most one call is charged for, before the card's factor (it is charged the time it uses)."""
    return read_s(speed, share) + get_task(task).tokens(settings) / speed.decode_tokens_per_s


def window_s(task: str, settings: Settings, speed: Speed) -> float:
    """The longest one window can take, its frames' preparation included (what the time limit covers)."""
    return speed.prepare_s + model_s(task, settings, speed)


def gpu_call_s(task: str, settings: Settings, speed: Speed, share: float = 1.0) -> int:
    """Seconds one window's ``spaces.GPU`` call asks for, within [``MIN_GPU_S``, ``MAX_GPU_S``]: ZeroGPU
    aborts a call past it, so it covers the longest answer (docs/CONFIGURATION.md, Sizing a ZeroGPU call)."""
    asked = math.ceil(GPU_MARGIN * model_s(task, settings, speed, share))
    return int(min(MAX_GPU_S, max(MIN_GPU_S, asked)))


def charged_s(seconds: float, factor: float | None = None) -> int:
    """``seconds`` of a ZeroGPU call as a visitor's quota counts them: times the card's factor, rounded as
    ``spaces`` rounds it (``factor`` None: ``zerogpu_rules.duration_factor``)."""
    return round(seconds * (zerogpu_rules.duration_factor() if factor is None else factor))


def call_fits_day(task: str, settings: Settings, speed: Speed, factor: float | None = None) -> bool:
    """Whether one full window's call can start on a whole day of a visitor who is not signed in."""
    return charged_s(gpu_call_s(task, settings, speed), factor) <= zerogpu_rules.daily_quota_s(
        "unauthenticated"
    )


def _tokens_fitting_day(task: str, settings: Settings, speed: Speed) -> int:
    """The largest token limit whose window call fits ``call_fits_day`` (0 if none does)."""
    field_name = get_task(task).max_new_tokens
    limits = range(get_task(task).tokens(settings) + 1)  # the call grows with the limit: bisect it
    too_many = bisect.bisect_left(
        limits, True, key=lambda n: not call_fits_day(task, settings.with_(**{field_name: n}), speed)
    )
    return max(0, too_many - 1)


def window_count(task: str, duration_s: float, settings: Settings) -> int:
    """The windows a request on ``duration_s`` seconds runs, the window limit ignored (sizing it)."""
    try:
        return len(plan_for(task, max(duration_s, 0.0), settings, limit=False))
    except ValueError:  # no usable duration: sized as one clip
        return 1


def request_gpu_s(task: str, duration_s: float, settings: Settings, speed: Speed) -> int:
    """The durations a whole request's calls ask for, one full window's call per window of the video,
    added up: each is only its call's admission check, not what the call is charged."""
    return window_count(task, duration_s, settings) * gpu_call_s(task, settings, speed)


def longest_video_s(task: str, settings: Settings) -> float:
    """The longest video ``task`` accepts and can finish (less where ``max_windows`` windows cover less)."""
    return min(settings.max_duration_s, get_task(task).covered_s(settings.max_windows, settings))


def limits_line(settings: Settings) -> str:
    """ "captions up to 30 min, find up to 30 min": what the header tells a visitor (every task)."""
    return ", ".join(
        f"{t.plural} up to {_minutes(longest_video_s(name, settings))}" for name, t in TASKS.items()
    )


def _minutes(seconds: float) -> str:
    """600 -> "10 min", 130 -> "130 s"."""
    return f"{seconds / 60:g} min" if seconds >= 120 and seconds % 60 == 0 else f"{seconds:g} s"


def conflicts(settings: Settings, device: str, zero_gpu: bool = False) -> list[str]:
    """One sentence per way these settings contradict the measured speeds (empty: they agree)."""
    out: list[str] = []
    speed = speed_for(settings, device)
    if speed is None:  # never measured: nothing to contradict
        return out
    for task, entry in TASKS.items():
        tokens = env_name(entry.max_new_tokens)
        if window_s(task, settings, speed) > settings.request_timeout_s:
            need = math.ceil(window_s(task, settings, speed))
            out.append(
                f"{env_name('request_timeout_s')}={settings.request_timeout_s:g} is shorter than one {task} "
                f"window can take here ({need} s at {speed.decode_tokens_per_s:g} tokens/s on {speed.name}, "
                f"service/speeds.json): raise it to at least {need} or lower {tokens}."
            )
        if zero_gpu and GPU_MARGIN * model_s(task, settings, speed) > MAX_GPU_S:
            out.append(
                f"{tokens}={entry.tokens(settings)} makes one {task} window ask ZeroGPU for more "
                f"than the {MAX_GPU_S} s one call may have ({speed.decode_tokens_per_s:g} tokens/s on "
                f"{speed.name}): lower it."
            )
        elif zero_gpu and not call_fits_day(task, settings, speed):
            asked, day = gpu_call_s(task, settings, speed), zerogpu_rules.daily_quota_s("unauthenticated")
            out.append(
                f"{tokens}={entry.tokens(settings)} makes one {task} window's ZeroGPU call ask for "
                f"{asked} s, {charged_s(asked)} s with the card's factor "
                f"{zerogpu_rules.duration_factor():g}: more than a visitor who is not signed in has in a day "
                f"({day} s): lower it to at most "
                f"{_tokens_fitting_day(task, settings, speed)}."
            )
    return out
