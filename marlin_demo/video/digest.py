"""Content hashes of files and frames: the one way the project names a video by its content (the engine's
video and prefix caches, the Compare tab matching an upload to an example clip)."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any


def file_digest(path: str | Path) -> str:
    """The file's sha256 (hex), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@lru_cache(maxsize=256)
def _stamped_digest(path: str, *stamp: int) -> str:
    del stamp  # part of the cache key only: a changed (or replaced) file is hashed again
    return file_digest(path)


def cached_file_digest(path: str | Path) -> str:
    """``file_digest``, remembered per (path, size, mtime, inode): a repeat does not read the file again."""
    p = Path(path)
    st = p.stat()
    return _stamped_digest(str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def frames_digest(frames: Any, metadata: dict[str, Any]) -> str:
    """A content key for decoded frames (a uint8 tensor) and their metadata: hashes the pixels once."""
    h = hashlib.sha256()
    frames = frames.detach().to("cpu").contiguous()
    h.update(repr((tuple(frames.shape), str(frames.dtype), sorted(metadata.items()))).encode())
    h.update(frames.numpy().tobytes())
    return "frames:" + h.hexdigest()
