"""The app as an MCP server, driven by a real MCP client (the ``mcp`` SDK, streamable HTTP).

The server is the real ``python app.py --model tiny`` (``ui_support.app_server``, loopback
only). Its tools are Gradio's own MCP server over the app's ``gr.api`` endpoints (``ui.api``),
described by their docstrings. Answers of the tiny stand-in are meaningless, so only their shape
and bounds are checked, never their words.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.server
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from gradio_client.utils import encode_file_path
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import CallToolResult, TextContent
from result_shapes import API_CAPTION_KEYS, FIND_KEYS, METRIC_KEYS
from ui_support import EXAMPLES, AppServer

from marlin_demo import settings as settings_mod
from marlin_demo import video
from marlin_demo.tasks import TASKS
from marlin_demo.ui import api
from marlin_demo.ui.api import DATA_URL_ONLY
from marlin_demo.ui.blocks import mcp_on
from marlin_demo.ui.gradio_hooks import NO_URLS
from marlin_demo.ui.inputs import NOT_UPLOADED

pytestmark = pytest.mark.slow

CLIP = EXAMPLES / "ball_rolls.mp4"

TOOLS = (*(f"/{name}" for name in TASKS), "/compare", "/search", "/caption_stream")
"""The endpoints served as MCP tools, in this order (one per task, then compare, search and the stream)."""


def mcp_url(server: AppServer | str) -> str:
    return f"{server if isinstance(server, str) else server.url}gradio_api/mcp/"


def with_session(server: AppServer | str, use: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    """Open a real MCP session to the app (streamable HTTP), run ``use`` in it."""

    async def run() -> Any:
        async with streamablehttp_client(mcp_url(server)) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await use(session)

    return asyncio.run(run())


def call(server: AppServer, tool: str, arguments: dict[str, Any], progress: bool = False) -> CallToolResult:
    """One tool call; ``progress`` sends a progress token (Gradio then takes its streaming path)."""
    updates: list[Any] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        updates.append(message)

    async def use(session: ClientSession) -> CallToolResult:
        callback = on_progress if progress else None
        return await session.call_tool(tool, arguments, progress_callback=callback)

    result = with_session(server, use)
    if progress:
        assert updates, "a progress token was sent but no progress notification came back"
    return result


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1, result.content
    item = result.content[0]
    assert isinstance(item, TextContent)
    return item.text


def json_of(result: CallToolResult) -> Any:
    assert not result.isError, text_of(result)
    text = text_of(result)
    assert text.startswith("{") and '"' in text[:3], (
        "gradio_hooks.from_mcp: the tool answered Python's repr, not JSON: Gradio's MCP bridge no longer "
        f"sends the header {api.gradio_hooks.MCP_USER_HEADER} it marks its calls with: {text[:80]}"
    )
    return json.loads(text)


def error_of(result: CallToolResult) -> str:
    assert result.isError, text_of(result)
    return text_of(result)


def data_url(path: Path, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


@pytest.fixture(scope="module")
def client(app_server: AppServer) -> Client:
    return Client(app_server.url, verbose=False)


@pytest.fixture(scope="module")
def clip_duration() -> float:
    return video.probe(CLIP).duration_s


def check_metrics(metrics: dict[str, Any]) -> None:
    assert set(metrics) == METRIC_KEYS
    for key in ("latency_s", "ttft_s", "tokens_per_s", "peak_memory_mb"):
        assert metrics[key] is None or isinstance(metrics[key], float | int), key
    assert isinstance(metrics["output_tokens"], int) and isinstance(metrics["video_tokens"], int)
    assert metrics["video_tokens"] > 0
    assert isinstance(metrics["device"], str) and isinstance(metrics["memory_kind"], str)


def test_the_tools_are_caption_find_compare_with_their_inputs(app_server: AppServer) -> None:
    tools = with_session(app_server, lambda s: s.list_tools()).tools
    by_name = {t.name: t for t in tools}
    assert list(by_name) == [t.lstrip("/") for t in TOOLS]  # nothing private
    expected = {
        "caption": (["video", "variant", "start", "end"], ["video"]),
        "find": (["video", "query", "variant", "start", "end"], ["video", "query"]),
        "compare": (["video", "task", "query", "start", "end"], ["video"]),
    }
    for name, (props, required) in expected.items():
        tool = by_name[name]
        schema = tool.inputSchema
        assert list(schema["properties"]) == props, name
        assert schema.get("required") == required, name
        video_arg = schema["properties"]["video"]
        assert video_arg["type"] == "string" and "format" not in video_arg
        assert "data:video/mp4;base64," in video_arg["description"]
        assert "/gradio_api/upload" in video_arg["description"]
        assert "MB" in tool.description and "Returns: JSON" in tool.description
    assert by_name["caption"].inputSchema["properties"]["variant"]["enum"] == ["gptq", "bnb4", "bf16"]
    # each argument is one docstring line, all of it kept (Gradio's parser keeps an argument's first line)
    assert "(16-bit)" in by_name["find"].inputSchema["properties"]["variant"]["description"]
    assert by_name["compare"].inputSchema["properties"]["task"]["enum"] == list(TASKS)
    # a time range: optional, described as the docstring says (only that part is asked)
    for name in expected:
        assert "Only that part is decoded" in by_name[name].inputSchema["properties"]["end"]["description"]
    # long videos: each tool says how it answers one (windows, scored moments) and the window limit
    assert '"windows": [{"start"' in by_name["caption"].description
    assert (
        '"moments": [{"start"' in by_name["find"].description and "best first" in by_name["find"].description
    )
    assert '"moments"' in by_name["compare"].description
    assert all("windows is refused" in t.description for t in tools)  # the window limit, named

    # the page's "Use via API" probes this route; with MCP on it answers (no 404 in the browser console)
    r = httpx.get(f"{app_server.url}gradio_api/mcp/schema", timeout=30)
    assert r.status_code == 200
    assert [t["name"] for t in r.json()] == list(by_name)


@pytest.mark.parametrize("progress", [False, True])
def test_caption_of_a_clip_sent_as_a_data_url(
    app_server: AppServer,
    clip_duration: float,
    progress: bool,
) -> None:
    data = json_of(call(app_server, "caption", {"video": data_url(CLIP, "video/mp4")}, progress))
    assert set(data) == API_CAPTION_KEYS
    assert data["variant"] == "gptq"
    assert isinstance(data["scene"], str) and isinstance(data["raw"], str) and data["raw"]
    assert isinstance(data["repaired"], bool)
    for event in data["events"]:
        assert set(event) == {"start", "end", "description"}
        assert 0.0 <= event["start"] <= event["end"] <= clip_duration + 1e-6, event
        assert isinstance(event["description"], str)
    check_metrics(data["metrics"])


def test_the_stream_as_a_tool_answers_its_last_message(app_server: AppServer) -> None:
    data = json_of(call(app_server, "caption_stream", {"video": data_url(CLIP, "video/mp4")}))
    assert data["done"] is True and set(data["result"]) == API_CAPTION_KEYS
    assert data["text"] == data["result"]["raw"]


def test_find_on_a_clip_uploaded_first_and_named_by_its_file_url(
    app_server: AppServer,
    clip_duration: float,
) -> None:
    with CLIP.open("rb") as f:
        r = httpx.post(f"{app_server.url}gradio_api/upload", files={"files": f}, timeout=60)
    r.raise_for_status()
    uploaded = r.json()[0]
    url = f"{app_server.url}gradio_api/file={encode_file_path(uploaded)}"
    query = "the ball rolls across the floor"
    args = {"video": url, "query": query, "variant": "bnb4", "start": 2, "end": 9}  # a time range, too
    data = json_of(call(app_server, "find", args))
    assert set(data) == FIND_KEYS
    assert data["variant"] == "bnb4" and data["query"] == query
    assert isinstance(data["format_ok"], bool)
    assert data["range"] == [2.0, 9.0] and clip_duration > 9.0  # only that part asked, the video's times
    if data["span"] is not None:
        start, end = data["span"]
        assert 2.0 <= start <= end <= 9.0 + 1e-6
    check_metrics(data["metrics"])


def test_compare_returns_both_variants_and_their_agreement(app_server: AppServer) -> None:
    args = {"video": data_url(CLIP, "video/mp4"), "task": "find", "query": "the ball stops"}
    data = json_of(call(app_server, "compare", args))
    assert {"task", "query", "results", "agreement"} <= set(data)
    assert data["task"] == "find" and data["query"] == "the ball stops"
    assert set(data["results"]) == {"gptq", "bnb4"}
    for result in data["results"].values():
        assert set(result) == FIND_KEYS
    assert set(data["agreement"]) == {"gptq|bnb4"}
    assert 0.0 <= data["agreement"]["gptq|bnb4"]["span_iou"] <= 1.0


@pytest.mark.parametrize(
    "given",
    [str(CLIP), "/etc/passwd", "examples/ball_rolls.mp4", "{server}gradio_api/file=" + str(CLIP)],
    ids=["example-path", "etc-passwd", "relative-path", "file-url-outside-uploads"],
)
def test_a_server_path_is_refused_with_the_api_sentence(app_server: AppServer, given: str) -> None:
    given = given.format(server=app_server.url)
    message = error_of(call(app_server, "caption", {"video": given}))
    name = Path(given.rsplit("=", 1)[-1]).name
    assert message == NOT_UPLOADED.format(name=name)


@pytest.mark.parametrize("progress", [False, True])
def test_a_text_file_gets_the_same_not_a_video_sentence_as_the_api(
    app_server: AppServer,
    client: Client,
    tmp_path: Path,
    progress: bool,
) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("this is not a video\n" * 20, encoding="utf-8")
    message = error_of(call(app_server, "caption", {"video": data_url(text, "text/plain")}, progress))
    assert "not a video" in message
    with pytest.raises(AppError) as api:
        client.predict(handle_file(text), "gptq", api_name="/caption")
    assert message == str(api.value)


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback standing in for "another host": (a clip's URL on it, the requests it
    got). Any fetch of that URL, by Gradio or the app, would be one of them."""
    got: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            got.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "video/mp4")
            self.end_headers()
            self.wfile.write(CLIP.read_bytes())

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/clip.mp4", got
    finally:
        server.shutdown()
        thread.join(timeout=30)
        server.server_close()


VIDEO_ENDPOINTS = {"caption": (), "find": ("the ball rolls",), "compare": (), "caption_stream": ()}
"""Every endpoint that takes a video, with what it takes after it."""


def test_a_url_given_to_any_endpoint_is_refused_and_nothing_is_fetched(
    app_server: AppServer, client: Client, listener: tuple[str, list[str]]
) -> None:
    """A URL to every endpoint that takes a video, as gradio_client sends it (handle_file: a file whose
    path is the URL, which Gradio itself would download before the endpoint runs; and as text) and as
    an MCP tool's text: each is refused with the one sentence, and the URL's server never hears of it.

    Gradio's download is guarded against private addresses, so a loopback URL alone would not prove
    our refusal: the sentence does (Gradio's guard answers otherwise), and test_hardening shows that
    without ``gradio_hooks`` Gradio does reach for the URL.
    """
    url, got = listener
    assert set(VIDEO_ENDPOINTS) == {t.lstrip("/") for t in TOOLS if t != "/search"}  # search takes no video
    for endpoint, rest in VIDEO_ENDPOINTS.items():
        for given in (handle_file(url), url):
            with pytest.raises(AppError) as refused:
                client.predict(given, *rest, api_name=f"/{endpoint}")
            assert str(refused.value) == NO_URLS, (endpoint, given)
        args = {"video": url, **({"query": rest[0]} if rest else {})}
        assert error_of(call(app_server, endpoint, args)) == NO_URLS, endpoint
    assert got == [], f"the server fetched {got}"


def test_arguments_other_than_the_tools_strings_are_refused(app_server: AppServer) -> None:
    file_object = {"path": str(CLIP), "meta": {"_type": "gradio.FileData"}}
    as_object = error_of(call(app_server, "find", {"video": file_object, "query": "x"}))
    assert "not of type 'string'" in as_object
    smuggled = error_of(call(app_server, "caption", {"video": str(CLIP), "extra": "x"}))
    assert "`extra` is not a valid key-word argument" in smuggled
    assert error_of(call(app_server, "caption_of", {"video": str(CLIP)})).startswith("Unknown tool")


def test_a_data_url_must_be_base64(app_server: AppServer) -> None:
    message = error_of(call(app_server, "caption", {"video": "data:video/mp4,not-base64"}))
    assert message == DATA_URL_ONLY


def test_the_setting_and_the_size_limit_before_decoding(tmp_path: Path) -> None:
    """MARLIN_MCP / --mcp turn the tools on or off; an over-size data URL is refused before it is decoded."""
    assert settings_mod.from_env({}).mcp is True
    assert settings_mod.from_env({"MARLIN_MCP": "0"}).mcp is False
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    base = settings_mod.from_env({})
    assert settings_mod.from_args(parser.parse_args(["--no-mcp"]), base).mcp is False
    assert mcp_on(base) is True and mcp_on(base.with_(mcp=False)) is False

    big = "data:video/mp4;base64," + "A" * 2_000_000  # 1.5 MB once decoded
    with pytest.raises(gr.Error) as info:
        api.save_data_url(big, max_mb=1.0)
    assert info.value.message == "The file is 1.5 MB; at most 1 MB is allowed."


def test_the_sse_transport_serves_the_same_tools_and_rules(app_server: AppServer) -> None:
    """Gradio also serves MCP over SSE (/gradio_api/mcp/sse); the tool list and the URL rule hold there."""

    async def run() -> tuple[list[str], CallToolResult, CallToolResult]:
        async with sse_client(f"{app_server.url}gradio_api/mcp/sse") as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                with CLIP.open("rb") as f:
                    r = httpx.post(f"{app_server.url}gradio_api/upload", files={"files": f}, timeout=60)
                own = f"{app_server.url}gradio_api/file={encode_file_path(r.json()[0])}"
                found = await session.call_tool("find", {"video": own, "query": "the ball"})
                other = f"http://localhost:{app_server.port}/gradio_api/file={r.json()[0]}"
                refused = await session.call_tool("caption", {"video": other})
                return names, found, refused

    names, found, refused = asyncio.run(run())
    assert names == [t.lstrip("/") for t in TOOLS]
    assert set(json_of(found)) == FIND_KEYS
    # the same file named through another host name is another host: refused, nothing fetched
    assert error_of(refused) == NO_URLS
