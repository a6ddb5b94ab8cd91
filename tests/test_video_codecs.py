"""The fast video path on every common encoding, against the reference decoder, and the `auto` rule.

No timing is asserted (benchmarks/bench_video_prep.py and bench_video_auto.py measure speed).
For each codec, on a few-second clip made once per session with ffmpeg (keyframes every second,
so the fast path splits the clip into runs decoded in parallel):
- the plan is the reference's (indices, size, tokens, metadata) and each returned frame is the
  frame torchcodec's index points at (pts error 0); pixels within docs/SPEED.md's tolerance;
- skipping non-reference pictures (H.264; HEVC with one temporal sub-layer) changes no pixel,
  and decodes fewer pictures exactly where the codec allows it;
- ``pick_backend`` (``auto``) follows the documented rule for each kind of clip.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from media_factory import ffmpeg, run_ffmpeg

from marlin_demo import video
from marlin_demo.model_io import VideoParams

PARAMS = VideoParams()
SRC = "testsrc2=size=320x180:rate=30:duration=4"
#: two slow AV1 encodes (several seconds each at 320x180) get a quarter of the pixels; av1_aom_model
#: keeps the full size, where libaom leaves pictures that nothing references (its case)
SMALL_SRC = "testsrc2=size=160x90:rate=30:duration=4"
SMALL = {"av1_rav1e", "av1_aom_resilient"}
X265 = ["-c:v", "libx265", "-preset", "ultrafast", "-x265-params"]
#: name -> ffmpeg encoder options (after the lavfi input)
ENCODES: dict[str, list[str]] = {
    "h264_high_b3": ["-c:v", "libx264", "-preset", "veryfast", "-profile:v", "high", "-bf", "3", "-g", "30"],
    "hevc_b": [*X265, "keyint=30:bframes=3:log-level=error"],
    "hevc_temporal_layers": [
        *X265, "keyint=30:bframes=3:b-pyramid=1:temporal-layers=1:log-level=error",
    ],
    "vp9_altref": ["-c:v", "libvpx-vp9", "-deadline", "good", "-cpu-used", "8", "-g", "30", "-b:v", "300k",
                   "-auto-alt-ref", "1", "-lag-in-frames", "16"],
    "av1_svt": ["-c:v", "libsvtav1", "-preset", "12", "-g", "30", "-svtav1-params", "verbosity=0"],
    # libaom with alt-refs and a decoder model (buffer removal times in every frame header)
    "av1_aom_model": ["-c:v", "libaom-av1", "-cpu-used", "8", "-g", "30", "-lag-in-frames", "16",
                      "-aom-params", "timing-info=model"],
    "av1_rav1e": ["-c:v", "librav1e", "-speed", "10", "-g", "30"],
    # error-resilient frames with frame ids, and no order hints: other branches of the frame header
    "av1_aom_resilient": ["-c:v", "libaom-av1", "-cpu-used", "8", "-g", "30", "-lag-in-frames", "16",
                          "-aom-params", "error-resilient=1:enable-order-hint=0"],
    "hevc_10bit": ["-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "keyint=30:log-level=error",
                   "-pix_fmt", "yuv420p10le"],
    # 4:2:0 180 px wide (4 past a multiple of 16, like 854 or 1080): PyAV's swscale left the last
    # columns black when converting such frames straight to planar RGB
    "h264_width_180": ["-vf", "crop=180:100", "-c:v", "libx264", "-preset", "veryfast", "-g", "30"],
    # fields woven into frames (tff), coded as interlaced: the reference decode, like 10-bit
    "h264_interlaced": ["-vf", "tinterlace=interleave_top,fieldorder=tff", "-c:v", "libx264", "-flags",
                        "+ildct+ilme", "-x264opts", "tff=1", "-g", "30"],
    "h264_vfr": ["-vf", "setpts='PTS+0.02*sin(N)/TB'", "-fps_mode", "vfr", "-c:v", "libx264", "-preset",
                 "veryfast", "-g", "30"],
}  # fmt: skip
SUFFIX = {
    "vp9_altref": ".webm",
    "av1_svt": ".mkv",
    "av1_aom_model": ".mkv",
    "av1_rav1e": ".webm",
    "av1_aom_resilient": ".mkv",
}
#: clips whose unplanned pictures that nothing references are not decoded -> at most this share of
#: the pictures a full decode returns is decoded (1.0: strictly fewer); the others decode them all
SKIPS = {
    "h264_high_b3": 0.8,
    "hevc_b": 0.8,
    "hevc_temporal_layers": 0.8,  # the highest of its two sub-layers only
    "h264_vfr": 0.8,
    "h264_width_180": 0.8,
    "av1_svt": 0.85,
    "av1_aom_model": 1.0,
    "av1_aom_resilient": 1.0,
}
AV1 = [name for name in ENCODES if name.startswith("av1_")]
#: clips the fast path leaves to the reference decode (``fast_supported``)
REFERENCE_ONLY = {"hevc_10bit", "h264_interlaced"}


@pytest.fixture(scope="session")
def codec_clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not video.ffmpeg_available():
        pytest.skip("the ffmpeg binary is not on PATH")
    root = tmp_path_factory.mktemp("codecs")
    out = {}
    for name, opts in ENCODES.items():
        path = root / (name + SUFFIX.get(name, ".mp4"))
        pix = [] if "-pix_fmt" in opts else ["-pix_fmt", "yuv420p"]
        src = SMALL_SRC if name in SMALL else SRC
        ffmpeg("-f", "lavfi", "-i", src, *opts, *pix, str(path))
        out[name] = path
    return out


def _exact_plan_and_frames(path: Path, fast: video.PreparedVideo, ref: video.PreparedVideo) -> None:
    plan = fast.plan
    assert fast.frames.shape == ref.frames.shape == (plan.nframes, 3, plan.height, plan.width)
    strip = {k: v for k, v in fast.metadata.items() if k != "video_backend"}
    assert strip == {k: v for k, v in ref.metadata.items() if k != "video_backend"}
    all_pts = video.frame_pts(path, fast.info.stream_index)
    assert fast.frame_pts == pytest.approx([all_pts[i] for i in plan.indices], abs=1e-9)  # pts error 0
    diff = (fast.frames.int() - ref.frames.int()).abs().float()
    assert diff.mean() <= 0.35, f"{path.name}: mean |diff| {diff.mean():.3f}"
    assert diff.mean(dim=(1, 2, 3)).max() <= 0.5
    worst_column = diff.mean(dim=(0, 1, 2)).max()  # sharp edges: ~2.5; a black right edge: ~120
    assert worst_column <= 10, f"{path.name}: a column of pixels is off by {worst_column:.1f} on average"
    assert torch.quantile(diff.flatten()[::7], 0.99) <= 6


@pytest.mark.parametrize("name", list(ENCODES))
def test_fast_path_per_codec(
    codec_clips: dict[str, Path], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARLIN_DECODE_THREADS", "2")
    path = codec_clips[name]
    info = video.probe(path)
    plan = video.plan_sampling(info, PARAMS)
    ref = video.sample(path, plan, backend="reference", info=info)
    fast = video.sample(path, plan, backend="fast", info=info)
    if name in REFERENCE_ONLY:  # above 8 bits or interlaced: the fast path is the reference decode
        assert not video.fast_supported(info) and fast.backend == ref.backend == "torchcodec"
        assert torch.equal(fast.frames, ref.frames)
        return
    assert fast.backend == "fast"
    _exact_plan_and_frames(path, fast, ref)
    with monkeypatch.context() as m:  # the same decode with every picture decoded
        m.setattr(video.parallel_decode, "FAST_SKIP_NONREF", frozenset())
        m.setattr(video.parallel_decode, "FAST_DROP_AV1", frozenset())
        full = video.sample(path, plan, backend="fast", info=info)
    assert torch.equal(fast.frames, full.frames) and fast.frame_pts == full.frame_pts
    assert fast.frames_decoded is not None and full.frames_decoded is not None
    if name in SKIPS:
        counts = (fast.frames_decoded, full.frames_decoded)
        assert fast.frames_decoded < SKIPS[name] * full.frames_decoded, counts
    else:
        assert fast.frames_decoded == full.frames_decoded


def test_hevc_skip_only_where_no_higher_sub_layer_exists(codec_clips: dict[str, Path]) -> None:
    """Sub-layer non-reference HEVC pictures may be referenced from higher sub-layers: with several
    sub-layers, only packets of the highest one may be skipped; in a single-layer stream, all."""
    import av

    def rule_per_packet(name: str) -> tuple[bool, list[int | None], list[bool]]:
        with av.open(str(codec_clips[name])) as c:
            stream = c.streams.video[0]
            rule = video.parallel_decode._nonref_rule(stream.codec_context)
            if rule is None:
                return False, [], []
            size = (stream.codec_context.extradata[21] & 3) + 1
            packets = [p for p in c.demux(stream) if p.size]
            tids = [video.parallel_decode._hevc_temporal_id(bytes(p), size) for p in packets]
            return True, tids, [rule(p) for p in packets]

    for name in ("hevc_b", "h264_high_b3"):
        found, _, allowed = rule_per_packet(name)
        assert found and all(allowed)
    found, tids, allowed = rule_per_packet("hevc_temporal_layers")
    assert found and set(tids) == {0, 1}  # x265: two temporal sub-layers
    assert allowed == [t == 1 for t in tids]
    for name in ("vp9_altref", "av1_svt"):
        assert not rule_per_packet(name)[0]


def _unreferenced_frames(flags: list[int | None]) -> int:
    """How many of a temporal unit's last frames refresh no reference slot (all of them: len)."""
    n = 0
    for f in reversed(flags):
        if f != 0:
            break
        n += 1
    return n


def _trace_headers(path: Path) -> list[tuple[int, int]]:
    """FFmpeg's own AV1 header parser (the ``trace_headers`` bitstream filter), per packet:
    (pts, how many of its last frame headers refresh no reference slot)."""
    res = run_ffmpeg("-loglevel", "info", "-i", str(path), "-map", "0:v", "-c", "copy",
                     "-bsf:v", "trace_headers", "-f", "null", "-")  # fmt: skip
    assert res.returncode == 0, res.stderr
    pts: list[int] = []
    flags: list[list[int | None]] = []  # per frame header: refresh_frame_flags (None: not read)
    for line in res.stderr.splitlines():
        if m := re.search(r"Packet: \d+ bytes.*?, pts (-?\d+)", line):
            pts.append(int(m.group(1)))
            flags.append([])
        elif re.search(r"\bshow_existing_frame\s+\d\s+=\s+\d", line):
            flags[-1].append(None)  # replaced by the refresh flags if the header has them
        elif m := re.search(r"\brefresh_frame_flags\s+[01]+\s+=\s+(\d+)", line):
            flags[-1][-1] = int(m.group(1))
    return [(p, _unreferenced_frames(f)) for p, f in zip(pts, flags, strict=True)]


@pytest.mark.parametrize("name", AV1)
def test_av1_reader_agrees_with_ffmpeg(codec_clips: dict[str, Path], name: str) -> None:
    """video.av1 leaves out exactly the frames FFmpeg's parser shows refreshing no reference slot
    at the end of each temporal unit: the whole unit, or its last frames after a referenced one."""
    import av

    from marlin_demo.video import av1

    ours: list[tuple[int, int]] = []
    partial = 0  # units whose last frames are left out but not the whole
    with av.open(str(codec_clips[name])) as c:
        stream = c.streams.video[0]
        seq = av1.sequence_header_from_extradata(stream.codec_context.extradata)
        assert seq is not None and seq.single_layer
        if name == "av1_aom_model":
            assert seq.decoder_model_info_present and seq.buffer_removal_time_length > 0
        if name == "av1_aom_resilient":
            assert seq.frame_id_length > 0 and seq.order_hint_bits == 0
        for packet in c.demux(stream):
            if packet.size:
                data = bytes(packet)
                seq = av1.sequence_header_in(data) or seq
                cut = av1.unreferenced_from(data, seq)
                frame_starts = [
                    at for t, _, _, _, at in av1.obus(data) if t in (av1.OBU_FRAME, av1.OBU_FRAME_HEADER)
                ]
                left_out = 0 if cut is None else sum(at >= cut for at in frame_starts)
                assert av1.references_nothing(data, seq) == (cut == 0)
                partial += 0 < left_out < len(frame_starts)
                ours.append((int(packet.pts), left_out))
    theirs = _trace_headers(codec_clips[name])
    assert [p for p, _ in ours] == [p for p, _ in theirs]
    assert ours == theirs
    if name != "av1_rav1e":
        assert any(n for _, n in ours)
    if name == "av1_svt":  # a hidden alternate reference, then a shown frame nothing references
        assert partial


def test_av1_reader_keeps_what_it_cannot_read() -> None:
    from marlin_demo.video import av1

    assert not av1.references_nothing(b"", None)
    assert not av1.references_nothing(b"\x32\xff\xff\xff\xff\xff\xff\xff\xff", None)
    assert av1.sequence_header_in(b"\x0a\x05\x00") is None  # a sequence header cut short
    assert av1.sequence_header_from_extradata(b"\x00\x00") is None


def test_auto_rule_per_kind_of_clip(codec_clips: dict[str, Path]) -> None:
    """auto = fast on every 8-bit source, whatever the codec, size or rate; reference above 8 bits."""
    for name, path in codec_clips.items():
        info = video.probe(path)
        want = "reference" if name in REFERENCE_ONLY else "fast"
        assert video.pick_backend(info, video.plan_sampling(info, PARAMS)) == want, name
    base = video.probe(codec_clips["h264_high_b3"])
    for width, height, fps in [(480, 270, 10.0), (640, 360, 30.0), (1920, 1080, 30.0), (1920, 1080, 60.0),
                               (1080, 1920, 60.0), (3840, 2160, 30.0)]:  # fmt: skip
        info = dataclasses.replace(base, width=width, height=height, fps=fps)
        assert video.pick_backend(info, video.plan_sampling(info, PARAMS)) == "fast", (width, height, fps)
        assert (
            video.pick_backend(dataclasses.replace(info, bit_depth=10), video.plan_sampling(info, PARAMS))
            == "reference"
        )


def test_a_clip_cut_without_re_encoding_is_read_like_the_reference(tmp_path: Path) -> None:
    """``ffmpeg -ss 1.3 -c copy`` keeps the frames from the keyframe before the cut, hidden by an
    edit list: not a truncated file, and its frames are numbered from the cut, as torchcodec does."""
    if not video.ffmpeg_available():
        pytest.skip("the ffmpeg binary is not on PATH")
    full, cut = tmp_path / "full.mp4", tmp_path / "cut.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30:duration=6", *ENCODES["h264_high_b3"],
           "-pix_fmt", "yuv420p", "-movflags", "+faststart", str(full))  # fmt: skip
    ffmpeg("-ss", "1.3", "-i", str(full), "-c", "copy", str(cut))
    info = video.probe(cut)
    assert info.num_frames == len(video.frame_pts(cut)) == 141 and video.frame_pts(cut)[0] == 0.0
    plan = video.plan_sampling(info, PARAMS)
    ref = video.sample(cut, plan, backend="reference", info=info)
    fast = video.sample(cut, plan, backend="fast", info=info)
    _exact_plan_and_frames(cut, fast, ref)
    assert fast.frames_decoded is not None and fast.frames_decoded < info.num_frames  # indexed, skipping
    # a file cut short still reads as truncated: its frames stop before the header's duration
    short = tmp_path / "short.mp4"
    short.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(video.VideoError, match="looks truncated"):
        video.probe(short)
