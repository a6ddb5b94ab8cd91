"""The app as an MCP server: ``/caption``, ``/find`` and ``/compare`` as tools for agents.

Gradio 6.31 serves an app's public endpoints as Model Context Protocol tools
(``launch(mcp_server=True)``: streamable HTTP at ``/gradio_api/mcp/``, SSE at
``/gradio_api/mcp/sse``, on the app's own port). Its bridge is adjusted here,
in a subclass Gradio builds for apps that opted in with :func:`enable`:

- **Only the listed tools.** ``/caption_stream`` stays an API endpoint: an MCP
  tool answers once, so as a tool it would be ``/caption`` wrapped in
  ``{"done": true, ...}``, and one tool per question is easier for an agent.
- **Videos an agent has, never what the server could fetch or read.** Gradio's
  bridge accepts a base64 data URL (it saves it and uploads it to the app like
  any client) or an http(s) URL, which the app would download. Here a URL is
  accepted only when it names a file already uploaded to this server
  (``<server>/gradio_api/file=<path in the upload folder>``, what Gradio's
  ``upload_file_to_gradio`` tool returns); it is mapped to that file without
  any request. Every other URL is refused before anything is fetched, and a
  bare string goes to the endpoint unchanged, which refuses a server path with
  the API's own sentence.
- **Descriptions an agent can act on**: the endpoint function's docstring
  (Google style, continuation lines kept), how to pass the video, and this
  server's live limits and variants.
- **JSON results**: Gradio writes a dict result as Python ``repr`` text; here
  it is JSON, exactly the API's.
"""

from __future__ import annotations

import html
import inspect
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import gradio as gr
import gradio.mcp
import httpx
from gradio import processing_utils, route_utils
from gradio_client import handle_file

from marlin_demo.ui.common import NOT_UPLOADED, UIContext, is_inside

log = logging.getLogger(__name__)

TOOLS = ("/caption", "/find", "/compare", "/search")
"""The endpoints served as MCP tools, in this order; every other endpoint stays off the tool list."""

NO_URLS = "Upload the video file itself: the server does not download URLs."
"""The API's sentence for a URL (``common.upload_video``); the tests check both say the same."""

DATA_URL_ONLY = (
    "Send the video as a base64 data URL (data:video/mp4;base64,...) or as this server's "
    "/gradio_api/file= URL of an upload."
)

VIDEO_HOWTO = (
    "Pass the video as a base64 data URL (data:video/mp4;base64,...), or upload the file first "
    "(HTTP POST, multipart field 'files', to <server>/gradio_api/upload; it answers a list of paths; "
    "or the upload_file_to_gradio tool of `gradio upload-mcp <server> <folder>`) and pass "
    "<server>/gradio_api/file=<path>. URLs of other hosts are refused (this server downloads nothing), "
    "and so are paths on the server."
)

_ATTR = "_marlin_mcp"


@dataclass(frozen=True)
class ToolSettings:
    """What the tool descriptions and the video checks need from the app (read once at build time)."""

    max_upload_mb: float
    limits: str
    long_videos: dict[str, str]


def limits_text(ctx: UIContext) -> str:
    """This server's limits and variants, for the tool descriptions."""
    s = ctx.settings
    text = (
        f"Limits on this server: a video of at most {s.max_upload_mb:g} MB, {s.max_duration_s:g} s and "
        f"{s.max_width}x{s.max_height} (either orientation); a query of at most {s.max_query_chars} "
        f"characters; a video needing more than {s.max_windows} windows is refused. "
        f"Variants here: {', '.join(ctx.variants)} (default {ctx.default_variant}). "
        "One model call runs at a time; when the queue is full the answer is 'Queue is full'."
    )
    if ctx.engine.settings.is_tiny:
        text += (
            " This server runs the tiny offline stand-in: answers have the right shape but random "
            "weights, so they say nothing about the video."
        )
    return text


def long_video_notes(ctx: UIContext) -> dict[str, str]:
    """Per endpoint: how a long video is answered (windows, moments), with this server's window settings."""
    s = ctx.settings
    windowed = "each window sampled as if it were uploaded alone, times mapped to the whole video"
    return {
        "/caption": (
            f"Long videos: a video longer than {s.caption_window_s:g} s is captioned in windows of "
            f"{s.caption_window_s:g} s ({windowed}); the events are on one timeline and the JSON also has "
            '"windows": [{"start": float, "end": float, "scene": str}], the windows answered with each '
            'one\'s scene (one entry [0, duration] for a short video); "scene" is their scenes in order.'
        ),
        "/find": (
            f"Long videos: a video longer than {s.find_window_s:g} s is searched in windows of "
            f"{s.find_window_s:g} s overlapping by {s.find_overlap_s:g} s ({windowed}). The JSON also has "
            '"moments": [{"start": float, "end": float, "score": float}]: every place the event was '
            f"found, best first, at most {s.top_k}, duplicates merged; score (0-1) is the model's own "
            'token probability for the times, for ranking; "span" is the best moment (for a short video '
            '"moments" holds its one scored span).'
        ),
        "/search": (
            f"Searches this server's library (its example clips unless it serves another): the words of "
            f"every caption window first, then find in the best {s.search_candidates} windows only."
        ),
        "/compare": (
            'Each result is the caption or find JSON with its "windows" or "moments"; a long video is '
            "decoded once per window and every variant answers the same windows."
        ),
    }


def enable(demo: gr.Blocks, ctx: UIContext) -> bool:
    """The ``mcp_server`` launch argument: True when the setting is on and ``gradio[mcp]`` is installed.

    Marks ``demo`` so the MCP server Gradio builds at launch is :class:`MarlinMCPServer`.
    """
    if not ctx.settings.mcp:
        return False
    try:
        import mcp  # noqa: F401
    except ImportError:
        log.warning("MARLIN_MCP is on but the mcp package is missing (pip install 'gradio[mcp]')")
        return False
    tool_settings = ToolSettings(
        max_upload_mb=ctx.settings.max_upload_mb, limits=limits_text(ctx), long_videos=long_video_notes(ctx)
    )
    setattr(demo, _ATTR, tool_settings)
    if not issubclass(gradio.mcp.GradioMCPServer, MarlinMCPServer):
        # Gradio 6.31 has no hook for its MCP server class; it looks the name up at launch. The subclass
        # behaves exactly like Gradio's for Blocks that were not marked here.
        gradio.mcp.GradioMCPServer = MarlinMCPServer  # type: ignore[misc]
    return True


# ---------------------------------------------------------------------------
# Docstrings: Google style, continuation lines kept (Gradio's parser drops them)
# ---------------------------------------------------------------------------

_PARAM = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(fn: Any) -> tuple[str, dict[str, str], str]:
    """(summary, {parameter: description}, returns) from ``fn``'s docstring."""
    doc = inspect.getdoc(fn) or ""
    summary: list[str] = []
    params: dict[str, list[str]] = {}
    returns: list[str] = []
    section, current = "summary", None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section = "args"
            continue
        if stripped == "Returns:":
            section = "returns"
            continue
        if not stripped:
            continue
        if section == "summary":
            summary.append(stripped)
        elif section == "returns":
            returns.append(stripped)
        else:
            match = _PARAM.match(stripped) if not line.startswith(" " * 8) else None
            if match:
                current = match.group(1)
                params[current] = [match.group(2)]
            elif current is not None:
                params[current].append(stripped)
    return " ".join(summary), {k: " ".join(v) for k, v in params.items()}, " ".join(returns)


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------


class MarlinMCPServer(gradio.mcp.GradioMCPServer):
    """Gradio's MCP server with this app's tool list, descriptions, video checks and JSON results."""

    def __init__(self, blocks: gr.Blocks) -> None:
        self.marlin: ToolSettings | None = getattr(blocks, _ATTR, None)
        super().__init__(blocks)

    def get_tool_to_endpoint(self) -> dict[str, str]:
        tools = super().get_tool_to_endpoint()
        if self.marlin is None:
            return tools
        by_endpoint = {endpoint: name for name, endpoint in tools.items()}
        return {by_endpoint[e]: e for e in TOOLS if e in by_endpoint}

    def get_fn_description(self, block_fn: Any, tool_name: str) -> tuple[str, dict[str, str]]:
        if self.marlin is None:
            return super().get_fn_description(block_fn, tool_name)
        summary, params, returns = parse_docstring(block_fn.fn)
        _, file_positions = self.get_input_schema(tool_name)
        parts = [summary]
        if returns:
            parts.append(f"Returns: {returns}")
        parts.append(self.marlin.long_videos.get(self.get_tool_to_endpoint().get(tool_name, ""), ""))
        parts.append(self.marlin.limits)
        for position in file_positions:
            name = str(position[0])
            params[name] = f"{params.get(name, '')} {VIDEO_HOWTO}".strip()
        return " ".join(p for p in parts if p), params

    def simplify_filedata_schema(
        self, schema: dict[str, Any]
    ) -> tuple[dict[str, Any], list[list[str | int]]]:
        simplified, positions = super().simplify_filedata_schema(schema)
        if self.marlin is not None:
            for position in positions:
                node = simplified.get("properties", {}).get(position[0]) if len(position) == 1 else None
                if isinstance(node, dict):
                    # Gradio's "a http or https url to a file" would invite URLs this server refuses.
                    node.pop("format", None)
                    node.pop("required", None)  # FileData's ["path"]: meaningless on a string
                    node["title"] = "Video"
        return simplified, positions

    def _prepare_tool_call_args(self, name: str, arguments: dict[str, Any]) -> Any:
        # Before Gradio's own handling: its client would upload any file object it finds in the
        # arguments from the server's disk, so only the tool's own string arguments get through.
        if self.marlin is not None and name in self.tool_to_endpoint:
            schema, files = self.get_input_schema(name)
            known = list(schema.get("properties", {}))
            videos = {str(p[0]) for p in files}
            for key, item in arguments.items():
                if key not in known:
                    raise ValueError(f"Unknown argument {key!r}: {name} takes {', '.join(known)}.")
                number = isinstance(item, int | float) and not isinstance(item, bool) and key not in videos
                if not (isinstance(item, str) or number):
                    raise ValueError(f"The argument {key!r} must be a string.")
        return super()._prepare_tool_call_args(name, arguments)

    async def _execute_tool_with_progress(self, job: Any, progress_token: str | int) -> Any:
        # With a progress token Gradio prefixes the error's title ("Error: ..."); without one it does
        # not. The same sentence either way, as the API gives it.
        try:
            return await super()._execute_tool_with_progress(job, progress_token)
        except RuntimeError as exc:
            message = str(exc)
            if self.marlin is not None and message.startswith("Error: "):
                raise RuntimeError(message.removeprefix("Error: ")) from None
            raise

    def convert_strings_to_filedata(self, value: Any, filedata_positions: list[list[str | int]]) -> Any:
        if self.marlin is None or not isinstance(value, dict):
            return super().convert_strings_to_filedata(value, filedata_positions)
        out = dict(value)
        rest = []
        for position in filedata_positions:
            if len(position) == 1 and position[0] in out:
                out[position[0]] = self._video_argument(out[position[0]])
            else:
                rest.append(position)
        return super().convert_strings_to_filedata(out, rest) if rest else out

    def _video_argument(self, text: str) -> Any:
        """What goes to the endpoint for a video argument; refusals are one sentence, before any I/O."""
        assert self.marlin is not None
        text = text.strip()
        if not text:
            return None  # the endpoint answers "No video: ..."
        if text.startswith("data:"):
            header, _, payload = text.partition(",")
            if ";base64" not in header or not payload:
                raise ValueError(DATA_URL_ONLY)
            size_mb = len(payload) * 3 / 4 / 1e6
            if size_mb > self.marlin.max_upload_mb:
                raise ValueError(
                    f"The file is {size_mb:.1f} MB; at most {self.marlin.max_upload_mb:g} MB is allowed."
                )
            saved = processing_utils.save_base64_to_cache(text, gradio.mcp.DEFAULT_TEMP_DIR)
            return handle_file(saved)
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", text):
            return handle_file(self._uploaded_file(text))
        return text  # a bare string: the endpoint refuses it as a server path, with the API's sentence

    def _uploaded_file(self, url: str) -> str:
        """The local path of ``<this server>/gradio_api/file=<upload>``; any other URL is refused."""
        try:
            target = httpx.URL(url)
            request = self.mcp_server.request_context.request
            root = httpx.URL(
                route_utils.get_root_url(
                    request=request,  # type: ignore[arg-type]
                    route_path=self.get_route_path(request),  # type: ignore[arg-type]
                    root_path=self.root_path,
                )
            )
        except (httpx.InvalidURL, LookupError, ValueError):
            raise ValueError(NO_URLS) from None
        prefix = root.path.rstrip("/") + "/gradio_api/file="
        raw_path = target.raw_path.decode("ascii", "replace").split("?", 1)[0]
        same_server = (target.scheme, target.host, target.port) == (root.scheme, root.host, root.port)
        if not same_server or not raw_path.startswith(prefix):
            raise ValueError(NO_URLS)
        path = Path(unquote(raw_path[len(prefix) :]))
        uploads = Path(gr.utils.get_upload_folder())
        if not path.is_absolute() or not is_inside(path, uploads) or not path.is_file():
            raise ValueError(NOT_UPLOADED.format(name=html.escape(path.name or str(path))))
        return str(path)

    def postprocess_output_data(self, data: Any, root_url: str) -> list[Any]:
        if self.marlin is None or not all(isinstance(d, dict | list) for d in data):
            return super().postprocess_output_data(data, root_url)
        return [self.types.TextContent(type="text", text=json.dumps(d, ensure_ascii=False)) for d in data]
