"""Long videos' windows: the plan, mapping and merge rules with fixed per-window answers (pure Python),
then each window's sampling plan against qwen-vl-utils' plan on the window cut as its own file, and the
windows' one-pass decode.

Long videos end to end on the tiny checkpoint are ``tests/test_long_videos.py``'s.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from media_factory import ffmpeg

from marlin_demo import model_io
from marlin_demo.engine import Engine
from marlin_demo.engine.scoring import span_score
from marlin_demo.longvideo import policy, runner
from marlin_demo.longvideo.policy import Window, WindowLimitError, plan_for, plan_windows
from marlin_demo.model_io import CaptionParse, Event, SpanParse
from marlin_demo.settings import Settings
from marlin_demo.tasks.caption import description_similarity, map_caption, merge_captions
from marlin_demo.tasks.find import best_span, map_span, merge_moments
from marlin_demo.video import frame_pts, plan_sampling, probe, sample, windows
from marlin_demo.video.decode import _decode_torchcodec, _resize
from marlin_demo.video.windows import decode_windows, plan_window, window_backend

D = Settings()  # the window defaults live in the settings alone


def caption_windows(
    duration: float, length: float = D.caption_window_s, max_windows: int | None = D.max_windows
):
    return policy.plan_windows(duration, length, 0.0, max_windows=max_windows)


def find_windows(
    duration: float,
    length: float = D.find_window_s,
    overlap: float = D.find_overlap_s,
    max_windows: int | None = D.max_windows,
):
    return policy.plan_windows(duration, length, overlap, max_windows=max_windows)


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
    parse = model_io.parse_caption(
        "Scene: A field.\n\nEvents:\n<0.0 - 10.0> A ball rolls.\n<55.0 - 70.0> It stops.\n<65.0 - 66.0> Gone."
    )
    out = map_caption(model_io.repair_caption(parse, w.duration), w)  # as the engine repaired it
    assert [(e.start, e.end) for e in out.events] == [(60.0, 70.0), (115.0, 120.0)]
    assert out.repaired
    assert any(n.startswith("window 2 (1:00–2:00): dropped 1 event") for n in out.repairs)
    assert any(n.startswith("window 2 (1:00–2:00): clamped 1 event") for n in out.repairs)


def test_map_span_past_the_end_and_offset() -> None:
    w = Window(2, 50.0, 80.0)
    assert map_span(SpanParse((3.0, 8.5), True), w).span == (53.0, 58.5)
    clamped = map_span(model_io.repair_span(SpanParse((20.0, 45.0), True), w.duration), w)
    assert clamped.span == (70.0, 80.0) and clamped.repaired
    assert clamped.repairs[0].startswith("window 3 (0:50–1:20): clamped")
    dropped = map_span(model_io.repair_span(SpanParse((31.0, 40.0), True), w.duration), w)
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
    assert merged.joined == ["joined an event cut by the window boundary at 1:00"]
    assert merged.scene == "A bathroom."  # the same scene twice is said once
    assert merged.windows == [
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
    assert merged.repaired and merged.repairs == ["window 1 (0:00–1:00): clamped 1 event"]  # still reported


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


# ------------------------------------------------------------------ the windows' frames (ffmpeg, decoders)
FIELDS = ("indices", "timestamps", "nframes", "height", "width", "video_tokens", "total_frames", "source_fps")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("win") / "src.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10", "-t", "62", "-c:v", "libx264",
           "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(p))  # fmt: skip
    return p


def test_window_plan_equals_cut_file_plan(clip: Path, tmp_path: Path) -> None:
    info = probe(clip)
    ws = plan_for("find", info.duration_s, D)
    assert [(w.start, w.end) for w in ws] == [(0, 30), (25, 55), (50, 62)]
    for w in ws:
        wp = plan_window(info, w)
        cut = tmp_path / f"w{w.index}.mp4"  # re-encoded, frame exact (a stream copy cuts at keyframes)
        trim = f"trim=start_frame={wp.first_frame}:end_frame={wp.first_frame + wp.num_frames}"
        ffmpeg(
            "-i",
            str(clip),
            "-vf",
            trim + ",setpts=PTS-STARTPTS",
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            str(cut),
        )
        ref = plan_sampling(probe(cut))
        for f in FIELDS:
            assert getattr(wp.plan, f) == pytest.approx(getattr(ref, f)), f
        assert wp.plan.timestamps[0] == 0.0
        assert wp.offset_s == pytest.approx(w.start)
        assert wp.source_indices[0] == wp.first_frame


def test_one_pass_decode_matches_reference(clip: Path) -> None:
    info = probe(clip)
    plans = [plan_window(info, w) for w in plan_for("find", info.duration_s, D)]
    got = list(decode_windows(str(clip), plans, backend="reference"))
    assert len(got) == len(plans) and {pv.backend for _, pv, _ in got} == {"pyav"}
    counts = [c for _, _, c in got]
    assert counts == sorted(counts) and counts[-1] == max(plans[-1].source_indices) + 1 <= info.num_frames
    union = sorted({i for wp in plans for i in wp.source_indices})
    full = _decode_torchcodec(str(clip), union)  # the reference decoder, once for every window
    row = {idx: k for k, idx in enumerate(union)}
    for wp, prepared, _ in got:
        ref = _resize(full[[row[i] for i in wp.source_indices]], wp.plan.height, wp.plan.width)
        assert prepared.frames.shape == ref.shape
        assert (prepared.frames.int() - ref.int()).abs().float().mean().item() < 0.5
        assert prepared.metadata["frames_indices"][0] == 0


@pytest.fixture(scope="module")
def bclip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """62 s, B-frames, a keyframe every 2 s: windows split into runs, non-reference pictures to skip."""
    p = tmp_path_factory.mktemp("winb") / "bframes.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30", "-t", "62", "-c:v", "libx264",
           "-preset", "veryfast", "-bf", "3", "-g", "60", "-pix_fmt", "yuv420p", str(p))  # fmt: skip
    return p


def test_fast_windows_one_scan_same_frames_as_the_fast_path(
    bclip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Overlapping find windows in one parallel scan: each picture decoded at most once, and each
    window's frames are bit for bit what ``sample(..., backend="fast")`` gives for those frames."""
    monkeypatch.setenv("MARLIN_DECODE_THREADS", "2")
    info = probe(bclip)
    plans = [plan_window(info, w) for w in plan_for("find", info.duration_s, D)]
    assert window_backend(plans, "fast") == "fast"
    got = list(decode_windows(str(bclip), plans, backend="fast"))
    assert [wp for wp, _, _ in got] == plans
    counts = [c for _, _, c in got]
    assert counts == sorted(counts)
    # B-frames nothing references are skipped unless planned; overlapping windows decode nothing twice
    assert counts[-1] < 0.8 * info.num_frames, counts
    all_pts = frame_pts(bclip, info.stream_index)
    for wp, prepared, _ in got:
        assert prepared.backend == "fast" and prepared.metadata["frames_indices"] == wp.plan.indices
        src_plan = dataclasses.replace(
            plan_sampling(info), indices=wp.source_indices, height=wp.plan.height, width=wp.plan.width
        )
        whole = sample(bclip, src_plan, backend="fast", info=info)
        assert torch.equal(prepared.frames, whole.frames)
        assert prepared.frame_pts == pytest.approx([all_pts[i] for i in wp.source_indices], abs=1e-9)


def test_window_backend_follows_the_video_backend(clip: Path) -> None:
    info = probe(clip)  # 8-bit: auto takes the fast path (docs/VIDEO_PREP.md); reference: the PyAV scan
    plans = [plan_window(info, w) for w in plan_for("find", info.duration_s, D)]
    assert window_backend(plans, "auto") == window_backend(plans, "fast") == "fast"
    assert window_backend(plans, "reference") == "pyav"


def test_second_question_on_a_long_video_decodes_nothing(
    bclip: Path, monkeypatch: pytest.MonkeyPatch, tiny_settings: Settings
) -> None:
    """The engine decodes a long video's windows in one scan, once: the second find decodes 0 pictures."""
    decoded: list[int] = []
    real_run = windows._decode_run

    def counting_run(*args: Any, **kwargs: Any) -> int:
        n = real_run(*args, **kwargs)
        decoded.append(n)
        return n

    monkeypatch.setattr(windows, "_decode_run", counting_run)
    eng = Engine(tiny_settings.with_(video_backend="fast"))
    plans = runner.window_plans(eng, bclip, "find")
    assert plans is not None and len(plans) == 3
    first = list(eng.window_frames(bclip, plans))
    assert not any(hit for _, _, hit in first)
    assert 0 < sum(decoded) < probe(bclip).num_frames  # one scan: no picture twice
    decoded.clear()
    second = list(eng.window_frames(bclip, runner.window_plans(eng, bclip, "find") or []))
    assert all(hit for _, _, hit in second) and sum(decoded) == 0 and decoded == []
    assert all(a[1] is b[1] for a, b in zip(first, second, strict=True))


def test_fast_windows_fall_back_to_the_scan(clip: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast-path failure (here: every run raises) is not a failed request: the PyAV scan runs."""

    def broken(*_a: Any, **_kw: Any) -> int:
        raise RuntimeError("seek missed")

    monkeypatch.setattr(windows, "_decode_run", broken)
    info = probe(clip)
    plans = [plan_window(info, w) for w in plan_for("find", info.duration_s, D)][:1]
    got = list(decode_windows(str(clip), plans, backend="fast"))
    assert [wp for wp, _, _ in got] == plans and {pv.backend for _, pv, _ in got} == {"pyav"}


def test_the_first_window_waits_only_for_its_own_pictures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows are decoded in order by every worker at once: window 1 is handed out once the GOPs up
    to the one holding its last planned frame are decoded, before any later GOP is waited for."""
    from marlin_demo.video.parallel_decode import _packet_index

    monkeypatch.setenv("MARLIN_DECODE_THREADS", "2")
    p = tmp_path / "long.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x90:rate=10", "-t", "130", "-c:v", "libx264",
           "-preset", "ultrafast", "-g", "45", "-pix_fmt", "yuv420p", str(p))  # fmt: skip
    info = probe(p)
    plans = [plan_window(info, w) for w in plan_for("caption", info.duration_s, D)]
    assert len(plans) == 3
    index = _packet_index(str(p), info.stream_index)
    assert index is not None
    next_key = min(k for k in index.keyframes if k > max(plans[0].source_indices))
    got = decode_windows(str(p), plans, backend="fast")
    first_plan, _, decoded_at_first = next(got)
    assert first_plan == plans[0] and decoded_at_first <= next_key  # all-P: pictures = frames decoded
    rest = list(got)
    assert [wp for wp, _, _ in rest] == plans[1:] and rest[-1][2] <= info.num_frames  # each picture once
