"""Window sampling plans vs qwen-vl-utils' plan on the window cut as its own file; one-pass decode."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from media_factory import ffmpeg

from marlin_demo.engine import Engine
from marlin_demo.longvideo import runner as window_runs
from marlin_demo.longvideo.policy import plan_for
from marlin_demo.settings import Settings
from marlin_demo.video import frame_pts, plan_sampling, probe, sample
from marlin_demo.video import windows as window_video
from marlin_demo.video.decode import _decode_torchcodec, _resize
from marlin_demo.video.windows import decode_windows, plan_window, window_backend

FIELDS = ("indices", "timestamps", "nframes", "height", "width", "video_tokens", "total_frames", "source_fps")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("win") / "src.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10", "-t", "62", "-c:v", "libx264",
           "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(p))  # fmt: skip
    return p


def test_window_plan_equals_cut_file_plan(clip: Path, tmp_path: Path) -> None:
    info = probe(clip)
    ws = plan_for("find", info.duration_s, Settings())
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
    plans = [plan_window(info, w) for w in plan_for("find", info.duration_s, Settings())]
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
    plans = [plan_window(info, w) for w in plan_for("find", info.duration_s, Settings())]
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
    plans = [plan_window(info, w) for w in plan_for("find", info.duration_s, Settings())]
    assert window_backend(plans, "auto") == window_backend(plans, "fast") == "fast"
    assert window_backend(plans, "reference") == "pyav"


def test_second_question_on_a_long_video_decodes_nothing(
    bclip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine decodes a long video's windows in one scan, once: the second find decodes 0 pictures."""
    decoded: list[int] = []
    real_run = window_video._decode_run

    def counting_run(*args: Any, **kwargs: Any) -> int:
        n = real_run(*args, **kwargs)
        decoded.append(n)
        return n

    monkeypatch.setattr(window_video, "_decode_run", counting_run)
    eng = Engine(Settings(model="tiny", video_backend="fast"))
    plans = window_runs.window_plans(eng, bclip, "find")
    assert plans is not None and len(plans) == 3
    first = list(eng.window_frames(bclip, plans))
    assert not any(hit for _, _, hit in first)
    assert 0 < sum(decoded) < probe(bclip).num_frames  # one scan: no picture twice
    decoded.clear()
    second = list(eng.window_frames(bclip, window_runs.window_plans(eng, bclip, "find") or []))
    assert all(hit for _, _, hit in second) and sum(decoded) == 0 and decoded == []
    assert all(a[1] is b[1] for a, b in zip(first, second, strict=True))


def test_fast_windows_fall_back_to_the_scan(clip: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast-path failure (here: every run raises) is not a failed request: the PyAV scan runs."""

    def broken(*_a: Any, **_kw: Any) -> int:
        raise RuntimeError("seek missed")

    monkeypatch.setattr(window_video, "_decode_run", broken)
    info = probe(clip)
    plans = [plan_window(info, w) for w in plan_for("find", info.duration_s, Settings())][:1]
    got = list(decode_windows(str(clip), plans, backend="fast"))
    assert [wp for wp, _, _ in got] == plans and {pv.backend for _, pv, _ in got} == {"pyav"}


def test_the_first_window_waits_only_for_its_own_pictures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows are decoded in order by every worker at once: window 1 is handed out once the GOPs up
    to the one holding its last planned frame are decoded, before any later GOP is waited for."""
    from marlin_demo.video.fast import _packet_index

    monkeypatch.setenv("MARLIN_DECODE_THREADS", "2")
    p = tmp_path / "long.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x90:rate=10", "-t", "130", "-c:v", "libx264",
           "-preset", "ultrafast", "-g", "45", "-pix_fmt", "yuv420p", str(p))  # fmt: skip
    info = probe(p)
    plans = [plan_window(info, w) for w in plan_for("caption", info.duration_s, Settings())]
    assert len(plans) == 3
    index = _packet_index(str(p), info.stream_index)
    assert index is not None
    next_key = min(k for k in index.keyframes if k > max(plans[0].source_indices))
    got = decode_windows(str(p), plans, backend="fast")
    first_plan, _, decoded_at_first = next(got)
    assert first_plan == plans[0] and decoded_at_first <= next_key  # all-P: pictures = frames decoded
    rest = list(got)
    assert [wp for wp, _, _ in rest] == plans[1:] and rest[-1][2] <= info.num_frames  # each picture once
