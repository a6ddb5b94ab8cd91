"""Speed work that must not change answers: the fast video path, the video cache, the prefix cache.

No timing is asserted here (benchmarks/ measures speed). What is asserted:
- the fast decode gives the reference's plan exactly (indices, size, tokens, metadata), the
  same source frames (presentation times), and pixels within a stated tolerance;
- a second request on a video decodes and hashes nothing again, and the caches stay bounded;
- warm requests (cached frames, reused prefix state) give token for token the answers of cold
  ones, for several queries and both the gptq and bf16 variants of the tiny checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from media_factory import ffmpeg, run_ffmpeg

from marlin_demo import model_io, video
from marlin_demo.engine import Engine, EngineError, video_store
from marlin_demo.engine.prefix_cache import PrefixCache
from marlin_demo.model_io import VideoParams
from marlin_demo.settings import Settings, from_env
from marlin_demo.video import digest
from marlin_demo.video.parallel_decode import _PacketIndex, _segments

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["ball_rolls.mp4", "blue_square.mp4", "people_meet.mp4", "day_to_night.mp4", "lamp_on_off.mp4"]
MEDIA_8BIT = ["nasa_13013.mp4", "av1_video.mkv", "bt709_full_range.mp4", "h265_video.mp4"]
PARAMS = VideoParams()

# Fast path vs reference, in levels of 0-255. Measured (docs/SPEED.md): mean 0.01-0.19 on the
# examples, the shared media and generated H.264/HEVC/VP9 clips; p99 <= 4; the largest single
# differences (<= ~36) sit on the sharp edges of synthetic patterns.
MAX_MEAN = 0.35
MAX_FRAME_MEAN = 0.5
MAX_P99 = 6

needs_ffmpeg = pytest.mark.skipif(not video.ffmpeg_available(), reason="the ffmpeg binary is not on PATH")


def example(name: str) -> Path:
    path = ROOT / "examples" / name
    if not path.is_file():
        pytest.skip(f"{path} has not been rendered")
    return path


def media(media_dir: Path, name: str) -> Path:
    path = media_dir / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("speed-media")


@pytest.fixture(scope="module")
def gop_clips(gen_dir: Path) -> dict[str, Path]:
    """Short clips with many keyframes (so the fast path splits and seeks), B-frames, open GOPs, HEVC."""
    if not video.ffmpeg_available():
        pytest.skip("the ffmpeg binary is not on PATH")
    src = "testsrc2=size=480x272:rate=30:duration=8"
    out = {
        "bframes": gen_dir / "bframes.mp4",
        "opengop": gen_dir / "opengop.mp4",
        "hevc": gen_dir / "hevc.mp4",
        "big": gen_dir / "big.mp4",
    }
    ffmpeg("-f", "lavfi", "-i", src, "-c:v", "libx264", "-preset", "veryfast", "-g", "30", "-bf", "3",
           "-pix_fmt", "yuv420p", str(out["bframes"]))  # fmt: skip
    ffmpeg("-f", "lavfi", "-i", src, "-c:v", "libx264", "-preset", "veryfast", "-g", "45", "-bf", "3",
           "-x264-params", "open-gop=1", "-pix_fmt", "yuv420p", str(out["opengop"]))  # fmt: skip
    x265 = "keyint=40:bframes=4:log-level=error"
    ffmpeg("-f", "lavfi", "-i", src, "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", x265,
           "-pix_fmt", "yuv420p", str(out["hevc"]))  # fmt: skip
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25:duration=4", "-c:v", "libx264",
           "-preset", "ultrafast", "-g", "25", "-pix_fmt", "yuv420p", str(out["big"]))  # fmt: skip
    return out


@pytest.fixture(scope="module")
def rotated(gen_dir: Path) -> dict[int, Path]:
    if not video.ffmpeg_available():
        pytest.skip("the ffmpeg binary is not on PATH")
    plain = gen_dir / "plain.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x240:rate=10:duration=3", "-c:v", "libx264",
           "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(plain))  # fmt: skip
    out = {}
    for deg in (90, 180, 270):
        path = gen_dir / f"rot{deg}.mp4"
        res = run_ffmpeg("-display_rotation", str(deg), "-i", str(plain), "-c", "copy", str(path))
        if res.returncode != 0:
            ffmpeg("-i", str(plain), "-c", "copy", "-metadata:s:v", f"rotate={deg}", str(path))
        if video.probe(path).rotation == 0:
            pytest.skip("this ffmpeg could not write a display rotation")
        out[deg] = path
    return out


def check_fast(path: Path) -> tuple[video.PreparedVideo, video.PreparedVideo]:
    """The fast path against the reference on one file: same plan and frames, pixels within tolerance."""
    info = video.probe(path)
    plan = video.plan_sampling(info, PARAMS)
    ref = video.sample(path, plan, backend="reference", info=info)
    fast = video.sample(path, plan, backend="fast", info=info)
    assert fast.plan is plan  # the plan (indices, size, tokens) is the reference's, untouched
    assert fast.frames.shape == ref.frames.shape == (plan.nframes, 3, plan.height, plan.width)
    assert fast.frames.dtype == torch.uint8
    strip = {k: v for k, v in fast.metadata.items() if k != "video_backend"}
    assert strip == {k: v for k, v in ref.metadata.items() if k != "video_backend"}
    if not video.fast_supported(info):  # >8-bit: the reference decode, exactly
        assert fast.backend == ref.backend and torch.equal(fast.frames, ref.frames)
        return ref, fast
    assert fast.backend == "fast"
    # the same source frames: each returned frame's pts is the pts torchcodec's index points at
    all_pts = video.frame_pts(path, info.stream_index)
    assert fast.frame_pts == pytest.approx([all_pts[i] for i in plan.indices], abs=1e-6)
    diff = (fast.frames.int() - ref.frames.int()).abs().float()
    assert diff.mean() <= MAX_MEAN, f"{path.name}: mean |diff| {diff.mean():.3f}"
    assert diff.mean(dim=(1, 2, 3)).max() <= MAX_FRAME_MEAN
    assert torch.quantile(diff.flatten()[::7], 0.99) <= MAX_P99
    return ref, fast


# ---------------------------------------------------------------------------
# fast video path (no model)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_fast_path_examples(name: str) -> None:
    check_fast(example(name))


@pytest.mark.parametrize("name", MEDIA_8BIT)
def test_fast_path_shared_media(media_dir: Path, name: str) -> None:
    check_fast(media(media_dir, name))


def test_fast_path_leaves_10bit_to_the_reference(media_dir: Path) -> None:
    path = media(media_dir, "h264_10bits.mp4")
    info = video.probe(path)
    assert not video.fast_supported(info)
    _, fast = check_fast(path)
    assert fast.backend == "torchcodec" and fast.frame_pts is None
    assert video.pick_backend(info, fast.plan) == "reference"


@needs_ffmpeg
@pytest.mark.parametrize("threads", ["1", "3"])
def test_fast_path_gops_and_seeks(
    gop_clips: dict[str, Path], threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many keyframes, B-frames, open GOPs, HEVC: split into runs and decoded in parallel, or in one run."""
    monkeypatch.setenv("MARLIN_DECODE_THREADS", threads)
    for path in gop_clips.values():
        check_fast(path)


@needs_ffmpeg
@pytest.mark.parametrize("threads", ["1", "3"])
def test_skipping_unplanned_nonreference_pictures_changes_no_pixel(
    gop_clips: dict[str, Path], threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """H.264 pictures nothing references are not decoded unless planned, and no returned frame changes."""
    monkeypatch.setenv("MARLIN_DECODE_THREADS", threads)
    for name in ("bframes", "opengop", "big"):
        info = video.probe(gop_clips[name])
        plan = video.plan_sampling(info, PARAMS)
        skipped = video.sample(gop_clips[name], plan, backend="fast", info=info)
        with monkeypatch.context() as m:
            m.setattr(video.parallel_decode, "FAST_SKIP_NONREF", frozenset())
            full = video.sample(gop_clips[name], plan, backend="fast", info=info)
        assert skipped.backend == full.backend == "fast"
        assert torch.equal(skipped.frames, full.frames), name
        assert skipped.frame_pts == full.frame_pts
        assert skipped.frames_decoded is not None and full.frames_decoded is not None
        if name == "big":  # x264 ultrafast: P-frames only, every picture is a reference
            assert skipped.frames_decoded == full.frames_decoded
        else:  # B-frames: most are non-reference, and most are not planned
            assert skipped.frames_decoded < 0.8 * full.frames_decoded, (name, skipped.frames_decoded)


@needs_ffmpeg
def test_fast_path_rotation(rotated: dict[int, Path]) -> None:
    for deg, path in rotated.items():
        _, fast = check_fast(path)
        upright = fast.plan.height > fast.plan.width
        assert upright == (deg in (90, 270))


def test_fast_path_falls_back_to_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    path = example("ball_rolls.mp4")
    info = video.probe(path)
    plan = video.plan_sampling(info, PARAMS)

    def broken(*_args: object, **_kw: object) -> None:
        raise RuntimeError("simulated decoder failure")

    monkeypatch.setattr(video.pipeline, "_decode_fast", broken)
    prepared = video.sample(path, plan, backend="fast", info=info)
    assert prepared.backend == "torchcodec"
    assert torch.equal(prepared.frames, video.sample(path, plan, info=info).frames)


def test_fast_path_counts_frames_without_a_usable_packet_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Packets without unique pts: one sequential decode that counts frames, like the PyAV fallback."""
    monkeypatch.setattr(video.parallel_decode, "_packet_index", lambda *_a: None)
    check_fast(example("people_meet.mp4"))


def test_segments_cover_every_frame_from_a_keyframe() -> None:
    index = _PacketIndex(pts=list(range(3600)), keyframes=list(range(0, 3600, 250)))
    wanted = torch.linspace(0, 3599, 240).round().long().tolist()
    for workers in (1, 2, 4, 16):
        runs = _segments(index, wanted, workers)
        assert sorted(w for _, ws in runs for w in ws) == sorted(set(wanted))
        for start, ws in runs:
            assert start in index.keyframes and min(ws) >= start
        if workers <= 2:
            assert len(runs) <= workers + 1
    # all-intra: every frame is a keyframe, so only the wanted frames are decoded
    intra = _PacketIndex(pts=list(range(100)), keyframes=list(range(100)))
    assert _segments(intra, [0, 10, 20, 30], 2) == [(0, [0]), (10, [10]), (20, [20]), (30, [30])]


def test_pick_backend(gop_clips: dict[str, Path], media_dir: Path) -> None:
    """auto = the fast path on every 8-bit source (measured faster: docs/VIDEO_PREP.md), reference above."""
    small = video.probe(example("ball_rolls.mp4"))  # 480x270 upscaled to 512x288: fast too (measured ~2x)
    assert video.pick_backend(small, video.plan_sampling(small, PARAMS)) == "fast"
    big = video.probe(gop_clips["big"])  # 1280x720 shrunk to 576x320
    assert video.pick_backend(big, video.plan_sampling(big, PARAMS)) == "fast"
    ten = video.probe(media(media_dir, "h264_10bits.mp4"))
    assert video.pick_backend(ten, video.plan_sampling(ten, PARAMS)) == "reference"


def test_sample_auto_means_the_per_clip_choice(gop_clips: dict[str, Path], media_dir: Path) -> None:
    """backend="auto" in video.sample means what MARLIN_VIDEO_BACKEND=auto means: pick_backend's choice."""
    ten = video.probe(media(media_dir, "h264_10bits.mp4"))
    assert video.sample(ten.path, video.plan_sampling(ten, PARAMS), "auto", ten).backend in (
        "torchcodec",
        "pyav",
    )
    big = video.probe(gop_clips["big"])
    assert video.sample(gop_clips["big"], video.plan_sampling(big, PARAMS), "auto", big).backend == "fast"


# ---------------------------------------------------------------------------
# video cache (no model)
# ---------------------------------------------------------------------------


def test_video_cache_bounds_and_no_second_decode(
    gop_clips: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_settings: Settings
) -> None:
    calls = {"sample": 0, "digest": 0}
    real_sample, real_digest = video_store.sample, digest.file_digest

    def counting_sample(*a: object, **kw: object) -> video.PreparedVideo:
        calls["sample"] += 1
        return real_sample(*a, **kw)  # type: ignore[arg-type]

    def counting_digest(path: Path) -> str:
        calls["digest"] += 1
        return real_digest(path)

    monkeypatch.setattr(video_store, "sample", counting_sample)
    monkeypatch.setattr(digest, "file_digest", counting_digest)
    digest._stamped_digest.cache_clear()  # the process-wide stamp cache: this test counts its own reads
    eng = Engine(tiny_settings, video_cache_size=2)
    first = eng.prepare(gop_clips["bframes"])
    assert eng.prepare(gop_clips["bframes"]) is first
    assert calls == {"sample": 1, "digest": 1}  # the repeat neither decodes nor re-reads the file
    copy = tmp_path / "copy.mp4"
    copy.write_bytes(gop_clips["bframes"].read_bytes())
    assert eng.prepare(copy) is first  # keyed by content
    assert calls["sample"] == 1
    for name in ("opengop", "hevc", "big"):
        eng.prepare(gop_clips[name])
        assert eng.video_cache_len() <= 2
    assert calls["sample"] == 4
    assert eng.prepare(gop_clips["big"]).backend == "fast"  # auto: a large source takes the fast path


def test_engine_backend_setting(gop_clips: dict[str, Path], tiny_settings: Settings) -> None:
    reference, fast = (
        tiny_settings.with_(video_backend="reference"),
        tiny_settings.with_(video_backend="fast"),
    )
    assert Engine(reference).prepare(gop_clips["big"]).backend == "torchcodec"
    assert Engine(fast).prepare(example("ball_rolls.mp4")).backend == "fast"
    with pytest.raises(ValueError, match="MARLIN_VIDEO_BACKEND"):
        Engine(tiny_settings.with_(video_backend="turbo"))


def test_prefix_cache_size_setting(monkeypatch: pytest.MonkeyPatch, tiny_settings: Settings) -> None:
    assert Engine(tiny_settings).prefixes.size == 2
    assert Engine(tiny_settings, video_cache_size=0).prefixes.size == 0  # the bench: all cold
    monkeypatch.setenv("MARLIN_PREFIX_CACHE", "0")  # the environment reaches the engine through Settings
    assert Engine(from_env().with_(model="tiny")).prefixes.size == 0
    assert Engine(tiny_settings.with_(prefix_cache_size=0)).prefixes.size == 0
    assert Engine(tiny_settings, prefix_cache_size=3).prefixes.size == 3


# ---------------------------------------------------------------------------
# prefix reuse on the tiny checkpoint
# ---------------------------------------------------------------------------

QUERIES = ["the ball stops", "(1) lamp turns on", 'someone says "hi"']


def _tokens(eng: Engine, clip: Path, variant: str, prompt: str, max_new: int = 16) -> tuple[list[int], Any]:
    run = eng.run_clip(clip, variant, prompt, max_new, None)
    gen, info = run.gen, run.info
    return gen.token_ids, info


def _state(entry: object) -> list[torch.Tensor]:
    out = []
    for layer in entry.cache.layers:  # type: ignore[attr-defined]
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                out.append(t.clone())
        for name in ("conv_states", "recurrent_states"):
            for t in (getattr(layer, name, None) or {}).values():
                if isinstance(t, torch.Tensor):
                    out.append(t.clone())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["gptq", "bf16"])
def test_warm_answers_equal_cold_ones(variant: str, tiny_settings: Settings) -> None:
    """Each warm request reuses the state a *different* prompt's cold request left; it must answer
    exactly as a cold request (prefix recomputed) and as the one-pass generate (reuse off)."""
    clip = example("ball_rolls.mp4")
    prompts = [model_io.find_prompt(q) for q in QUERIES] + [model_io.CAPTION_PROMPT]
    eng = Engine(tiny_settings)
    _, info = _tokens(eng, clip, variant, prompts[0])
    assert not info.reused_prefix and not info.cached_video and info.prefill_s > 0
    for prompt in prompts[1:]:
        warm, info = _tokens(eng, clip, variant, prompt)
        assert info.reused_prefix and info.cached_video and info.prefill_s == 0.0
        assert info.first_text_s is None or 0 <= info.first_text_s  # type: ignore[attr-defined]
        eng.prefixes.clear()  # cold: the prefix is computed again, by this prompt
        cold, cold_info = _tokens(eng, clip, variant, prompt)
        assert not cold_info.reused_prefix
        eng.prefixes.size = 0  # reuse off: the one-pass generate over the whole prompt
        plain, plain_info = _tokens(eng, clip, variant, prompt)
        eng.prefixes.size = 2
        assert plain_info.reused_prefix is False and plain_info.prefill_s is None
        assert warm == cold, f"{variant}: warm and cold answers differ for {prompt[:40]!r}"
        assert warm == plain, f"{variant}: the split prefill changed the answer for {prompt[:40]!r}"
    assert eng.prefix_cache_len() == 1  # caption and every find share the one (variant, video) entry


@pytest.mark.slow
def test_prefix_state_is_not_mutated_and_skips_the_processor(
    monkeypatch: pytest.MonkeyPatch, tiny_settings: Settings
) -> None:
    clip = example("lamp_on_off.mp4")
    eng = Engine(tiny_settings)
    _tokens(eng, clip, "bf16", model_io.find_prompt(QUERIES[0]))
    (entry,) = list(eng.prefixes._entries.values())
    assert entry.tail_ok  # the processor's ids were the prefix ids + the tokenizer's ids of the tail
    before = _state(entry)
    loaded = eng.load("bf16")
    prepared = eng.prepare(clip)
    text, inputs = eng.build_inputs(loaded, prepared, model_io.find_prompt(QUERIES[1]))
    warm_inputs, _ = eng.prefixes.warm_inputs(loaded, prepared, text)
    for key in ("input_ids", "attention_mask", "mm_token_type_ids"):
        assert torch.equal(warm_inputs[key], inputs[key]), key

    def no_processor(*_a: object, **_kw: object) -> None:
        raise AssertionError("the processor ran although the prefix was cached")

    monkeypatch.setattr(eng, "build_inputs", no_processor)
    for q in QUERIES[1:]:
        _, info = _tokens(eng, clip, "bf16", model_io.find_prompt(q))
        assert info.reused_prefix
    after = _state(entry)
    assert len(before) == len(after) and all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.slow
def test_prefix_cache_bounds(gop_clips: dict[str, Path], tiny_settings: Settings) -> None:
    eng = Engine(tiny_settings, prefix_cache_size=2)
    clips = [example("ball_rolls.mp4"), example("blue_square.mp4"), example("lamp_on_off.mp4")]
    for clip in clips:
        eng.find(clip, "something moves", "bf16")
        assert eng.prefix_cache_len() <= 2
    assert eng.prefixes.nbytes() > 0
    # the oldest video was evicted: asking again is cold, the newest is warm
    assert not eng.find(clips[0], "again", "bf16").info.reused_prefix
    assert eng.find(clips[2], "again", "bf16").info.reused_prefix
    eng.faults.add("oom")  # an out-of-memory error drops every cached state
    with pytest.raises(EngineError):
        eng.find(clips[2], "again", "bf16")
    assert eng.prefix_cache_len() == 0
    eng.find(clips[1], "again", "bf16")
    assert eng.unload("bf16") and eng.prefix_cache_len() == 0  # unloading a variant drops its states


def test_prefix_cache_is_off_without_video() -> None:
    cache = PrefixCache(2)
    assert len(cache) == 0 and cache.nbytes() == 0
    cache.clear()
    cache.drop("bf16")


def test_workers_beside_the_tiny_build_run_on_the_time_it_leaves() -> None:
    """In a whole-suite run under xdist the workers are SCHED_IDLE (conftest.py), so the build's two-thread
    team is never kept waiting for a time slice by a test."""
    flag = os.environ.get("MARLIN_TESTS_YIELD_TO_BUILD")
    if not flag:
        pytest.skip("not a whole-suite run by two or more pytest-xdist workers")
    if flag == "refused":
        pytest.skip("this machine refused SCHED_IDLE to the workers")
    assert os.sched_getscheduler(0) == os.SCHED_IDLE


def test_parallel_workers_get_their_share_of_math_threads() -> None:
    """Under xdist each worker (and what it starts) has the cores divided among the workers: OpenMP
    threads spin while they wait, so two per process on two cores fought (conftest.py sets it)."""
    if os.environ.get("MARLIN_TEST_THREADS") != "share":
        pytest.skip("not run by two or more pytest-xdist workers, or OMP_NUM_THREADS was set by hand")
    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    share = max(1, (os.cpu_count() or 1) // workers)
    assert os.environ["OMP_NUM_THREADS"] == str(share)
    assert torch.get_num_threads() == share
