"""One clip for every tab: a video given to one tab (upload or example) is given to the others too.

A visitor who captioned a clip and opens Find or Compare finds it already there. Each tab keeps
its own video component (its events, credit line and suggestions hang on it); this module only
copies the value across. A copy changes the other components, whose own change events then see
the same file everywhere and stop (no ping-pong).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import gradio as gr

from marlin_demo.ui.common import PRIVATE_UI


def _same_file(a: str | None, b: str | None) -> bool:
    """The same clip, whatever folder Gradio copied it to (name and size; no hashing on each change)."""
    if not a or not b:
        return False
    if a == b:
        return True
    try:
        return os.path.basename(a) == os.path.basename(b) and os.path.getsize(a) == os.path.getsize(b)
    except OSError:
        return False


def spread(source: int, values: Sequence[str | None]) -> list[Any]:
    """The updates for every video: the source's clip wherever another clip (or none) is shown."""
    clip = values[source]
    if not clip:  # a cleared video clears only its own tab
        return [gr.skip() for _ in values]
    return [gr.skip() if i == source or _same_file(clip, v) else clip for i, v in enumerate(values)]


def follow(videos: Sequence[gr.Video]) -> None:
    """Wire ``videos`` (one per tab) so that the clip given to any of them is given to all."""
    videos = list(videos)
    for i, video in enumerate(videos):
        video.change(functools.partial(_copy, i), videos, videos, **PRIVATE_UI)


def _copy(source: int, *values: str | None) -> list[Any]:
    return spread(source, values)
