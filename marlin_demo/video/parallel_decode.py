"""Fast decode (docs/SPEED.md): same plan, keyframe runs decoded in parallel, planned frames scaled."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marlin_demo.settings import env_value
from marlin_demo.video import av1
from marlin_demo.video.decode import _check_complete, _needs, _open_stream, _rotation_k, _upright_chw
from marlin_demo.video.info import Backend, VideoInfo, _packet_times, _short, _shown_packets, _undecodable
from marlin_demo.video.sampling import SamplingPlan

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch


# YUV -> RGB at the stored size (the reference's bits), then swscale's bicubic to the plan's size: 0.02-0.2
# levels off on average (docs/SPEED.md); scaling straight from YUV saves ~2 ms a frame but is ~1.3 off.
FAST_PLANAR = "gbrp"
FAST_SCALER = "BICUBIC"
#: above this many bits PyAV's bundled FFmpeg converts to RGB differently (~2.7 levels on 10-bit)
FAST_MAX_BIT_DEPTH = 8
#: codecs whose unplanned non-reference pictures get ``skip_frame=NONREF`` (``_nonref_rule``;
#: docs/VIDEO_PREP.md). Not VP9: libvpx's encodes have none to skip (measured, 0 of 180).
FAST_SKIP_NONREF = frozenset({"h264", "hevc"})
#: AV1 decoders fed no unplanned unit refreshing no slot (``video.av1``): libdav1d reads skip_frame once
FAST_DROP_AV1 = frozenset({"libdav1d"})
#: codecs ``auto`` leaves to the reference decoder (none measured slower: docs/VIDEO_PREP.md)
AUTO_REFERENCE_CODECS: frozenset[str] = frozenset()


@dataclass
class _PacketIndex:
    """The packets of one stream, as torchcodec's exact mode numbers frames (sorted by pts)."""

    pts: list[int]  # presentation order: frame index i has pts[i] (stream time base)
    keyframes: list[int]  # frame indices whose packet is flagged as a keyframe, ascending


def _packet_index(path: str, stream_index: int | None) -> _PacketIndex | None:
    """Scan packets (demux only). None when pts are missing or repeated: then frames are counted."""
    pts: list[int] = []
    key_pts: list[int] = []
    with _open_stream(path, stream_index) as (container, stream):
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
    return _PacketIndex(pts=pts, keyframes=sorted(where[p] for p in key_pts))


def _nonref_rule(codec: Any) -> Callable[[Any], bool] | None:
    """Which unplanned packets may be decoded with ``skip_frame=NONREF`` (None: none); HEVC: only the
    highest temporal sub-layer's, its count from hvcC byte 21 (docs/VIDEO_PREP.md)."""
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
    """Split the wanted frame indices into keyframe-started runs balanced by frames decoded."""
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
    """Decode keyframe ``start`` to the last of ``want``: pictures decoded (no index: counted from 0)."""
    import av

    todo = set(want)
    by_pts = None if index is None else {index.pts[i]: i for i in todo}
    with _open_stream(path, stream_index, threaded=threads > 1) as (container, stream):
        codec = stream.codec_context
        # the skip needs pts -> frame and a decoder that decodes each packet as it is sent
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
                    idx = n if by_pts is None else by_pts.get(frame.pts, -1)  # -1: not a planned frame
                    if idx in todo:
                        on_frame(idx, frame)
                        todo.discard(idx)
                if not todo:
                    break
        except av.error.FFmpegError as exc:
            raise _undecodable(f"the fast decoder failed after frame {n}: {_short(exc)}") from exc
    return n + 1


class _Av1Drop:
    """What of an AV1 packet a run decodes: all if planned, else what later frames reference."""

    def __init__(self, extradata: bytes | None) -> None:
        self.seq = av1.sequence_header_from_extradata(extradata)

    def needed_part(self, packet: Any, planned: dict[int, int]) -> Any | None:
        """The packet, None (nothing in it is needed), or a new packet holding its needed head."""
        if packet.size == 0:
            return packet
        data = bytes(packet)
        self.seq = av1.sequence_header_in(data) or self.seq  # a key frame may bring a new one
        if packet.pts is None or packet.pts in planned:
            return packet
        cut = av1.unreferenced_from(data, self.seq)
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
    return None if index is not None and num_frames is not None and len(index.pts) != num_frames else index


class _Collected:
    """Planned frames of several plans, converted once per size, stored at every (plan, position)."""

    def __init__(self, plans: Sequence[SamplingPlan], index_lists: Sequence[list[int]]) -> None:
        self.plans, self.need = plans, _needs(index_lists)
        self.frames: list[list[Any]] = [[None] * len(ix) for ix in index_lists]
        self.times: list[list[float]] = [[float("nan")] * len(ix) for ix in index_lists]
        self.lock = threading.Lock()

    def keeper(self) -> Callable[[int, Any], None]:
        """One run's ``on_frame`` (``_decode_run``), with its own converters: swscale's are per thread."""
        converters: dict[tuple[int, int], _FastConverter] = {}

        def keep(idx: int, frame: Any) -> None:
            t = float(frame.time) if frame.time is not None else float("nan")
            small: dict[tuple[int, int], Any] = {}
            for w, pos in self.need[idx]:
                p = self.plans[w]
                size = (p.height, p.width)
                if size not in small:
                    if size not in converters:
                        converters[size] = _FastConverter(p)
                    small[size] = converters[size](frame, idx)
                with self.lock:
                    self.frames[w][pos] = small[size]
                    self.times[w][pos] = t

        return keep


def _decode_fast(
    path: str, plan: SamplingPlan, stream_index: int | None, num_frames: int | None = None
) -> tuple[torch.Tensor, list[float], int]:
    """The planned frames, their pts (s) and the pictures decoded: one single-threaded decoder per core
    spends less CPU than FFmpeg's frame threading (docs/SPEED.md, section 1)."""
    import torch

    index = _index_for(path, stream_index, num_frames)
    got = _Collected([plan], [plan.indices])
    wanted = sorted(got.need)
    workers = _fast_workers()
    if index is None:  # one decoder, frame-threaded, counting frames
        decoded = _decode_run(path, stream_index, None, 0, wanted, workers, got.keeper())
    else:
        runs = _segments(index, wanted, workers)
        with ThreadPoolExecutor(max_workers=min(workers, len(runs)), thread_name_prefix="decode") as pool:
            futures = [
                pool.submit(_decode_run, path, stream_index, index, *run, 1, got.keeper()) for run in runs
            ]
            decoded = sum(fut.result() for fut in futures)
    _check_complete(plan.indices, got.frames[0])
    return torch.stack(got.frames[0]), got.times[0], decoded


class _FastConverter:
    """One planned frame -> uint8 CHW RGB at the plan's size (cached swscale contexts per thread)."""

    def __init__(self, plan: SamplingPlan) -> None:
        from av.video.reformatter import Interpolation, VideoReformatter

        self.plan = plan
        self.interpolation = Interpolation[FAST_SCALER]
        self.to_planar, self.to_packed, self.to_small = (VideoReformatter() for _ in range(3))

    def _full_size_rgb(self, frame: Any) -> Any:
        """The frame in RGB at its stored size: planar (cheaper) where that equals packed rgb24, else packed:
        swscale's planar blackens the last columns of some widths (854...) and rounds NV12 differently."""
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


#: (pixel format, width, height) -> whether swscale's planar RGB equals its rgb24 there (filled per process)
_PLANAR_EXACT: dict[tuple[str, int, int], bool] = {}


def frame_pts(path: str | os.PathLike[str], stream_index: int | None = None) -> list[float]:
    """Every frame's time (s) as torchcodec's exact mode numbers them, from the packets alone."""
    with _open_stream(str(path), stream_index) as (container, stream):
        return sorted(start for start, _ in _packet_times(container, stream))


def fast_supported(info: VideoInfo) -> bool:
    """True for 8-bit progressive sources: interlaced ones convert to RGB differently (2.3 levels)."""
    return not (info.bit_depth and info.bit_depth > FAST_MAX_BIT_DEPTH) and not info.interlaced


def pick_backend(info: VideoInfo, plan: SamplingPlan) -> Backend:
    """``auto``'s choice: fast wherever supported, measured faster on every 8-bit source; ``plan`` stays
    in the signature so a size-dependent rule can come back without changing callers."""
    del plan  # the measured rule does not depend on the plan's size
    return "fast" if fast_supported(info) and info.codec not in AUTO_REFERENCE_CODECS else "reference"
