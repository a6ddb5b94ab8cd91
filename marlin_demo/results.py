"""The plain data every layer passes around in memory (``out_folder`` writes records of it to disk):
video facts, plans, windows, moments, metrics, results, a request's stages; one shape for UI, API, CLI and
bench. No torch, nor the package but ``model_io``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from marlin_demo.model_io import Event


@dataclass
class VideoInfo:
    """What the file holds, as the sampler will see it: ``fps``/``num_frames`` from ``metadata_source``;
    ``display_*`` are ``width``/``height`` after ``rotation`` (degrees counter-clockwise)."""

    path: str
    size_bytes: int
    container: str
    duration_s: float
    fps: float
    num_frames: int
    width: int
    height: int
    display_width: int
    display_height: int
    rotation: int
    codec: str
    pix_fmt: str | None = None
    bit_depth: int | None = None
    interlaced: bool = False  # the first frame is coded as interlaced (fields)
    audio_streams: int = 0
    video_streams: int = 1
    stream_index: int = 0
    metadata_source: str = "pyav"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class SamplingPlan:
    """Which frames are sampled, at what size, and their vision tokens: ``indices``: absolute source frames,
    ``total_frames`` qwen-vl-utils' count of the range, ``source_*`` the upright decoded size."""

    indices: list[int]
    timestamps: list[float]
    nframes: int
    sample_fps: float
    height: int
    width: int
    video_tokens: int
    source_fps: float
    total_frames: int
    source_height: int = 0
    source_width: int = 0
    min_pixels: int = 0
    max_pixels: int = 0


@dataclass(frozen=True)
class Window:
    """One window of the source video, in global seconds."""

    index: int
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Moment:
    """A scored span in global seconds; ``window`` is the index of the window that answered it."""

    start: float
    end: float
    score: float
    window: int = 0

    def to_dict(self) -> dict[str, float]:
        return {"start": self.start, "end": self.end, "score": self.score}


#: What ``Metrics.peak_memory_mb`` measured: the GPU's peak in the request, or on CPU the process's peak RSS.
MemoryKind = Literal["cuda_peak_allocated", "cpu_peak_rss"]
MEMORY_KIND_LABELS: dict[str, str] = {
    "cuda_peak_allocated": "GPU peak allocated",
    "cpu_peak_rss": "process peak RSS (CPU)",
}


def memory_label(kind: str) -> str:
    """How a memory figure is named next to its value (the UI's cards and tables)."""
    return MEMORY_KIND_LABELS.get(kind, kind)


@dataclass
class Metrics:
    """What one request cost. ``memory_kind`` says what ``peak_memory_mb`` measures."""

    latency_s: float
    ttft_s: float | None
    output_tokens: int
    tokens_per_s: float | None
    video_tokens: int
    peak_memory_mb: float
    memory_kind: MemoryKind
    load_s: float
    device: str
    #: the part of ``latency_s`` spent waiting for other requests' turns on the model (service.scheduler)
    queue_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Every field in order, the times and rates rounded (``_DIGITS``)."""
        items = dataclasses.asdict(self).items()
        return {k: v if v is None or k not in _DIGITS else round(float(v), _DIGITS[k]) for k, v in items}


#: the digits each rounded ``Metrics`` field keeps in the public JSON
_DIGITS = {"latency_s": 3, "ttft_s": 3, "tokens_per_s": 2, "peak_memory_mb": 1, "load_s": 3, "queue_s": 3}


@dataclass
class Runtime:
    """Where and how an answer was computed (the public ``runtime`` block): its linear ``kernel``, its
    ``compute_dtype``, and ``gpu_*`` this request's ZeroGPU calls and seconds (0 off ZeroGPU)."""

    device: str = ""
    compute_dtype: str = ""
    kernel: str = ""
    gpu_calls: int = 0
    gpu_asked_s: float = 0.0
    gpu_used_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "compute_dtype": self.compute_dtype,
            "kernel": self.kernel,
            "gpu_calls": {
                "calls": self.gpu_calls,
                "asked_s": round(self.gpu_asked_s, 1),
                "used_s": round(self.gpu_used_s, 1),
            },
        }


@dataclass(frozen=True)
class Partial:
    """An answer cut short by a ZeroGPU refusal: ``windows_done`` of ``windows_total``, and why."""

    reason: str
    windows_done: int
    windows_total: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def note(self) -> str:
        """The label a partial answer carries where it is shown."""
        return f"Partial answer: {self.windows_done} of {self.windows_total} windows answered. {self.reason}"


@dataclass
class RunInfo:
    """Details kept beside a result but not in its public JSON (tests, bench, UI extras)."""

    prompt: str = ""
    duration_s: float = 0.0
    decode_s: float = 0.0
    prefill_s: float | None = None
    #: the request's whole time in the service, load included (``metrics.latency_s`` leaves it out)
    total_s: float = 0.0
    first_text_s: float | None = None  # time to the first non-empty decoded text (streaming)
    kernel: str = ""
    attention: str = ""
    compile: str = ""  # compiled decoding: "off", its state, or "eager (reason)"
    compile_s: float = 0.0  # compile time this variant has paid so far (never in a latency)
    #: how the tokens were decoded: "graphs", "static" (the step uncaptured: a CPU), "eager" or "compiled"
    decode: str = ""
    #: why graphs (or compile) were asked for and eager ran; on ZeroGPU "checked at start-up" when they ran
    decode_note: str = ""
    capture_s: float = 0.0  # capturing a new cache size's decode step in this request (inside latency_s)
    replayed_steps: int = 0  # decode steps that ran the captured step (a CPU: the same step, uncaptured)
    repairs: list[str] = field(default_factory=list)
    cached_video: bool = False
    reused_prefix: bool = False
    #: the probed facts of the video answered about (so cutting a span need not probe it again)
    video: VideoInfo | None = None
    #: a long video: each window's own run details, in window order (empty for a one-window video)
    windows: list[RunInfo] = field(default_factory=list)
    runtime: Runtime = field(default_factory=Runtime)


@dataclass(kw_only=True)
class Result:
    """What every task's result has, whatever its answer says (``tasks.Answer`` builds and reads the rest):
    a task's result type adds its own fields (given by position, these by name) and its JSON's (``own``)."""

    variant: str
    model: str
    raw: str
    metrics: Metrics
    format_ok: bool = True
    repaired: bool = False
    info: RunInfo = field(default_factory=RunInfo)
    #: set when ZeroGPU refused a later window's call: the windows answered before it (else None)
    partial: Partial | None = None
    #: the part of the video asked about (start, end) in its own seconds, or None for the whole video
    range_s: tuple[float, float] | None = None

    def own(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """Its own JSON keys: (after "model", after "raw", after "runtime"), in order."""
        return {}, {}, {}

    def to_dict(self) -> dict[str, Any]:
        """The public JSON: the keys every result shares, its own (``own``) in their places."""
        head, mid, tail = self.own()
        return {
            "variant": self.variant,
            "model": self.model,
            **head,
            "raw": self.raw,
            **mid,
            "metrics": self.metrics.to_dict(),
            "runtime": self.info.runtime.to_dict(),
            **tail,
            "partial": None if self.partial is None else self.partial.to_dict(),
            "range": span_json(self.range_s),
        }


@dataclass(kw_only=True)
class CaptionResult(Result):
    scene: str
    events: list[Event]
    #: the windows answered, in global seconds, each with its own scene (one entry for a short video)
    windows: list[dict[str, Any]] = field(default_factory=list)

    def own(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        windows = [
            {"start": round(w["start"], 3), "end": round(w["end"], 3), "scene": w["scene"]}
            for w in self.windows
        ]
        head = {"scene": self.scene, "events": [e.to_dict() for e in self.events]}
        return head, {"repaired": self.repaired}, {"windows": windows}


@dataclass(kw_only=True)
class FindResult(Result):
    query: str
    span: tuple[float, float] | None
    #: scored spans in global seconds, best first, at most top_k (``span`` is the first one's)
    moments: list[Moment] = field(default_factory=list)

    def own(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        moments = [
            {"start": round(m.start, 3), "end": round(m.end, 3), "score": round(m.score, 4)}
            for m in self.moments
        ]
        head = {"query": self.query, "span": span_json(self.span), "format_ok": self.format_ok}
        return head, {}, {"moments": moments}


def span_json(span: tuple[float, float] | None) -> list[float] | None:
    """A span as the JSON gives it: [start, end] to the millisecond (None: none)."""
    return None if span is None else [round(span[0], 3), round(span[1], 3)]


# The stages of one request (marlin_demo.service streams them)


@dataclass(frozen=True)
class Prepared:
    """The video was checked, planned and decoded (``cached_video``: nothing decoded for this request)."""

    video: VideoInfo
    plan: SamplingPlan
    cached_video: bool
    #: the windows a long video is answered in (empty: answered whole); ``plan`` is the first one's
    windows: tuple[Window, ...] = ()


@dataclass(frozen=True)
class Loaded:
    """The variant is in memory; ``cold``: this request loaded it (``load_s`` seconds, paid once)."""

    variant: str
    cold: bool
    load_s: float


@dataclass(frozen=True)
class Progress:
    """The answer so far. ``window``/``windows``: which part of a long video it belongs to (1-based)."""

    text: str
    window: int | None = None
    windows: int | None = None


@dataclass(frozen=True)
class Done:
    """The finished request: the result object the UI, API, CLI and bench all read."""

    result: Result


@dataclass(frozen=True)
class WindowDone:
    """Window ``window`` (1-based) of ``windows`` answered; ``result``: all so far, merged."""

    window: int
    windows: int
    result: Result


Stage = Prepared | Loaded | Progress | WindowDone | Done
"""What ``service.stream`` yields, in this order: Prepared, Loaded, Progress* , Done."""
