"""Decoding in CUDA graphs without torch.compile (MARLIN_DECODE): one step captured per variant, cache size
and input shape, replayed for every token in ``generate``'s own loop, so tokens are eager decoding's
(docs/DESIGN.md, "Decoding"); a failed capture, or another shape, decodes eagerly and says why."""

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


@dataclass
class Form:
    """One shape of a step's inputs: its fixed buffers, and the graph captured on them (None on a CPU)."""

    inputs: dict[str, Any]
    graph: Any = None
    output: Any = None


@dataclass
class Trace:
    """The start-up check's record of one generation: each step's logits; ``uncaptured``: the forward run on
    the buffers instead of the replay; ``min_tokens``: both runs decode as many steps."""

    uncaptured: bool
    min_tokens: int
    logits: list[Any] = field(default_factory=list)


_TRACE: ContextVar[Trace | None] = ContextVar("marlin_graphs_trace", default=None)


@contextlib.contextmanager
def tracing(uncaptured: bool, min_tokens: int) -> Iterator[Trace]:
    """Inside: every decode step's logits are kept in the yielded ``Trace`` (the start-up check)."""
    trace = Trace(uncaptured, min_tokens)
    token = _TRACE.set(trace)
    try:
        yield trace
    finally:
        _TRACE.reset(token)


def trace_kwargs() -> dict[str, Any]:
    """``generate``'s extra arguments under ``tracing``: no stop before its tokens."""
    trace = _TRACE.get()
    return {} if trace is None else {"min_new_tokens": trace.min_tokens}


class DecodeStep:
    """The decode step on one static cache: inputs copied into fixed buffers of their shape, then the graph
    replayed (or, on a CPU, the forward run on them); a step of an unprepared shape runs eagerly."""

    def __init__(self, model: Any, cache: Any, capture: bool) -> None:
        self.model = model
        self.cache = cache
        self.capture = capture
        self.forms: dict[Any, Form] = {}
        self.making = False
        self.replayed = 0  # this request's steps that ran the step (replayed, or uncaptured on a CPU)
        self.eager_steps = 0  # this request's steps whose inputs fit no form: run eagerly

    def __call__(self, **kwargs: Any) -> Any:
        signature = _signature(kwargs)
        form = self.forms.get(signature)
        if form is None and not self.making:
            self.eager_steps += 1
            return self.model(**kwargs)
        if form is None:
            form = self.forms[signature] = Form(_buffers(kwargs))
            if self.capture:
                form.graph, form.output = _capture(self.model, form.inputs)
        else:
            _fill(form.inputs, kwargs)
        self.replayed += 1
        trace = None if self.making else _TRACE.get()  # the throwaway generations are not the request's
        output = self.model(**form.inputs) if trace is not None and trace.uncaptured else replay(self, form)
        if trace is not None:
            trace.logits.append(output.logits[:, -1].float().clone())
        return output


def replay(step: DecodeStep, form: Form) -> Any:
    """The graph captured on ``form``'s buffers replayed (a CPU: the forward run on them)."""
    if form.graph is None:
        return step.model(**form.inputs)
    form.graph.replay()
    return form.output


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
    """The step's graph and its output; its warm-up advances the cache, so it runs only in ``prepare``."""
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
    step.replayed = step.eager_steps = 0
    return step, spent


def _new_step(loaded: Any, size: int, gen_kwargs: dict[str, Any], capture: bool) -> DecodeStep:
    """A static cache of ``size`` tokens and its step, captured by two short text generations: the first for
    a request without a prefix, the second, on its cache, for one from a video's prefix (other rope rows)."""
    import torch
    from transformers import StaticCache

    model = loaded.model
    cache = StaticCache(config=model.config, max_cache_len=size)
    step = DecodeStep(model, cache, capture)
    ids = loaded.processor.tokenizer("warm up", return_tensors="pt")["input_ids"].to(model.device)
    step.making = True
    try:
        with torch.inference_mode(), decoding(model, step):
            out = _throwaway(model, cache, ids, gen_kwargs)
            _throwaway(model, cache, torch.cat([out, ids], dim=1), gen_kwargs)  # cache holds the first's
    finally:
        step.making = False
    if len(step.forms) < 2:
        raise RuntimeError("generate did not call the decode step (transformers changed how it decodes)")
    if capture:
        torch.cuda.synchronize()
    return step


def _throwaway(model: Any, cache: Any, ids: Any, gen_kwargs: dict[str, Any]) -> Any:
    """A short greedy generation on ``cache`` (only what it does not hold yet is prefilled)."""
    import torch

    return model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=torch.zeros_like(ids),  # a video prompt's decode steps pass them too (all 0)
        cache=cache,
        max_new_tokens=CAPTURE_TOKENS,
        min_new_tokens=CAPTURE_TOKENS,
        **GREEDY,
        **gen_kwargs,
    )


@dataclass(frozen=True)
class Verdict:
    """The start-up check of one variant's captured step: whether its replay gave the very logits of the same
    forward uncaptured, ``why``, and how the variant decodes after it (``decode``)."""

    variant: str
    passed: bool
    why: str
    seconds: float = 0.0
    decode: str = "eager"

    def line(self) -> str:
        """ "gptq: graphs (24 decode steps, ...)" or "gptq: eager (decode step 3 of 23: ...)"."""
        return f"{self.variant}: {self.decode} ({self.why})"


def judge(variant: str, runs: list[tuple[Trace, Any]], seconds: float) -> Verdict:
    """The verdict on two traced generations of one prompt, replayed then uncaptured (each with its
    ``Generation``): any step that did not replay, or any logit that differs, fails it."""
    import torch

    (replayed, a), (uncaptured, b) = runs
    steps = len(replayed.logits)
    if a.decode not in ("graphs", "static") or a.replayed < steps or steps == 0:
        why = f"the step did not replay every token ({a.decode_note or a.decode})"
        return Verdict(variant, False, why, seconds)
    for i, (x, y) in enumerate(zip(replayed.logits, uncaptured.logits, strict=False)):
        if not torch.equal(x, y):
            diff = float((x - y).abs().max()) if x.shape == y.shape else float("nan")
            why = (
                f"decode step {i + 1} of {steps}: its replayed logits differ from uncaptured (max {diff:.3g})"
            )
            return Verdict(variant, False, why, seconds)
    if len(uncaptured.logits) != steps or a.token_ids != b.token_ids:
        return Verdict(variant, False, "the replayed and uncaptured runs decoded different tokens", seconds)
    why = f"{steps} decode steps replayed and run uncaptured: the same logits, bit for bit"
    return Verdict(variant, True, why, seconds, a.decode)


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
