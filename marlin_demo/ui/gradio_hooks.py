"""The one module that reaches into Gradio's internals: one patch, one header read, and why.

1. **No download of a URL a caller names** (the patch). Before any event's function runs, Gradio
   moves each file it was sent into its cache (``Blocks.preprocess_data`` ->
   ``processing_utils.async_move_files_to_cache`` -> ``Block.async_move_resource_to_block_cache``),
   and there it downloads a file whose path is an http(s) URL (guarded against private addresses,
   so any public host). That happens before a validator or the endpoint sees the value, and no public
   setting turns it off. :func:`refuse_url_downloads` replaces that method on every component of the
   app with one that refuses a URL with :data:`NO_URLS` and moves anything else as Gradio does.
2. **MCP calls told apart** (read, nothing patched). Gradio's MCP bridge writes a tool's dict result
   as Python's repr; the endpoints answer it JSON text instead. The bridge calls the endpoint through
   its own client, which sends the header ``x-gradio-user: mcp`` (:func:`from_mcp`).

``tests/test_hardening.py`` has a test for each that fails naming it when Gradio changes under it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
from gradio.blocks import Block

NO_URLS = "Upload the video file itself: the server does not download URLs."

MCP_USER_HEADER = ("x-gradio-user", "mcp")
"""What Gradio's MCP bridge sends with each tool call it makes through its client (gradio/mcp.py)."""


def refuse_url_downloads(demo: gr.Blocks) -> int:
    """Every component of ``demo`` refuses a file given as a URL where Gradio would download it; the
    number of components so adjusted."""
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


def from_mcp(request: Any) -> bool:
    """The call came through Gradio's MCP bridge."""
    headers = getattr(request, "headers", None) or {}
    name, value = MCP_USER_HEADER
    return bool(headers.get(name) == value)
