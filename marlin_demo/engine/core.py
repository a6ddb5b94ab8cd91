"""Caption and find on a loaded variant: one prompt/generation path for every variant.

This is what Marlin's remote ``.caption()`` / ``.find()`` do, rebuilt on the
plain transformers model so that every variant (GPTQ, bnb4, bf16, a local
quantization) receives byte-identical prompts and is measured the same way.

Reuse (docs/SPEED.md): a video is decoded once per content (a bounded cache keyed by
the file's hash, the sampling parameters and the decode backend), and the model state
after the shared start of every prompt, the chat header and the whole timestamped
video, is kept per (variant, video) in a small bounded cache: later requests on the
same video (a second find, a caption) prefill only their own text. Every request, cold
or warm, runs the same two steps (prefix forward, then generate over the rest), so a
warm answer is token for token the cold one.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from marlin_demo import contract
from marlin_demo.engine import compiled, scoring
from marlin_demo.engine.generation import Generation, free_memory, generate, trim_heap
from marlin_demo.engine.prefix_cache import Prefix, PrefixCache
from marlin_demo.engine.prompt import compact_pads, encode, render_prompt
from marlin_demo.longvideo import plan as win
from marlin_demo.longvideo import runner as window_runs
from marlin_demo.models import LoadedModel, ModelLoadError, load_variant
from marlin_demo.results import (
    CaptionResult,
    FindResult,
    Loaded,
    Metrics,
    Prepared,
    Progress,
    Result,
    RunInfo,
    Stage,
    Task,
)
from marlin_demo.settings import Settings, Variant
from marlin_demo.video import (
    Backend,
    Limits,
    PreparedVideo,
    VideoError,
    VideoInfo,
    pick_backend,
    plan_sampling,
    sample,
    validate,
)
from marlin_demo.video.digest import file_digest, frames_digest
from marlin_demo.video.windows import WindowPlan, plan_window

log = logging.getLogger(__name__)

TINY_LABEL = "marlin-tiny (offline stand-in, random weights)"

#: MARLIN_VIDEO_BACKEND values: the reference decode (qwen-vl-utils' pixels), the fast one, or the
#: choice by clip (video.pick_backend: fast for 8-bit sources, where it was measured faster)
VIDEO_BACKENDS = ("auto", "reference", "fast")


class EngineError(RuntimeError):
    """A request failed for a reason the user can act on; the message says what and how."""


class FaultInjected(RuntimeError):
    """Raised only by the fault-injection switch (tests of the out-of-memory path)."""


class Cancelled(Exception):
    """The caller of ``Engine.stream`` stopped listening: generation stops at the next token."""


class Engine:
    """Loads variants once, prepares videos once per content, runs caption/find."""

    def __init__(
        self, settings: Settings, video_cache_size: int = 4, prefix_cache_size: int | None = None
    ) -> None:
        self.settings = settings
        self.params = contract.VideoParams()
        self._models: dict[str, LoadedModel] = {}
        self._load_errors: dict[str, str] = {}
        self._load_lock = threading.Lock()
        self.gpu_lock = threading.Lock()
        self._videos: OrderedDict[tuple[str, str, str], PreparedVideo] = OrderedDict()
        self._video_lock = threading.Lock()
        self._digests: OrderedDict[tuple[Any, ...], str] = OrderedDict()
        self._infos: OrderedDict[tuple[str, str], VideoInfo] = OrderedDict()
        #: a long video's decoded windows, per (content, window bounds): one entry per video and plan
        self._window_sets: OrderedDict[tuple[Any, ...], list[PreparedVideo]] = OrderedDict()
        self.video_cache_size = video_cache_size
        self.video_backend = _video_backend(settings)
        if prefix_cache_size is None:
            # an engine told to cache no video (the bench) caches no prefix either: every request is cold
            prefix_cache_size = max(0, settings.prefix_cache_size) if video_cache_size > 0 else 0
        if settings.compile:  # compiled decoding runs on a static cache: no per-video prefix states
            prefix_cache_size = 0
        self.prefixes = PrefixCache(prefix_cache_size)
        self._prefix_base = prefix_cache_size  # a long video's request raises the bound to its windows
        self.faults: set[str] = set()  # e.g. {"oom"}: the next request raises a simulated OOM
        self.cancelled = 0  # streamed requests stopped because their caller went away

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

    def limits(self) -> Limits:
        s = self.settings
        return Limits(
            max_file_mb=s.max_upload_mb,
            max_duration_s=s.max_duration_s,
            max_width=s.max_width,
            max_height=s.max_height,
        )

    def load(self, variant: Variant) -> LoadedModel:
        """Load once; a failure is remembered so the UI can show it and retry is explicit."""
        if variant not in self.variants:
            raise EngineError(f"Unknown variant {variant!r}: choose one of {', '.join(self.variants)}.")
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

    # ------------------------------------------------------------------ video
    def prepare(self, video: str | Path | PreparedVideo) -> PreparedVideo:
        """Validate, plan and decode once per (content, parameters, backend); repeats reuse the frames."""
        return self.prepare_cached(video)[0]

    def prepare_cached(self, video: str | Path | PreparedVideo) -> tuple[PreparedVideo, bool]:
        """``prepare`` plus whether the frames came from the cache (nothing decoded in this call)."""
        if isinstance(video, PreparedVideo):  # frames made elsewhere (the GPU check's synthetic clip)
            if not video.digest:
                video.digest = frames_digest(video.frames, video.metadata)
            return video, True
        path = Path(video)
        if not path.exists():
            raise VideoError(f"No file at {path.name}: upload a video file.")
        if not path.is_file() or path.stat().st_size / 1e6 > self.settings.max_upload_mb:
            validate(path, self.limits())  # the user-facing message (not a file, too large), before hashing
        try:
            digest = self._digest(path)
        except OSError:
            validate(path, self.limits())  # e.g. permission denied: say so as a VideoError
            raise
        key = (digest, repr(self.params), self.video_backend)
        with self._video_lock:
            hit = self._videos.get(key)
            if hit is not None:  # validated when it was first prepared, under the same limits
                self._videos.move_to_end(key)
                return hit, True
        info = validate(path, self.limits())
        plan = plan_sampling(info, self.params)
        backend = pick_backend(info, plan) if self.video_backend == "auto" else self.video_backend
        prepared = sample(path, plan, backend=backend, info=info)
        prepared.digest = "|".join(key)
        with self._video_lock:
            self._videos[key] = prepared
            while len(self._videos) > self.video_cache_size:
                self._videos.popitem(last=False)
        return prepared, False

    def _digest(self, path: Path) -> str:
        """The file's sha256, remembered per (path, size, mtime, inode): a repeat does not re-read it."""
        st = path.stat()
        stamp = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
        with self._video_lock:
            known = self._digests.get(stamp)
        if known is not None:
            return known
        digest = file_digest(path)
        with self._video_lock:
            self._digests[stamp] = digest
            while len(self._digests) > 256:
                self._digests.popitem(last=False)
        return digest

    def video_cache_len(self) -> int:
        return len(self._videos)

    def prefix_cache_len(self) -> int:
        return len(self.prefixes)

    # ------------------------------------------------------------------ inputs
    def build_inputs(
        self, loaded: LoadedModel, prepared: PreparedVideo, prompt: str, text: str | None = None
    ) -> tuple[str, Any]:
        """The chat-templated prompt and the processor's tensors, identical for every variant.

        ``text``: the prompt already rendered by ``render_prompt`` (it is not rendered again).
        """
        if text is None:
            text = render_prompt(loaded.processor, prompt, str(prepared.info.path))
        return text, encode(loaded.processor, text, prepared).to(loaded.model.device)

    # ------------------------------------------------------------------ generation
    def _generate(
        self,
        loaded: LoadedModel,
        inputs: Any,
        max_new_tokens: int,
        on_text: Callable[[str], None] | None,
        deadline: float,
        prefix: Prefix | None = None,
        want_logprobs: bool = False,
    ) -> Generation:
        """``generation.generate`` with this engine's settings (and its fault-injection switch)."""
        if "oom" in self.faults:
            self.faults.discard("oom")
            raise FaultInjected("CUDA out of memory (simulated by the fault-injection switch)")
        return generate(
            loaded, inputs, max_new_tokens, on_text, deadline, prefix, want_logprobs, self.settings.compile
        )

    def _run(
        self,
        video: str | Path | PreparedVideo,
        variant: Variant,
        prompt: str,
        max_new_tokens: int,
        on_text: Callable[[str], None] | None,
        on_stage: Callable[[Stage], None] | None = None,
        *,
        cached: bool | None = None,
        deadline: float | None = None,
        logprobs: bool = False,
    ) -> tuple[Generation, Metrics, RunInfo, PreparedVideo]:
        """One prompt on one prepared clip (a whole short video, or one window of a long one).

        ``cached``: whether the frames of a ``PreparedVideo`` given by the caller came from a cache;
        ``deadline``: the request's time limit when it spans several windows.
        """
        import torch

        t_start = time.perf_counter()
        # bad input fails here, before any model is loaded
        prepared, cached_video = self.prepare_cached(video)
        if cached is not None:
            cached_video = cached
        if on_stage is not None:
            on_stage(Prepared(prepared.info, prepared.plan, cached_video))
        t_load = time.perf_counter()
        cold = variant not in self._models
        loaded = self.load(variant)
        if on_stage is not None:
            on_stage(Loaded(variant, cold, loaded.load_s))
        # a first-use load is reported as load_s, not inside the request's latency
        t_start += time.perf_counter() - t_load
        if deadline is None:
            deadline = t_start + self.settings.request_timeout_s
        if time.perf_counter() >= deadline:  # preparing the video alone used up the time limit
            raise EngineError(self._timeout_message())
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
                gen = self._generate(
                    loaded, inputs, max_new_tokens, on_text, deadline, prefix=prefix, want_logprobs=logprobs
                )
                t_start += gen.compile_s  # compiling a new cache size is reported as compile_s
                if cuda:
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() / 2**20
                else:
                    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
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
        latency = time.perf_counter() - t_start
        if gen.stopped_by_time:
            raise EngineError(self._timeout_message())
        ttft = None if gen.first_token_at is None else gen.first_token_at - t_start
        decode_window = None if gen.first_token_at is None else (t_start + latency) - gen.first_token_at
        tps = (gen.output_tokens - 1) / decode_window if decode_window and gen.output_tokens > 1 else None
        metrics = Metrics(
            latency_s=latency,
            ttft_s=ttft,
            output_tokens=gen.output_tokens,
            tokens_per_s=tps,
            video_tokens=prepared.plan.video_tokens,
            peak_memory_mb=peak,
            memory_kind="cuda_peak_allocated" if cuda else "cpu_peak_rss",
            load_s=loaded.load_s,
            device=loaded.device,
        )
        info = RunInfo(
            prompt=compact_pads(loaded.processor.tokenizer.decode(input_ids)),
            duration_s=prepared.info.duration_s,
            video=prepared.info,
            decode_s=prepared.decode_s,
            kernel=loaded.kernel,
            attention=loaded.attention,
            compile=compiled.state_of(loaded).describe() if self.settings.compile else "off",
            compile_s=getattr(getattr(loaded, "compile_state", None), "compile_s", 0.0),
            prefill_s=prefill_s,
            first_text_s=None if gen.first_text_at is None else gen.first_text_at - t_start,
            cached_video=cached_video,
            reused_prefix=reused_prefix,
        )
        return gen, metrics, info, prepared

    def _timeout_message(self) -> str:
        return (
            f"The request ran past the {self.settings.request_timeout_s:g} s time limit and was stopped: "
            "try a shorter clip (MARLIN_REQUEST_TIMEOUT_S sets the limit)."
        )

    # ------------------------------------------------------------------ tasks
    def caption(
        self,
        video: str | Path | PreparedVideo,
        variant: Variant,
        on_text: Callable[[str], None] | None = None,
        on_stage: Callable[[Stage], None] | None = None,
    ) -> CaptionResult:
        """Scene paragraph plus timed events, repaired into the clip and flagged when repaired.

        A video longer than one caption window is captioned window by window (``_caption_windows``).
        """
        plans = self.window_plans(video, "caption")
        if plans is not None:
            return window_runs.caption_windows(self, Path(str(video)), plans, variant, on_text, on_stage)
        self.prefixes.size = self._prefix_base
        gen, metrics, info, prepared = self._run(
            video, variant, contract.CAPTION_PROMPT, self.settings.caption_max_new_tokens, on_text, on_stage
        )
        parsed = contract.parse_caption(gen.text)
        fixed = contract.repair_caption(parsed, prepared.info.duration_s)
        info.repairs = list(fixed.repairs)
        return CaptionResult(
            variant=variant,
            model=self.model_label,
            scene=fixed.scene,
            events=list(fixed.events),
            raw=gen.text,
            repaired=fixed.repaired,
            metrics=metrics,
            format_ok=parsed.format_ok,
            info=info,
            windows=[{"start": 0.0, "end": prepared.info.duration_s, "scene": fixed.scene}],
        )

    def find(
        self,
        video: str | Path | PreparedVideo,
        query: str,
        variant: Variant,
        on_text: Callable[[str], None] | None = None,
        on_stage: Callable[[Stage], None] | None = None,
    ) -> FindResult:
        """A start-end span for the query, or None when the answer gives none: never a made-up span.

        ``moments``: the span scored by the model's own token probabilities (``windows.span_score``);
        a video longer than one find window is searched window by window (``_find_windows``).
        """
        clean = contract.sanitize_query(query, self.settings.max_query_chars)
        prompt = contract.find_prompt(clean, self.settings.max_query_chars)
        plans = self.window_plans(video, "find")
        if plans is not None:
            return window_runs.find_windows(
                self, Path(str(video)), plans, clean, prompt, variant, on_text, on_stage
            )
        self.prefixes.size = self._prefix_base
        gen, metrics, info, prepared = self._run(
            video, variant, prompt, self.settings.find_max_new_tokens, on_text, on_stage, logprobs=True
        )
        parsed = contract.parse_span(gen.text)
        fixed = contract.repair_span(parsed, prepared.info.duration_s)
        info.repairs = list(fixed.repairs)
        score = self._score(gen, variant)
        moments = [] if fixed.span is None or score is None else [win.Moment(*fixed.span, score)]
        return FindResult(
            moments=moments,
            variant=variant,
            model=self.model_label,
            query=clean,
            span=fixed.span,
            format_ok=parsed.format_ok,
            raw=gen.text,
            metrics=metrics,
            repaired=fixed.repaired,
            info=info,
        )

    # ------------------------------------------------------------------ long videos
    def window_plans(self, video: str | Path | PreparedVideo, task: Task) -> list[WindowPlan] | None:
        """Each window's sampling plan for a video longer than one ``task`` window; None: answered whole.

        Too many windows is a ``WindowLimitError`` (a user error), raised before anything is decoded.
        """
        if isinstance(video, PreparedVideo):
            return None
        path = Path(video)
        if not path.is_file() or path.stat().st_size / 1e6 > self.settings.max_upload_mb:
            return None  # prepare_cached says what is wrong, in its own words
        info = self._info(path)
        s = self.settings
        if task == "caption":
            windows = win.caption_windows(info.duration_s, s.caption_window_s, s.max_windows)
        else:
            windows = win.find_windows(info.duration_s, s.find_window_s, s.find_overlap_s, s.max_windows)
        if len(windows) == 1:
            return None
        return [plan_window(info, w, self.params) for w in windows]

    def _info(self, path: Path) -> VideoInfo:
        """The validated facts of a file, probed once per (content, path)."""
        try:
            key = (self._digest(path), str(path.resolve()))
        except OSError:
            validate(path, self.limits())  # e.g. permission denied: said as a VideoError
            raise
        with self._video_lock:
            known = self._infos.get(key)
        if known is not None:
            return known
        info = validate(path, self.limits())
        with self._video_lock:
            self._infos[key] = info
            while len(self._infos) > 64:
                self._infos.popitem(last=False)
        return info

    def _score(self, gen: Generation, variant: Variant) -> float | None:
        """``windows.span_score`` of a find answer (None: no log-probs, or fewer than two numbers)."""
        if gen.logprobs is None or gen.token_ids is None:
            return None
        loaded = self.load(variant)  # already loaded: the request just ran on it
        ids = gen.token_ids[: len(gen.logprobs)]
        return win.span_score(scoring.token_texts(loaded.processor.tokenizer, ids), gen.logprobs[: len(ids)])

    def run(
        self,
        task: str,
        video: str | Path | PreparedVideo,
        variant: Variant,
        query: str | None = None,
        **kw: Any,
    ) -> Result:
        """Dispatch by task name (the compare tab and the bench use it)."""
        if task == "caption":
            return self.caption(video, variant, **kw)
        if task == "find":
            if query is None:
                raise ValueError("The find task needs a query: describe the event to find.")
            return self.find(video, query, variant, **kw)
        raise ValueError(f"Unknown task {task!r}: choose caption or find.")

    def stream(
        self, task: str, video: str | Path | PreparedVideo, variant: Variant, query: str | None = None
    ) -> Iterator[str | Result]:
        """The text as the model writes it, then the result: ``service.stream`` without its other stages.

        Closing the generator early stops the generation at its next token (see ``service.stream``).
        """
        from marlin_demo import service
        from marlin_demo.results import Done

        with contextlib.closing(service.stream(self, task, video, variant, query)) as stages:
            for stage in stages:
                if isinstance(stage, Progress):
                    yield stage.text
                elif isinstance(stage, Done):
                    yield stage.result

    def note_cancelled(self) -> None:
        """Count a streamed request whose caller went away (its generation was stopped)."""
        with self._load_lock:
            self.cancelled += 1


def _video_backend(settings: Settings) -> Backend:
    """Settings.video_backend (MARLIN_VIDEO_BACKEND), checked: auto, reference or fast."""
    value = (settings.video_backend or "auto").strip().lower()
    if value not in VIDEO_BACKENDS:
        raise ValueError(f"MARLIN_VIDEO_BACKEND={value!r} is not one of {', '.join(VIDEO_BACKENDS)}.")
    return cast(Backend, value)  # checked just above


USER_ERRORS: tuple[type[BaseException], ...] = (EngineError, ModelLoadError, VideoError, ValueError)
"""Exceptions whose message is meant for the user (UI banner, gr.Error, CLI line)."""
