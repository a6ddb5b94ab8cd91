"""Where the app reaches into a loaded Gradio's internals, and why (before it loads: ``gradio_stubs``).

1. Gradio downloads a file sent as an http(s) URL into its cache before any validator or endpoint sees it
   (``Block.async_move_resource_to_block_cache``), with no setting to turn it off:
   :func:`refuse_url_downloads` patches that method on every component to refuse a URL (:data:`NO_URLS`).
2. Gradio's MCP bridge writes a dict result as Python's repr, so the endpoints answer it JSON text; it
   calls through its own client, which sends ``x-gradio-user: mcp`` (:func:`from_mcp`).
3. Gradio's queue looks for new work every millisecond while it has none (``Queue.sleep_when_free``
   on Linux, 50 ms on Windows), about a tenth of a core on an idle server, taken from the model on a
   2-vCPU machine: :func:`quiet_queue` sets the Windows pace (a queued call starts up to that much later).
4. ``gr.Video`` runs ``ffprobe`` on a video each time it shows it (``processing_utils.video_is_playable``):
   72 probes of the 12 example clips, 11 of the app's 15 s start on a 2-core machine.
   :func:`remember_playable` answers a file it has probed, unchanged since, from memory.

``tests/test_hardening.py`` fails naming each when Gradio changes under it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import gradio as gr
from gradio import processing_utils
from gradio.blocks import Block

NO_URLS = "Upload the video file itself: the server does not download URLs."

MCP_USER_HEADER = ("x-gradio-user", "mcp")
"""What Gradio's MCP bridge sends with each tool call it makes through its client (gradio/mcp.py)."""


def refuse_url_downloads(demo: gr.Blocks) -> int:
    """Every component of ``demo`` refuses a URL Gradio would download; how many were adjusted."""
    adjusted = 0
    for block in demo.blocks.values():
        if isinstance(block, Block) and not getattr(block, "_marlin_refuses_urls", False):
            _refuse_urls(block)
            adjusted += 1
    return adjusted


def _refuse_urls(block: Block) -> None:
    plain_move = block.async_move_resource_to_block_cache

    async def move_refusing_urls(url_or_file_path: str | Path | None) -> str | None:
        if url_or_file_path is not None and str(url_or_file_path).startswith(("http://", "https://")):
            raise gr.Error(NO_URLS, title="", print_exception=False)
        return await plain_move(url_or_file_path)

    block.async_move_resource_to_block_cache = move_refusing_urls  # type: ignore[method-assign]
    block._marlin_refuses_urls = True  # type: ignore[attr-defined]


#: How often an idle queue looks for work, and how often a busy one sends progress (Gradio's Windows pace).
QUEUE_IDLE_POLL_S = 0.05
QUEUE_PROGRESS_POLL_S = 0.1


def quiet_queue(demo: gr.Blocks) -> None:
    """The queue ``demo.queue()`` made polls at :data:`QUEUE_IDLE_POLL_S` (its pace is read per wait)."""
    queue = demo._queue
    for name, seconds in (
        ("sleep_when_free", QUEUE_IDLE_POLL_S),
        ("progress_update_sleep_when_free", QUEUE_PROGRESS_POLL_S),
    ):
        if not isinstance(getattr(queue, name, None), float):
            raise RuntimeError(f"gradio's Queue has no {name} any more: see marlin_demo/ui/gradio_hooks.py")
        setattr(queue, name, max(getattr(queue, name), seconds))


def remember_playable() -> None:
    """``video_is_playable`` probes a file once per (path, size, modification time) in this process."""
    probe = processing_utils.video_is_playable
    if getattr(probe, "_marlin_remembers", False):
        return

    @functools.lru_cache(maxsize=1024)
    def probed(path: str, size: int, mtime_ns: int) -> bool:
        return bool(probe(path))

    def remembered(video_filepath: str) -> bool:
        try:
            st = os.stat(video_filepath)
        except OSError:  # not a local file: Gradio's own answer
            return bool(probe(video_filepath))
        return probed(str(video_filepath), st.st_size, st.st_mtime_ns)

    remembered._marlin_remembers = True  # type: ignore[attr-defined]
    processing_utils.video_is_playable = remembered


def from_mcp(request: Any) -> bool:
    """The call came through Gradio's MCP bridge."""
    headers = getattr(request, "headers", None) or {}
    name, value = MCP_USER_HEADER
    return bool(headers.get(name) == value)
