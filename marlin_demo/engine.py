"""Caption and find on a loaded variant: one prompt/generation path for every variant.

This is what Marlin's remote ``.caption()`` / ``.find()`` do, rebuilt on the
plain transformers model so that every variant (GPTQ, bnb4, bf16, a local
quantization) receives byte-identical prompts and is measured the same way.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import re
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marlin_demo import contract
from marlin_demo.models import LoadedModel, ModelLoadError, load_variant
from marlin_demo.results import CaptionResult, FindResult, Metrics, Result, RunInfo
from marlin_demo.settings import Settings
from marlin_demo.video import Limits, PreparedVideo, VideoError, plan_sampling, sample, validate

log = logging.getLogger(__name__)

TINY_LABEL = "marlin-tiny (offline stand-in, random weights)"


class EngineError(RuntimeError):
    """A request failed for a reason the user can act on; the message says what and how."""


class FaultInjected(RuntimeError):
    """Raised only by the fault-injection switch (tests of the out-of-memory path)."""


@dataclass
class Generation:
    text: str
    output_tokens: int
    ttft_s: float | None
    gen_s: float
    first_token_at: float | None
    stopped_by_time: bool


class _Streamer:
    """A transformers streamer: notes when the first new token arrives and streams text out."""

    def __init__(self, tokenizer: Any, on_text: Callable[[str], None] | None) -> None:
        self.tokenizer = tokenizer
        self.on_text = on_text
        self.prompt_seen = False
        self.ids: list[int] = []
        self.first_token_at: float | None = None

    def put(self, value: Any) -> None:
        if not self.prompt_seen:  # generate() first hands over the prompt
            self.prompt_seen = True
            return
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.ids.extend(int(t) for t in value.reshape(-1).tolist())
        if self.on_text is not None:
            self.on_text(self.tokenizer.decode(self.ids, skip_special_tokens=True))

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

    def __init__(self, settings: Settings, video_cache_size: int = 4) -> None:
        self.settings = settings
        self.params = contract.VideoParams()
        self._models: dict[str, LoadedModel] = {}
        self._load_errors: dict[str, str] = {}
        self._load_lock = threading.Lock()
        self.gpu_lock = threading.Lock()
        self._videos: OrderedDict[tuple[str, str], PreparedVideo] = OrderedDict()
        self._video_lock = threading.Lock()
        self.video_cache_size = video_cache_size
        self.faults: set[str] = set()  # e.g. {"oom"}: the next request raises a simulated OOM

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
        _free_memory()
        return True

    # ------------------------------------------------------------------ video
    def prepare(self, video: str | Path | PreparedVideo) -> PreparedVideo:
        """Validate, plan and decode once per (content, parameters); later requests reuse the frames."""
        if isinstance(video, PreparedVideo):  # frames made elsewhere (the GPU check's synthetic clip)
            return video
        path = Path(video)
        if not path.exists():
            raise VideoError(f"No file at {path.name}: upload a video file.")
        info = validate(path, self.limits())
        key = (_file_digest(path), repr(self.params))
        with self._video_lock:
            hit = self._videos.get(key)
            if hit is not None:
                self._videos.move_to_end(key)
                return hit
        prepared = sample(path, plan_sampling(info, self.params), info=info)
        with self._video_lock:
            self._videos[key] = prepared
            while len(self._videos) > self.video_cache_size:
                self._videos.popitem(last=False)
        return prepared

    def video_cache_len(self) -> int:
        return len(self._videos)

    # ------------------------------------------------------------------ inputs
    def build_inputs(self, loaded: LoadedModel, prepared: PreparedVideo, prompt: str) -> tuple[str, Any]:
        """The chat-templated prompt and the processor's tensors, identical for every variant."""
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
    ) -> Generation:
        import torch

        if "oom" in self.faults:
            self.faults.discard("oom")
            raise FaultInjected("CUDA out of memory (simulated by the fault-injection switch)")
        streamer = _Streamer(loaded.processor.tokenizer, on_text)
        gen_cfg = loaded.model.generation_config
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = loaded.model.generate(
                **inputs,
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
        gen_s = time.perf_counter() - t0
        new_ids = out[0, inputs["input_ids"].shape[1] :]
        text = loaded.processor.tokenizer.decode(new_ids, skip_special_tokens=True)
        eos = gen_cfg.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        finished = len(new_ids) > 0 and int(new_ids[-1]) in eos_ids
        stopped_by_time = not finished and len(new_ids) < max_new_tokens and time.perf_counter() >= deadline
        return Generation(
            text=text.strip(),
            output_tokens=len(new_ids),
            ttft_s=None,
            gen_s=gen_s,
            first_token_at=streamer.first_token_at,
            stopped_by_time=stopped_by_time,
        )

    def _run(
        self,
        video: str | Path | PreparedVideo,
        variant: str,
        prompt: str,
        max_new_tokens: int,
        on_text: Callable[[str], None] | None,
    ) -> tuple[Generation, Metrics, RunInfo, PreparedVideo]:
        import torch

        t_start = time.perf_counter()
        prepared = self.prepare(video)  # bad input fails here, before any model is loaded
        t_load = time.perf_counter()
        loaded = self.load(variant)
        # a first-use load is reported as load_s, not inside the request's latency
        t_start += time.perf_counter() - t_load
        deadline = t_start + self.settings.request_timeout_s
        if time.perf_counter() >= deadline:  # preparing the video alone used up the time limit
            raise EngineError(self._timeout_message())
        with self.gpu_lock:
            cuda = loaded.device == "cuda"
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            try:
                _, inputs = self.build_inputs(loaded, prepared, prompt)
                gen = self._generate(loaded, inputs, max_new_tokens, on_text, deadline)
                if cuda:
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() / 2**20
                else:
                    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            except (torch.OutOfMemoryError, FaultInjected) as exc:
                _free_memory()
                raise EngineError(
                    f"Out of GPU memory on this request ({type(exc).__name__}): the memory was released; "
                    "try a shorter clip, or the gptq/bnb4 variant, and run it again."
                ) from None
            input_ids = inputs["input_ids"][0].tolist()
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
            decode_s=prepared.decode_s,
            kernel=loaded.kernel,
            attention=loaded.attention,
        )
        return gen, metrics, info, prepared

    def _timeout_message(self) -> str:
        return (
            f"The request ran past the {self.settings.request_timeout_s:g} s time limit and was stopped: "
            "try a shorter clip (MARLIN_REQUEST_TIMEOUT_S sets the limit)."
        )

    # ------------------------------------------------------------------ tasks
    def caption(
        self, video: str | Path | PreparedVideo, variant: str, on_text: Callable[[str], None] | None = None
    ) -> CaptionResult:
        """Scene paragraph plus timed events, repaired into the clip and flagged when repaired."""
        gen, metrics, info, prepared = self._run(
            video, variant, contract.CAPTION_PROMPT, self.settings.caption_max_new_tokens, on_text
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
        )

    def find(
        self,
        video: str | Path | PreparedVideo,
        query: str,
        variant: str,
        on_text: Callable[[str], None] | None = None,
    ) -> FindResult:
        """A start-end span for the query, or None when the answer gives none: never a made-up span."""
        clean = contract.sanitize_query(query, self.settings.max_query_chars)
        prompt = contract.find_prompt(clean, self.settings.max_query_chars)
        gen, metrics, info, prepared = self._run(
            video, variant, prompt, self.settings.find_max_new_tokens, on_text
        )
        parsed = contract.parse_span(gen.text)
        fixed = contract.repair_span(parsed, prepared.info.duration_s)
        info.repairs = list(fixed.repairs)
        return FindResult(
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
        """Yield the partial text as the model writes, then the result object (errors re-raised)."""
        updates: queue.Queue[tuple[str, Any]] = queue.Queue()

        def work() -> None:
            try:
                res = self.run(task, video, variant, query, on_text=lambda t: updates.put(("text", t)))
                updates.put(("done", res))
            except BaseException as exc:
                updates.put(("error", exc))

        threading.Thread(target=work, daemon=True, name=f"marlin-{task}").start()
        while True:
            kind, value = updates.get()
            if kind == "text":
                yield value
            elif kind == "done":
                yield value
                return
            else:
                raise value


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


def _free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


USER_ERRORS: tuple[type[BaseException], ...] = (EngineError, ModelLoadError, VideoError, ValueError)
"""Exceptions whose message is meant for the user (UI banner, gr.Error, CLI line)."""
