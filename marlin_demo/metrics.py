"""Quality metrics used in this field (pure Python + ``rouge-score``; no torch).

Temporal grounding (see ``shared/REFERENCE.md``):
    IoU = max(0, min(e, e') - max(s, s')) / (max(e, e') - min(s, s'));
    R1@m = share of queries with IoU >= m; mIoU = mean IoU.
    Unparseable answers (``None``) count as IoU 0.
Dense captions: ROUGE-L F-measure, keyword coverage |K_ref ∩ K_pred| / |K_ref|,
and one-to-one event matching by temporal IoU.

Edge-case conventions (each is tested):
* A span given reversed is read as (min, max). Two identical zero-length
  spans have IoU 1.0 (the hull is empty, they agree exactly); any other pair
  with an empty hull cannot occur. Non-finite times give 0.0.
* No queries: every grounding score is 0.0 with ``n == 0``.
* Event matching is greedy by highest IoU (ties: lower pred index, then lower
  ref index); a pair needs IoU >= ``min_iou`` and IoU > 0.
* No events on either side: precision = recall = f1 = 1.0 (nothing to find,
  nothing claimed). Events on one side only: all three are 0.0.
  ``mean_matched_iou`` is the mean over matched pairs, 0.0 when none.
* Keyword coverage is 1.0 when the reference has no keywords (nothing to
  cover), which keeps the function total and its type a float.

Several true spans per query (long videos: "every time it happens"), see
:func:`moment_scores`: a prediction's IoU is its IoU with the nearest true span
(the largest over the true spans), so one true span gives exactly
:func:`grounding_scores`. R1@m scores the best moment; Rk@m counts a query as a hit
when any of its first k moments has IoU >= m with any true span; occurrence recall
is the share of all true spans matched one-to-one by a moment at IoU >= m.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from marlin_demo.contract import Event

__all__ = [
    "STOPWORDS",
    "best_iou",
    "caption_scores",
    "caption_text",
    "event_scores",
    "grounding_scores",
    "keyword_coverage",
    "keywords",
    "match_events",
    "moment_scores",
    "precision_recall_f1",
    "rouge_l",
    "temporal_iou",
]

Span = tuple[float, float]
EventLike = Event | Mapping[str, Any]


# ---------------------------------------------------------------------------
# Temporal grounding
# ---------------------------------------------------------------------------


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
    if hull <= 0.0:
        # Both spans are the same single instant.
        return 1.0
    return inter / hull


def grounding_scores(
    preds: Sequence[Sequence[float] | None],
    refs: Sequence[Sequence[float]],
    thresholds: Iterable[float] = (0.3, 0.5, 0.7),
) -> dict[str, float | int]:
    """mIoU, R1@m for each threshold (keys ``r1@0.3`` ...), parse rate and n."""
    if len(preds) != len(refs):
        raise ValueError(f"got {len(preds)} predictions for {len(refs)} references; they must pair up.")
    n = len(refs)
    ious = [temporal_iou(p, r) for p, r in zip(preds, refs, strict=True)]
    scores: dict[str, float | int] = {"miou": sum(ious) / n if n else 0.0}
    for t in thresholds:
        scores[f"r1@{t:g}"] = sum(1 for iou in ious if iou >= t) / n if n else 0.0
    scores["parse_rate"] = sum(1 for p in preds if p is not None) / n if n else 0.0
    scores["n"] = n
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
    """Grounding with several true spans per query and a ranked list of moments per answer.

    ``best[i]`` is query i's best moment (None: no usable span), ``moments[i]`` its moments
    best first, ``refs[i]`` its true spans (at least one). Returns :func:`grounding_scores`'
    keys (mIoU and R1@m on the best moment, against the nearest true span), ``r{k}@{k_iou}``
    (any of the first k moments hits any true span), ``occurrence_recall@{k_iou}`` (true spans
    matched one-to-one by the first k moments, over all true spans), parse rate and n.
    """
    if not len(best) == len(moments) == len(refs):
        raise ValueError(
            f"got {len(best)} best spans, {len(moments)} moment lists and {len(refs)} references; "
            "they must pair up."
        )
    if any(not r for r in refs):
        raise ValueError("every query needs at least one true span.")
    n = len(refs)
    ious = [best_iou(b, r) for b, r in zip(best, refs, strict=True)]
    scores: dict[str, float | int] = {"miou": sum(ious) / n if n else 0.0}
    for t in thresholds:
        scores[f"r1@{t:g}"] = sum(1 for iou in ious if iou >= t) / n if n else 0.0
    hits = sum(1 for ms, r in zip(moments, refs, strict=True) if any(best_iou(m, r) >= k_iou for m in ms[:k]))
    scores[f"r{k}@{k_iou:g}"] = hits / n if n else 0.0
    matched = sum(len(match_events(ms[:k], r, k_iou)) for ms, r in zip(moments, refs, strict=True))
    total = sum(len(r) for r in refs)
    scores[f"occurrence_recall@{k_iou:g}"] = matched / total if total else 0.0
    scores["parse_rate"] = sum(1 for b in best if b is not None) / n if n else 0.0
    scores["n"] = n
    return scores


# ---------------------------------------------------------------------------
# Event matching
# ---------------------------------------------------------------------------


def _event_span(item: EventLike | Sequence[float]) -> Span:
    if isinstance(item, Event):
        return (item.start, item.end)
    if isinstance(item, Mapping):
        return (float(item["start"]), float(item["end"]))
    return (float(item[0]), float(item[1]))


def _description(item: EventLike) -> str:
    if isinstance(item, Event):
        return item.description
    return str(item.get("description", ""))


def match_events(
    pred: Sequence[EventLike | Sequence[float]],
    ref: Sequence[EventLike | Sequence[float]],
    min_iou: float = 0.3,
) -> list[tuple[int, int, float]]:
    """One-to-one matching by temporal IoU; returns (pred_idx, ref_idx, iou) by pred_idx.

    Greedy: take the highest-IoU pair left, remove both events, repeat.
    Greedy is not always the maximum-weight matching, but with the few
    events of a clip the two rarely differ, and it is simple to audit.
    """
    pred_spans = [_event_span(p) for p in pred]
    ref_spans = [_event_span(r) for r in ref]
    pairs = []
    for i, ps in enumerate(pred_spans):
        for j, rs in enumerate(ref_spans):
            iou = temporal_iou(ps, rs)
            if iou > 0.0 and iou >= min_iou:
                pairs.append((-iou, i, j))
    pairs.sort()
    used_pred: set[int] = set()
    used_ref: set[int] = set()
    matches: list[tuple[int, int, float]] = []
    for neg_iou, i, j in pairs:
        if i in used_pred or j in used_ref:
            continue
        used_pred.add(i)
        used_ref.add(j)
        matches.append((i, j, -neg_iou))
    matches.sort()
    return matches


def precision_recall_f1(tp: int, n_pred: int, n_ref: int) -> tuple[float, float, float]:
    """(precision, recall, F1) of ``tp`` matches among ``n_pred`` predicted and ``n_ref`` reference events.

    No events on either side: all three are 1.0; events on one side only: all three are 0.0.
    """
    if n_pred == 0 and n_ref == 0:
        return 1.0, 1.0, 1.0
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_ref if n_ref else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def event_scores(pred: Sequence[EventLike], ref: Sequence[EventLike], min_iou: float = 0.3) -> dict[str, Any]:
    """Precision / recall / F1 of matched events and their mean IoU (conventions above)."""
    matches = match_events(pred, ref, min_iou)
    n_pred, n_ref, tp = len(pred), len(ref), len(matches)
    precision, recall, f1 = precision_recall_f1(tp, n_pred, n_ref)
    mean_iou = sum(m[2] for m in matches) / tp if tp else 0.0
    return {
        "mean_matched_iou": mean_iou,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "n_pred": n_pred,
        "n_ref": n_ref,
    }


# ---------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------

_SCORER: Any = None


def _rouge_scorer() -> Any:
    """One RougeScorer per process (import is deferred: it pulls in nltk)."""
    global _SCORER
    if _SCORER is None:
        from rouge_score import rouge_scorer

        _SCORER = rouge_scorer.RougeScorer(["rougeL"])
    return _SCORER


def rouge_l(pred_text: str, ref_text: str) -> float:
    """ROUGE-L F-measure from ``rouge_score`` (no stemming).

    Its tokenizer keeps only ASCII letters and digits, so text with no such
    characters (including empty text) scores 0.0.
    """
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
    if not ref_kw:
        return 1.0
    return len(ref_kw & keywords(pred_text)) / len(ref_kw)


def caption_text(scene: str, events: Iterable[EventLike]) -> str:
    """The text a caption is scored on: the scene, then each event's description, one per line."""
    return "\n".join([scene or "", *(_description(e) for e in events)]).strip()


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
