"""Quality metrics (pure Python + ``rouge-score``; no torch), defined in docs/BENCHMARK.md: temporal IoU,
R1@m, mIoU, ROUGE-L, keyword coverage, event matching; an unparseable answer (``None``) counts as IoU 0."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from marlin_demo.model_io import Event

Span = tuple[float, float]
EventLike = Event | Mapping[str, Any]


def _clean_span(span: Sequence[float] | None) -> Span | None:
    if span is None:
        return None
    s, e = float(span[0]), float(span[1])
    if not (math.isfinite(s) and math.isfinite(e)):
        return None
    return (s, e) if s <= e else (e, s)


def temporal_iou(a: Sequence[float] | None, b: Sequence[float] | None) -> float:
    """Temporal IoU of two (start, end) spans; ``None`` on either side gives 0.0."""
    sa, sb = _clean_span(a), _clean_span(b)
    if sa is None or sb is None:
        return 0.0
    inter = max(0.0, min(sa[1], sb[1]) - max(sa[0], sb[0]))
    hull = max(sa[1], sb[1]) - min(sa[0], sb[0])
    return inter / hull if hull > 0.0 else 1.0  # an empty hull: both are the same single instant


def grounding_scores(
    preds: Sequence[Sequence[float] | None],
    refs: Sequence[Sequence[float]],
    thresholds: Iterable[float] = (0.3, 0.5, 0.7),
) -> dict[str, float | int]:
    """mIoU, R1@m for each threshold (keys ``r1@0.3`` ...), parse rate and n."""
    if len(preds) != len(refs):
        raise ValueError(f"got {len(preds)} predictions for {len(refs)} references; they must pair up.")
    scores = _iou_scores([temporal_iou(p, r) for p, r in zip(preds, refs, strict=True)], thresholds)
    return {**scores, "parse_rate": _share(sum(p is not None for p in preds), len(refs)), "n": len(refs)}


def _share(count: float, n: int) -> float:
    return count / n if n else 0.0


def _iou_scores(ious: Sequence[float], thresholds: Iterable[float]) -> dict[str, float | int]:
    """mIoU and R1@m of each threshold: the keys grounding and moment scores share."""
    scores: dict[str, float | int] = {"miou": _share(sum(ious), len(ious))}
    for t in thresholds:
        scores[f"r1@{t:g}"] = _share(sum(iou >= t for iou in ious), len(ious))
    return scores


def best_iou(pred: Sequence[float] | None, refs: Sequence[Sequence[float]]) -> float:
    """IoU of ``pred`` with the nearest of several true spans (0.0 for no prediction or no truth)."""
    return max((temporal_iou(pred, r) for r in refs), default=0.0)


def moment_scores(
    best: Sequence[Sequence[float] | None],
    moments: Sequence[Sequence[Sequence[float]]],
    refs: Sequence[Sequence[Sequence[float]]],
    thresholds: Iterable[float] = (0.3, 0.5, 0.7),
    k: int = 5,
    k_iou: float = 0.5,
) -> dict[str, float | int]:
    """:func:`grounding_scores` with several true spans per query (``best`` against the nearest), plus
    ``r{k}@{k_iou}`` and ``occurrence_recall@{k_iou}`` of the first k ranked moments (long videos)."""
    if not len(best) == len(moments) == len(refs):
        raise ValueError(
            f"got {len(best)} best spans, {len(moments)} moment lists and {len(refs)} references; "
            "they must pair up."
        )
    if any(not r for r in refs):
        raise ValueError("every query needs at least one true span.")
    n = len(refs)
    scores = _iou_scores([best_iou(b, r) for b, r in zip(best, refs, strict=True)], thresholds)
    hits = sum(any(best_iou(m, r) >= k_iou for m in ms[:k]) for ms, r in zip(moments, refs, strict=True))
    scores[f"r{k}@{k_iou:g}"] = _share(hits, n)
    matched = sum(len(match_events(ms[:k], r, k_iou)) for ms, r in zip(moments, refs, strict=True))
    scores[f"occurrence_recall@{k_iou:g}"] = _share(matched, sum(len(r) for r in refs))
    return {**scores, "parse_rate": _share(sum(b is not None for b in best), n), "n": n}


def _event_span(item: EventLike | Sequence[float]) -> Span:
    if isinstance(item, Event):
        return (item.start, item.end)
    if isinstance(item, Mapping):
        return (float(item["start"]), float(item["end"]))
    return (float(item[0]), float(item[1]))


def match_events(
    pred: Sequence[EventLike | Sequence[float]],
    ref: Sequence[EventLike | Sequence[float]],
    min_iou: float = 0.3,
) -> list[tuple[int, int, float]]:
    """One-to-one matching by temporal IoU, (pred_idx, ref_idx, iou) by pred_idx: greedy, simple to audit
    and, with a clip's few events, rarely other than the maximum-weight matching."""
    pred_spans, ref_spans = [_event_span(p) for p in pred], [_event_span(r) for r in ref]
    return sorted(
        greedy_pairs(
            (iou, i, j)
            for i, ps in enumerate(pred_spans)
            for j, rs in enumerate(ref_spans)
            if (iou := temporal_iou(ps, rs)) > 0.0 and iou >= min_iou
        )
    )


def greedy_pairs(scored: Iterable[tuple[float, int, int]]) -> list[tuple[int, int, float]]:
    """(i, j, score) pairs taken highest score first (ties: lower i, then lower j), each i and each j
    once: the one greedy matching of events by IoU and of a caption's cut events by similarity."""
    used_i: set[int] = set()
    used_j: set[int] = set()
    pairs: list[tuple[int, int, float]] = []
    for neg, i, j in sorted((-score, i, j) for score, i, j in scored):
        if i not in used_i and j not in used_j:
            used_i.add(i)
            used_j.add(j)
            pairs.append((i, j, -neg))
    return pairs


def precision_recall_f1(tp: int, n_pred: int, n_ref: int) -> tuple[float, float, float]:
    """(precision, recall, F1) of ``tp`` matches among ``n_pred`` predicted and ``n_ref`` reference events."""
    if n_pred == 0 and n_ref == 0:
        return 1.0, 1.0, 1.0
    precision, recall = _share(tp, n_pred), _share(tp, n_ref)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def event_scores(pred: Sequence[EventLike], ref: Sequence[EventLike], min_iou: float = 0.3) -> dict[str, Any]:
    """Precision / recall / F1 of matched events and their mean IoU (conventions above)."""
    matches = match_events(pred, ref, min_iou)
    n_pred, n_ref, tp = len(pred), len(ref), len(matches)
    precision, recall, f1 = precision_recall_f1(tp, n_pred, n_ref)
    return {
        "mean_matched_iou": _share(sum(m[2] for m in matches), tp),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "n_pred": n_pred,
        "n_ref": n_ref,
    }


@functools.cache
def _rouge_scorer() -> Any:
    """One RougeScorer per process (import is deferred: it pulls in nltk)."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"])


def rouge_l(pred_text: str, ref_text: str) -> float:
    """ROUGE-L F-measure (no stemming; ASCII letters and digits only: text with none scores 0.0)."""
    return float(_rouge_scorer().score(ref_text or "", pred_text or "")["rougeL"].fmeasure)


_STOPWORDS_TEXT = """
    a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over own
    same she should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves s t
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORDS_TEXT.split())
"""Small English stopword list: function words that carry no visual content."""

_WORD_RE = re.compile(r"[^\W\d_]+")


def keywords(text: str) -> set[str]:
    """Lower-cased alphabetic words (any script) minus :data:`STOPWORDS`; no stemming."""
    return {w for w in _WORD_RE.findall((text or "").casefold()) if w not in STOPWORDS}


def keyword_coverage(pred_text: str, ref_text: str) -> float:
    """|K_ref ∩ K_pred| / |K_ref|; 1.0 when the reference has no keywords."""
    ref_kw = keywords(ref_text)
    return len(ref_kw & keywords(pred_text)) / len(ref_kw) if ref_kw else 1.0


def caption_text(scene: str, events: Iterable[EventLike]) -> str:
    """The text a caption is scored on: the scene, then each event's description, one per line."""
    texts = (e.description if isinstance(e, Event) else str(e.get("description", "")) for e in events)
    return "\n".join([scene or "", *texts]).strip()


def caption_scores(
    pred_scene: str,
    pred_events: Sequence[EventLike],
    ref_scene: str,
    ref_events: Sequence[EventLike],
    min_iou: float = 0.3,
) -> dict[str, Any]:
    """ROUGE-L and keyword coverage over scene + event descriptions, plus :func:`event_scores`."""
    pred_text = caption_text(pred_scene, pred_events)
    ref_text = caption_text(ref_scene, ref_events)
    return {
        "rouge_l": rouge_l(pred_text, ref_text),
        "keyword_coverage": keyword_coverage(pred_text, ref_text),
        **event_scores(pred_events, ref_events, min_iou),
    }
