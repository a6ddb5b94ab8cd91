"""Compiled decoding (MARLIN_COMPILE): ``generate`` with a per-variant ``StaticCache`` and a ``CompileConfig``
(why, and the cost: docs/GPU_CHECK.md); one that will not compile runs eagerly and says why."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: Cache sizes are rounded up to a multiple of this many tokens (one compiled graph per size).
BUCKET = 2048

#: Inductor's switches for compiled decoding: bf16 rounded like eager's (token identity), and freezing and
#: autotuning at their defaults, which gptqmodel's CPU kernel turns on process-wide (a ~5 s build per shape).
INDUCTOR_OPTIONS = {"emulate_precision_casts": True, "freezing": False, "max_autotune": False}


@dataclass
class CompileState:
    """Per loaded variant: the static caches by size, the compile time paid, and why it is off if it is."""

    caches: dict[int, Any] = field(default_factory=dict)
    config: Any = None  # one CompileConfig per variant: transformers recompiles when it changes
    compile_s: float = 0.0
    fallback: str = ""  # non-empty: runs eagerly, for this reason

    def describe(self) -> str:
        if self.fallback:
            return f"eager ({self.fallback})"
        sizes = ",".join(str(n) for n in sorted(self.caches)) or "none yet"
        return f"static cache + torch.compile (cache sizes {sizes}; prefix reuse off)"


def compile_config(device: str) -> Any:
    """``reduce-overhead`` (CUDA graphs) on a GPU; on a CPU plain inductor, same precision switch."""
    from transformers.generation.configuration_utils import CompileConfig

    # mode and options are exclusive in torch.compile: CUDA graphs are an inductor option too
    options = {**INDUCTOR_OPTIONS, "triton.cudagraphs": True} if device == "cuda" else dict(INDUCTOR_OPTIONS)
    # transformers types mode as str and _compile_all_devices as None, but torch.compile takes
    # mode=None (needed with options) and transformers reads the flag as a bool
    config = CompileConfig(fullgraph=False, dynamic=False, mode=None, options=options)  # type: ignore[arg-type]
    config._compile_all_devices = device != "cuda"  # type: ignore[assignment]  # CUDA only unless told
    return config


def state_of(loaded: Any) -> CompileState:
    """The variant's compile state, created on first use (kept on the LoadedModel)."""
    if getattr(loaded, "compile_state", None) is None:
        loaded.compile_state = CompileState()
    return loaded.compile_state


def bucket(tokens: int) -> int:
    return -(-tokens // BUCKET) * BUCKET


def _refusal(model: Any, cache: Any, config: Any) -> str:
    """Why transformers would not compile this model's decode step ('' when it would)."""
    from transformers import GenerationConfig

    if model._valid_auto_compile_criteria({"cache": cache}, GenerationConfig(compile_config=config)):
        return ""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and not quantizer.is_compileable:
        return f"transformers does not compile {type(quantizer).__name__}"
    return "transformers refused to compile this model"


def prepare(
    loaded: Any, prompt_tokens: int, max_new_tokens: int, gen_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """generate() arguments for compiled decoding ({}: eager); ``["_compile_s"]``: a new size's compile."""
    import torch
    from transformers import StaticCache

    state = state_of(loaded)
    if state.fallback:
        return {}
    model = loaded.model
    size = bucket(prompt_tokens + max_new_tokens + 1)
    if state.config is None:
        state.config = compile_config(loaded.device)
    config = state.config
    spent = 0.0
    cache = state.caches.get(size)
    if cache is None:
        cache = StaticCache(config=model.config, max_cache_len=size)
        reason = _refusal(model, cache, config)
        if reason:
            state.fallback = reason
            return {}
        t0 = time.perf_counter()
        try:
            _warm_up(loaded, cache, config, gen_kwargs)
        except Exception as exc:  # a kernel dynamo cannot trace, a missing compiler...
            log.warning("compiled decoding failed for %s: %r; running eagerly", loaded.variant, exc)
            state.fallback = f"compile failed: {type(exc).__name__}: {str(exc)[:160]}"
            return {}
        spent = time.perf_counter() - t0
        state.compile_s += spent
        state.caches[size] = cache
    with torch.inference_mode():
        cache.reset()
    return {"cache": cache, "compile_config": config, "_compile_s": spent}


def _warm_up(loaded: Any, cache: Any, config: Any, gen_kwargs: dict[str, Any]) -> None:
    """A few decode steps on a short text prompt: compiles (and on CUDA records) this cache size."""
    import torch

    ids = loaded.processor.tokenizer("warm up", return_tensors="pt")["input_ids"].to(loaded.model.device)
    with torch.inference_mode():
        for _ in range(2):  # the second run replays what the first compiled (CUDA graphs record on it)
            cache.reset()
            loaded.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                cache=cache,
                compile_config=config,
                max_new_tokens=4,
                min_new_tokens=4,
                **gen_kwargs,
            )
