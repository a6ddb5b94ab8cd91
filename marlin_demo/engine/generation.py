"""Greedy generation on a loaded variant: the one ``generate`` call every request makes, and its streamer."""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marlin_demo.engine import compiled, graphs, scoring
from marlin_demo.engine.prefix_cache import Prefix
from marlin_demo.models import LoadedModel
from marlin_demo.results import MemoryKind


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
    decode: str = "eager"  # how the decode steps ran: graphs, static (uncaptured), eager or compiled
    decode_note: str = ""  # why they ran eagerly when graphs were asked for
    capture_s: float = 0.0  # capturing a new static-cache size's step in this request (inside its latency)
    replayed: int = 0  # decode steps that ran the captured step (on a CPU: the same step, uncaptured)


class Streamer:
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


@dataclass
class _Decoding:
    """How one request decodes: its generate() arguments and what ran (``Generation.decode``)."""

    gen_inputs: dict[str, Any]
    extra: dict[str, Any]
    step: graphs.DecodeStep | None = None
    capture_s: float = 0.0
    compile_s: float = 0.0
    ran: str = "eager"


def _decoding(
    loaded: LoadedModel,
    inputs: Any,
    prefix: Prefix | None,
    max_new_tokens: int,
    ids_kw: dict[str, Any],
    decode: str,
) -> _Decoding:
    """The static cache and step (graphs), or the compiled cache (compiled), or eager's plain arguments;
    a prefix is copied for eager decoding and loaded into the static cache for a step."""
    prompt_len = inputs["input_ids"].shape[1]
    step, capture_s, compile_s, extra, ran = None, 0.0, 0.0, {}, "eager"
    if decode == "compiled":  # compiles a new cache size first: that time is kept out of latency
        extra = compiled.prepare(loaded, prompt_len, max_new_tokens, ids_kw)
        compile_s = extra.pop("_compile_s", 0.0)
        ran = "compiled" if "compile_config" in extra else "eager"
    elif decode in ("graphs", "static"):  # before the prefix sets its rope deltas: a capture generates
        step, capture_s = graphs.prepare(loaded, prompt_len, max_new_tokens, ids_kw, decode == "graphs")
        graphs.check_required(step, loaded)
    if step is None:
        plain = dict(inputs) if prefix is None else prefix.generate_kwargs(loaded.model, inputs)
        return _Decoding(plain, extra, capture_s=capture_s, compile_s=compile_s, ran=ran)
    if prefix is None:
        gen_inputs = {**dict(inputs), "cache": step.cache}
    else:
        graphs.seed(step.cache, prefix.cache)
        gen_inputs = prefix.generate_kwargs(loaded.model, inputs, step.cache)
    return _Decoding(gen_inputs, {}, step, capture_s, ran="graphs" if step.capture else "static")


def generate(
    loaded: LoadedModel,
    inputs: Any,
    max_new_tokens: int,
    on_text: Callable[[str], None] | None,
    deadline: float,
    prefix: Prefix | None = None,
    want_logprobs: bool = False,
    decode: str = "eager",
) -> Generation:
    """Greedy generation; ``prefix``: only the tokens after it prefilled; ``decode``: ``graphs.wanted``'s."""
    import torch

    streamer = Streamer(loaded.processor.tokenizer, on_text)
    gen_cfg = loaded.model.generation_config
    ids_kw = {"eos_token_id": gen_cfg.eos_token_id, "pad_token_id": gen_cfg.pad_token_id}
    prompt_len = inputs["input_ids"].shape[1]
    how = _decoding(loaded, inputs, prefix, max_new_tokens, ids_kw, decode)
    deadline += how.compile_s  # the time limit is the request's, not the one-time compile's
    extra = {**how.extra, **graphs.trace_kwargs()}
    if want_logprobs:  # the raw logits of each step (greedy choice unchanged): the find score
        extra.update(output_logits=True, return_dict_in_generate=True)
    with torch.inference_mode(), graphs.decoding(loaded.model, how.step):
        res = loaded.model.generate(
            **how.gen_inputs,
            **extra,
            max_new_tokens=max_new_tokens,
            **graphs.GREEDY,
            streamer=streamer,
            max_time=max(0.05, deadline - time.perf_counter()),
            **ids_kw,
        )
    out = res.sequences if want_logprobs else res
    logprobs = scoring.generated_logprobs(res, prompt_len) if want_logprobs else None
    new_ids = out[0, prompt_len:]
    text = loaded.processor.tokenizer.decode(new_ids, skip_special_tokens=True)
    eos_ids = set(eos if isinstance(eos := gen_cfg.eos_token_id, list) else [eos])
    finished = len(new_ids) > 0 and int(new_ids[-1]) in eos_ids
    stopped_by_time = not finished and len(new_ids) < max_new_tokens and time.perf_counter() >= deadline
    state = compiled.state_of(loaded) if decode == "compiled" else graphs.state_of(loaded)
    note = state.fallback if how.ran == "eager" and decode != "eager" else ""
    ran, replayed = how.ran, 0 if how.step is None else how.step.replayed
    if how.step is not None and how.step.eager_steps:  # any step eager: the request decoded at eager's speed
        ran = "eager"
        note = (
            f"{how.step.eager_steps} of {how.step.eager_steps + replayed} decode steps ran eagerly: their "
            "inputs did not fit the captured ones"
        )
    return Generation(
        text=text.strip(),
        output_tokens=len(new_ids),
        first_token_at=streamer.first_token_at,
        stopped_by_time=stopped_by_time,
        first_text_at=streamer.first_text_at,
        token_ids=[int(t) for t in new_ids.tolist()],
        compile_s=how.compile_s,
        logprobs=logprobs,
        decode=ran,
        decode_note=note,
        capture_s=how.capture_s,
        replayed=replayed,
    )


def trim_heap() -> None:
    """Hand freed CPU tensor memory back to the OS, so a long-running server's RSS tracks its real use."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def peak_memory(device: str) -> tuple[float, MemoryKind]:
    """The process's peak memory in MB and what it measured: CUDA's peak allocated, else the peak RSS."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20, "cuda_peak_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "cpu_peak_rss"
