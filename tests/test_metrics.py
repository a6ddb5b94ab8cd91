"""Tests for marlin_demo.metrics against hand-computed values."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from marlin_demo import metrics
from marlin_demo.metrics import (
    caption_scores,
    event_scores,
    grounding_scores,
    keyword_coverage,
    keywords,
    match_events,
    rouge_l,
    temporal_iou,
)
from marlin_demo.model_io import Event

approx = pytest.approx


def test_metrics_imports_no_torch() -> None:
    tree = ast.parse(Path(metrics.__file__).read_text(encoding="utf-8"))
    names = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "torch" not in names and "numpy" not in names


# ---------------------------------------------------------------------------
# temporal_iou
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((0.0, 10.0), (5.0, 15.0), 5 / 15),
        ((0.0, 10.0), (0.0, 10.0), 1.0),
        ((2.0, 4.0), (0.0, 10.0), 0.2),
        ((0.0, 5.0), (5.0, 10.0), 0.0),  # touching, no overlap
        ((0.0, 2.0), (3.0, 5.0), 0.0),  # disjoint
        ((10.0, 0.0), (0.0, 10.0), 1.0),  # reversed read as (min, max)
        ((3.0, 3.0), (3.0, 3.0), 1.0),  # identical instants
        ((3.0, 3.0), (0.0, 10.0), 0.0),  # instant inside a span has no length to share
        ((3.0, 3.0), (4.0, 4.0), 0.0),
        (None, (0.0, 1.0), 0.0),
        ((0.0, 1.0), None, 0.0),
        (None, None, 0.0),
        ((float("nan"), 1.0), (0.0, 1.0), 0.0),
    ],
)
def test_temporal_iou(a, b, expected: float) -> None:
    assert temporal_iou(a, b) == approx(expected)
    assert temporal_iou(b, a) == approx(expected)


def test_temporal_iou_accepts_lists() -> None:
    assert temporal_iou([1, 3], [2, 4]) == approx(1 / 3)


# ---------------------------------------------------------------------------
# grounding_scores
# ---------------------------------------------------------------------------


def test_grounding_scores_hand_computed() -> None:
    preds = [(0.0, 10.0), (0.0, 5.0), None, (2.0, 4.0)]
    refs = [(0.0, 10.0)] * 4
    # IoUs: 1.0, 0.5, 0 (unparsed), 0.2
    scores = grounding_scores(preds, refs)
    assert set(scores) == {"miou", "r1@0.3", "r1@0.5", "r1@0.7", "parse_rate", "n"}
    assert scores["miou"] == approx(1.7 / 4)
    assert scores["r1@0.3"] == approx(0.5)
    assert scores["r1@0.5"] == approx(0.5)  # 0.5 >= 0.5 counts
    assert scores["r1@0.7"] == approx(0.25)
    assert scores["parse_rate"] == approx(0.75)
    assert scores["n"] == 4


def test_grounding_scores_custom_thresholds() -> None:
    scores = grounding_scores([(0.0, 1.0)], [(0.0, 10.0)], thresholds=(0.1, 0.05))
    assert scores["r1@0.1"] == 1.0
    assert scores["r1@0.05"] == 1.0
    assert "r1@0.3" not in scores


def test_grounding_scores_all_unparsed() -> None:
    scores = grounding_scores([None, None], [(0.0, 1.0), (2.0, 3.0)])
    assert scores["miou"] == 0.0 and scores["r1@0.3"] == 0.0 and scores["parse_rate"] == 0.0
    assert scores["n"] == 2


def test_grounding_scores_empty() -> None:
    scores = grounding_scores([], [])
    assert scores == {"miou": 0.0, "r1@0.3": 0.0, "r1@0.5": 0.0, "r1@0.7": 0.0, "parse_rate": 0.0, "n": 0}


def test_grounding_scores_length_mismatch() -> None:
    with pytest.raises(ValueError, match="pair up"):
        grounding_scores([None], [(0.0, 1.0), (1.0, 2.0)])


# ---------------------------------------------------------------------------
# match_events / event_scores
# ---------------------------------------------------------------------------

PRED = [Event(0.0, 2.0, "a"), Event(2.0, 6.0, "b"), Event(20.0, 25.0, "c")]
REF = [Event(0.0, 3.0, "a"), Event(3.0, 6.0, "b"), Event(10.0, 12.0, "c")]


def test_match_events_hand_computed() -> None:
    # p0-r0: 2/3; p1-r1: 3/4; p1-r0: 1/6 (< 0.3); p2 overlaps nothing.
    matches = match_events(PRED, REF)
    assert [(i, j) for i, j, _ in matches] == [(0, 0), (1, 1)]
    assert matches[0][2] == approx(2 / 3)
    assert matches[1][2] == approx(0.75)


def test_match_events_one_to_one_and_greedy_best_first() -> None:
    # The pred overlaps both refs; it goes to the one with the higher IoU.
    assert match_events([(0.0, 6.0)], [(0.0, 10.0), (0.0, 6.0)]) == [(0, 1, 1.0)]
    # Tie (0.6 each): lower ref index wins; the other ref stays unmatched.
    assert match_events([(0.0, 10.0)], [(0.0, 6.0), (4.0, 10.0)]) == [(0, 0, approx(0.6))]
    # Two preds want the same ref: the better one gets it.
    matches = match_events([(0.0, 5.0), (0.0, 4.0)], [(0.0, 4.0)])
    assert matches == [(1, 0, 1.0)]


def test_match_events_threshold_inclusive_and_positive() -> None:
    assert match_events([(0.0, 10.0)], [(0.0, 3.0)], min_iou=0.3) == [(0, 0, approx(0.3))]
    assert match_events([(0.0, 10.0)], [(0.0, 3.0)], min_iou=0.31) == []
    assert match_events([(0.0, 1.0)], [(5.0, 6.0)], min_iou=0.0) == []


def test_match_events_accepts_dicts() -> None:
    pred = [{"start": 0.0, "end": 2.0, "description": "x"}]
    ref = [{"start": 0.0, "end": 4.0, "description": "y"}]
    assert match_events(pred, ref) == [(0, 0, 0.5)]


def test_event_scores_hand_computed() -> None:
    s = event_scores(PRED, REF)
    assert s["precision"] == approx(2 / 3)
    assert s["recall"] == approx(2 / 3)
    assert s["f1"] == approx(2 / 3)
    assert s["mean_matched_iou"] == approx((2 / 3 + 0.75) / 2)
    assert (s["n_pred"], s["n_ref"]) == (3, 3)


def test_event_scores_unequal_counts() -> None:
    s = event_scores([Event(0.0, 2.0, "a")], [Event(0.0, 2.0, "a"), Event(4.0, 6.0, "b")])
    assert s["precision"] == 1.0
    assert s["recall"] == 0.5
    assert s["f1"] == approx(2 / 3)
    assert s["mean_matched_iou"] == 1.0


def test_event_scores_no_events_anywhere() -> None:
    assert event_scores([], []) == {
        "mean_matched_iou": 0.0,
        "precision": 1.0,
        "recall": 1.0,
        "f1": 1.0,
        "n_pred": 0,
        "n_ref": 0,
    }


@pytest.mark.parametrize(
    ("pred", "ref"),
    [
        ([], [Event(0.0, 1.0, "a")]),
        ([Event(0.0, 1.0, "a")], []),
        ([Event(0.0, 1.0, "a")], [Event(5.0, 6.0, "a")]),
    ],
)
def test_event_scores_nothing_matches(pred, ref) -> None:
    s = event_scores(pred, ref)
    assert s["precision"] == 0.0 and s["recall"] == 0.0 and s["f1"] == 0.0
    assert s["mean_matched_iou"] == 0.0
    assert (s["n_pred"], s["n_ref"]) == (len(pred), len(ref))


# ---------------------------------------------------------------------------
# rouge_l / keyword_coverage
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pred", "ref", "expected"),
    [
        ("the cat sat on the mat", "the cat is on the mat", 5 / 6),  # LCS 5 of 6 each side
        ("the cat sat on the mat", "the cat sat on the mat", 1.0),
        ("The Cat!", "the cat", 1.0),  # lower-cased, punctuation ignored
        ("a b c d", "d c b a", 0.25),  # LCS 1 of 4
        ("the cat", "the cat sat down", 2 / 3),  # P 1, R 1/2
        ("dog", "cat", 0.0),
        ("", "the cat", 0.0),
        ("", "", 0.0),
    ],
)
def test_rouge_l(pred: str, ref: str, expected: float) -> None:
    assert rouge_l(pred, ref) == approx(expected)


def test_rouge_scorer_created_once() -> None:
    rouge_l("a", "a")
    first = metrics._rouge_scorer()
    rouge_l("b", "c")
    assert metrics._rouge_scorer() is first is not None
    assert metrics._rouge_scorer.cache_info().misses == 1  # built by the first rouge_l, then reused


def test_keywords() -> None:
    assert keywords("The dog's ball, and 3 DOGS!") == {"dog", "ball", "dogs"}
    assert keywords("the and of it") == set()
    assert keywords("一只狗 runs") == {"一只狗", "runs"}


@pytest.mark.parametrize(
    ("pred", "ref", "expected"),
    [
        ("The dog sleeps in a park", "A dog runs in the park", 2 / 3),  # K_ref {dog, runs, park}
        ("DOG PARK RUNS", "A dog runs in the park", 1.0),
        ("", "A dog runs", 0.0),
        ("dog", "dogs", 0.0),  # no stemming
        ("anything", "the and of it", 1.0),  # reference has no keywords: nothing to cover
        ("", "", 1.0),
        ("dog dog dog", "dog cat", 0.5),  # sets, not counts
    ],
)
def test_keyword_coverage(pred: str, ref: str, expected: float) -> None:
    assert keyword_coverage(pred, ref) == approx(expected)


# ---------------------------------------------------------------------------
# caption_scores
# ---------------------------------------------------------------------------


def test_caption_scores_hand_computed() -> None:
    s = caption_scores(
        "A dog in a park.",
        [Event(0.0, 2.0, "The dog runs.")],
        "A dog in a park.",
        [Event(0.0, 2.0, "The dog runs."), Event(4.0, 6.0, "The dog sits.")],
    )
    assert set(s) == {
        "rouge_l",
        "keyword_coverage",
        "mean_matched_iou",
        "precision",
        "recall",
        "f1",
        "n_pred",
        "n_ref",
    }
    # pred tokens (8) are a prefix of ref tokens (11): P = 1, R = 8/11, F = 16/19.
    assert s["rouge_l"] == approx(16 / 19)
    # K_ref = {dog, park, runs, sits}; pred lacks "sits".
    assert s["keyword_coverage"] == approx(0.75)
    assert s["precision"] == 1.0 and s["recall"] == 0.5 and s["f1"] == approx(2 / 3)
    assert s["mean_matched_iou"] == 1.0
    assert (s["n_pred"], s["n_ref"]) == (1, 2)


def test_caption_scores_identical_and_empty() -> None:
    ev = [Event(0.0, 1.0, "a man waves")]
    same = caption_scores("A street.", ev, "A street.", ev)
    assert same["rouge_l"] == approx(1.0) and same["keyword_coverage"] == 1.0 and same["f1"] == 1.0
    empty = caption_scores("", [], "A street.", ev)
    assert empty["rouge_l"] == 0.0 and empty["keyword_coverage"] == 0.0
    assert empty["recall"] == 0.0 and empty["n_pred"] == 0


def test_caption_scores_accepts_dict_events() -> None:
    ev = [{"start": 0.0, "end": 1.0, "description": "a man waves"}]
    s = caption_scores("A street.", ev, "A street.", [Event(0.0, 1.0, "a man waves")])
    assert s["rouge_l"] == approx(1.0) and s["f1"] == 1.0


# ---------------------------------------------------------------------------
# Several true spans per query, ranked moments (long videos)
# ---------------------------------------------------------------------------


def test_best_iou_takes_the_nearest_true_span() -> None:
    refs = [(0.0, 10.0), (50.0, 60.0)]
    assert metrics.best_iou((52.0, 60.0), refs) == approx(0.8)
    assert metrics.best_iou((5.0, 10.0), refs) == approx(0.5)
    assert metrics.best_iou(None, refs) == 0.0
    assert metrics.best_iou((1.0, 2.0), []) == 0.0


def test_moment_scores_hand_computed() -> None:
    refs = [
        [(0.0, 10.0), (50.0, 60.0)],  # q1: the event happens twice
        [(20.0, 30.0)],  # q2: once
        [(5.0, 15.0), (40.0, 44.0)],  # q3: twice
    ]
    best = [(51.0, 60.0), (20.0, 24.0), None]
    moments = [
        [(51.0, 60.0), (0.0, 8.0), (100.0, 110.0)],  # best IoU 0.9; second moment IoU 0.8 with (0, 10)
        [(20.0, 24.0), (21.0, 29.0)],  # best IoU 0.4; the second moment 0.8
        [],  # no usable span
    ]
    s = metrics.moment_scores(best, moments, refs)
    assert s["miou"] == approx((0.9 + 0.4 + 0.0) / 3)
    assert s["r1@0.3"] == approx(2 / 3)
    assert s["r1@0.5"] == approx(1 / 3)
    assert s["r1@0.7"] == approx(1 / 3)
    assert s["r5@0.5"] == approx(2 / 3)  # q2 is a hit through its second moment
    # true spans matched one-to-one at IoU >= 0.5: q1 both, q2 one (two moments, one true span), q3 none
    assert s["occurrence_recall@0.5"] == approx(3 / 5)
    assert s["parse_rate"] == approx(2 / 3)
    assert s["n"] == 3


def test_moment_scores_k_cuts_the_ranking() -> None:
    refs = [[(0.0, 10.0)]]
    moments = [[(30.0, 40.0), (50.0, 60.0), (0.0, 10.0)]]  # the hit is third
    assert metrics.moment_scores([moments[0][0]], moments, refs, k=2)["r2@0.5"] == 0.0
    assert metrics.moment_scores([moments[0][0]], moments, refs, k=3)["r3@0.5"] == 1.0


def test_moment_scores_one_true_span_equals_grounding_scores() -> None:
    preds = [(1.0, 9.0), None, (12.0, 18.0), (0.0, 3.0)]
    refs = [(0.0, 10.0), (5.0, 8.0), (10.0, 20.0), (4.0, 6.0)]
    multi = metrics.moment_scores(preds, [[p] if p else [] for p in preds], [[r] for r in refs])
    single = grounding_scores(preds, refs)
    for key, value in single.items():
        assert multi[key] == approx(value), key


def test_moment_scores_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="pair up"):
        metrics.moment_scores([None], [], [[(0.0, 1.0)]])
    with pytest.raises(ValueError, match="at least one true span"):
        metrics.moment_scores([None], [[]], [[]])
    empty = metrics.moment_scores([], [], [])
    assert empty["n"] == 0 and empty["r5@0.5"] == 0.0 and empty["occurrence_recall@0.5"] == 0.0
