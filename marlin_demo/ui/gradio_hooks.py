"""The one module that reaches into Gradio's internals, each reach tested in ``tests/test_hardening.py``."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gradio as gr
    from gradio.blocks import Block

NO_URLS = "Upload the video file itself: the server does not download URLs."

MCP_USER_HEADER = ("x-gradio-user", "mcp")
"""What Gradio's MCP bridge sends with each tool call it makes through its client (gradio/mcp.py)."""


def refuse_url_downloads(demo: gr.Blocks) -> int:
    """Every component refuses a URL: Gradio downloads one before any validator sees it. How many."""
    from gradio.blocks import Block

    adjusted = 0
    for block in demo.blocks.values():
        if isinstance(block, Block) and not getattr(block, "_marlin_refuses_urls", False):
            _refuse_urls(block)
            adjusted += 1
    return adjusted


def _refuse_urls(block: Block) -> None:
    import gradio as gr

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
    """The queue polls at :data:`QUEUE_IDLE_POLL_S`: Gradio's 1 ms on Linux took a tenth of a core."""
    queue = demo._queue
    for name, seconds in (
        ("sleep_when_free", QUEUE_IDLE_POLL_S),
        ("progress_update_sleep_when_free", QUEUE_PROGRESS_POLL_S),
    ):
        if not isinstance(getattr(queue, name, None), float):
            raise RuntimeError(f"gradio's Queue has no {name} any more: see marlin_demo/ui/gradio_hooks.py")
        setattr(queue, name, max(getattr(queue, name), seconds))


def remember_playable() -> None:
    """``video_is_playable`` (an ``ffprobe``: 11 s of a 15 s start) once per (path, size, mtime)."""
    from gradio import processing_utils

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
    """The call came through Gradio's MCP bridge (answer JSON text: it would write a dict as a repr)."""
    headers = getattr(request, "headers", None) or {}
    name, value = MCP_USER_HEADER
    return bool(headers.get(name) == value)


#: the module and the step :func:`skip_stub_rewrite` replaces
MODULE = "gradio.component_meta"
STEP = "create_or_modify_pyi"


def skipped_stub_rewrite(*args: Any, **kwargs: Any) -> None:
    """Stands in for Gradio's stub rewrite: the installed stubs are kept as shipped."""


class _SkipStubRewrite(importlib.abc.MetaPathFinder):
    """Finds Gradio's metaclass module; its loader swaps the stub step before any component exists."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path) if fullname == MODULE else None
        if spec is None or spec.loader is None:
            return None
        load = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            if hasattr(module, STEP):  # renamed by a later Gradio: nothing to skip (the test says so)
                setattr(module, STEP, skipped_stub_rewrite)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def skip_stub_rewrite() -> bool:
    """Skip Gradio's ``.pyi`` stub rewrite at import (1.4 s CPU); False when Gradio is imported already."""
    if MODULE in sys.modules:
        return False
    if not any(isinstance(f, _SkipStubRewrite) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipStubRewrite())
    return True


def upload_folder() -> Path:
    """Where Gradio keeps uploads in this process (``GRADIO_TEMP_DIR``, else its default)."""
    import gradio as gr

    return Path(gr.utils.get_upload_folder())
