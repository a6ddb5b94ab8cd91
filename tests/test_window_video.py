"""Window sampling plans vs qwen-vl-utils' plan on the window cut as its own file; one-pass decode."""

from __future__ import annotations

from pathlib import Path

import pytest
from media_factory import ffmpeg

from marlin_demo.video import plan_sampling, probe, sample
from marlin_demo.window_video import decode_windows, plan_window
from marlin_demo.windows import find_windows

FIELDS = ("indices", "timestamps", "nframes", "height", "width", "video_tokens", "total_frames", "source_fps")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("win") / "src.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10", "-t", "62", "-c:v", "libx264",
           "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(p))  # fmt: skip
    return p


def test_window_plan_equals_cut_file_plan(clip: Path, tmp_path: Path) -> None:
    info = probe(clip)
    ws = find_windows(info.duration_s)
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
    plans = [plan_window(info, w) for w in find_windows(info.duration_s)]
    got = list(decode_windows(str(clip), plans))
    assert len(got) == len(plans)
    counts = [c for _, _, c in got]
    assert counts == sorted(counts) and counts[-1] == max(plans[-1].source_indices) + 1 <= info.num_frames
    for wp, prepared, _ in got:
        src_plan = plan_sampling(info)
        src_plan.indices = wp.source_indices
        src_plan.height, src_plan.width = wp.plan.height, wp.plan.width
        ref = sample(clip, src_plan, backend="torchcodec", info=info)
        assert prepared.frames.shape == ref.frames.shape
        assert (prepared.frames.int() - ref.frames.int()).abs().float().mean().item() < 0.5
        assert prepared.metadata["frames_indices"][0] == 0
