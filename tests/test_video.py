"""marlin_demo.video: probe, validation, the qwen-vl-utils sampling contract, decoding, clip export.

The key tests compare ``plan_sampling`` + ``sample`` with qwen-vl-utils' own
``process_vision_info`` (torchcodec reader) on the same files: same frame
indices, size, token count, metadata and pixel values.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from media_factory import run_ffmpeg

from marlin_demo import video
from marlin_demo.model_io import VideoParams
from marlin_demo.video import Limits, VideoError, export_clip, plan_sampling, probe, sample, validate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_CLIPS = [
    "ball_rolls.mp4",
    "blue_square.mp4",
    "people_meet.mp4",
    "day_to_night.mp4",
    "lamp_on_off.mp4",
]

# What probe must report for ../shared/media (see its README). nasa_13013.mp4 holds TWO video
# streams: stream 0 is 320x180 @ 25 fps (the README's row) and stream 3 is 480x270 @ 29.97 fps.
# torchcodec, hence qwen-vl-utils, decodes FFmpeg's "best" stream, stream 3, so that is what counts.
MEDIA = {
    "nasa_13013.mp4": dict(
        codec="h264", width=480, height=270, fps=30000 / 1001, frames=390, duration=13.013, audio=2, videos=2
    ),
    "av1_video.mkv": dict(
        codec="av1", width=640, height=360, fps=25.0, frames=125, duration=5.0, audio=0, videos=1
    ),
    "bt709_full_range.mp4": dict(
        codec="h264", width=1280, height=720, fps=30.0, frames=30, duration=1.0, audio=0, videos=1
    ),
    "h264_10bits.mp4": dict(
        codec="h264", width=200, height=200, fps=30.0, frames=30, duration=1.0, audio=0, videos=1
    ),
    "h265_video.mp4": dict(
        codec="hevc", width=128, height=128, fps=10.0, frames=10, duration=1.0, audio=0, videos=1
    ),
}
PARAMS = VideoParams()

needs_ffmpeg = pytest.mark.skipif(not video.ffmpeg_available(), reason="the ffmpeg binary is not on PATH")


def media_file(media_dir: Path, name: str) -> Path:
    path = media_dir / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def example_file(name: str) -> Path:
    path = ROOT / "examples" / name
    if not path.is_file():
        pytest.skip(f"{path} has not been rendered (python examples/render_examples.py)")
    return path


# ---------------------------------------------------------------------------
# Generated videos (session scoped, made with the ffmpeg binary)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("generated")


def _testsrc(out: Path, size: str, rate: int, seconds: float, *extra: str) -> Path:
    if not video.ffmpeg_available():
        pytest.skip("the ffmpeg binary is not on PATH")
    if not out.exists():
        res = run_ffmpeg(
            "-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}:duration={seconds}",
            *extra, "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(out),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
    return out


def _rotated(src: Path, out: Path, degrees: int) -> Path:
    """Tag a copy of ``src`` with a display rotation (FFmpeg >= 6: -display_rotation; 5.x: rotate tag)."""
    if not out.exists():
        res = run_ffmpeg("-display_rotation", str(degrees), "-i", str(src), "-c", "copy", str(out))
        if res.returncode != 0:
            res = run_ffmpeg("-i", str(src), "-c", "copy", "-metadata:s:v", f"rotate={degrees}", str(out))
        assert res.returncode == 0, res.stderr
    if probe(out).rotation == 0:
        pytest.skip("this ffmpeg could not write a display rotation")
    return out


@pytest.fixture(scope="session")
def plain_320x240(gen_dir: Path) -> Path:
    return _testsrc(gen_dir / "plain.mp4", "320x240", 10, 3)


@pytest.fixture(scope="session")
def rotated_90(gen_dir: Path, plain_320x240: Path) -> Path:
    return _rotated(plain_320x240, gen_dir / "rot90.mp4", 90)


@pytest.fixture(scope="session")
def rotated_270(gen_dir: Path, plain_320x240: Path) -> Path:
    return _rotated(plain_320x240, gen_dir / "rot270.mp4", 270)


@pytest.fixture(scope="session")
def long_video(gen_dir: Path) -> Path:
    """150 s at 4 fps (600 frames): more than 240 samples at 2 fps, so the max_frames cap applies."""
    return _testsrc(gen_dir / "long.mp4", "160x90", 4, 150)


@pytest.fixture(scope="session")
def one_frame(gen_dir: Path) -> Path:
    return _testsrc(gen_dir / "one_frame.mp4", "64x64", 10, 1, "-frames:v", "1")


# ---------------------------------------------------------------------------
# probe
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MEDIA))
def test_probe_shared_media(media_dir: Path, name: str) -> None:
    path = media_file(media_dir, name)
    want = MEDIA[name]
    info = probe(path)
    assert info.codec == want["codec"]
    assert (info.width, info.height) == (want["width"], want["height"])
    assert (info.display_width, info.display_height) == (want["width"], want["height"])
    assert info.rotation == 0
    assert info.fps == pytest.approx(want["fps"], rel=1e-6)
    assert info.num_frames == want["frames"]
    assert info.duration_s == pytest.approx(want["duration"], abs=0.02)
    assert info.audio_streams == want["audio"]
    assert info.video_streams == want["videos"]
    assert info.size_bytes == path.stat().st_size
    assert info.path == str(path)
    assert set(info.to_dict()) >= {"path", "duration_s", "fps", "codec", "rotation", "num_frames"}


def test_probe_details(media_dir: Path) -> None:
    ten_bit = probe(media_file(media_dir, "h264_10bits.mp4"))
    assert ten_bit.bit_depth == 10 and ten_bit.pix_fmt == "yuv420p10le"
    full_range = probe(media_file(media_dir, "bt709_full_range.mp4"))
    assert full_range.bit_depth == 8 and full_range.pix_fmt == "yuvj420p"
    assert probe(media_file(media_dir, "av1_video.mkv")).container == "mkv"
    nasa = probe(media_file(media_dir, "nasa_13013.mp4"))
    assert nasa.container == "mp4" and nasa.stream_index == 3


@pytest.mark.parametrize("name", sorted(MEDIA))
def test_probe_without_torchcodec_agrees(media_dir: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PyAV packet scan gives the same frame count, fps and duration as torchcodec's exact scan."""
    path = media_file(media_dir, name)
    with_tc = probe(path)
    monkeypatch.setattr(video.info, "_torchcodec_metadata", lambda _path: None)
    without = probe(path)
    assert without.metadata_source == "pyav"
    assert without.num_frames == with_tc.num_frames
    assert without.fps == pytest.approx(with_tc.fps, rel=1e-9)
    assert without.duration_s == pytest.approx(with_tc.duration_s, abs=1e-6)
    assert without.stream_index == with_tc.stream_index


def test_probe_rotated(rotated_90: Path, rotated_270: Path) -> None:
    info = probe(rotated_90)
    assert info.rotation == 90
    assert (info.width, info.height) == (320, 240)
    assert (info.display_width, info.display_height) == (240, 320)
    info270 = probe(rotated_270)
    assert info270.rotation == 270
    assert (info270.display_width, info270.display_height) == (240, 320)


# ---------------------------------------------------------------------------
# Bad inputs: one clear sentence each
# ---------------------------------------------------------------------------


def _make_bad(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{kind}.mp4"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("This is not a video, just some notes.\nSecond line.\n")
    elif kind == "png":
        from PIL import Image

        Image.new("RGB", (64, 48), (200, 30, 30)).save(path, format="PNG")
    elif kind == "random":
        path.write_bytes(random.Random(1234).randbytes(20000))
    elif kind == "mp3":
        if not video.ffmpeg_available():
            pytest.skip("the ffmpeg binary is not on PATH")
        path = tmp_path / "tone.mp3"
        res = run_ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=2", str(path))
        assert res.returncode == 0, res.stderr
    elif kind == "truncated":
        # moov at the end (no faststart): cutting the file loses the index entirely.
        if not video.ffmpeg_available():
            pytest.skip("the ffmpeg binary is not on PATH")
        full = tmp_path / "full.mp4"
        res = run_ffmpeg("-i", str(example_file("ball_rolls.mp4")), "-c", "copy", str(full))
        assert res.returncode == 0, res.stderr
        data = full.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "truncated_faststart":
        # moov first: the index survives but half the frames are missing.
        data = example_file("ball_rolls.mp4").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "missing":
        pass
    else:  # pragma: no cover
        raise AssertionError(kind)
    return path


@pytest.mark.parametrize(
    ("kind", "pattern"),
    [
        ("empty", r"^The file is empty \(0 bytes\): upload an MP4"),
        ("text", r"^This file is not a video \(it looks like a text file\)"),
        (
            "png",
            r"^This file is not a video \(it looks like a PNG image\): "
            r"upload an MP4, WebM, MOV or MKV clip\.$",
        ),
        ("random", r"^This file is not a video \(its format was not recognised\)"),
        ("mp3", r"^This file has no video stream \(it contains only audio\)"),
        ("truncated", r"^The video could not be decoded \(the file looks truncated or damaged\)"),
        (
            "truncated_faststart",
            r"^The video could not be decoded \(the file looks truncated: \d+ of 120 frames",
        ),
        ("missing", r"does not exist"),
    ],
)
def test_bad_files(kind: str, pattern: str, tmp_path: Path) -> None:
    path = _make_bad(kind, tmp_path)
    with pytest.raises(VideoError, match=pattern) as err:
        probe(path)
    message = str(err.value)
    assert message.endswith(".") and message.count(". ") == 0  # one sentence
    assert isinstance(err.value, ValueError)
    with pytest.raises(VideoError):
        validate(path)


def test_zero_duration_message(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = SimpleNamespace(
        stream_index=0,
        num_frames=0,
        average_fps=0.0,
        duration_seconds=0.0,
        num_frames_from_content=None,
        num_frames_from_header=0,
    )
    monkeypatch.setattr(video.info, "_torchcodec_metadata", lambda _path: fake)
    with pytest.raises(VideoError, match=r"zero duration"):
        probe(example_file("ball_rolls.mp4"))


def test_one_frame_video_cannot_be_sampled(one_frame: Path) -> None:
    info = probe(one_frame)
    assert info.num_frames == 1
    with pytest.raises(VideoError, match=r"only 1 frame\(s\); at least 2 frames are needed"):
        plan_sampling(info, PARAMS)


# ---------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------


def test_limits(media_dir: Path) -> None:
    nasa = media_file(media_dir, "nasa_13013.mp4")
    assert validate(nasa).duration_s == pytest.approx(13.013, abs=0.01)
    with pytest.raises(VideoError, match=r"^The file is 0\.7 MB; at most 0\.5 MB is allowed\.$"):
        validate(nasa, Limits(max_file_mb=0.5))
    with pytest.raises(VideoError, match=r"^The video is 13\.0 s long; at most 10 s is allowed\.$"):
        validate(nasa, Limits(max_duration_s=10))
    with pytest.raises(
        VideoError, match=r"^The video is 480x270; at most 320x240 \(either orientation\) is allowed"
    ):
        validate(nasa, Limits(max_width=320, max_height=240))
    assert Limits() == Limits(max_file_mb=200.0, max_duration_s=600.0, max_width=3840, max_height=2160)


def test_limits_accept_portrait(rotated_90: Path) -> None:
    info = validate(rotated_90, Limits(max_width=320, max_height=240))
    assert (info.display_width, info.display_height) == (240, 320)


# ---------------------------------------------------------------------------
# THE KEY TEST: plan_sampling + sample == qwen-vl-utils (torchcodec reader)
# ---------------------------------------------------------------------------


def qwen_fetch(path: Path, monkeypatch: pytest.MonkeyPatch, **extra: object) -> tuple[torch.Tensor, dict]:
    """Run qwen-vl-utils' process_vision_info on ``path`` with the torchcodec reader, or skip saying why."""
    monkeypatch.setenv("FORCE_QWENVL_VIDEO_READER", "torchcodec")
    from qwen_vl_utils import process_vision_info
    from qwen_vl_utils import vision_process as vp

    # The env var is read once at import; another test may have imported qwen_vl_utils already.
    monkeypatch.setattr(vp, "get_video_reader_backend", lambda: "torchcodec")
    element = {
        "type": "video",
        "video": str(path),
        "fps": PARAMS.fps,
        "max_frames": PARAMS.max_frames,
        "min_frames": PARAMS.min_frames,
        "max_pixels": PARAMS.max_pixels,
        **extra,
    }
    try:
        _, videos, kwargs = process_vision_info(
            [{"role": "user", "content": [element]}],
            return_video_kwargs=True,
            return_video_metadata=True,
            image_patch_size=PARAMS.patch_size,
        )
    except Exception as exc:  # torchcodec failed and its torchvision fallback is gone in torchvision 0.29
        pytest.skip(f"qwen-vl-utils itself cannot read {path.name}: {type(exc).__name__}: {exc}")
    assert kwargs == {"do_sample_frames": False}
    frames, metadata = videos[0]
    if metadata.get("video_backend") != "torchcodec":
        pytest.skip(f"qwen-vl-utils did not use torchcodec for {path.name}")
    return frames, metadata


def check_parity(path: Path, monkeypatch: pytest.MonkeyPatch, **qwen_range: float) -> video.PreparedVideo:
    ref_frames, ref_meta = qwen_fetch(path, monkeypatch, **qwen_range)
    info = probe(path)
    assert info.metadata_source == "torchcodec"
    plan = plan_sampling(
        info, PARAMS, start_s=qwen_range.get("video_start"), end_s=qwen_range.get("video_end")
    )
    t, c, h, w = ref_frames.shape
    assert plan.indices == list(ref_meta["frames_indices"])
    assert plan.nframes == t == len(plan.indices)
    assert (plan.height, plan.width) == (h, w) and c == 3
    assert plan.total_frames == ref_meta["total_num_frames"]
    assert plan.source_fps == ref_meta["fps"]
    assert plan.video_tokens == (t // 2) * (h // 32) * (w // 32)
    assert plan.timestamps == pytest.approx([i / ref_meta["fps"] for i in ref_meta["frames_indices"]])
    assert plan.height % PARAMS.factor == 0 and plan.width % PARAMS.factor == 0
    assert plan.height * plan.width <= PARAMS.max_pixels

    prepared = sample(path, plan, info=info)
    assert prepared.metadata == ref_meta
    assert prepared.backend == "torchcodec" and prepared.decode_s > 0
    assert prepared.frames.dtype == torch.uint8
    assert ref_frames.dtype == torch.float32
    # qwen-vl-utils resizes uint8 then calls .float(): whole numbers, identical to ours.
    assert torch.equal(prepared.frames.float(), ref_frames)
    return prepared


@pytest.mark.parametrize("name", EXAMPLE_CLIPS)
def test_parity_examples(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    prepared = check_parity(example_file(name), monkeypatch)
    # 480x270 examples: upscaled to the 128-token minimum per frame, 2 fps.
    assert prepared.plan.sample_fps == pytest.approx(2.0)


@pytest.mark.parametrize("name", sorted(MEDIA))
def test_parity_shared_media(media_dir: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    check_parity(media_file(media_dir, name), monkeypatch)


def test_parity_rotated(rotated_90: Path, rotated_270: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchcodec rotates while decoding, so qwen-vl-utils plans the upright (portrait) size."""
    for path in (rotated_90, rotated_270):
        prepared = check_parity(path, monkeypatch)
        assert prepared.plan.height > prepared.plan.width


def test_parity_long_video_caps_frames(long_video: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prepared = check_parity(long_video, monkeypatch)
    assert prepared.plan.nframes == 240
    assert prepared.plan.sample_fps == pytest.approx(240 / 600 * 4)  # 1.6 fps, below the asked 2 fps


def test_parity_time_range(media_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prepared = check_parity(
        media_file(media_dir, "nasa_13013.mp4"), monkeypatch, video_start=2.5, video_end=9.0
    )
    assert prepared.plan.indices[0] >= 2.5 * prepared.plan.source_fps


def test_sample_fps_matches_fetch_video(media_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qwen_vl_utils import vision_process as vp

    path = media_file(media_dir, "nasa_13013.mp4")
    qwen_fetch(path, monkeypatch)  # skips when qwen-vl-utils cannot read it
    element = {"video": str(path), "fps": 2.0, "max_frames": 240, "min_frames": 4, "max_pixels": 200704}
    (_, _), sample_fps = vp.fetch_video(
        element, image_patch_size=16, return_video_sample_fps=True, return_video_metadata=True
    )
    assert plan_sampling(probe(path), PARAMS).sample_fps == sample_fps


def test_processor_sees_uint8_and_float_alike() -> None:
    """With do_resize=False (frames already at qwen-vl-utils' size) the HF video processor gives identical
    pixels for our uint8 frames and qwen-vl-utils' float32 ones, and the token count of the plan.

    With its default resize it would shrink them again (its own budget) and uint8 vs float would differ.
    """
    transformers = pytest.importorskip("transformers")
    processor = transformers.Qwen3VLVideoProcessor(patch_size=16, merge_size=2, temporal_patch_size=2)
    path = example_file("ball_rolls.mp4")
    info = probe(path)
    plan = plan_sampling(info, PARAMS)
    prepared = sample(path, plan, info=info)
    outs = [
        processor(
            videos=[frames],
            video_metadata=[dict(prepared.metadata)],
            do_sample_frames=False,
            do_resize=False,
            return_tensors="pt",
        )
        for frames in (prepared.frames, prepared.frames.float())
    ]
    assert torch.equal(outs[0]["pixel_values_videos"], outs[1]["pixel_values_videos"])
    assert outs[0]["video_grid_thw"].tolist() == [[plan.nframes // 2, plan.height // 16, plan.width // 16]]
    assert int(outs[0]["video_grid_thw"].prod()) // 4 == plan.video_tokens


# ---------------------------------------------------------------------------
# PyAV fallback
# ---------------------------------------------------------------------------


def _pyav_vs_torchcodec(path: Path) -> tuple[video.PreparedVideo, video.PreparedVideo]:
    info = probe(path)
    plan = plan_sampling(info, PARAMS)
    ref = sample(path, plan, backend="torchcodec", info=info)
    alt = sample(path, plan, backend="pyav", info=info)
    assert alt.metadata["video_backend"] == "pyav" and alt.backend == "pyav"
    assert {k: v for k, v in alt.metadata.items() if k != "video_backend"} == {
        k: v for k, v in ref.metadata.items() if k != "video_backend"
    }
    assert alt.frames.shape == ref.frames.shape and alt.frames.dtype == torch.uint8
    return ref, alt


@pytest.mark.parametrize("name", sorted(MEDIA))
def test_pyav_fallback_matches(media_dir: Path, name: str) -> None:
    ref, alt = _pyav_vs_torchcodec(media_file(media_dir, name))
    diff = (alt.frames.int() - ref.frames.int()).abs().float().mean().item()
    # 8-bit sources convert identically; 10-bit chroma upsampling differs between FFmpeg builds.
    assert diff < (5.0 if ref.info.bit_depth and ref.info.bit_depth > 8 else 0.5)


def test_pyav_fallback_rotation(rotated_90: Path, rotated_270: Path) -> None:
    for path in (rotated_90, rotated_270):
        ref, alt = _pyav_vs_torchcodec(path)
        assert (alt.frames.int() - ref.frames.int()).abs().float().mean().item() < 0.5


def test_auto_falls_back_to_pyav(monkeypatch: pytest.MonkeyPatch) -> None:
    path = example_file("ball_rolls.mp4")
    info = probe(path)
    plan = plan_sampling(info, PARAMS)

    def broken(*_args: object) -> None:
        raise RuntimeError("Could not load libtorchcodec: libavutil.so.59 not found")

    monkeypatch.setattr(video.pipeline, "_decode_torchcodec", broken)
    prepared = sample(path, plan, info=info)
    assert prepared.metadata["video_backend"] == "pyav"
    assert prepared.frames.shape == (plan.nframes, 3, plan.height, plan.width)
    with pytest.raises(VideoError, match="could not be decoded"):
        sample(path, plan, backend="torchcodec", info=info)
    with pytest.raises(ValueError, match="backend must be"):
        sample(path, plan, backend="decord", info=info)  # type: ignore[arg-type]


def test_auto_uses_pyav_when_probe_could_not_use_torchcodec(monkeypatch: pytest.MonkeyPatch) -> None:
    path = example_file("lamp_on_off.mp4")
    monkeypatch.setattr(video.info, "_torchcodec_metadata", lambda _path: None)
    info = probe(path)
    assert info.metadata_source == "pyav"
    prepared = sample(path, plan_sampling(info, PARAMS), info=info)
    assert prepared.backend == "pyav"


def test_plan_rejects_a_pixel_budget_below_the_minimum() -> None:
    info = probe(example_file("ball_rolls.mp4"))
    with pytest.raises(ValueError, match="below the per-frame minimum 131072"):
        plan_sampling(info, VideoParams(max_pixels=100_000))


def test_prepare_is_validate_plan_sample() -> None:
    path = example_file("people_meet.mp4")
    prepared = video.prepare(path, PARAMS, Limits())
    assert prepared.info == probe(path)
    assert prepared.plan == plan_sampling(prepared.info, PARAMS)
    assert prepared.frames.shape[0] == prepared.plan.nframes == 28
    with pytest.raises(VideoError, match="at most 5 s"):
        video.prepare(path, PARAMS, Limits(max_duration_s=5))


# ---------------------------------------------------------------------------
# export_clip
# ---------------------------------------------------------------------------


@needs_ffmpeg
def test_export_clip_is_frame_accurate(media_dir: Path, tmp_path: Path) -> None:
    src = media_file(media_dir, "nasa_13013.mp4")
    out = export_clip(src, 2.0, 5.0, tmp_path / "cut" / "nasa_2_5.mp4")
    assert out == tmp_path / "cut" / "nasa_2_5.mp4" and out.is_file()
    info = probe(out)
    assert abs(info.duration_s - 3.0) <= 1 / info.fps + 1e-6
    assert info.codec == "h264" and info.pix_fmt == "yuv420p"
    assert (info.width, info.height) == (480, 270)  # the best stream, as sampled
    assert info.audio_streams == 2  # audio kept
    with out.open("rb") as fh:
        head = fh.read(64 * 1024)
    assert head.find(b"moov") < head.find(b"mdat") or b"mdat" not in head  # faststart


@needs_ffmpeg
def test_export_clip_clamps_and_rejects(tmp_path: Path) -> None:
    src = example_file("ball_rolls.mp4")
    out = export_clip(src, 10.0, 99.0, tmp_path / "tail.mp4")
    info = probe(out)
    assert abs(info.duration_s - 2.0) <= 1 / info.fps + 1e-6
    assert info.audio_streams == 0
    out = export_clip(src, -5.0, 1.0, tmp_path / "head.mp4")
    assert abs(probe(out).duration_s - 1.0) <= 0.1 + 1e-6
    for start, end in [(5.0, 5.0), (6.0, 2.0), (20.0, 30.0), (float("nan"), 3.0)]:
        with pytest.raises(VideoError):
            export_clip(src, start, end, tmp_path / "bad.mp4")


@needs_ffmpeg
def test_export_clip_rotated_comes_out_upright(rotated_90: Path, tmp_path: Path) -> None:
    info = probe(export_clip(rotated_90, 0.5, 2.5, tmp_path / "upright.mp4"))
    assert info.rotation == 0 and (info.display_width, info.display_height) == (240, 320)


def test_export_clip_without_ffmpeg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(video.export.shutil, "which", lambda _name: None)
    assert not video.ffmpeg_available()
    with pytest.raises(RuntimeError, match="ffmpeg was not found"):
        export_clip(example_file("ball_rolls.mp4"), 0, 1, tmp_path / "x.mp4")
