"""What a request will cost, said before it runs in one line (GPU quota on ZeroGPU, time on a CPU), from
the same speeds and window plan as the limits, so the two agree."""

from __future__ import annotations

from dataclasses import dataclass

from marlin_demo.longvideo.policy import plan_for
from marlin_demo.model_io import VideoParams
from marlin_demo.models import compute_choice
from marlin_demo.service import capacity, gpu_calls, zerogpu_rules
from marlin_demo.service.zerogpu_rules import duration_words
from marlin_demo.settings import Settings, Variant
from marlin_demo.tasks import get_task
from marlin_demo.video import SamplingPlan


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
    kept: tuple[bool, bool] = (False, False),
) -> Estimate:
    """Each window's preparation, overhead and prefill, plus decoding every token the task allows; ``kept``:
    a one-window clip's frames and prefix kept from an earlier run are not priced."""
    windows = plan_for(task, max(duration_s, 0.0), settings, limit=False)
    covered_s = max(plan.nframes / max(plan.sample_fps, 1e-9), 1e-9)
    per_s = plan.video_tokens / covered_s
    p = params or VideoParams()
    first = 0.0
    frames_kept, prefix_kept = kept if len(windows) == 1 else (False, False)
    for w in windows:  # a window's frames cost their share of a full window's preparation and prefill
        seconds = min(w.duration, duration_s)
        frames = min(1.0, seconds * p.fps / p.max_frames)
        share = capacity.prefill_share(per_s * seconds, params)
        first += speed.overhead_s + (0.0 if frames_kept else speed.prepare_s * frames)
        first += 0.0 if prefix_kept else speed.prefill_s * share
    decode = len(windows) * get_task(task).tokens(settings) / speed.decode_tokens_per_s
    return Estimate(first_s=first, most_s=first + decode, windows=len(windows))


def estimate_line(
    task: str,
    plan: SamplingPlan,
    duration_s: float,
    settings: Settings,
    variants: list[Variant] | None = None,
    params: VideoParams | None = None,
    share: float = 1.0,
    kept: dict[str, tuple[bool, bool]] | None = None,
) -> str:
    """The one line saying, before Run, what this request costs here ('' where nothing needs saying): the
    ZeroGPU quota, a CPU's time per variant, nothing on any other GPU."""
    runs = max(1, len(variants or []))
    noun = get_task(task).noun
    who = noun if runs == 1 else f"{noun} on {runs} variants"
    if gpu_calls.zero_gpu():
        return request_gpu_line(
            task, duration_s, settings, runs, share=share, what=f"On ZeroGPU, {who} of this clip"
        )
    if capacity.device_of(settings) != "cpu":
        return ""
    chosen = variants or (settings.variant_list or ["gptq"])[:1]
    speeds = [capacity.expected(settings, "cpu", v) for v in chosen]
    if None in speeds:
        return f"How long {noun} takes on this CPU was never measured (see docs/SPEED.md): expect minutes."
    ests = [
        estimate(task, plan, duration_s, settings, sp, params, (kept or {}).get(v, (False, False)))
        for v, sp in zip(chosen, speeds, strict=True)
        if sp is not None
    ]
    dtype = compute_choice(settings, chosen[0], "cpu").dtype
    first, most = sum(e.first_s for e in ests), sum(e.most_s for e in ests)
    return (
        f"On this CPU ({dtype}), {who} of this clip takes about {duration_words(first)} to read "
        f"it, and up to {duration_words(most)} if {_answers(ests[0].windows * runs)} to its "
        f"{get_task(task).tokens(settings)}-token limit."
    )


def _answers(n: int) -> str:
    return "every answer runs" if n > 1 else "the answer runs"


# ----------------- ZeroGPU: what a request, a library's indexing or a search asks of a visitor's daily quota


@dataclass(frozen=True)
class GpuCost:
    """ZeroGPU calls a piece of work makes: ``calls`` calls of one ``task`` window, each asking ``each_s`` and
    charged from ``read_s`` to ``use_s``, both times the card's ``factor``."""

    task: str
    calls: int
    each_s: int
    read_s: float
    use_s: float
    factor: float

    @property
    def start_s(self) -> int:
        """What a visitor must have left for a call to start: its request, times the factor."""
        return capacity.charged_s(self.each_s, self.factor)

    @property
    def charged_s(self) -> int:
        """The most the calls take from a quota: each charged its time, at most ``use_s``."""
        return capacity.charged_s(self.calls * self.use_s, self.factor)

    @property
    def needs_s(self) -> int:
        """The quota that lets every call start even if each runs to its token limit: the calls before
        the last charged ``use_s`` each, the last started with its whole request left."""
        if self.calls < 1:
            return 0
        return capacity.charged_s((self.calls - 1) * self.use_s, self.factor) + self.start_s

    def fits(self, tier: str = "unauthenticated") -> bool:
        """Whether every call can start within one day of ``tier``, whatever their answers' length."""
        return self.needs_s <= zerogpu_rules.daily_quota_s(tier)


def gpu_cost(
    task: str, calls: int, settings: Settings, factor: float | None = None, share: float = 1.0
) -> GpuCost:
    """``calls`` ZeroGPU calls of one ``task`` window each (``share``: their frames' share of a full
    window's prefill; ``factor``: the card's, read from ``spaces``), at the H200's measured speed."""
    f = zerogpu_rules.duration_factor() if factor is None else factor
    h200 = capacity.speeds()["h200"]
    return GpuCost(
        task,
        max(0, calls),
        gpu_calls.call_seconds(task, settings, share),
        capacity.read_s(h200, share),
        capacity.model_s(task, settings, h200, share),
        f,
    )


def longest_fitting_s(task: str, settings: Settings, runs: int = 1, tier: str = "unauthenticated") -> float:
    """The longest time range whose request fits a day of ``tier`` at every token limit (0: none)."""
    windows, runs = 0, max(1, runs)
    while windows < settings.max_windows and gpu_cost(task, (windows + 1) * runs, settings).fits(tier):
        windows += 1
    return float(get_task(task).covered_s(windows, settings)) if windows >= 1 else 0.0


def gpu_cost_line(
    cost: GpuCost, what: str, settings: Settings, reading: bool = False, quotas: bool = True
) -> str:
    """What ``what`` asks of a visitor's quota: each call's request and the time it is charged (``reading``:
    from reading its frames), then the daily quotas unless a later sentence says them."""
    n, one = cost.calls, cost.calls == 1
    day, free = (duration_words(zerogpu_rules.daily_quota_s(t)) for t in ("unauthenticated", "free"))
    quota = f" A visitor has {day} of GPU a day without signing in, {free} with a free account."
    used = f"up to {duration_words(cost.charged_s)}{'' if one else ' in all'}"
    if reading:
        used = f"about {duration_words(capacity.charged_s(n * cost.read_s, cost.factor))} to read, {used}"
    return (
        f"{what} makes {n} GPU call{'' if one else 's'} of up to {cost.each_s} s{'' if one else ' each'}: "
        f"{'it' if one else 'each'} needs {cost.start_s} s of a visitor's daily GPU quota left to start "
        f"({cost.each_s} s x{cost.factor:g} on this card), then is charged only the time it uses, "
        f"x{cost.factor:g}: {used} if {_answers(n)} to its {get_task(cost.task).tokens(settings)}"
        f"-token limit.{quota if quotas else ''}"
    )


def _last_starts(cost: GpuCost, tier: str) -> str:
    """Whether the calls all start within a fresh day of ``tier``: each is admitted on its own request and
    charged its use, so the last starts only while the ones before leave it room."""
    room = zerogpu_rules.daily_quota_s(tier) - cost.start_s
    if room < 0:
        return "not even its first call can start"
    n = cost.calls - 1
    before = "the call before it is" if n == 1 else f"the {n} calls before it are"
    return f"its last call starts only if {before} charged at most {room} s{' in all' if n > 1 else ''}"


def _short_of_day(
    cost: GpuCost, what: str, settings: Settings, reading: bool = False, free_too: bool = False
) -> str:
    """``gpu_cost_line`` without the quotas, then how many calls a fresh day starts (not signed in;
    ``free_too``: a free account too) and what those before the last are charged at most."""
    line = gpu_cost_line(cost, what, settings, reading, quotas=False)  # what follows names them
    day, free = (duration_words(zerogpu_rules.daily_quota_s(t)) for t in ("unauthenticated", "free"))
    then = f"in the {day} of a visitor who is not signed in, {_last_starts(cost, 'unauthenticated')}"
    if free_too:
        then += f"; in the {free} of a free account, {_last_starts(cost, 'free')}"
    worst = capacity.charged_s((cost.calls - 1) * cost.use_s, cost.factor)
    limit = {0: "", 1: f" (its answer, run to its limit, is charged {worst} s)"}.get(
        cost.calls - 1, f" (their answers, run to their limits, are charged {worst} s)"
    )
    return f"{line} Then, {then}{limit}"


def request_gpu_line(
    task: str,
    duration_s: float,
    settings: Settings,
    runs: int = 1,
    share: float = 1.0,
    what: str = "This run",
) -> str:
    """The line before a run on ZeroGPU: its calls, their quota, and where they may not all start in a day
    without signing in, the way out (sign in, or a time range that fits)."""
    windows = capacity.window_count(task, duration_s, settings)  # one call per window per variant
    cost = gpu_cost(task, windows * max(1, runs), settings, share=share)
    if cost.fits("unauthenticated"):
        return gpu_cost_line(cost, what, settings, reading=True)
    free = duration_words(zerogpu_rules.daily_quota_s("free"))
    fits_day = longest_fitting_s(task, settings, runs)
    if cost.fits("free"):
        way = f", or choose a time range of at most {duration_words(fits_day)}" if fits_day else ""
        short = _short_of_day(cost, what, settings, reading=True)
        return f"{short}; sign in (a free account has {free} a day){way}."
    fits_free = longest_fitting_s(task, settings, runs, "free")
    ranges = [
        f"{duration_words(seconds)} {who}"
        for seconds, who in ((fits_day, "without signing in"), (fits_free, "with a free account"))
        if seconds
    ]
    way = f"choose a time range of at most {' or '.join(ranges)}" if ranges else "choose a shorter time range"
    pro = duration_words(zerogpu_rules.daily_quota_s("pro"))
    short = _short_of_day(cost, what, settings, reading=True, free_too=True)
    return f"{short}; {way} (a PRO account has {pro} a day)."


def cpu_work_line(task: str, windows: int, settings: Settings, what: str) -> str:
    """Off ZeroGPU: about how long ``windows`` windows of ``task`` take at most on this machine."""
    device = capacity.device_of(settings)
    if device is None:
        return ""
    speed = capacity.speed_for(settings, device)
    if speed is None:
        return f"{what} runs {task} in {windows} windows; how long that takes here was never measured."
    most = windows * capacity.window_s(task, settings, speed)
    return f"{what} runs {task} in {windows} windows: up to {duration_words(most)} here."


def index_cost_line(durations: list[float], settings: Settings) -> str:
    """Where no prebuilt library matches, what indexing the examples costs (one caption call per window)."""
    windows = sum(len(plan_for("caption", max(d, 0.1), settings, limit=False)) for d in durations)
    clips = f"{len(durations)} example clip{'s' if len(durations) != 1 else ''}"
    what = f"No prebuilt library matches this model, so the first search indexes the {clips}"
    if not gpu_calls.zero_gpu():
        return cpu_work_line("caption", windows, settings, f"{what} before it answers: it")
    what += " first, which"
    cost = gpu_cost("caption", windows, settings)
    if cost.fits("unauthenticated"):
        return gpu_cost_line(cost, what, settings)
    return f"{_short_of_day(cost, what, settings)}."


def search_cost_line(find_windows: int, settings: Settings) -> str:
    """A search's own cost, said before it runs: find in ``find_windows`` windows."""
    what = f"This search, find in {find_windows} window{'s' if find_windows != 1 else ''},"
    if not gpu_calls.zero_gpu():
        return cpu_work_line("find", find_windows, settings, "This search")
    return gpu_cost_line(gpu_cost("find", find_windows, settings), what, settings)
