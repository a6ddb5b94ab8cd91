"""The video benchmarks run on small clips: bench_video_prep.py's long-video measure (the engine's
one-scan window decode) and bench_av1_drop.py's three modes.

Only the shape of their figures is asserted (timing is the benchmarks' own business).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from media_factory import ffmpeg
from script_loader import load_script

from marlin_demo import video

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str = "bench_video_prep") -> object:
    return load_script(ROOT / "benchmarks" / f"{name}.py")


def test_measure_windows_reports_one_scan(tmp_path: Path) -> None:
    if not video.ffmpeg_available():
        pytest.skip("the ffmpeg binary is not on PATH")
    clip = tmp_path / "long.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x90:rate=10:duration=130", "-c:v", "libx264",
           "-preset", "ultrafast", "-bf", "2", "-g", "40", "-pix_fmt", "yuv420p", str(clip))  # fmt: skip
    r = _bench().measure_windows(clip, "auto")  # type: ignore[attr-defined]
    assert r["windows"] == 3 and r["decoder"] == "fast"
    assert r["source_frames"] == 1300
    assert 0 < r["pictures_decoded"] < r["source_frames"]  # unplanned B-frames are not decoded
    assert 0 < r["first_window_s"] <= r["s"] and r["cpu_s"] > 0


def test_av1_drop_modes_give_the_same_frames_from_fewer_pictures(tmp_path: Path) -> None:
    if not video.ffmpeg_available():
        pytest.skip("the ffmpeg binary is not on PATH")
    clip = tmp_path / "av1.mkv"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30:duration=4", "-c:v", "libsvtav1", "-preset",
           "12", "-g", "30", "-svtav1-params", "verbosity=0", "-pix_fmt", "yuv420p", str(clip))  # fmt: skip
    r = _bench("bench_av1_drop").measure(clip, 1)  # type: ignore[attr-defined]
    assert r["same_frames"]
    n = r["pictures_decoded"]
    assert n["partial"] < n["whole"] < n["none"], n
    assert video.parallel_decode.FAST_DROP_AV1 == frozenset({"libdav1d"})  # the app's setting is restored
