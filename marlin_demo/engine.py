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
import copy
import dataclasses
import hashlib
import inspect
import itertools
import logging
import re
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from marlin_demo import compiled, contract, scoring
from marlin_demo import windows as win
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
)
from marlin_demo.settings import Settings
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
from marlin_demo.window_video import WindowPlan, decode_windows, plan_window

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


@dataclass
class Generation:
    text: str
    output_tokens: int
    first_token_at: float | None
    stopped_by_time: bool
    first_text_at: float | None = None  # first non-empty decoded text (time to first visible token)
    token_ids: list[int] | None = None  # the new token ids (tests compare warm and cold runs with them)
    compile_s: float = 0.0  # compiling a new static-cache size before this request (MARLIN_COMPILE)
    logprobs: list[float] | None = None  # per new token, natural log-prob (find: the moment's score)


class _Streamer:
    """A transformers streamer: notes when the first new token arrives and streams text out."""

    def __init__(self, tokenizer: Any, on_text: Callable[[str], None] | None) -> None:
        self.tokenizer = tokenizer
        self.on_text = on_text
        self.prompt_seen = False
        self.ids: list[int] = []
        self.first_token_at: float | None = None
        self.first_text_at: float | None = None

    def put(self, value: Any) -> None:
        if not self.prompt_seen:  # generate() first hands over the prompt
            self.prompt_seen = True
            return
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.ids.extend(int(t) for t in value.reshape(-1).tolist())
        if self.on_text is None and self.first_text_at is not None:
            return  # nothing left to learn from decoding
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if self.first_text_at is None and text.strip():
            self.first_text_at = time.perf_counter()
        if self.on_text is not None:
            self.on_text(text)

    def end(self) -> None:
        pass


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _compact_pads(text: str) -> str:
    """The decoded prompt with runs of video pad tokens counted instead of spelled out."""
    return re.sub(
        r"(?:<\|video_pad\|>)+", lambda m: f"<|video_pad|>×{m.group(0).count('<|video_pad|>')}", text
    )


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

    def load(self, variant: str) -> LoadedModel:
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

    def unload(self, variant: str) -> bool:
        """Drop a variant and give its memory back."""
        with self._load_lock:
            loaded = self._models.pop(variant, None)
        if loaded is None:
            return False
        del loaded
        with self.gpu_lock:
            self.prefixes.drop(variant)
        _free_memory()
        return True

    # ------------------------------------------------------------------ video
    def prepare(self, video: str | Path | PreparedVideo) -> PreparedVideo:
        """Validate, plan and decode once per (content, parameters, backend); repeats reuse the frames."""
        return self.prepare_cached(video)[0]

    def prepare_cached(self, video: str | Path | PreparedVideo) -> tuple[PreparedVideo, bool]:
        """``prepare`` plus whether the frames came from the cache (nothing decoded in this call)."""
        if isinstance(video, PreparedVideo):  # frames made elsewhere (the GPU check's synthetic clip)
            if not video.digest:
                video.digest = _frames_digest(video)
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
        digest = _file_digest(path)
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
        """Greedy generation; with ``prefix``, only the tokens after it are prefilled (on a copy of it)."""
        import torch

        if "oom" in self.faults:
            self.faults.discard("oom")
            raise FaultInjected("CUDA out of memory (simulated by the fault-injection switch)")
        streamer = _Streamer(loaded.processor.tokenizer, on_text)
        gen_cfg = loaded.model.generation_config
        gen_inputs = dict(inputs) if prefix is None else prefix.generate_kwargs(loaded.model, inputs)
        ids_kw = {"eos_token_id": gen_cfg.eos_token_id, "pad_token_id": gen_cfg.pad_token_id}
        extra = {}
        if self.settings.compile:  # compiles a new cache size first: that time is kept out of latency
            extra = compiled.prepare(loaded, inputs["input_ids"].shape[1], max_new_tokens, ids_kw)
        compile_s = extra.pop("_compile_s", 0.0)
        deadline += compile_s  # the time limit is the request's, not the one-time compile's
        if want_logprobs:  # the raw logits of each step (greedy choice unchanged): the find score
            extra.update(output_logits=True, return_dict_in_generate=True)
        with torch.inference_mode():
            res = loaded.model.generate(
                **gen_inputs,
                **extra,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                streamer=streamer,
                max_time=max(0.05, deadline - time.perf_counter()),
                eos_token_id=gen_cfg.eos_token_id,
                pad_token_id=gen_cfg.pad_token_id,
            )
        out = res.sequences if want_logprobs else res
        logprobs = scoring.generated_logprobs(res, inputs["input_ids"].shape[1]) if want_logprobs else None
        new_ids = out[0, inputs["input_ids"].shape[1] :]
        text = loaded.processor.tokenizer.decode(new_ids, skip_special_tokens=True)
        eos = gen_cfg.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        finished = len(new_ids) > 0 and int(new_ids[-1]) in eos_ids
        stopped_by_time = not finished and len(new_ids) < max_new_tokens and time.perf_counter() >= deadline
        return Generation(
            text=text.strip(),
            output_tokens=len(new_ids),
            first_token_at=streamer.first_token_at,
            stopped_by_time=stopped_by_time,
            first_text_at=streamer.first_text_at,
            token_ids=[int(t) for t in new_ids.tolist()],
            compile_s=compile_s,
            logprobs=logprobs,
        )

    def _run(
        self,
        video: str | Path | PreparedVideo,
        variant: str,
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
                _free_memory()
                raise EngineError(
                    f"Out of GPU memory on this request ({type(exc).__name__}): the memory was released; "
                    "try a shorter clip, or the gptq/bnb4 variant, and run it again."
                ) from None
            input_ids = inputs["input_ids"][0].tolist()
            del inputs
            if not cuda:
                _trim_heap()
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
            prompt=_compact_pads(loaded.processor.tokenizer.decode(input_ids)),
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
        variant: str,
        on_text: Callable[[str], None] | None = None,
        on_stage: Callable[[Stage], None] | None = None,
    ) -> CaptionResult:
        """Scene paragraph plus timed events, repaired into the clip and flagged when repaired.

        A video longer than one caption window is captioned window by window (``_caption_windows``).
        """
        plans = self.window_plans(video, "caption")
        if plans is not None:
            return self._caption_windows(Path(str(video)), plans, variant, on_text, on_stage)
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
        variant: str,
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
            return self._find_windows(Path(str(video)), plans, clean, prompt, variant, on_text, on_stage)
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
    def window_plans(self, video: str | Path | PreparedVideo, task: str) -> list[WindowPlan] | None:
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

    def _window_frames(
        self, path: Path, plans: list[WindowPlan]
    ) -> Iterator[tuple[WindowPlan, PreparedVideo, bool]]:
        """(plan, frames, from the cache?) per window; a miss decodes all windows in one scan of the file.

        Each window's digest names the window, so the prefix cache keeps one state per window.
        """
        base = f"{self._digest(path)}|{self.params!r}|windows|{self.video_backend}"
        key = (base, tuple((wp.window.start, wp.window.end) for wp in plans))
        with self._video_lock:
            hit = self._window_sets.get(key)
            if hit is not None:
                self._window_sets.move_to_end(key)
        if hit is not None:
            for wp, pv in zip(plans, hit, strict=True):
                yield wp, pv, True
            return
        got: list[PreparedVideo] = []
        t0 = time.perf_counter()
        for wp, pv, _ in decode_windows(str(path), plans, backend=self.video_backend):
            pv.digest = f"{base}|{wp.window.start:g}-{wp.window.end:g}"
            pv.decode_s = time.perf_counter() - t0
            got.append(pv)
            yield wp, pv, False
            t0 = time.perf_counter()
        with self._video_lock:
            self._window_sets[key] = got
            while len(self._window_sets) > self.video_cache_size:
                self._window_sets.popitem(last=False)

    def _run_windows(
        self,
        path: Path,
        plans: list[WindowPlan],
        variant: str,
        prompt: str,
        max_new_tokens: int,
        on_text: Callable[[str], None] | None,
        on_stage: Callable[[Stage], None] | None,
        logprobs: bool = False,
    ) -> tuple[list[tuple[WindowPlan, Generation, Metrics, RunInfo]], Metrics, RunInfo]:
        """Each window through ``_run`` (today's path on that window's frames), in order, one time limit.

        Stages: Prepared (the whole video, the first window's plan), Loaded, then per window a
        ``Progress("", k, n)`` when it starts (its text follows as Progress with the same k).
        """
        n = len(plans)
        if self._prefix_base > 0:  # room for every window's prefix: a second query reuses them all
            self.prefixes.size = max(self._prefix_base, n)
        frames = self._window_frames(path, plans)
        first = next(frames)  # a decode failure is raised here, before any model is loaded
        whole = self._info(path)
        if on_stage is not None:
            on_stage(Prepared(whole, first[0].plan, first[2]))
        cold = variant not in self._models
        loaded = self.load(variant)
        if on_stage is not None:
            on_stage(Loaded(variant, cold, loaded.load_s))
        t_start = time.perf_counter()
        deadline = t_start + self.settings.request_timeout_s
        runs: list[tuple[WindowPlan, Generation, Metrics, RunInfo]] = []
        decode_s = 0.0
        for k, (wp, pv, hit) in enumerate(itertools.chain([first], frames), 1):
            if on_stage is not None:
                on_stage(Progress("", k, n))
            decode_s += pv.decode_s if not hit else 0.0
            gen, m, ri, _ = self._run(
                pv, variant, prompt, max_new_tokens, on_text, None, cached=hit, deadline=deadline,
                logprobs=logprobs,
            )  # fmt: skip
            runs.append((wp, gen, m, ri))
        ms = [r[2] for r in runs]
        tokens = sum(m.output_tokens for m in ms)
        decode_time = sum(m.output_tokens / m.tokens_per_s for m in ms if m.tokens_per_s)
        metrics = Metrics(
            latency_s=time.perf_counter() - t_start,
            ttft_s=ms[0].ttft_s,
            output_tokens=tokens,
            tokens_per_s=tokens / decode_time if decode_time > 0 else None,
            video_tokens=sum(m.video_tokens for m in ms),
            peak_memory_mb=max(m.peak_memory_mb for m in ms),
            memory_kind=ms[0].memory_kind,
            load_s=loaded.load_s,
            device=loaded.device,
        )
        infos = [r[3] for r in runs]
        prefills = [i.prefill_s for i in infos]
        info = dataclasses.replace(
            infos[0],
            duration_s=whole.duration_s,
            video=whole,
            decode_s=decode_s,
            prefill_s=None if None in prefills else sum(p or 0.0 for p in prefills),
            first_text_s=infos[0].first_text_s,
            cached_video=all(i.cached_video for i in infos),
            reused_prefix=all(i.reused_prefix for i in infos),
            windows=infos,
        )
        return runs, metrics, info

    @staticmethod
    def _raw(runs: list[tuple[WindowPlan, Generation, Metrics, RunInfo]]) -> str:
        """Each window's answer under a header naming the window (the model's words, unchanged)."""
        n = len(runs)
        return "\n\n".join(
            f"[window {k}/{n}: {wp.window.start:g}-{wp.window.end:g} s]\n{gen.text}"
            for k, (wp, gen, _, _) in enumerate(runs, 1)
        )

    def _score(self, gen: Generation, variant: str) -> float | None:
        """``windows.span_score`` of a find answer (None: no log-probs, or fewer than two numbers)."""
        if gen.logprobs is None or gen.token_ids is None:
            return None
        loaded = self.load(variant)  # already loaded: the request just ran on it
        ids = gen.token_ids[: len(gen.logprobs)]
        return win.span_score(scoring.token_texts(loaded.processor.tokenizer, ids), gen.logprobs[: len(ids)])

    def _caption_windows(
        self,
        path: Path,
        plans: list[WindowPlan],
        variant: str,
        on_text: Callable[[str], None] | None,
        on_stage: Callable[[Stage], None] | None,
    ) -> CaptionResult:
        """Caption each window, map its events to global time, merge them into one timeline."""
        runs, metrics, info = self._run_windows(
            path, plans, variant, contract.CAPTION_PROMPT, self.settings.caption_max_new_tokens, on_text,
            on_stage,
        )  # fmt: skip
        parts = []
        for wp, gen, _, _ in runs:
            parsed = contract.parse_caption(gen.text)
            parts.append((wp.window, win.map_caption(parsed, wp.window, offset=wp.offset_s)))
        merged = win.merge_captions(parts)
        info.repairs = [*merged.repairs, *merged.joined]
        return CaptionResult(
            variant=variant,
            model=self.model_label,
            scene=merged.scene,
            events=list(merged.events),
            raw=self._raw(runs),
            repaired=merged.repaired,
            metrics=metrics,
            format_ok=merged.format_ok,
            info=info,
            windows=list(merged.windows),
        )

    def _find_windows(
        self,
        path: Path,
        plans: list[WindowPlan],
        query: str,
        prompt: str,
        variant: str,
        on_text: Callable[[str], None] | None,
        on_stage: Callable[[Stage], None] | None,
    ) -> FindResult:
        """Find in each window, score and map each span, merge duplicates: the best top_k moments."""
        runs, metrics, info = self._run_windows(
            path, plans, variant, prompt, self.settings.find_max_new_tokens, on_text, on_stage, logprobs=True
        )
        answers = []
        for wp, gen, _, _ in runs:
            mapped = win.map_span(contract.parse_span(gen.text), wp.window, offset=wp.offset_s)
            answers.append((wp.window, mapped, self._score(gen, variant)))
        moments = win.merge_moments(answers, max(1, self.settings.top_k))
        info.repairs = [note for _, p, _ in answers for note in p.repairs]
        return FindResult(
            variant=variant,
            model=self.model_label,
            query=query,
            span=win.best_span(moments),
            format_ok=all(p.format_ok for _, p, _ in answers),
            raw=self._raw(runs),
            metrics=metrics,
            repaired=any(p.repaired for _, p, _ in answers),
            info=info,
            moments=moments,
        )

    def run(
        self, task: str, video: str | Path | PreparedVideo, variant: str, query: str | None = None, **kw: Any
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
        self, task: str, video: str | Path | PreparedVideo, variant: str, query: str | None = None
    ) -> Iterator[str | Result]:
        """The text as the model writes it, then the result: ``service.stream`` without its other stages.

        Closing the generator early stops the generation at its next token (see ``service.stream``).
        """
        from marlin_demo import service
        from marlin_demo.results import Done, Progress

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


def _frames_digest(prepared: PreparedVideo) -> str:
    """A content key for frames made outside the engine (hashes the pixels once)."""
    h = hashlib.sha256()
    frames = prepared.frames.detach().to("cpu").contiguous()
    h.update(repr((tuple(frames.shape), str(frames.dtype), sorted(prepared.metadata.items()))).encode())
    h.update(frames.numpy().tobytes())
    return "frames:" + h.hexdigest()


def _cache_kwarg(model: Any) -> str:
    """The name generate()/forward() take the cache under (``cache`` in transformers >= 5.2x)."""
    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _tensor_bytes(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes held by the tensors reachable from a cache object (for the memory figures)."""
    import torch

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_tensor_bytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return sum(_tensor_bytes(v, seen) for v in vars(obj).values())
    return 0


@dataclass
class Prefix:
    """The model state after a prompt's shared start: the chat header and the whole timestamped video.

    ``cache`` holds the full-attention keys/values and the Gated DeltaNet conv and recurrent
    states after ``length`` tokens; ``rope_deltas`` the M-RoPE offset of the text that follows
    the video (Qwen3.5 keeps it on the model between calls). It is never used directly:
    every request generates on a deep copy, so the stored state stays as the prefix left it.
    ``ids``/``mm_types`` are the prefix's token ids and modality types; ``tail_ok`` says that
    the processor's ids for the first prompt were exactly these followed by the tokenizer's ids
    of the text after the video, so later prompts can skip the processor (and its pixels).
    """

    variant: str
    length: int
    cache: Any
    rope_deltas: Any
    nbytes: int
    prefill_s: float
    ids: Any = None
    mm_types: Any = None
    tail_ok: bool = False

    def generate_kwargs(self, model: Any, inputs: Any) -> dict[str, Any]:
        """generate() arguments for the whole prompt on a copy of this state.

        The pixels are left out: the cache covers every video token, so the vision tower
        must not run again (generate would pass them to the first forward, which would
        look for video tokens among the new ones). ``mm_token_type_ids`` stays so generate
        sees that no vision tokens follow the cached part and uses the stored rope deltas.
        """
        kwargs = {k: inputs[k] for k in ("input_ids", "attention_mask", "mm_token_type_ids") if k in inputs}
        kwargs[_cache_kwarg(model)] = copy.deepcopy(self.cache)
        model.model.rope_deltas = self.rope_deltas.clone()
        return kwargs


class PrefixCache:
    """A bounded LRU of ``Prefix`` states keyed by (variant, model, video content, templated header).

    Each entry holds one video's keys/values on the model's device (for Marlin-2B about 12 KB a
    token: ~0.28 GB for a 2-minute clip's ~23,500 tokens, plus ~20 MB of linear-attention
    state), so the default keeps two. Only used under the engine's gpu_lock.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[Any, ...], Prefix] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()

    def drop(self, variant: str) -> None:
        for key in [k for k, e in self._entries.items() if e.variant == variant]:
            del self._entries[key]

    @staticmethod
    def _split(loaded: LoadedModel, text: str) -> tuple[str, str] | None:
        """The templated prompt cut after the video's ``<|vision_end|>``: (header + video, the rest)."""
        end_id = getattr(loaded.model.config, "vision_end_token_id", None)
        if end_id is None:
            return None
        marker = loaded.processor.tokenizer.convert_ids_to_tokens(int(end_id))
        cut = text.rfind(marker) if isinstance(marker, str) and marker else -1
        if cut < 0:
            return None
        cut += len(marker)
        return text[:cut], text[cut:]

    def _key(self, loaded: LoadedModel, prepared: PreparedVideo, head: str) -> tuple[Any, ...]:
        if not prepared.digest:  # Engine._prepare always sets it; without it videos would share a key
            raise ValueError("PrefixCache needs a video prepared by Engine.prepare (it has no digest).")
        return (loaded.variant, id(loaded.model), prepared.digest, head)

    def _usable(self, loaded: LoadedModel) -> bool:
        return self.size > 0 and hasattr(getattr(loaded.model, "model", None), "rope_deltas")

    def warm_inputs(
        self, loaded: LoadedModel, prepared: PreparedVideo, text: str
    ) -> tuple[dict[str, Any], Prefix] | None:
        """Inputs for ``text`` built from a cached prefix without the processor, or None (no usable entry).

        The prefix's ids plus the tokenizer's ids for the text after the video: the same ids
        the processor gives (checked on the entry's first, cold, request: ``tail_ok``).
        """
        import torch

        if not self._usable(loaded):
            return None
        parts = self._split(loaded, text)
        if parts is None:
            return None
        key = self._key(loaded, prepared, parts[0])
        entry = self._entries.get(key)
        if entry is None or not entry.tail_ok:
            return None
        self._entries.move_to_end(key)
        tail = _tail_ids(loaded, parts[1]).to(entry.ids.device)
        inputs: dict[str, Any] = {
            "input_ids": torch.cat([entry.ids, tail], dim=1),
        }
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        if entry.mm_types is not None:
            inputs["mm_token_type_ids"] = torch.cat([entry.mm_types, torch.zeros_like(tail)], dim=1)
        return inputs, entry

    def lookup(
        self, loaded: LoadedModel, prepared: PreparedVideo, text: str, inputs: Any
    ) -> tuple[Prefix | None, bool, float | None]:
        """(prefix state, reused?, seconds spent computing it) for processor ``inputs`` of ``text``.

        (None, False, None) when reuse is off or does not apply (no video in the prompt).
        """
        if not self._usable(loaded):
            return None, False, None
        parts = self._split(loaded, text)
        ids = inputs["input_ids"]
        length = _boundary(loaded.model, ids)
        if parts is None or length == 0 or length >= ids.shape[1] or ids.shape[0] != 1:
            return None, False, None
        key = self._key(loaded, prepared, parts[0])
        hit = self._entries.get(key)
        if hit is not None and hit.length == length and bool((hit.ids == ids[:, :length]).all()):
            self._entries.move_to_end(key)
            return hit, True, 0.0
        entry = self._compute(loaded, inputs, length)
        tail = _tail_ids(loaded, parts[1]).to(ids.device)
        entry.tail_ok = tail.shape[1] == ids.shape[1] - length and bool((tail == ids[:, length:]).all())
        mm = inputs.get("mm_token_type_ids")
        entry.tail_ok = entry.tail_ok and (mm is None or not bool(mm[:, length:].any()))
        self._entries[key] = entry
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return entry, False, entry.prefill_s

    @staticmethod
    def _compute(loaded: LoadedModel, inputs: Any, length: int) -> Prefix:
        """One forward over the prefix (vision tower included), keeping its cache and rope deltas."""
        import torch
        from transformers import DynamicCache

        model = loaded.model
        t0 = time.perf_counter()
        kwargs = dict(inputs)
        for name in ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids"):
            if name in kwargs and kwargs[name] is not None:
                kwargs[name] = kwargs[name][:, :length]
        cache = DynamicCache(config=model.config)
        model.model.rope_deltas = None  # recomputed from this prompt's video grid
        with torch.inference_mode():
            # logits_to_keep=1: the prefix's logits are never used (all of them would be 23k x vocab)
            model(**kwargs, **{_cache_kwarg(model): cache}, use_cache=True, logits_to_keep=1)
        deltas = model.model.rope_deltas
        if deltas is None:
            raise RuntimeError("the model did not compute M-RoPE deltas for the prefix")
        mm = kwargs.get("mm_token_type_ids")
        return Prefix(
            variant=loaded.variant,
            length=length,
            cache=cache,
            rope_deltas=deltas.clone(),
            nbytes=_tensor_bytes(cache),
            prefill_s=time.perf_counter() - t0,
            ids=kwargs["input_ids"].clone(),
            mm_types=None if mm is None else mm.clone(),
        )


def _boundary(model: Any, input_ids: Any) -> int:
    """Tokens in the shared prefix: everything through the last ``<|vision_end|>`` (0: no video)."""
    end_id = getattr(model.config, "vision_end_token_id", None)
    if end_id is None:
        return 0
    hits = (input_ids[0] == end_id).nonzero()
    return int(hits.max()) + 1 if hits.numel() else 0


def _tail_ids(loaded: LoadedModel, tail: str) -> Any:
    """The tokenizer's ids for the prompt text after the video (special tokens split it from the video)."""
    return loaded.processor.tokenizer(tail, add_special_tokens=False, return_tensors="pt")["input_ids"]


def render_prompt(processor: Any, prompt: str, video: str | None) -> str:
    """Marlin's single user turn (the video, then the prompt) through the checkpoint's chat template."""
    content: list[dict[str, Any]] = [{"type": "video", "video": video}] if video is not None else []
    content.append({"type": "text", "text": prompt})
    messages = [{"role": "user", "content": content}]
    return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode(processor: Any, text: str, prepared: PreparedVideo | None) -> Any:
    """Processor tensors for ``text``: the frames go in as sampled, with their real timestamps.

    ``do_resize=False`` keeps the reference pipeline's size (the processor would resize again);
    ``video_metadata`` carries the fps and frame indices that make the ``<t seconds>`` markers right.
    The inference path, the quantizer's calibration and the tiny model's training all use this.
    """
    if prepared is None:
        return processor(text=[text], return_tensors="pt")
    return processor(
        text=[text],
        videos=[prepared.frames],
        video_metadata=[dict(prepared.metadata)],  # the processor mutates what it is given
        do_sample_frames=False,
        do_resize=False,
        return_tensors="pt",
    )


def _trim_heap() -> None:
    """Hand freed CPU tensor memory back to the OS, so a long-running server's RSS tracks its real use."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def _free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


USER_ERRORS: tuple[type[BaseException], ...] = (EngineError, ModelLoadError, VideoError, ValueError)
"""Exceptions whose message is meant for the user (UI banner, gr.Error, CLI line)."""
