"""benchmarks/bench_video_prep.py's long-video measure runs the engine's one-scan window decode.

Only the shape of its figures is asserted (timing is the benchmark's own business): a small
synthetic clip long enough for three 60 s caption windows.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from media_factory import ffmpeg

from marlin_demo import video as V

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_video_prep", ROOT / "benchmarks/bench_video_prep.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_video_prep", module)
    spec.loader.exec_module(module)
    return module


def test_measure_windows_reports_one_scan(tmp_path: Path) -> None:
    if not V.ffmpeg_available():
        pytest.skip("the ffmpeg binary is not on PATH")
    clip = tmp_path / "long.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x90:rate=10:duration=130", "-c:v", "libx264",
           "-preset", "ultrafast", "-bf", "2", "-g", "40", "-pix_fmt", "yuv420p", str(clip))  # fmt: skip
    r = _bench().measure_windows(clip, "auto")  # type: ignore[attr-defined]
    assert r["windows"] == 3 and r["decoder"] == "fast"
    assert r["source_frames"] == 1300
    assert 0 < r["pictures_decoded"] < r["source_frames"]  # unplanned B-frames are not decoded
    assert 0 < r["first_window_s"] <= r["s"] and r["cpu_s"] > 0
