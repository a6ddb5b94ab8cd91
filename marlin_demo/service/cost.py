"""What a request will cost, said before it runs: one line, whatever the machine.

On ZeroGPU the cost is GPU seconds from a visitor's daily quota (``space``); on a CPU it is the
visitor's time, and the real model on two cores takes minutes. Both come from the measured speeds
(``capacity``) and the same window plan the request will run, so the line under the clip and the
limits never disagree. Shown as soon as a clip is chosen, before Run.
"""

from __future__ import annotations

from dataclasses import dataclass

from marlin_demo.contract import VideoParams
from marlin_demo.longvideo.plan import plan_for
from marlin_demo.models import ModelLoadError, compute_choice, pick_device
from marlin_demo.results import Task
from marlin_demo.service import capacity, space
from marlin_demo.settings import Settings, Variant
from marlin_demo.video import SamplingPlan, largest_window_tokens


@dataclass(frozen=True)
class Estimate:
    """A request's time on this machine: until the first word, and if every answer runs to its limit."""

    first_s: float
    most_s: float
    windows: int


def estimate(
    task: Task,
    plan: SamplingPlan,
    duration_s: float,
    settings: Settings,
    speed: capacity.Speed,
    params: VideoParams | None = None,
) -> Estimate:
    """Each window's preparation (scaled by its frames), overhead and prefill (by its video tokens), plus
    decoding every token the task allows.

    ``plan``: the clip's sampling plan (its tokens per second of video give each window's tokens).
    """
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
    task: Task,
    plan: SamplingPlan,
    duration_s: float,
    settings: Settings,
    variants: list[Variant] | None = None,
    params: VideoParams | None = None,
) -> str:
    """The one line that says, before Run, what this request will cost here ('' where nothing needs saying).

    On ZeroGPU: the GPU seconds it asks for (``space.gpu_note``). On a CPU: about how long it takes,
    from this CPU's measured speeds, in the compute type it will use, for each of ``variants`` in turn
    (Compare runs several). On a GPU outside ZeroGPU: nothing.
    """
    runs = max(1, len(variants or []))
    if space.zero_gpu():
        return space.gpu_note(task, duration_s, settings, runs)
    try:
        device = pick_device(settings.device)
    except ModelLoadError:
        return ""
    if device != "cpu":
        return ""
    speed = capacity.speed_for(settings, device)
    noun = "a caption" if task == "caption" else "a find"
    if speed is None:
        return f"How long {noun} takes on this CPU was never measured (see docs/SPEED.md): expect minutes."
    est = estimate(task, plan, duration_s, settings, speed, params)
    dtype = compute_choice(settings, (variants or settings.variant_list or ["gptq"])[0], device).dtype
    who = noun if runs == 1 else f"{noun} on {runs} variants"
    answers = "every answer runs" if est.windows * runs > 1 else "the answer runs"
    return (
        f"On this CPU ({dtype}), {who} of this clip takes about {duration_words(est.first_s * runs)} to "
        f"read it, and up to {duration_words(est.most_s * runs)} if {answers} to its "
        f"{capacity.max_new_tokens(task, settings)}-token limit."
    )
