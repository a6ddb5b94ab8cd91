"""Decoding in CUDA graphs without torch.compile (MARLIN_DECODE): one decode step captured per variant and
static-cache size, replayed for every token (docs/DESIGN.md, "Decoding").

``generate`` keeps its own loop, so greedy tokens are eager decoding's: on a ``StaticCache`` (fixed addresses)
its decode steps call a ``DecodeStep``, which copies each token's inputs into fixed buffers and replays the
graph captured on them, or on a CPU runs the forward on them uncaptured (``static``: the tests' token
identity). A variant whose capture fails decodes eagerly and says why (docs/GPU_CHECK.md).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from marlin_demo.engine.compiled import bucket

log = logging.getLogger(__name__)

#: MARLIN_DECODE: auto (graphs on CUDA, eager elsewhere), graphs (on a CPU: the step, uncaptured), eager
CHOICES = ("auto", "graphs", "eager")
#: static caches (and their graphs) kept per variant, most recently used first; a new size evicts the oldest
KEEP = 2
#: forward passes before the capture: cuBLAS handles, Triton's JIT and autotuning run outside the graph
WARMUP_STEPS = 2
#: tokens of the short text generation that captures a new cache size (its decode steps capture and replay)
CAPTURE_TOKENS = 4


#: greedy decoding, the generation config's sampling switched off (Marlin's answers are greedy)
GREEDY: dict[str, Any] = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}


class GraphsUnavailable(RuntimeError):
    """Raised instead of decoding eagerly inside ``required()`` (a ZeroGPU call sized for graphs)."""


_REQUIRED: ContextVar[bool] = ContextVar("marlin_graphs_required", default=False)


@contextlib.contextmanager
def required() -> Iterator[None]:
    """Inside: a variant that cannot decode in graphs raises ``GraphsUnavailable`` before its prefill
    instead of decoding eagerly, which would outlast the ZeroGPU call sized for graphs."""
    token = _REQUIRED.set(True)
    try:
        yield
    finally:
        _REQUIRED.reset(token)


def check_required(step: DecodeStep | None, loaded: Any) -> None:
    """``GraphsUnavailable`` when graphs are ``required()`` and this request got no step."""
    if step is None and _REQUIRED.get():
        why = state_of(loaded).fallback or "no step"
        raise GraphsUnavailable(f"{loaded.variant} cannot decode in CUDA graphs in this process ({why})")


def wanted(choice: str, device: str, compile_on: bool = False) -> str:
    """What a request's decoding will be asked to be, before any capture: a ValueError for a bad choice."""
    value = (choice or "auto").strip().lower()
    if value not in CHOICES:
        raise ValueError(f"MARLIN_DECODE={choice!r} is not one of {', '.join(CHOICES)}.")
    if compile_on:
        return "compiled"
    if value == "eager" or (value == "auto" and device != "cuda"):
        return "eager"
    return "graphs" if device == "cuda" else "static"


@dataclass
class GraphState:
    """Per loaded variant: its decode steps by cache size, and why it is off if it is."""

    steps: OrderedDict[int, DecodeStep] = field(default_factory=OrderedDict)
    fallback: str = ""  # non-empty: decodes eagerly, for this reason


def state_of(loaded: Any) -> GraphState:
    """The variant's graph state, created on first use (kept on the LoadedModel, in this process)."""
    if getattr(loaded, "graph_state", None) is None:
        loaded.graph_state = GraphState()
    return loaded.graph_state  # type: ignore[no-any-return]


class DecodeStep:
    """One decode step on one static cache: its inputs copied into fixed buffers each token, then the graph
    captured on them replayed (``capture``) or the same forward run on them (a CPU)."""

    def __init__(self, model: Any, cache: Any, capture: bool) -> None:
        self.model = model
        self.cache = cache
        self.capture = capture
        self.graph: Any = None
        self.inputs: dict[str, Any] | None = None
        self.output: Any = None
        self.signature: Any = None
        self.eager_steps = 0  # this request's steps whose inputs did not fit the buffers: run eagerly

    def __call__(self, **kwargs: Any) -> Any:
        if self.inputs is None:
            self.signature = _signature(kwargs)
            self.inputs = _buffers(kwargs)
            if self.capture:
                self.graph, self.output = _capture(self.model, self.inputs)
        elif _signature(kwargs) != self.signature:
            self.eager_steps += 1
            return self.model(**kwargs)
        else:
            _fill(self.inputs, kwargs)
        if self.graph is None:
            return self.model(**self.inputs)
        self.graph.replay()
        return self.output


def _signature(value: Any) -> Any:
    """What must not change between steps: tensors' shapes and types, every other value itself."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.device)
    if isinstance(value, dict):
        return tuple((k, _signature(v)) for k, v in sorted(value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, *(_signature(v) for v in value))
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return ("object", id(value))  # the cache: the same object every step


def _buffers(value: Any) -> Any:
    """Fixed copies of a step's tensors (the graph reads them), everything else as it is."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _buffers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_buffers(v) for v in value)
    return value


def _fill(buffers: Any, value: Any) -> None:
    """This step's tensors copied into the fixed buffers (same structure: ``_signature`` checked it)."""
    import torch

    if isinstance(value, torch.Tensor):
        buffers.copy_(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _fill(buffers[k], v)
    elif isinstance(value, list | tuple):
        for b, v in zip(buffers, value, strict=True):
            _fill(b, v)


def _capture(model: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    """The step's graph and its output (whose tensors each replay rewrites). The warm-up passes run on a
    side stream as torch.cuda.graph requires; they advance the cache, which is why capture happens only in
    ``prepare``'s throwaway generation."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_STEPS):
            model(**inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: another thread's CUDA call (a second engine, a video decode) does not void the capture
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        output = model(**inputs)
    return graph, output


@contextlib.contextmanager
def decoding(model: Any, step: DecodeStep | None) -> Iterator[None]:
    """``generate`` inside: its decode steps call ``step`` (transformers takes the decode step from
    ``get_compiled_call`` when ``_valid_auto_compile_criteria`` holds: both answered on this instance)."""
    if step is None:
        yield
        return
    model.get_compiled_call = lambda _config: step
    model._valid_auto_compile_criteria = lambda _kwargs, _config: True
    try:
        yield
    finally:
        del model.get_compiled_call
        del model._valid_auto_compile_criteria


def prepare(
    loaded: Any, prompt_tokens: int, max_new_tokens: int, gen_kwargs: dict[str, Any], capture: bool
) -> tuple[DecodeStep | None, float]:
    """The decode step for this request's cache size, its cache reset (None: this variant decodes eagerly),
    and the seconds spent creating and capturing a new size (0 when it was ready)."""
    import torch

    state = state_of(loaded)
    if state.fallback:
        return None, 0.0
    size = bucket(prompt_tokens + max_new_tokens + 1)
    step = state.steps.get(size)
    spent = 0.0
    if step is None:
        t0 = time.perf_counter()
        try:
            step = _new_step(loaded, size, gen_kwargs, capture)
        except Exception as exc:  # a kernel that cannot be captured, out of memory...
            log.warning("decoding in CUDA graphs failed for %s: %r; decoding eagerly", loaded.variant, exc)
            state.fallback = f"capture failed: {type(exc).__name__}: {str(exc)[:160]}"
            state.steps.clear()
            if capture and torch.cuda.is_available():
                with contextlib.suppress(Exception):  # a voided capture may fail these too: eager goes on
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
            return None, time.perf_counter() - t0
        spent = time.perf_counter() - t0
        state.steps[size] = step
        while len(state.steps) > KEEP:
            state.steps.popitem(last=False)
    state.steps.move_to_end(size)
    with torch.inference_mode():
        step.cache.reset()
    step.eager_steps = 0
    return step, spent


def _new_step(loaded: Any, size: int, gen_kwargs: dict[str, Any], capture: bool) -> DecodeStep:
    """A static cache of ``size`` tokens and its step, captured by a short text generation: its prefill
    allocates the cache's tensors (where the graph reads and writes), its first decode step captures."""
    import torch
    from transformers import StaticCache

    model = loaded.model
    cache = StaticCache(config=model.config, max_cache_len=size)
    step = DecodeStep(model, cache, capture)
    ids = loaded.processor.tokenizer("warm up", return_tensors="pt")["input_ids"].to(model.device)
    with torch.inference_mode(), decoding(model, step):
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            mm_token_type_ids=torch.zeros_like(ids),  # a video prompt's decode steps pass them too (all 0)
            cache=cache,
            max_new_tokens=CAPTURE_TOKENS,
            min_new_tokens=CAPTURE_TOKENS,
            **GREEDY,
            **gen_kwargs,
        )
    if step.inputs is None:
        raise RuntimeError("generate did not call the decode step (transformers changed how it decodes)")
    if capture:
        torch.cuda.synchronize()
    return step


def seed(cache: Any, source: Any) -> None:
    """Load a prefix's state (a ``DynamicCache``: the chat header and the whole video) into a reset static
    cache, so the request prefills only its own text on it, as it would on a copy of the prefix."""
    import torch
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    with torch.inference_mode():
        for dst, src in zip(cache.layers, source.layers, strict=True):  # each layer's state copied in place
            if isinstance(src, LinearAttentionCacheLayerMixin):  # conv and recurrent states
                for i, has in src.has_previous_state.items():
                    if has:
                        dst.conv_states[i].copy_(src.conv_states[i])
                        dst.recurrent_states[i].copy_(src.recurrent_states[i])
                        dst.has_previous_state[i] = True
            keys = getattr(src, "keys", None)
            if keys is not None and getattr(dst, "keys", None) is not None:  # the K/V and their length
                n = keys.shape[-2]
                dst.keys[:, :, :n].copy_(keys)
                dst.values[:, :, :n].copy_(src.values)
                dst.cumulative_length.fill_(n)
