"""The video prefix cache: the model state after a prompt's chat header and whole timestamped video, so a
later request on the same video prefills only its own text (docs/SPEED.md); used under the gpu_lock."""

from __future__ import annotations

import copy
import inspect
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from marlin_demo.models import LoadedModel
from marlin_demo.video import PreparedVideo


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
    """The model state after a prompt's chat header and whole video; every request generates on a deep copy.
    ``rope_deltas``: M-RoPE's offset after the video; ``tail_ok``: later prompts skip the processor."""

    variant: str
    length: int
    cache: Any
    rope_deltas: Any
    nbytes: int
    prefill_s: float
    ids: Any = None
    mm_types: Any = None
    tail_ok: bool = False

    def generate_kwargs(self, model: Any, inputs: Any, cache: Any = None) -> dict[str, Any]:
        """generate() arguments for the whole prompt on a copy of this state (``cache``: a loaded static
        cache); no pixels, and ``mm_token_type_ids`` kept so generate uses the stored rope deltas."""
        kwargs = {k: inputs[k] for k in ("input_ids", "attention_mask", "mm_token_type_ids") if k in inputs}
        kwargs[_cache_kwarg(model)] = copy.deepcopy(self.cache) if cache is None else cache
        model.model.rope_deltas = self.rope_deltas.clone()
        return kwargs


class PrefixCache:
    """A bounded LRU of ``Prefix`` states, keyed by (variant, model, video content, templated header):
    one is ~0.3 GB for a 2-minute clip on Marlin-2B (docs/SPEED.md): the default keeps two. Under gpu_lock."""

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

    def holds(self, variant: str, digest: str) -> bool:
        """Whether a prefix state of ``variant`` on the frames ``digest`` names is kept (any prompt's)."""
        return any(k[0] == variant and k[2] == digest for k in list(self._entries))

    def _find(
        self, loaded: LoadedModel, prepared: PreparedVideo, text: str
    ) -> tuple[tuple[Any, ...], str] | None:
        """The entry key of the templated prompt cut after the video's ``<|vision_end|>`` (header + video,
        keyed by variant, model and content) and the text after it; None: reuse off or no video."""
        end_id = getattr(loaded.model.config, "vision_end_token_id", None)
        if (
            self.size <= 0
            or end_id is None
            or not hasattr(getattr(loaded.model, "model", None), "rope_deltas")
        ):
            return None
        marker = loaded.processor.tokenizer.convert_ids_to_tokens(int(end_id))
        cut = text.rfind(marker) if isinstance(marker, str) and marker else -1
        if cut < 0:
            return None
        if not prepared.digest:  # Engine._prepare always sets it; without it videos would share a key
            raise ValueError("PrefixCache needs a video prepared by Engine.prepare (it has no digest).")
        cut += len(marker)
        return (loaded.variant, id(loaded.model), prepared.digest, text[:cut]), text[cut:]

    def warm_inputs(
        self, loaded: LoadedModel, prepared: PreparedVideo, text: str
    ) -> tuple[dict[str, Any], Prefix] | None:
        """Inputs for ``text`` from a cached prefix without the processor (None: no usable entry): the
        prefix's ids plus the tokenizer's for the rest, the processor's ids (checked once: ``tail_ok``)."""
        import torch

        found = self._find(loaded, prepared, text)
        if found is None:
            return None
        key, rest = found
        entry = self._entries.get(key)
        if entry is None or not entry.tail_ok:
            return None
        self._entries.move_to_end(key)
        tail = _tail_ids(loaded, rest).to(entry.ids.device)
        ids = torch.cat([entry.ids, tail], dim=1)
        inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if entry.mm_types is not None:
            inputs["mm_token_type_ids"] = torch.cat([entry.mm_types, torch.zeros_like(tail)], dim=1)
        return inputs, entry

    def lookup(
        self, loaded: LoadedModel, prepared: PreparedVideo, text: str, inputs: Any
    ) -> tuple[Prefix | None, bool, float | None]:
        """(prefix state, reused?, seconds to compute) for ``text``'s ``inputs`` (off: None, False, None)."""
        found = self._find(loaded, prepared, text)
        ids = inputs["input_ids"]
        length = _boundary(loaded.model, ids)
        if found is None or length == 0 or length >= ids.shape[1] or ids.shape[0] != 1:
            return None, False, None
        key, rest = found
        hit = self._entries.get(key)
        if hit is not None and hit.length == length and bool((hit.ids == ids[:, :length]).all()):
            self._entries.move_to_end(key)
            return hit, True, 0.0
        entry = self._compute(loaded, inputs, length)
        tail = _tail_ids(loaded, rest).to(ids.device)
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
