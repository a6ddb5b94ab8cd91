"""Per-token log-probabilities of a find answer and the moment's score (``span_score``), from raw logits:
``scores`` come after the logits processors, not the model's own distribution."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any


def generated_logprobs(out: Any, prompt_len: int) -> list[float]:
    """Natural log-probability of each generated token (batch row 0), computed in float32."""
    import torch

    steps = out.logits if getattr(out, "logits", None) is not None else out.scores
    if steps is None:
        raise ValueError(
            "generate() output has no logits: pass output_logits=True, return_dict_in_generate=True."
        )
    new = out.sequences[0, prompt_len:].tolist()
    return [
        float(torch.log_softmax(row[0].float(), dim=-1)[int(t)]) for row, t in zip(steps, new, strict=False)
    ]


def token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's own text (special tokens as ""), such that "".join(...) is the decoded answer."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    texts: list[str] = []
    prev, kept = "", []
    for t in ids:
        if t in special:
            texts.append("")
            continue
        kept.append(t)
        cur = tokenizer.decode(kept, skip_special_tokens=True)
        texts.append(cur[len(prev) :])
        prev = cur
    return texts


_NUMBER_RE = re.compile(r"\d+(?:[.:]\d+)*")


def span_score(token_texts: Sequence[str], token_logprobs: Sequence[float]) -> float | None:
    """Geometric mean of the probabilities of the tokens overlapping the answer's first two numbers (None:
    fewer): the words around them are near-certain and would pull every score toward 1. Not calibrated."""
    if len(token_texts) != len(token_logprobs):
        raise ValueError("token_texts and token_logprobs must have the same length.")
    text = "".join(token_texts)
    nums = list(_NUMBER_RE.finditer(text))[:2]
    if len(nums) < 2:
        return None
    picked: list[float] = []
    pos = 0
    for piece, lp in zip(token_texts, token_logprobs, strict=True):
        a, b = pos, pos + len(piece)
        pos = b
        if a < b and any(a < m.end() and m.start() < b for m in nums):
            picked.append(float(lp))
    if not picked:
        return None
    return min(1.0, max(0.0, math.exp(sum(picked) / len(picked))))
