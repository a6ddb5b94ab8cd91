"""Fast decode (docs/SPEED.md): same plan, keyframe runs decoded in parallel, planned frames scaled."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marlin_demo.settings import env_value
from marlin_demo.video.decode import _check_complete, _positions, _rotation_k, _upright_chw, _video_stream
from marlin_demo.video.info import Backend, VideoInfo, _short, _shown_packets, _undecodable
from marlin_demo.video.sampling import SamplingPlan

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch


# The fast path's two swscale steps per planned frame: (1) YUV -> RGB at the stored size, bit for
# bit the reference's rgb24 conversion (planar where that is exact, else packed rgb24:
# ``_FastConverter._full_size_rgb``), (2) that RGB at the plan's size, bicubic, into planar RGB
# (swscale widens the kernel when shrinking, i.e. it antialiases), packed by numpy. Step 2
# replaces torchvision's bicubic+antialias resize, the reference's most expensive step on large
# sources: mean |diff| 0.02-0.2 levels on the example clips, the shared media and a 1080p clip
# (docs/SPEED.md). Scaling straight from YUV in one step is cheaper by ~2 ms a frame but ~1.1-1.4
# levels off (swscale scales the YUV planes).
FAST_PLANAR = "gbrp"
FAST_SCALER = "BICUBIC"
#: the fast path is used for sources of at most this many bits per component; above it PyAV's
#: bundled FFmpeg converts to RGB differently from torchcodec's (~2.7 levels on a 10-bit clip)
FAST_MAX_BIT_DEPTH = 8
#: codecs whose unplanned non-reference pictures the fast path does not decode (FFmpeg's
#: ``skip_frame=NONREF`` set for exactly the packets that hold no planned frame; decoders with
#: one thread decode a packet as it is sent, so the switch applies per packet):
#:
#: - H.264: a picture with ``nal_ref_idc == 0`` is never used to predict another (the
#:   standard's definition), so dropping it cannot change any other picture. On a default
#:   x264 encode (B-frames) that skips ~40% of the decode; on all-P streams nothing.
#: - HEVC: a "sub-layer non-reference" picture (TRAIL_N, TSA_N, STSA_N, RADL_N, RASL_N) is
#:   never referenced by pictures of its own temporal sub-layer, but may be by higher ones; so
#:   the skip is used for every packet when the stream declares one temporal sub-layer
#:   (``numTemporalLayers == 1`` in its hvcC record: x265's usual encodes), and with several
#:   only for packets whose picture is in the highest sub-layer, where nothing is higher.
#:   See ``_nonref_rule``.
#:
#: Not VP9 (FFmpeg's decoder skips only frames that refresh no reference slot; libvpx's encodes
#: have none: measured, 0 of 180). AV1 is skipped another way (FAST_DROP_AV1).
FAST_SKIP_NONREF = frozenset({"h264", "hevc"})
#: AV1 decoders whose unplanned temporal units that refresh no reference slot are not sent to the
#: decoder at all (``video.av1``): libdav1d reads ``skip_frame`` once, when it opens, so it cannot
#: be switched per packet, but a frame that refreshes no slot changes nothing a later frame reads.
FAST_DROP_AV1 = frozenset({"libdav1d"})
#: codecs ``auto`` leaves to the reference decoder although the fast path supports them: none,
#: since on every 8-bit clip measured (H.264, HEVC, VP9, VP8, AV1; 270p to 1080p; 10 to 60 fps)
#: the fast path was at least as fast as the reference (benchmarks/bench_video_auto.py,
#: docs/VIDEO_PREP.md). Kept as the one place to send a codec back if a measurement says so.
AUTO_REFERENCE_CODECS: frozenset[str] = frozenset()


@dataclass
class _PacketIndex:
    """The packets of one stream, as torchcodec's exact mode numbers frames (sorted by pts)."""

    pts: list[int]  # presentation order: frame index i has pts[i] (stream time base)
    keyframes: list[int]  # frame indices whose packet is flagged as a keyframe, ascending
    time_base: float


def _packet_index(path: str, stream_index: int | None) -> _PacketIndex | None:
    """Scan packets (demux only). None when pts are missing or repeated: then frames are counted."""
    import av

    pts: list[int] = []
    key_pts: list[int] = []
    with av.open(path) as container:
        stream = _video_stream(container, stream_index)
        tb = float(stream.time_base)
        for packet in _shown_packets(container, stream):
            if packet.pts is None:
                return None
            pts.append(int(packet.pts))
            if packet.is_keyframe:
                key_pts.append(int(packet.pts))
    pts.sort()
    if not pts or len(set(pts)) != len(pts):
        return None
    where = {p: i for i, p in enumerate(pts)}
    return _PacketIndex(pts=pts, keyframes=sorted(where[p] for p in key_pts), time_base=tb)


def _nonref_rule(codec: Any) -> Callable[[Any], bool] | None:
    """Which unplanned packets may be decoded with ``skip_frame=NONREF`` (FAST_SKIP_NONREF); None: none.

    H.264: all of them. HEVC: all when the stream declares one temporal sub-layer; with several,
    only those whose picture is in the highest one (a sub-layer non-reference picture there has
    no higher sub-layer to be referenced from). The count is read from the hvcC record (ISO/IEC
    14496-15: byte 21 = constantFrameRate(2) numTemporalLayers(3) temporalIdNested(1)
    lengthSizeMinusOne(2)); Annex B extradata (no hvcC) or a count of 0 (unknown): none.
    """
    if codec.name not in FAST_SKIP_NONREF:
        return None
    if codec.name != "hevc":
        return lambda _packet: True
    ed = codec.extradata or b""
    if len(ed) < 23 or ed[0] != 1:
        return None
    layers, size = (ed[21] >> 3) & 7, (ed[21] & 3) + 1
    if layers == 0:
        return None
    if layers == 1:
        return lambda _packet: True
    return lambda packet: _hevc_temporal_id(bytes(packet), size) == layers - 1


def _hevc_temporal_id(data: bytes, size: int) -> int | None:
    """TemporalId of the first picture (VCL) NAL unit of a length-prefixed HEVC packet, or None."""
    pos = 0
    while pos + size + 2 <= len(data):
        nal = pos + size
        if (data[nal] >> 1) & 63 < 32:  # nal_unit_type: 0-31 are VCL
            return (data[nal + 1] & 7) - 1  # nuh_temporal_id_plus1 - 1
        pos = nal + int.from_bytes(data[pos:nal], "big")
    return None


def _fast_workers() -> int:
    """Decoder threads for the fast path: one single-threaded decoder per available core (at most 16)."""
    env = env_value("decode_threads")
    if env:
        return max(1, int(env))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(16, cores))


def _segments(index: _PacketIndex, wanted: list[int], workers: int) -> list[tuple[int, list[int]]]:
    """Split the wanted frame indices into runs that each start at a keyframe.

    A run is decoded from its keyframe up to its last wanted frame; GOPs holding no wanted frame
    are skipped. Runs are balanced by the number of frames they decode, at most ``workers`` of
    them unless gaps force more.
    """
    keys = index.keyframes
    if not keys or keys[0] > min(wanted):
        return [(0, sorted(set(wanted)))]
    import bisect

    gops: dict[int, list[int]] = {}  # keyframe index -> wanted indices in its GOP
    for w in sorted(set(wanted)):
        gops.setdefault(keys[bisect.bisect_right(keys, w) - 1], []).append(w)
    starts = sorted(gops)
    rank = {k: r for r, k in enumerate(keys)}
    budget = sum(gops[k][-1] - k + 1 for k in starts) / max(1, workers)  # frames to decode per worker
    runs: list[tuple[int, list[int]]] = []
    run_start, run_wanted = starts[0], list(gops[starts[0]])
    for prev, k in itertools.pairwise(starts):
        contiguous = rank[k] == rank[prev] + 1  # no wanted-free GOP between them
        if contiguous and gops[k][-1] - run_start + 1 <= budget * 1.05:
            run_wanted += gops[k]
        else:
            runs.append((run_start, run_wanted))
            run_start, run_wanted = k, list(gops[k])
    runs.append((run_start, run_wanted))
    return runs


def _decode_run(
    path: str,
    stream_index: int | None,
    index: _PacketIndex | None,
    start: int,
    want: list[int],
    threads: int,
    on_frame: Callable[[int, Any], None],
) -> int:
    """Decode one run: seek to frame ``start`` (a keyframe), decode up to the last of ``want``.

    ``on_frame(idx, frame)`` is called once per wanted frame index, in decode order. Without a
    packet index (``index`` None) the run starts at frame 0 and numbers frames by counting.
    Returns how many pictures the decoder returned (wanted or not).
    """
    import av

    todo = set(want)
    by_pts = None if index is None else {index.pts[i]: i for i in todo}
    with av.open(path) as container:
        stream = _video_stream(container, stream_index)
        codec = stream.codec_context
        if threads > 1:
            stream.thread_type = "AUTO"
        else:
            codec.thread_count = 1
        # Skipping non-reference pictures needs the packet -> frame mapping (pts) and a decoder
        # that decodes each packet as it is sent (one thread); see FAST_SKIP_NONREF.
        skip = _nonref_rule(codec) if by_pts is not None and threads == 1 else None
        mode = codec.skip_frame
        drop = _Av1Drop(codec.extradata) if by_pts is not None and codec.name in FAST_DROP_AV1 else None
        if index is not None and start > 0:
            container.seek(index.pts[start], stream=stream, backward=True, any_frame=False)
        n = -1
        try:
            for packet in container.demux(stream):
                if drop is not None:
                    packet = drop.needed_part(packet, by_pts or {})
                    if packet is None:
                        continue  # never decoded: not counted
                if skip is not None:
                    planned = packet.pts is None or packet.pts in (by_pts or ())
                    want_mode = "NONREF" if not planned and skip(packet) else "DEFAULT"
                    if want_mode != mode:
                        codec.skip_frame = mode = want_mode
                for frame in codec.decode(packet):
                    n += 1
                    if by_pts is None:
                        idx = n
                    else:
                        found = by_pts.get(frame.pts) if frame.pts is not None else None
                        if found is None:
                            continue
                        idx = found
                    if idx in todo:
                        on_frame(idx, frame)
                        todo.discard(idx)
                if not todo:
                    break
        except av.error.FFmpegError as exc:
            raise _undecodable(f"the fast decoder failed after frame {n}: {_short(exc)}") from exc
    return n + 1


class _Av1Drop:
    """What of an AV1 packet a run decodes: all of it if planned, else only what a later frame
    references (FAST_DROP_AV1)."""

    def __init__(self, extradata: bytes | None) -> None:
        from marlin_demo.video import av1

        self._av1 = av1
        self.seq = av1.sequence_header_from_extradata(extradata)

    def needed_part(self, packet: Any, planned: dict[int, int]) -> Any | None:
        """The packet, None (nothing in it is needed), or a new packet holding its needed head."""
        if packet.size == 0:
            return packet
        data = bytes(packet)
        self.seq = self._av1.sequence_header_in(data) or self.seq  # a key frame may bring a new one
        if packet.pts is None or packet.pts in planned:
            return packet
        cut = self._av1.unreferenced_from(data, self.seq)
        if cut is None:
            return packet
        if cut == 0:
            return None
        import av

        head = av.Packet(data[:cut])  # the frames others reference; its shown frame is left out
        head.pts, head.dts, head.time_base = packet.pts, packet.dts, packet.time_base
        return head


def _index_for(path: str, stream_index: int | None, num_frames: int | None) -> _PacketIndex | None:
    """The packet index, or None when frames must be counted (no unique pts, or not torchcodec's count)."""
    index = _packet_index(path, stream_index)
    if index is not None and num_frames is not None and len(index.pts) != num_frames:
        return None  # the packets do not match torchcodec's count: count decoded frames instead
    return index


def _decode_fast(
    path: str, plan: SamplingPlan, stream_index: int | None, num_frames: int | None = None
) -> tuple[torch.Tensor, list[float], int]:
    """Decode the planned frames with one single-threaded decoder per core, converting only those frames.

    The clip is split at keyframes into runs (``_segments``) decoded in parallel threads (PyAV
    releases the GIL while decoding and scaling). A single-threaded decoder spends ~20-30% less
    CPU than FFmpeg's frame threading, and the runs use every core. Frames are identified by
    their pts against the packet index, which is how torchcodec's exact mode numbers them;
    files whose packets lack unique pts fall back to one sequential decode that counts frames
    like ``_decode_pyav``. Each planned frame is converted to RGB at its stored size (exactly the
    reference's conversion) and scaled to the plan's size by swscale, then rotated upright (as
    torchcodec rotates).
    H.264 and HEVC pictures that nothing references (e.g. most B-frames) and AV1 temporal units
    that refresh no reference slot are not decoded unless planned: see ``FAST_SKIP_NONREF`` and
    ``FAST_DROP_AV1``.
    Returns the frames, their pts in seconds and how many pictures were decoded.
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import torch

    index = _index_for(path, stream_index, num_frames)
    positions = _positions(plan.indices)
    out: list[Any] = [None] * len(plan.indices)
    times: list[float] = [float("nan")] * len(plan.indices)
    decoded = [0]  # pictures the decoders returned (wanted or not), summed over the runs
    lock = threading.Lock()

    def run(start: int, want: list[int], threads: int) -> None:
        converter = _FastConverter(plan)  # one per run: swscale contexts are per thread

        def keep(idx: int, frame: Any) -> None:
            small = converter(frame, idx)
            t = float(frame.time) if frame.time is not None else float("nan")
            with lock:
                for pos in positions[idx]:
                    out[pos] = small
                    times[pos] = t

        count = _decode_run(path, stream_index, index, start, want, threads, keep)
        with lock:
            decoded[0] += count

    wanted = sorted(positions)
    workers = _fast_workers()
    if index is None:
        run(0, wanted, threads=workers)  # one decoder, frame-threaded, counting frames
    else:
        runs = _segments(index, wanted, workers)
        if len(runs) == 1 or workers == 1:
            for start, want in runs:
                run(start, want, threads=1)
        else:
            with ThreadPoolExecutor(max_workers=min(workers, len(runs)), thread_name_prefix="decode") as pool:
                for fut in [pool.submit(run, start, want, 1) for start, want in runs]:
                    fut.result()
    _check_complete(plan.indices, out)
    return torch.stack(out), times, decoded[0]


class _FastConverter:
    """One planned frame -> uint8 CHW RGB at the plan's size (cached swscale contexts per thread)."""

    def __init__(self, plan: SamplingPlan) -> None:
        from av.video.reformatter import Interpolation, VideoReformatter

        self.plan = plan
        self.interpolation = Interpolation[FAST_SCALER]
        self.to_planar, self.to_packed, self.to_small = (
            VideoReformatter(),
            VideoReformatter(),
            VideoReformatter(),
        )

    def _full_size_rgb(self, frame: Any) -> Any:
        """The frame in RGB at its stored size: planar when that is exactly the packed RGB the
        reference converts to (checked once per pixel format and size), else packed rgb24.

        The planar route is ~1.3 ms a 1080p frame cheaper, but PyAV's bundled swscale gets it
        wrong in places: 4:2:0 and 4:2:2 frames whose width is 1-8 past a multiple of 16 (854,
        1080, 1366...) came out with their last columns black, and NV12 and 4:4:0 round
        differently. Both routes then scale with the same bicubic scaler into planar RGB.
        """
        key = (frame.format.name, frame.width, frame.height)
        exact = _PLANAR_EXACT.get(key)
        if exact is None:
            import numpy as np

            planar = self.to_planar.reformat(frame, format=FAST_PLANAR, threads=1)
            packed = self.to_packed.reformat(frame, format="rgb24", threads=1)
            exact = _PLANAR_EXACT[key] = bool(np.array_equal(planar.to_ndarray(), packed.to_ndarray()))
            return planar if exact else packed
        if exact:
            return self.to_planar.reformat(frame, format=FAST_PLANAR, threads=1)
        return self.to_packed.reformat(frame, format="rgb24", threads=1)

    def __call__(self, frame: Any, idx: int) -> torch.Tensor:
        plan = self.plan
        k = _rotation_k(frame)
        src = (frame.height, frame.width) if k % 2 else (frame.width, frame.height)
        if plan.source_height and src != (plan.source_width, plan.source_height):
            want = f"{plan.source_width}x{plan.source_height}"
            raise RuntimeError(f"frame {idx} is {src[0]}x{src[1]}, the plan expected {want}")
        # scale in the stored orientation, then rotate the small frame upright
        w, h = (plan.height, plan.width) if k % 2 else (plan.width, plan.height)
        small = self.to_small.reformat(
            self._full_size_rgb(frame),
            width=w,
            height=h,
            format=FAST_PLANAR,
            interpolation=self.interpolation,
            threads=1,
        )
        # PyAV returns planar gbrp as (h, w, 3) in R, G, B order
        return _upright_chw(small.to_ndarray(), k)


#: (pixel format, width, height) -> whether swscale's YUV -> planar RGB equals its YUV -> rgb24
#: there (``_FastConverter._full_size_rgb``); filled on first use, per process
_PLANAR_EXACT: dict[tuple[str, int, int], bool] = {}


def frame_pts(path: str | os.PathLike[str], stream_index: int | None = None) -> list[float]:
    """Every frame's presentation time (s) in presentation order, from the packets alone (no decoding).

    This is how torchcodec's exact mode numbers frames (scan the packets, sort by pts), so
    ``frame_pts(path)[i]`` is the time of the frame torchcodec returns for index ``i``: the
    benchmark and the tests use it to check that the fast path returned the same frames.
    """
    import av

    times: list[float] = []
    with av.open(str(path)) as container:
        stream = _video_stream(container, stream_index)
        tb = float(stream.time_base)
        for packet in _shown_packets(container, stream):
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is not None:
                times.append(ts * tb)
    return sorted(times)


def fast_supported(info: VideoInfo) -> bool:
    """True when the fast path reproduces the reference's RGB conversion: 8-bit, progressive sources.

    Interlaced frames (fields woven into one picture) are converted to RGB differently by PyAV's
    bundled FFmpeg and torchcodec's (2.3 levels on average, up to 224, at full size), so they
    keep the reference decode, like sources above 8 bits.
    """
    return not (info.bit_depth and info.bit_depth > FAST_MAX_BIT_DEPTH) and not info.interlaced


def pick_backend(info: VideoInfo, plan: SamplingPlan) -> Backend:
    """The engine's default choice (``auto``): the faster path whenever both give the same plan and frames.

    Both paths always give the same plan (indices, size, tokens, metadata) and the same source
    frames; the fast one is measured faster on every 8-bit source (docs/VIDEO_PREP.md: 1.3-2.7x
    on H.264, HEVC, VP9 and AV1 from 360p to 1080p, 30 and 60 fps), so ``"fast"`` for those;
    ``"reference"`` above 8 bits and for interlaced sources (the fast path would decode them the
    reference's way anyway, ``fast_supported``) and for codecs in ``AUTO_REFERENCE_CODECS``.
    ``plan`` is part of the signature so a size-dependent rule can come back without changing
    callers.
    """
    del plan  # the measured rule does not depend on the plan's size
    if fast_supported(info) and info.codec not in AUTO_REFERENCE_CODECS:
        return "fast"
    return "reference"
