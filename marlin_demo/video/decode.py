"""Reference decode: the planned frames as torchcodec (or PyAV) gives them, resized like qwen-vl-utils."""

from __future__ import annotations

import contextlib
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marlin_demo.video.info import VideoInfo, _short, _torchcodec_decoder, _undecodable
from marlin_demo.video.sampling import SamplingPlan

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch


@dataclass
class PreparedVideo:
    """Frames for the processor: uint8 (T, C, H, W) RGB at the plan's size, qwen-vl-utils' values;
    ``metadata`` is its dict, to pass as ``video_metadata`` so the ``<t seconds>`` stamps are right."""

    frames: torch.Tensor
    metadata: dict[str, Any]
    plan: SamplingPlan
    info: VideoInfo
    decode_s: float = 0.0
    backend: str = field(default="")
    #: presentation time (s) of each returned frame, when the decoder reported it (the fast path does)
    frame_pts: list[float] | None = None
    #: content key the engine's caches use ("" until the engine sets or computes it)
    digest: str = ""
    #: pictures the fast path decoded (planned or not); None on the reference paths
    frames_decoded: int | None = None

    def __post_init__(self) -> None:
        if not self.backend:
            self.backend = str(self.metadata.get("video_backend", ""))


@contextlib.contextmanager
def _open_stream(
    path: str, stream_index: int | None, threaded: bool | None = None
) -> Iterator[tuple[Any, Any]]:
    """PyAV's container and the stream ``probe`` chose (by index), else the best, else the first one;
    ``threaded``: FFmpeg's own threading (True), one thread (False), or demux only (None)."""
    import av

    with av.open(path) as container:
        stream: Any = next((s for s in container.streams.video if s.index == stream_index), None)
        if stream is None:
            stream = container.streams.best("video") or container.streams.video[0]
        if threaded:
            stream.thread_type = "AUTO"
        elif threaded is not None:
            stream.codec_context.thread_count = 1
        yield container, stream


def _rotation_k(frame: Any) -> int:
    """Quarter turns (counter-clockwise) that make a decoded frame upright, from its display rotation."""
    return (round(float(getattr(frame, "rotation", 0) or 0)) // 90) % 4


def _upright_chw(rgb: Any, k: int) -> torch.Tensor:
    """An (h, w, 3) uint8 array rotated by ``k`` quarter turns, as a (3, h, w) tensor."""
    import numpy as np
    import torch

    if k:
        rgb = np.rot90(rgb, k=k, axes=(0, 1))
    return torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)


def _needs(index_lists: Sequence[list[int]]) -> dict[int, list[tuple[int, int]]]:
    """Frame index -> the (list, position) pairs that hold it (a plan may repeat an index)."""
    need: dict[int, list[tuple[int, int]]] = {}
    for w, indices in enumerate(index_lists):
        for pos, idx in enumerate(indices):
            need.setdefault(idx, []).append((w, pos))
    return need


def _metadata(plan: SamplingPlan, backend: str) -> dict[str, Any]:
    """The metadata dict qwen-vl-utils returns for ``plan``, plus the decoder that made the frames."""
    return {
        "fps": plan.source_fps,
        "frames_indices": list(plan.indices),
        "total_num_frames": plan.total_frames,
        "video_backend": backend,
    }


def _check_complete(indices: list[int], out: list[Any]) -> None:
    """Raise the "truncated" error when a planned frame was never decoded."""
    missing = [indices[i] for i, t in enumerate(out) if t is None]
    if missing:
        raise _undecodable(f"frames {missing[:3]} could not be read, the file may be truncated")


def _decode_torchcodec(path: str, indices: list[int]) -> torch.Tensor:
    return _torchcodec_decoder(path).get_frames_at(indices=indices).data


def _scan_frames(path: str, stream_index: int | None, wanted: Container[int]) -> Iterator[tuple[int, Any]]:
    """Every frame's index in order (frame-threaded PyAV), with its upright CHW tensor if ``wanted``."""
    with _open_stream(path, stream_index, threaded=True) as (container, stream):
        for n, frame in enumerate(container.decode(stream)):
            chw = _upright_chw(frame.to_ndarray(format="rgb24"), _rotation_k(frame)) if n in wanted else None
            yield n, chw


def _decode_pyav(path: str, indices: list[int], stream_index: int | None) -> torch.Tensor:
    """The fallback: decode frames by presentation index with PyAV (sequential), rotated like torchcodec."""
    import av
    import torch

    wanted = _needs([indices])
    out: list[Any] = [None] * len(indices)
    n, last = -1, max(indices)
    try:
        for n, tensor in _scan_frames(path, stream_index, wanted):
            for _, pos in wanted.get(n, ()):
                out[pos] = tensor
            if n >= last:
                break
    except av.error.FFmpegError as exc:
        raise _undecodable(f"PyAV failed after frame {n}: {_short(exc)}") from exc
    _check_complete(indices, out)
    return torch.stack(out)


def _resize(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """qwen-vl-utils' resize: on the uint8 tensor, bicubic with antialias (output stays uint8)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F

    return F.resize(frames, [height, width], interpolation=InterpolationMode.BICUBIC, antialias=True)
