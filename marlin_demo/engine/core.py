"""Caption and find on one clip of a loaded variant: Marlin's remote ``.caption()`` / ``.find()`` rebuilt
on plain transformers, so every variant gets byte-identical prompts (reuse: docs/SPEED.md)."""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from marlin_demo import model_io
from marlin_demo.engine import compiled, graphs, scoring
from marlin_demo.engine.generation import Generation, free_memory, generate, peak_memory, trim_heap
from marlin_demo.engine.prefix_cache import Prefix, PrefixCache
from marlin_demo.engine.prompt import compact_pads, encode, render_prompt
from marlin_demo.engine.video_store import VideoStore
from marlin_demo.models import LoadedModel, ModelLoadError, load_variant
from marlin_demo.results import (
    CaptionResult,
    FindResult,
    MemoryKind,
    Metrics,
    Result,
    RunInfo,
    Runtime,
    VideoInfo,
)
from marlin_demo.settings import Settings, Variant
from marlin_demo.tasks import Task, get_task
from marlin_demo.tasks.registry import Made
from marlin_demo.variants import unknown
from marlin_demo.video import Backend, Limits, PreparedVideo, VideoError
from marlin_demo.video.windows import WindowPlan

log = logging.getLogger(__name__)

TINY_LABEL = "marlin-tiny (offline stand-in, random weights)"

#: MARLIN_VIDEO_BACKEND values: the reference decode, the fast one, or by clip (``video.pick_backend``)
VIDEO_BACKENDS = ("auto", "reference", "fast")


class EngineError(RuntimeError):
    """A request failed for a reason the user can act on; the message says what and how."""


class FaultInjected(RuntimeError):
    """Raised only by the fault-injection switch (tests of the out-of-memory path)."""


class Cancelled(Exception):
    """The caller of a streamed request stopped listening: generation stops at the next token."""


@dataclass
class ClipRun:
    """One prompt answered on one clip: the generation, its metrics, what ran, and the frames used."""

    gen: Generation
    metrics: Metrics
    info: RunInfo
    prepared: PreparedVideo


class Engine:
    """Loads variants once, prepares videos once per content, answers caption/find on one clip."""

    def __init__(
        self, settings: Settings, video_cache_size: int = 4, prefix_cache_size: int | None = None
    ) -> None:
        self.settings = settings
        self.params = model_io.VideoParams()
        self._models: dict[str, LoadedModel] = {}
        self._load_errors: dict[str, str] = {}
        self._load_lock = threading.Lock()
        #: one generation at a time in this process, whoever asks; it orders nothing (the scheduler does)
        self.gpu_lock = threading.Lock()
        graphs.wanted(settings.decode, "cpu")  # a bad MARLIN_DECODE fails here, before any load
        #: how each variant's tokens were last decoded (``note_decode``): what ZeroGPU calls are sized for
        self.decoded: dict[str, str] = {}
        #: the start-up check's ``graphs.Verdict`` per variant: graphs where it passed (None: off ZeroGPU)
        self.graph_checks: dict[str, graphs.Verdict] | None = None
        limits = Limits(
            settings.max_upload_mb, settings.max_duration_s, settings.max_width, settings.max_height
        )
        self.store = VideoStore(self.params, _video_backend(settings), video_cache_size, limits)
        if prefix_cache_size is None:
            # an engine told to cache no video (the bench) caches no prefix either: every request is cold
            prefix_cache_size = max(0, settings.prefix_cache_size) if video_cache_size > 0 else 0
        if settings.compile:  # compiled decoding runs on a static cache: no per-video prefix states
            prefix_cache_size = 0
        self.prefixes = PrefixCache(prefix_cache_size)
        self._prefix_base = prefix_cache_size  # a long video's request raises the bound to its windows
        self.faults: set[str] = set()  # e.g. {"oom"}: the next request raises a simulated OOM
        self.cancelled = 0  # streamed requests stopped because their caller went away
        self.key = next(_KEYS)
        _LIVE[self.key] = self

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        """Pickled by reference: a forked process (a ZeroGPU call) has the same engine under its key."""
        return (engine_by_key, (self.key,))

    # ------------------------------------------------------------------ models
    @property
    def model_label(self) -> str:
        if self.settings.is_tiny:
            return TINY_LABEL
        if self.settings.model == "marlin":
            return self.settings.bf16_id
        return str(self.settings.model)

    @property
    def variants(self) -> list[str]:
        return self.settings.variant_list

    def load(self, variant: Variant) -> LoadedModel:
        """Load once; a failure is remembered so the UI can show it and retry is explicit."""
        if variant not in self.variants:
            raise EngineError(unknown(variant, self.variants))
        with self._load_lock:
            if variant in self._models:
                return self._models[variant]
            try:
                loaded = load_variant(self.settings, variant)
            except ModelLoadError as exc:
                self._load_errors[variant] = str(exc)
                raise
            self._load_errors.pop(variant, None)
            self._models[variant] = loaded
            return loaded

    def loaded(self) -> dict[str, LoadedModel]:
        return dict(self._models)

    def is_loaded(self, variant: Variant) -> bool:
        return variant in self._models

    def load_errors(self) -> dict[str, str]:
        return dict(self._load_errors)

    def unload(self, variant: Variant) -> bool:
        """Drop a variant and give its memory back."""
        with self._load_lock:
            loaded = self._models.pop(variant, None)
        if loaded is None:
            return False
        del loaded
        with self.gpu_lock:
            self.prefixes.drop(variant)
        free_memory()
        return True

    def decode_expected(self, variant: Variant, device: str) -> str:
        """What a call for ``variant`` is sized for: graphs once a run showed they capture for it, until
        then eager's (slower) figures, so a variant that falls back never runs in a call sized for graphs."""
        wanted = graphs.wanted(self.settings.decode, device, self.settings.compile)
        if wanted != "graphs":
            return wanted
        return "graphs" if self.decoded.get(variant) == "graphs" else "eager"

    def note_decode(self, variant: Variant, mode: str) -> None:
        """Remember how ``variant`` decoded (a ZeroGPU call's answer tells the process that made it)."""
        if mode:
            self.decoded[variant] = mode

    def check_graphs(self, verdicts: dict[str, graphs.Verdict]) -> None:
        """Keep the start-up check's verdicts: graphs, and calls sized for them, only where one passed."""
        self.graph_checks = dict(verdicts)
        for variant in self.variants:
            verdict = verdicts.get(variant)
            if verdict is None or not verdict.passed:
                self.note_decode(variant, "eager")

    def _checked(self, loaded: LoadedModel) -> str:
        """Graphs off for this variant in this process when its start-up check failed or never came (the
        request then says why); "checked at start-up" for one that passed; "" when no check was asked."""
        if self.graph_checks is None:
            return ""
        verdict = self.graph_checks.get(loaded.variant)
        if verdict is None or not verdict.passed:
            why = "no start-up check ran for it" if verdict is None else verdict.why
            graphs.state_of(loaded).fallback = f"start-up check: {why}"
            return ""
        return "checked at start-up"

    # ------------------------------------------------------------------ video
    def prepare(self, video: str | Path | PreparedVideo) -> PreparedVideo:
        """Validate, plan and decode once per (content, parameters, backend); repeats reuse the frames."""
        return self.store.prepare(video)[0]

    def info(self, path: Path, *, whole: bool = True) -> VideoInfo:
        """The validated facts of a file; ``whole=False``: the duration limit is the caller's (a range)."""
        return self.store.info(path, whole=whole)

    def window_frames(
        self, path: Path, plans: list[WindowPlan]
    ) -> Iterator[tuple[WindowPlan, PreparedVideo, bool]]:
        """Each window's frames (and whether they were cached), decoded in one scan on a miss."""
        return self.store.windows(path, plans)

    def kept_reading(self, path: Path, variant: Variant) -> tuple[bool, bool]:
        """Whether ``variant`` would find the clip at ``path``'s frames and prefix kept (then unpriced)."""
        digest, frames = self.store.kept(path)
        return frames, self.prefixes.holds(variant, digest)

    def video_cache_len(self) -> int:
        return len(self.store)

    def prefix_cache_len(self) -> int:
        return len(self.prefixes)

    def reserve_prefixes(self, clips: int) -> None:
        """Keep room for ``clips`` prefix states (a long video's windows), never below the setting."""
        if self._prefix_base > 0:
            self.prefixes.size = max(self._prefix_base, clips)

    # ------------------------------------------------------------------ inputs
    def build_inputs(
        self, loaded: LoadedModel, prepared: PreparedVideo, prompt: str, text: str | None = None
    ) -> tuple[str, Any]:
        """The chat-templated prompt (``text``: already rendered) and the processor's tensors."""
        if text is None:
            text = render_prompt(loaded.processor, prompt, str(prepared.info.path))
        return text, encode(loaded.processor, text, prepared).to(loaded.model.device)

    # ------------------------------------------------------------------ generation
    def run_clip(
        self,
        video: str | Path | PreparedVideo,
        variant: Variant,
        prompt: str,
        max_new_tokens: int,
        on_text: Callable[[str], None] | None = None,
        *,
        cached: bool | None = None,
        logprobs: bool = False,
    ) -> ClipRun:
        """One prompt on one clip; ``cached``: whether a given ``PreparedVideo``'s frames were cached."""
        t_start = time.perf_counter()
        # bad input fails here, before any model is loaded
        prepared, cached_video = self.store.prepare(video)
        cached_video = cached_video if cached is None else cached
        t_load = time.perf_counter()
        loaded = self.load(variant)
        # a first-use load is reported as load_s, not inside the request's latency
        t_start += time.perf_counter() - t_load
        deadline = t_start + self.settings.request_timeout_s
        if time.perf_counter() >= deadline:  # preparing the video alone used up the time limit
            raise EngineError(self._timeout_message())
        gen, peak, input_ids, prefill_s, reused_prefix = self._answer(
            loaded, prepared, prompt, max_new_tokens, on_text, deadline, logprobs
        )
        t_start += gen.compile_s  # compiling a new cache size is reported as compile_s
        latency = time.perf_counter() - t_start
        if gen.stopped_by_time:
            raise EngineError(self._timeout_message())
        metrics = self._metrics(gen, loaded, prepared, t_start, latency, peak)
        self.note_decode(variant, gen.decode)
        info = RunInfo(
            prompt=compact_pads(loaded.processor.tokenizer.decode(input_ids)),
            duration_s=prepared.info.duration_s,
            video=prepared.info,
            decode_s=prepared.decode_s,
            kernel=loaded.kernel,
            attention=loaded.attention,
            runtime=Runtime(device=loaded.device, compute_dtype=loaded.compute_dtype, kernel=loaded.kernel),
            compile=compiled.state_of(loaded).describe() if self.settings.compile else "off",
            compile_s=getattr(getattr(loaded, "compile_state", None), "compile_s", 0.0),
            decode=gen.decode,
            decode_note=gen.decode_note,
            capture_s=gen.capture_s,
            replayed_steps=gen.replayed,
            prefill_s=prefill_s,
            first_text_s=None if gen.first_text_at is None else gen.first_text_at - t_start,
            cached_video=cached_video,
            reused_prefix=reused_prefix,
        )
        return ClipRun(gen, metrics, info, prepared)

    def _answer(
        self,
        loaded: LoadedModel,
        prepared: PreparedVideo,
        prompt: str,
        max_new_tokens: int,
        on_text: Callable[[str], None] | None,
        deadline: float,
        logprobs: bool,
    ) -> tuple[Generation, tuple[float, MemoryKind], list[int], float | None, bool]:
        """Prefill (or reuse the video's prefix) and generate under the GPU lock: (generation, peak memory,
        prompt ids, prefill s, prefix reused?). Out of memory releases the caches and says so."""
        import torch

        with self.gpu_lock:
            cuda = loaded.device == "cuda"
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            try:
                # a cached prefix for this video: only the prompt's own text is tokenized (no pixels)
                text = render_prompt(loaded.processor, prompt, str(prepared.info.path))
                warm = self.prefixes.warm_inputs(loaded, prepared, text)
                prefix: Prefix | None
                prefill_s: float | None
                if warm is not None:
                    inputs, prefix = warm
                    reused_prefix, prefill_s = True, 0.0
                else:
                    text, inputs = self.build_inputs(loaded, prepared, prompt, text=text)
                    prefix, reused_prefix, prefill_s = self.prefixes.lookup(loaded, prepared, text, inputs)
                if "oom" in self.faults:  # the fault-injection switch (tests of this path)
                    self.faults.discard("oom")
                    raise FaultInjected("CUDA out of memory (simulated by the fault-injection switch)")
                decode = graphs.wanted(self.settings.decode, loaded.device, self.settings.compile)
                checked = self._checked(loaded) if decode in ("graphs", "static") else ""
                gen = generate(loaded, inputs, max_new_tokens, on_text, deadline, prefix, logprobs, decode)
                if checked and gen.decode == decode and not gen.decode_note:
                    gen.decode_note = checked  # Compare's decode field: the step its start-up call checked
                peak = peak_memory(loaded.device)
            except (torch.OutOfMemoryError, FaultInjected) as exc:
                self.prefixes.clear()
                free_memory()
                raise EngineError(
                    f"Out of GPU memory on this request ({type(exc).__name__}): the memory was released; "
                    "try a shorter clip, or the gptq/bnb4 variant, and run it again."
                ) from None
            input_ids = inputs["input_ids"][0].tolist()
            del inputs
            if not cuda:
                trim_heap()
        return gen, peak, input_ids, prefill_s, reused_prefix

    def _metrics(
        self,
        gen: Generation,
        loaded: LoadedModel,
        prepared: PreparedVideo,
        t_start: float,
        latency: float,
        peak: tuple[float, MemoryKind],
    ) -> Metrics:
        """Latency, first-token time and decode rate of one clip's answer."""
        ttft = None if gen.first_token_at is None else gen.first_token_at - t_start
        decode_window = None if gen.first_token_at is None else (t_start + latency) - gen.first_token_at
        tps = (gen.output_tokens - 1) / decode_window if decode_window and gen.output_tokens > 1 else None
        return Metrics(
            latency_s=latency,
            ttft_s=ttft,
            output_tokens=gen.output_tokens,
            tokens_per_s=tps,
            video_tokens=prepared.plan.video_tokens,
            peak_memory_mb=peak[0],
            memory_kind=peak[1],
            load_s=loaded.load_s,
            device=loaded.device,
        )

    def _timeout_message(self) -> str:
        return (
            f"The request ran past the {self.settings.request_timeout_s:g} s time limit and was stopped: "
            "try a shorter clip (MARLIN_REQUEST_TIMEOUT_S sets the limit)."
        )

    def score(self, gen: Generation, variant: Variant) -> float | None:
        """``scoring.span_score`` of a find answer (None: no log-probs, or fewer than two numbers)."""
        if gen.logprobs is None or gen.token_ids is None:
            return None
        loaded = self.load(variant)  # already loaded: the request just ran on it
        ids = gen.token_ids[: len(gen.logprobs)]
        return scoring.span_score(
            scoring.token_texts(loaded.processor.tokenizer, ids), gen.logprobs[: len(ids)]
        )

    # ------------------------------------------------------------------ tasks (one clip)
    def run(
        self,
        task: Task,
        video: str | Path | PreparedVideo,
        variant: Variant,
        query: str | None = None,
        on_text: Callable[[str], None] | None = None,
        cached: bool | None = None,
        length: float | None = None,
    ) -> Result:
        """One task on one clip, its answer parsed, repaired against ``length`` (default: the clip's duration)
        and scored; ``task`` and its cleaned ``query`` come as ``service.request`` made them."""
        answer = task.answer
        run = self.run_clip(
            video,
            variant,
            task.prompt(query or ""),
            task.tokens(self.settings),
            on_text,
            cached=cached,
            logprobs=answer.logprobs,
        )
        duration = run.prepared.info.duration_s
        fixed = task.repair(task.parse(run.gen.text), duration if length is None else length)
        run.info.repairs = list(fixed.repairs)
        score = self.score(run.gen, variant) if answer.logprobs else None  # a scored answer's confidence
        made = Made(
            variant, self.model_label, run.gen.text, run.metrics, run.info, query or "", self.settings,
            duration, score,
        )  # fmt: skip
        return answer.build(fixed, made)

    def ask(
        self,
        task: str | Task,
        video: str | Path | PreparedVideo,
        variant: Variant,
        query: str | None = None,
        **kw: Any,
    ) -> Result:
        """``run`` for a script (no request): the task looked up and the query cleaned here."""
        entry = get_task(task)
        return self.run(entry, video, variant, entry.ask(query, self.settings)[0], **kw)

    def caption(self, video: str | Path | PreparedVideo, variant: Variant, **kw: Any) -> CaptionResult:
        """``ask`` of the caption task: scene paragraph plus timed events of one clip."""
        return cast(CaptionResult, self.ask("caption", video, variant, **kw))

    def find(self, video: str | Path | PreparedVideo, query: str, variant: Variant, **kw: Any) -> FindResult:
        """``ask`` of the find task: a start-end span for the query in one clip (None: no span)."""
        return cast(FindResult, self.ask("find", video, variant, query, **kw))

    def note_cancelled(self) -> None:
        """Count a streamed request whose caller went away (its generation was stopped)."""
        with self._load_lock:
            self.cancelled += 1


_KEYS = itertools.count(1)
_LIVE: weakref.WeakValueDictionary[int, Engine] = weakref.WeakValueDictionary()


def engine_by_key(key: int) -> Engine:
    """The live engine of this key (in a forked process: the parent's, as it was at the fork)."""
    engine = _LIVE.get(key)
    if engine is None:
        raise EngineError("The engine of this request is gone: start the request again.")
    return engine


def _video_backend(settings: Settings) -> Backend:
    """Settings.video_backend (MARLIN_VIDEO_BACKEND), checked: auto, reference or fast."""
    value = (settings.video_backend or "auto").strip().lower()
    if value not in VIDEO_BACKENDS:
        raise ValueError(f"MARLIN_VIDEO_BACKEND={value!r} is not one of {', '.join(VIDEO_BACKENDS)}.")
    return cast(Backend, value)  # checked just above


USER_ERRORS: tuple[type[BaseException], ...] = (EngineError, ModelLoadError, VideoError, ValueError)
"""Exceptions whose message is meant for the user (UI banner, gr.Error, CLI line)."""
