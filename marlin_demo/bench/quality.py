"""Scores against the ground truth and agreement between variants (pure: records -> figures)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from marlin_demo.agreement import (
    agreement as pair_agreement,  # alias: this module defines its own agreement()
)
from marlin_demo.bench.matrix import asks
from marlin_demo.datasets import Example
from marlin_demo.tasks import TASKS, get_task


def _scored(
    idx: dict[tuple, dict[str, Any]], variant: str, task: str, name: str, query: str | None, repeats: int
):
    """The record quality is scored on: the first successful repeat (greedy decoding: repeats agree)."""
    recs = [r for rep in range(repeats) if (r := idx.get((variant, task, name, query, rep))) is not None]
    return next((r for r in recs if r.get("ok")), recs[0] if recs else None)


def quality_rows() -> list[tuple[str, str, str]]:
    """(task, key, label) of every quality figure, the tasks in the registry's order."""
    return [(name, f.key, f.label) for name, task in TASKS.items() for f in task.answer.figures]


def _asked(examples: Sequence[Example], tasks: Sequence[str]) -> dict[str, list[tuple[Example, Any]]]:
    """Per task run (registry order): the (example, query) pairs it asks (``matrix.asks``), when any."""
    out = {name: [(ex, q) for ex in examples for q in asks(ex, name)] for name in TASKS if name in tasks}
    return {name: pairs for name, pairs in out.items() if pairs}


def quality(
    examples: Sequence[Example],
    idx: dict[tuple, dict[str, Any]],
    variant: str,
    tasks: Sequence[str],
    repeats: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Scores against ground truth (each task's answer type scores its own), and one row per scored item
    (results.json ``items``); ``overall`` is the mean of the figures marked for it."""
    items: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    for name, pairs in _asked(examples, tasks).items():
        rows = [(ex, q, _scored(idx, variant, name, ex.name, q and q.query, repeats)) for ex, q in pairs]
        out[name], scored = get_task(name).answer.quality(rows)
        items += [{"variant": variant, "task": name, **item} for item in scored]
    parts = [out[t][f.key] for t in list(out) for f in get_task(t).answer.figures if f.overall]
    out["overall"] = statistics.fmean(parts) if parts else None
    return out, items


def agreement(
    examples: Sequence[Example],
    idx: dict[tuple, dict[str, Any]],
    variant: str,
    reference: str,
    tasks: Sequence[str],
    repeats: int,
) -> dict[str, Any]:
    """How close a variant's answers are to the reference variant's (bf16), request by request."""
    out: dict[str, Any] = {}
    for task, pairs in _asked(examples, tasks).items():
        matched = []
        for ex, q in pairs:
            a = _scored(idx, variant, task, ex.name, q and q.query, repeats)
            b = _scored(idx, reference, task, ex.name, q and q.query, repeats)
            if a and a.get("ok") and b and b.get("ok"):
                matched.append((pair_agreement(task, {"a": a, "b": b})["a|b"], a.get("raw") == b.get("raw")))
        if matched:
            out[task] = {k: statistics.fmean(p[k] for p, _ in matched) for k in matched[0][0]}
            out[task]["same_answer_rate"] = sum(same for _, same in matched) / len(matched)
            out[task]["n"] = len(matched)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def retention(q: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """quantized score / reference score for every quality metric (None where the reference is 0)."""
    out: dict[str, Any] = {}
    for task, key, _ in quality_rows():
        if task in q and task in ref:
            out.setdefault(task, {})[key] = _ratio(q[task].get(key), ref[task].get(key))
    out["overall"] = _ratio(q.get("overall"), ref.get("overall"))
    return out
