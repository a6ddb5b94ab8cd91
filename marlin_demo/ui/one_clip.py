"""One clip for every tab: a video given to one tab (upload or example) is given to the others too.

A visitor who captioned a clip and opens Find or Compare finds it already there. Each tab keeps
its own video component (its events, credit line and suggestions hang on it); this module only
copies the value across. A copy changes the other components, whose own change events then see
the same file everywhere and stop (no ping-pong).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gradio as gr

from marlin_demo.ui.common import PRIVATE_UI, same_file


def spread(
    source: int, values: Sequence[str | None], accept: Callable[[str], bool] = lambda clip: True
) -> list[Any]:
    """The updates for every video: the source's clip wherever another clip (or none) is shown.

    A clip the app refuses (``accept`` is False) stays in its own tab: given to another, Gradio would
    convert it (a PNG named ``.mp4`` becomes a 0 s H.264 clip) and that copy would come back as a
    "Ready" clip, hiding the refusal of the original.
    """
    clip = values[source]
    if not clip or not accept(clip):  # a cleared video clears only its own tab
        return [gr.skip() for _ in values]
    return [gr.skip() if i == source or same_file(clip, v) else clip for i, v in enumerate(values)]


def follow(videos: Sequence[gr.Video], accept: Callable[[str], bool] = lambda clip: True) -> None:
    """Wire ``videos`` (one per tab) so that the clip given to any of them (and ``accept``ed) is
    given to all."""
    videos = list(videos)
    for i, video in enumerate(videos):
        video.change(functools.partial(_copy, i, accept), videos, videos, **PRIVATE_UI)


def _copy(source: int, accept: Callable[[str], bool], *values: str | None) -> list[Any]:
    return spread(source, values, accept)
