"""Window plan, mapping and merge rules with fixed per-window answers (pure Python)."""

from __future__ import annotations

import itertools
import math

import pytest

from marlin_demo import contract
from marlin_demo.contract import CaptionParse, Event, SpanParse
from marlin_demo.engine.scoring import span_score
from marlin_demo.longvideo import policy
from marlin_demo.longvideo.policy import (
    Window,
    WindowLimitError,
    best_span,
    description_similarity,
    map_caption,
    map_span,
    merge_captions,
    merge_moments,
    plan_windows,
)
from marlin_demo.settings import Settings

D = Settings()  # the window defaults live in the settings alone


def caption_windows(
    duration: float, length: float = D.caption_window_s, max_windows: int | None = D.max_windows
):
    return policy.caption_windows(duration, length, max_windows)


def find_windows(
    duration: float,
    length: float = D.find_window_s,
    overlap: float = D.find_overlap_s,
    max_windows: int | None = D.max_windows,
):
    return policy.find_windows(duration, length, overlap, max_windows)


def _b(ws: list[Window]) -> list[tuple[float, float]]:
    return [(w.start, w.end) for w in ws]


def test_one_window_fits_exactly() -> None:
    assert _b(caption_windows(60.0)) == [(0.0, 60.0)]
    assert _b(caption_windows(12.3)) == [(0.0, 12.3)]
    assert _b(find_windows(30.0)) == [(0.0, 30.0)]


def test_just_over_one_window_merges_the_short_tail() -> None:
    assert _b(caption_windows(61.9)) == [(0.0, 61.9)]  # tail 1.9 s < 2 s joins the previous window
    assert _b(caption_windows(62.0)) == [(0.0, 60.0), (60.0, 62.0)]
    assert _b(find_windows(30.5)) == [(0.0, 30.0), (25.0, 30.5)]


def test_find_windows_overlap_and_cover() -> None:
    ws = find_windows(100.0)
    assert _b(ws) == [(0, 30), (25, 55), (50, 80), (75, 100)]
    for a, b in itertools.pairwise(ws):
        assert a.end - b.start == pytest.approx(5.0)
    assert [w.index for w in ws] == [0, 1, 2, 3]


def test_caption_windows_tile_without_overlap() -> None:
    ws = caption_windows(360.0)
    assert _b(ws) == [(60.0 * k, 60.0 * (k + 1)) for k in range(6)]


def test_window_limit_is_one_sentence() -> None:
    with pytest.raises(
        WindowLimitError, match=r"at most 3 windows are allowed: use a clip of at most 180 s\.$"
    ):
        plan_windows(200.0, 60.0, max_windows=3)
    assert len(plan_windows(180.0, 60.0, max_windows=3)) == 3
    for bad in [(0.0, 60.0, 0.0), (10.0, 0.0, 0.0), (10.0, 30.0, 30.0), (math.inf, 30.0, 0.0)]:
        with pytest.raises(ValueError):
            plan_windows(*bad)


def test_map_caption_offsets_and_reports_past_the_end() -> None:
    w = Window(1, 60.0, 120.0)
    parse = contract.parse_caption(
        "Scene: A field.\n\nEvents:\n<0.0 - 10.0> A ball rolls.\n<55.0 - 70.0> It stops.\n<65.0 - 66.0> Gone."
    )
    out = map_caption(parse, w)
    assert [(e.start, e.end) for e in out.events] == [(60.0, 70.0), (115.0, 120.0)]
    assert out.repaired
    assert any(n.startswith("window 2 (60-120 s): dropped 1 event") for n in out.repairs)
    assert any(n.startswith("window 2 (60-120 s): clamped 1 event") for n in out.repairs)


def test_one_window_mapping_equals_todays_repair() -> None:
    parse = contract.parse_caption("Scene: x.\nEvents:\n<0.0 - 99.0> A thing.")
    today = contract.repair_caption(parse, 12.0)
    mapped = map_caption(parse, Window(0, 0.0, 12.0), single=True)
    assert mapped.events == today.events and mapped.repairs == today.repairs


def test_map_span_past_the_end_and_offset() -> None:
    w = Window(2, 50.0, 80.0)
    assert map_span(SpanParse((3.0, 8.5), True), w).span == (53.0, 58.5)
    clamped = map_span(SpanParse((20.0, 45.0), True), w)
    assert clamped.span == (70.0, 80.0) and clamped.repaired
    assert clamped.repairs[0].startswith("window 3 (50-80 s): clamped")
    dropped = map_span(SpanParse((31.0, 40.0), True), w)
    assert dropped.span is None and "starts at or after" in dropped.repairs[0]


def test_event_cut_by_a_boundary_becomes_one() -> None:
    w0, w1 = Window(0, 0.0, 60.0), Window(1, 60.0, 120.0)
    a = CaptionParse(
        "A bathroom.",
        [Event(0.0, 40.0, "A dog sits."), Event(40.0, 60.0, "The person washes the dog.")],
        True,
    )
    b = CaptionParse(
        "A bathroom",
        [
            Event(0.0, 12.0, "The person continues washing the dog."),
            Event(12.0, 30.0, "The dog shakes off water."),
        ],
        True,
    )
    merged = merge_captions([(w0, map_caption(a, w0)), (w1, map_caption(b, w1))])
    assert [(e.start, e.end) for e in merged.events] == [(0.0, 40.0), (40.0, 72.0), (72.0, 90.0)]
    assert merged.events[1].description == "The person washes the dog."  # the longer part (20 s vs 12 s)
    assert merged.joined == ["joined an event cut by the window boundary at 60 s"]
    assert merged.scene == "A bathroom."  # the same scene twice is said once
    assert merged.to_dict()["windows"] == [
        {"start": 0.0, "end": 60.0, "scene": "A bathroom."},
        {"start": 60.0, "end": 120.0, "scene": "A bathroom"},
    ]


def test_different_events_at_a_boundary_stay_apart() -> None:
    w0, w1 = Window(0, 0.0, 60.0), Window(1, 60.0, 120.0)
    a = CaptionParse("Field.", [Event(50.0, 60.0, "The red ball rolls.")], True, True, ["clamped 1 event"])
    b = CaptionParse("Night.", [Event(0.0, 5.0, "The ball stops.")], True)
    merged = merge_captions([(w0, map_caption(a, w0)), (w1, map_caption(b, w1))])
    assert len(merged.events) == 2 and merged.joined == []
    assert merged.scene == "Field. Night."
    assert merged.repaired and merged.repairs == ["clamped 1 event"]  # repairs stay reported


def test_similarity_rule() -> None:
    assert description_similarity("The person washes the dog.", "The person continues washing the dog") >= 0.6
    assert description_similarity("The ball rolls.", "The ball stops.") < 0.6
    assert description_similarity("", "x") == 0.0


def test_find_merge_duplicates_in_overlap_and_missing_window() -> None:
    ws = find_windows(100.0)
    answers = [
        (ws[0], map_span(SpanParse((26.0, 30.0), True), ws[0]), 0.4),  # 26-30
        (ws[1], map_span(SpanParse((1.0, 6.0), True), ws[1]), 0.7),  # 26-31: same moment, higher score
        (ws[2], map_span(SpanParse(None, False), ws[2]), 0.9),  # no usable span
        (ws[3], map_span(SpanParse((10.0, 40.0), True), ws[3]), 0.2),  # 85-100, clamped
    ]
    moments = merge_moments(answers, D.top_k)
    assert [m.to_dict() for m in moments] == [
        {"start": 26.0, "end": 31.0, "score": 0.7},
        {"start": 85.0, "end": 100.0, "score": 0.2},
    ]
    assert best_span(moments) == (26.0, 31.0)
    assert best_span(merge_moments([(ws[2], SpanParse(None, False), 0.9)], D.top_k)) is None


def test_find_merge_top_k_and_sorted() -> None:
    w = Window(0, 0.0, 1000.0)
    answers = [
        (w, SpanParse((i * 20.0, i * 20.0 + 3), True), s)
        for i, s in enumerate([0.1, 0.5, 0.3, 0.9, 1.7, 0.2])
    ]
    moments = merge_moments(answers, top_k=3)
    assert [m.score for m in moments] == [1.0, 0.9, 0.5]
    with pytest.raises(ValueError):
        merge_moments(answers, top_k=0)


def test_span_score_uses_the_number_tokens() -> None:
    texts = ["From", " ", "1", "2", ".", "5", " to", " ", "2", "0", ".", "0", ".", ""]
    lps = [-5.0, -5.0, -0.1, -0.2, -0.0, -0.3, -5.0, -5.0, -0.1, -0.1, 0.0, -0.2, -5.0, -5.0]
    expected = math.exp(sum([-0.1, -0.2, 0.0, -0.3, -0.1, -0.1, 0.0, -0.2]) / 8)
    assert span_score(texts, lps) == pytest.approx(expected)
    assert span_score(["From", " here"], [-0.1, -0.1]) is None
    with pytest.raises(ValueError):
        span_score(["a"], [])
