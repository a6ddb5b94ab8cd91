"""The engine's video store: each file decoded once per content (sha256, sampling parameters, backend), so
a renamed copy reuses its frames and an edited file is decoded again."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from marlin_demo.model_io import VideoParams
from marlin_demo.results import VideoInfo
from marlin_demo.video import (
    Backend,
    Limits,
    PreparedVideo,
    VideoError,
    check_duration,
    plan_sampling,
    sample,
    validate,
)
from marlin_demo.video.digest import cached_file_digest, frames_digest
from marlin_demo.video.windows import WindowPlan, decode_windows


class VideoStore:
    """Bounded caches of digests, probes, decoded clips and decoded window sets."""

    def __init__(self, params: VideoParams, backend: Backend, size: int, limits: Limits) -> None:
        self.params = params
        self.backend = backend
        self.size = size
        self.limits = limits
        self.lock = threading.Lock()
        self._videos: OrderedDict[tuple[str, str, str], PreparedVideo] = OrderedDict()
        self._infos: OrderedDict[tuple[str, str], VideoInfo] = OrderedDict()
        self._window_sets: OrderedDict[tuple[Any, ...], list[PreparedVideo]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._videos)

    def digest(self, path: Path) -> str:
        """``cached_file_digest``; a file that cannot be read (permission denied) is said as a VideoError."""
        try:
            return cached_file_digest(path)
        except OSError:
            validate(path, self.limits)
            raise

    def info(self, path: Path, *, whole: bool = True) -> VideoInfo:
        """The validated facts of a file, once per (content, path); ``whole=False``: no duration check."""
        key = (self.digest(path), str(path.resolve()))
        with self.lock:
            known = self._infos.get(key)
        if known is None:
            known = validate(path, dataclasses.replace(self.limits, max_duration_s=math.inf))
            with self.lock:
                self._infos[key] = known
                _bound(self._infos, 64)
        if whole:
            check_duration(known, self.limits)
        return known

    def prepare(self, video: str | Path | PreparedVideo) -> tuple[PreparedVideo, bool]:
        """The clip's frames and whether they came from the cache (nothing decoded in this call)."""
        if isinstance(video, PreparedVideo):  # frames made elsewhere (the GPU check's synthetic clip)
            if not video.digest:
                video.digest = frames_digest(video.frames, video.metadata)
            return video, True
        path = Path(video)
        if not path.exists():
            raise VideoError(f"No file at {path.name}: upload a video file.")
        if not path.is_file() or path.stat().st_size / 1e6 > self.limits.max_file_mb:
            validate(path, self.limits)  # the user-facing message (not a file, too large), before hashing
        key = (self.digest(path), repr(self.params), self.backend)
        with self.lock:
            hit = self._videos.get(key)
            if hit is not None:  # validated when it was first prepared, under the same limits
                self._videos.move_to_end(key)
                return hit, True
        info = validate(path, self.limits)
        prepared = sample(path, plan_sampling(info, self.params), backend=self.backend, info=info)
        prepared.digest = "|".join(key)
        with self.lock:
            self._videos[key] = prepared
            _bound(self._videos, self.size)
        return prepared, False

    def kept(self, path: Path) -> tuple[str, bool]:
        """The digest the whole clip's frames go by (its prefix states' key) and whether they are kept."""
        key = (self.digest(path), repr(self.params), self.backend)
        with self.lock:
            return "|".join(key), key in self._videos

    def windows(
        self, path: Path, plans: list[WindowPlan]
    ) -> Iterator[tuple[WindowPlan, PreparedVideo, bool]]:
        """(plan, frames, from the cache?) per window; a miss decodes all windows in one scan of the file.
        Each window's digest names the window, so the prefix cache keeps one state per window."""
        base = f"{self.digest(path)}|{self.params!r}|windows|{self.backend}"
        key = (base, tuple((wp.window.start, wp.window.end) for wp in plans))
        with self.lock:
            hit = self._window_sets.get(key)
            if hit is not None:
                self._window_sets.move_to_end(key)
        if hit is not None:
            for wp, pv in zip(plans, hit, strict=True):
                yield wp, pv, True
            return
        got: list[PreparedVideo] = []
        t0 = time.perf_counter()
        for wp, pv, _ in decode_windows(str(path), plans, backend=self.backend):
            pv.digest = f"{base}|{wp.window.start:g}-{wp.window.end:g}"
            pv.decode_s = time.perf_counter() - t0
            got.append(pv)
            yield wp, pv, False
            t0 = time.perf_counter()
        with self.lock:
            self._window_sets[key] = got
            _bound(self._window_sets, self.size)


def _bound(cache: OrderedDict[Any, Any], size: int) -> None:
    """Drop the oldest entries past ``size`` (least recently stored or used first)."""
    while len(cache) > size:
        cache.popitem(last=False)
