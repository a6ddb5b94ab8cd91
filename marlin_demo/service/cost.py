"""What a request will cost, said before it runs: one line, whatever the machine.

GPU seconds of a visitor's daily quota on ZeroGPU, the visitor's time on a CPU; both from the measured
speeds (``capacity``) and the window plan the request will run, so the line and the limits agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from marlin_demo.contract import VideoParams
from marlin_demo.longvideo.policy import plan_for
from marlin_demo.models import ModelLoadError, compute_choice, pick_device
from marlin_demo.service import capacity, space, zerogpu
from marlin_demo.settings import Settings, Variant
from marlin_demo.tasks import get_task
from marlin_demo.video import SamplingPlan, largest_window_tokens


@dataclass(frozen=True)
class Estimate:
    """A request's time on this machine: until the first word, and if every answer runs to its limit."""

    first_s: float
    most_s: float
    windows: int


def estimate(
    task: str,
    plan: SamplingPlan,
    duration_s: float,
    settings: Settings,
    speed: capacity.Speed,
    params: VideoParams | None = None,
) -> Estimate:
    """Each window's preparation (scaled by its frames), overhead and prefill (by its video tokens, from
    ``plan``'s tokens per second), plus decoding every token the task allows."""
    windows = plan_for(task, max(duration_s, 0.0), settings, limit=False)
    covered_s = max(plan.nframes / max(plan.sample_fps, 1e-9), 1e-9)
    per_s = plan.video_tokens / covered_s
    largest = largest_window_tokens(params)
    p = params or VideoParams()
    first = 0.0
    for w in windows:  # a window's frames cost their share of a full window's preparation and prefill
        seconds = min(w.duration, duration_s)
        frames = min(1.0, seconds * p.fps / p.max_frames)
        share = min(1.0, per_s * seconds / largest)
        first += speed.prepare_s * frames + speed.overhead_s + speed.prefill_s * share
    decode = len(windows) * capacity.max_new_tokens(task, settings) / speed.decode_tokens_per_s
    return Estimate(first_s=first, most_s=first + decode, windows=len(windows))


def duration_words(seconds: float) -> str:
    """12 -> "12 s", 130 -> "2 min 10 s", 7300 -> "2 h 2 min": as a visitor reads a wait."""
    s = max(1, round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 and s < 600 else "")
    return f"{s // 3600} h {s % 3600 // 60} min"


def estimate_line(
    task: str,
    plan: SamplingPlan,
    duration_s: float,
    settings: Settings,
    variants: list[Variant] | None = None,
    params: VideoParams | None = None,
) -> str:
    """The one line that says, before Run, what this request will cost here ('' where nothing needs saying):
    on ZeroGPU the GPU time and what it asks of a visitor's quota, on a CPU about how long it takes for
    each of ``variants`` in turn, on any other GPU nothing."""
    runs = max(1, len(variants or []))
    noun = get_task(task).noun
    who = noun if runs == 1 else f"{noun} on {runs} variants"
    if space.zero_gpu():  # the GPU's measured speed gives the typical figure; the calls' size the most
        gpu = capacity.speed_for(settings, "cuda")
        est = estimate(task, plan, duration_s, settings, gpu, params) if gpu else None
        typical = _time_sentence(f"On ZeroGPU, {who} of this clip uses", est, task, settings, runs, "of GPU ")
        return f"{typical} {request_gpu_line(task, duration_s, settings, runs)}".strip()
    try:
        device = pick_device(settings.device)
    except ModelLoadError:
        return ""
    if device != "cpu":
        return ""
    speed = capacity.speed_for(settings, device)
    if speed is None:
        return f"How long {noun} takes on this CPU was never measured (see docs/SPEED.md): expect minutes."
    est = estimate(task, plan, duration_s, settings, speed, params)
    dtype = compute_choice(settings, (variants or settings.variant_list or ["gptq"])[0], device).dtype
    return _time_sentence(f"On this CPU ({dtype}), {who} of this clip takes", est, task, settings, runs)


def _time_sentence(
    head: str, est: Estimate | None, task: str, settings: Settings, runs: int, unit: str = ""
) -> str:
    """'<head> about T <unit>to read it, and up to M if the answer runs to its N-token limit.'"""
    if est is None:
        return ""
    answers = "every answer runs" if est.windows * runs > 1 else "the answer runs"
    return (
        f"{head} about {duration_words(est.first_s * runs)} {unit}to read it, and up to "
        f"{duration_words(est.most_s * runs)} if {answers} to its "
        f"{capacity.max_new_tokens(task, settings)}-token limit."
    )


# ---------------------------------------------------------------------------------------------------
# ZeroGPU: what a request, a library's indexing or a search asks of a visitor's daily quota
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuCost:
    """ZeroGPU calls a piece of work asks for, before it runs: ``calls`` of ``each_s`` seconds, which
    ``spaces`` multiplies by the card's ``factor``; ``charged_s`` is the most it takes from a quota."""

    calls: int
    each_s: int
    factor: float

    @property
    def asked_s(self) -> int:
        return self.calls * self.each_s

    @property
    def charged_s(self) -> int:
        return self.calls * capacity.charged_s(self.each_s, self.factor)

    def fits(self, tier: str = "unauthenticated") -> bool:
        """Whether a visitor of ``tier`` (unauthenticated, free, pro) can pay for it in one day."""
        return self.charged_s <= zerogpu.daily_quota_s(tier)


def gpu_cost(task: str, calls: int, settings: Settings, factor: float | None = None) -> GpuCost:
    """``calls`` ZeroGPU calls of one ``task`` window each (``factor``: the card's, read from ``spaces``)."""
    f = zerogpu.duration_factor() if factor is None else factor
    return GpuCost(max(0, calls), space.call_seconds(task, settings), f)


def request_gpu_cost(
    task: str, duration_s: float, settings: Settings, runs: int = 1, factor: float | None = None
) -> GpuCost:
    """A request on ``duration_s`` seconds of video (a time range's length, when one is asked), ``runs``
    variants in turn: one call per window per variant."""
    windows = capacity.window_count(task, duration_s, settings)
    return gpu_cost(task, windows * max(1, runs), settings, factor)


def quota_words() -> str:
    """A visitor's daily ZeroGPU quota, as the page says it."""
    day, free = zerogpu.daily_quota_s("unauthenticated"), zerogpu.daily_quota_s("free")
    return (
        f"a visitor has {duration_words(day)} of GPU a day without signing in, "
        f"{duration_words(free)} with a free account"
    )


def longest_fitting_s(task: str, settings: Settings, runs: int = 1, tier: str = "unauthenticated") -> float:
    """The longest time range whose request fits a day of ``tier`` (0: not even one window does)."""
    per_window = gpu_cost(task, max(1, runs), settings).charged_s
    windows = zerogpu.daily_quota_s(tier) // max(1, per_window)
    return float(get_task(task).covered_s(windows, settings)) if windows >= 1 else 0.0


def gpu_cost_line(cost: GpuCost, what: str = "This run") -> str:
    """One line: what ``what`` asks ZeroGPU for at most (the card's factor counted) and a visitor's quota."""
    plural = "s" if cost.calls != 1 else ""
    return (
        f"{what} asks ZeroGPU for up to {cost.charged_s} s of GPU ({cost.calls} call{plural} of "
        f"{cost.each_s} s, x{cost.factor:g} on this card); {quota_words()}."
    )


def request_gpu_line(task: str, duration_s: float, settings: Settings, runs: int = 1) -> str:
    """The line before a run on ZeroGPU: its cost, the quota, and when it cannot fit in a day without
    signing in, the way out (sign in, or a time range that fits)."""
    cost = request_gpu_cost(task, duration_s, settings, runs)
    line = gpu_cost_line(cost)
    if cost.fits("unauthenticated"):
        return line
    day = duration_words(zerogpu.daily_quota_s("unauthenticated"))
    fits = longest_fitting_s(task, settings, runs)
    way = f"choose a time range of at most {duration_words(fits)}" if fits > 0 else "try a shorter task"
    free = duration_words(zerogpu.daily_quota_s("free"))
    signin = (
        f"sign in (a free account has {free} a day)" if cost.fits("free") else "sign in for a larger quota"
    )
    return f"{line[:-1]}. It cannot fit in the {day} of a visitor who is not signed in: {signin}, or {way}."


def cpu_work_line(task: str, windows: int, settings: Settings, what: str) -> str:
    """Off ZeroGPU: about how long ``windows`` windows of ``task`` take at most on this machine."""
    try:
        device = pick_device(settings.device)
    except ModelLoadError:
        return ""
    speed = capacity.speed_for(settings, device)
    if speed is None:
        return f"{what} runs {task} in {windows} windows; how long that takes here was never measured."
    most = windows * capacity.window_s(task, settings, speed)
    return f"{what} runs {task} in {windows} windows: up to {duration_words(most)} here."


def index_cost_line(durations: list[float], settings: Settings) -> str:
    """Where no prebuilt library matches: what indexing these videos (the examples) costs before the first
    search can answer, one caption call per window; said before anyone searches."""
    windows = sum(len(plan_for("caption", max(d, 0.1), settings, limit=False)) for d in durations)
    clips = f"{len(durations)} example clip{'s' if len(durations) != 1 else ''}"
    if not space.zero_gpu():
        first = (
            f"No prebuilt library matches this model, so the first search indexes the {clips} before it "
            "answers: it"
        )
        return cpu_work_line("caption", windows, settings, first)
    what = f"No prebuilt library matches this model, so the first search indexes the {clips} first, which"
    cost = gpu_cost("caption", windows, settings)
    line = gpu_cost_line(cost, what)
    if cost.fits("unauthenticated"):
        return line
    return f"{line[:-1]}: more than the whole day of a visitor who is not signed in."


def search_cost_line(find_windows: int, settings: Settings) -> str:
    """A search's own cost, said before it runs: find in ``find_windows`` windows (``library.search``'s
    ``search_windows`` counts them for a query)."""
    what = f"This search, find in {find_windows} window{'s' if find_windows != 1 else ''},"
    if not space.zero_gpu():
        return cpu_work_line("find", find_windows, settings, "This search")
    return gpu_cost_line(gpu_cost("find", find_windows, settings), what)
