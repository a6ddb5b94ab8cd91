"""Per-token log-probabilities of a generated answer, from ``generate(...)`` output (torch).

The engine asks ``generate`` for ``output_logits=True, return_dict_in_generate=True`` on find
requests (answers are ~10 tokens, so keeping one logits row per step is cheap) and feeds the
result here; ``windows.span_score`` turns the numbers' log-probs into the moment's score.
Raw logits (not ``scores``) are used: ``scores`` are after logits processors, which are not the
model's own distribution.
"""

from __future__ import annotations

from typing import Any


def generated_logprobs(out: Any, prompt_len: int) -> list[float]:
    """Natural log-probability of each generated token (batch row 0), computed in float32."""
    import torch

    steps = out.logits if getattr(out, "logits", None) is not None else out.scores
    if steps is None:
        raise ValueError(
            "generate() output has no logits: pass output_logits=True, return_dict_in_generate=True."
        )
    new = out.sequences[0, prompt_len:]
    vals: list[float] = []
    for row, tok in zip(steps, new.tolist(), strict=False):
        lp = torch.log_softmax(row[0].float(), dim=-1)
        vals.append(float(lp[int(tok)]))
    return vals


def token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's own text (special tokens as ""), such that "".join(...) is the decoded answer."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    texts: list[str] = []
    prev = ""
    kept: list[int] = []
    for t in ids:
        if t in special:
            texts.append("")
            continue
        kept.append(t)
        cur = tokenizer.decode(kept, skip_special_tokens=True)
        texts.append(cur[len(prev) :])
        prev = cur
    return texts
