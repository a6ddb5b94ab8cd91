"""Greedy generation on a loaded variant: the one ``generate`` call every request makes.

Also the streamer that times the first token and streams text out, and giving memory back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marlin_demo.engine import compiled, scoring
from marlin_demo.engine.prefix_cache import Prefix
from marlin_demo.models import LoadedModel


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


def generate(
    loaded: LoadedModel,
    inputs: Any,
    max_new_tokens: int,
    on_text: Callable[[str], None] | None,
    deadline: float,
    prefix: Prefix | None = None,
    want_logprobs: bool = False,
    use_compile: bool = False,
) -> Generation:
    """Greedy generation; with ``prefix``, only the tokens after it are prefilled (on a copy of it)."""
    import torch

    streamer = Streamer(loaded.processor.tokenizer, on_text)
    gen_cfg = loaded.model.generation_config
    gen_inputs = dict(inputs) if prefix is None else prefix.generate_kwargs(loaded.model, inputs)
    ids_kw = {"eos_token_id": gen_cfg.eos_token_id, "pad_token_id": gen_cfg.pad_token_id}
    extra = {}
    if use_compile:  # compiles a new cache size first: that time is kept out of latency
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
            **ids_kw,
        )
    out = res.sequences if want_logprobs else res
    logprobs = scoring.generated_logprobs(res, inputs["input_ids"].shape[1]) if want_logprobs else None
    new_ids = out[0, inputs["input_ids"].shape[1] :]
    text = loaded.processor.tokenizer.decode(new_ids, skip_special_tokens=True)
    eos_ids = set(eos if isinstance(eos := gen_cfg.eos_token_id, list) else [eos])
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


def trim_heap() -> None:
    """Hand freed CPU tensor memory back to the OS, so a long-running server's RSS tracks its real use."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
