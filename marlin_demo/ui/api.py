"""The public API and the MCP tools: each endpoint a ``gr.api`` function described by its docstring."""

from __future__ import annotations

import base64
import binascii
import contextlib
import html
import json
import mimetypes
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

import gradio as gr
import httpx

from marlin_demo import model_io, service, tasks
from marlin_demo.library.search import DEFAULT_TOP_K
from marlin_demo.tasks import Task
from marlin_demo.ui import gradio_hooks
from marlin_demo.ui.caption import StreamMessages
from marlin_demo.ui.context import GPU_EVENT, UIContext, variant_label
from marlin_demo.ui.inputs import NOT_UPLOADED, pick_variant, require_upload, session_of, user_errors
from marlin_demo.ui.library import LibraryTab, public_answer
from marlin_demo.ui.running import follow

DATA_URL_ONLY = (
    "Send the video as a base64 data URL (data:video/mp4;base64,...) or as this server's "
    "/gradio_api/file= URL of an upload."
)

VIDEO_ARG = (
    "The clip (MP4, WebM, MOV or MKV). From gradio_client: handle_file('clip.mp4'), which uploads it. "
    "As text: a base64 data URL (data:video/mp4;base64,...), or upload the file first (HTTP POST, "
    "multipart field 'files', to <server>/gradio_api/upload; it answers a list of paths; or the "
    "upload_file_to_gradio tool of `gradio upload-mcp <server> <folder>`) and pass "
    "<server>/gradio_api/file=<path>. URLs of other hosts are refused (this server downloads nothing), "
    "and so are paths on the server."
)
RANGE_ARGS = {
    "start": "Optional: the first second of the part of the video to ask about (empty: its start).",
    "end": "Optional: the last second of that part (empty: the video's end). Only that part is decoded "
    "and asked; times in the answer stay on the video's own timeline.",
}
VIDEO_NOTE = (
    "The video goes as a file (gradio_client: handle_file('clip.mp4')) or as text (see its argument)."
)

COMPARE_RETURNS = (
    'JSON {"task": str, "query": str or null, "results": {variant: the task\'s JSON}, "agreement": '
    '{"gptq|bnb4": {"event_iou": float, "event_f1": float, "rouge_l": float}} for caption or {"gptq|bnb4": '
    '{"span_iou": float}} for find, one key per pair of variants}, plus "scores": {variant: {...}} against '
    'the ground truth when the clip is one of the app\'s bundled examples, and "errors": {variant: one '
    "sentence} when a variant could not load or run (the others still answer; when none answers the call "
    'fails). Per variant that answered: "cold" (true: loaded for this request, so its latency includes '
    'first-use costs), "footprint_mb" (its weights in memory, measured at its load: its own size, where '
    'metrics.peak_memory_mb spans the process or the GPU) and "warm" ({"latency_s", "rerun", '
    '"reused_prefix"}, null for a cold run).'
)

SEARCH_RETURNS = (
    'JSON {"query": str, "library": {"videos": int, "windows": int}, "searched_windows": int, "moments": '
    '[{"video": str, "id": str, "start": float, "end": float, "score": float, "retrieval_score": float, '
    '"window": [start, end], "thumbnail": str or null}]}, best first. "video" is the video\'s name in the '
    'library and "id" its entry; start/end are seconds on that video\'s own timeline; "score" (0-1) '
    'combines find\'s confidence with the window\'s text relevance ("retrieval_score", BM25); "window" is '
    'the caption window find was asked in; "thumbnail" is a URL path on this server. An empty library, or '
    'no match, is an empty "moments" list. "searched_windows" counts the find windows asked (a caption '
    "window longer than find's window is several), as the search's cost line counts them before it runs."
)


def limits_text(ctx: UIContext) -> str:
    """This server's limits and variants, for every description."""
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


def long_video_note(ctx: UIContext, task: Task) -> str:
    """How a long video is answered (windows, moments), with this server's window settings."""
    length, overlap = task.windows(ctx.engine.settings)
    windowed = "each window sampled as if it were uploaded alone, times mapped to the whole video"
    overlapping = f" overlapping by {overlap:g} s" if overlap else ""
    head = (
        f"Long videos: a video longer than {length:g} s is answered in windows of {length:g} s{overlapping} "
    )
    return f"{head}({windowed}){task.answer.windows_note(ctx.engine.settings)}"


def variant_arg(ctx: UIContext) -> str:
    named = "; ".join(f'"{v}": {variant_label(v)}' for v in ctx.variants)
    return f'Which copy of Marlin-2B answers ({named}); default "{ctx.default_variant}".'


def video_file(video: object, ctx: UIContext, request: gr.Request | None) -> str:
    """The local path of the video a caller sent, else one clear ``gr.Error`` before anything is read."""
    if isinstance(video, dict):  # gradio_client's handle_file: already uploaded to this server
        return require_upload(str(video.get("path") or ""), ctx, uploads_only=True)
    if isinstance(video, str) or video is None:
        return require_upload(video_text((video or "").strip(), ctx, request), ctx, uploads_only=True)
    raise gr.Error("The video must be a file (handle_file) or text.", print_exception=False)


def video_text(text: str, ctx: UIContext, request: gr.Request | None) -> str:
    """A video sent as text: a data URL (saved among the uploads) or this server's file URL of one."""
    if not text:
        return ""
    if text.startswith("data:"):
        return save_data_url(text, ctx.settings.max_upload_mb)
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", text):
        return own_file(text, request)
    name = html.escape(Path(text).name or text)  # a path on the server
    raise gr.Error(NOT_UPLOADED.format(name=name), print_exception=False)


def save_data_url(text: str, max_mb: float) -> str:
    """A base64 data URL written to a new file among Gradio's uploads (its size checked before decoding)."""
    header, _, payload = text.partition(",")
    if ";base64" not in header or not payload:
        raise gr.Error(DATA_URL_ONLY, print_exception=False)
    size_mb = len(payload) * 3 / 4 / 1e6
    if size_mb > max_mb:
        raise gr.Error(
            f"The file is {size_mb:.1f} MB; at most {max_mb:g} MB is allowed.", print_exception=False
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise gr.Error(DATA_URL_ONLY, print_exception=False) from None
    mime = header[len("data:") :].split(";", 1)[0]
    folder = gradio_hooks.upload_folder() / f"data-url-{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    path = folder / f"video{mimetypes.guess_extension(mime) or '.bin'}"
    path.write_bytes(data)
    return str(path)


def own_file(url: str, request: gr.Request | None) -> str:
    """The upload a URL of this server names (``/gradio_api/file=<path>``); any other URL is refused."""
    headers = request.headers if request is not None else {}
    here = headers.get("x-forwarded-host") or headers.get("host") or ""
    try:
        target = httpx.URL(url)
        server = httpx.URL(f"{target.scheme}://{here}")
    except (httpx.InvalidURL, TypeError, ValueError):
        raise gr.Error(gradio_hooks.NO_URLS, print_exception=False) from None
    raw_path = target.raw_path.decode("ascii", "replace").split("?", 1)[0]
    _, marker, rest = raw_path.partition("/gradio_api/file=")
    if not here or (target.host, target.port) != (server.host, server.port) or not marker:
        raise gr.Error(gradio_hooks.NO_URLS, print_exception=False)
    return unquote(rest)


@contextlib.contextmanager
def api_errors() -> Iterator[None]:
    """``user_errors`` untitled: MCP prefixes a title only with a progress token; this keeps one sentence."""
    try:
        with user_errors():
            yield
    except gr.Error as exc:
        raise gr.Error(exc.message, title="", print_exception=False) from None


def reply(data: dict[str, Any], request: gr.Request | None) -> Any:
    """The JSON; to Gradio's MCP bridge as text (it would write a dict as Python's repr)."""
    return json.dumps(data, ensure_ascii=False) if gradio_hooks.from_mcp(request) else data


def task_endpoint(ctx: UIContext, task: Task) -> Callable[..., Any]:
    """The endpoint of one task: the video, the task's query when it takes one, a variant, a range."""

    def answer(video: object, query: str | None, variant: str, start: Any, end: Any, request: Any) -> Any:
        with api_errors():
            path, v = video_file(video, ctx, request), pick_variant(variant, ctx)
            asked = service.request(ctx.engine, task, path, v, query, start, end, visitor=session_of(request))
            result = service.run(ctx.engine, asked)
            return reply(task.answer.to_json(result), request)

    default = ctx.default_variant
    endpoint: Callable[..., dict[str, Any]]
    if task.query:

        def asks(
            video: str,
            query: str,
            variant: str = default,
            start: float | None = None,
            end: float | None = None,
            request: gr.Request = None,  # type: ignore[assignment]
        ) -> dict[str, Any]:
            return answer(video, query, variant, start, end, request)  # type: ignore[no-any-return]

        endpoint = asks
    else:

        def tells(
            video: str,
            variant: str = default,
            start: float | None = None,
            end: float | None = None,
            request: gr.Request = None,  # type: ignore[assignment]
        ) -> dict[str, Any]:
            return answer(video, None, variant, start, end, request)  # type: ignore[no-any-return]

        endpoint = tells
    args = {
        "video": VIDEO_ARG,
        **({"query": task.query_help} if task.query else {}),
        "variant": variant_arg(ctx),
    }
    summary = task.summary or task.help[:1].upper() + task.help[1:] + "."
    about = f"{summary} {VIDEO_NOTE} {long_video_note(ctx, task)} {limits_text(ctx)}"
    return named(endpoint, task.name, ctx, about, {**args, **RANGE_ARGS}, task.answer.returns)


def named(
    fn: Callable[..., Any], name: str, ctx: UIContext, summary: str, args: dict[str, str], returns: str
) -> Callable[..., Any]:
    """``fn`` as the tool ``name``, its docstring as Gradio parses it (an argument: its first line only)."""
    fn.__name__ = fn.__qualname__ = name
    lines = [summary, "", "Args:", *(f"    {arg}: {text}" for arg, text in args.items()), ""]
    fn.__doc__ = "\n".join([*lines, "Returns:", f"    {returns}"])
    if "variant" in fn.__annotations__:
        fn.__annotations__["variant"] = Literal[tuple(ctx.variants)]  # type: ignore[valid-type]
    return fn


def caption_stream_endpoint(ctx: UIContext) -> Callable[..., Any]:
    def caption_stream(
        video: str,
        variant: str = ctx.default_variant,
        start: float | None = None,
        end: float | None = None,
        request: gr.Request = None,  # type: ignore[assignment]
    ) -> Iterator[dict[str, Any]]:
        with api_errors():
            path, v = video_file(video, ctx, request), pick_variant(variant, ctx)
            asked = service.request(
                ctx.engine, tasks.CAPTION, path, v, None, start, end, visitor=session_of(request)
            )
            stages = service.stream(ctx.engine, asked)
            for message in follow(stages, StreamMessages(), ctx.settings.stream_every_s):
                yield reply(message, request)

    about = (
        "The caption as the model writes it: {done: false, text} messages (with window and windows on a "
        "long video), then {done: true, text, first_text_s, result} with result as /caption returns it "
        f"(as an MCP tool, which answers once: that last message). {VIDEO_NOTE} "
        f"{long_video_note(ctx, tasks.CAPTION)} {limits_text(ctx)}"
    )
    args = {"video": VIDEO_ARG, "variant": variant_arg(ctx), **RANGE_ARGS}
    return named(caption_stream, "caption_stream", ctx, about, args, "JSON messages, as above.")


def compare_endpoint(ctx: UIContext) -> Callable[..., Any]:
    def compare(
        video: str,
        task: str = tasks.CAPTION.name,
        query: str = "",
        start: float | None = None,
        end: float | None = None,
        request: gr.Request = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        with api_errors():
            path = video_file(video, ctx, request)
            asked = service.request(
                ctx.engine, task, path, "", query, start, end, visitor=session_of(request)
            )
            *_, run = service.compare(ctx.engine, asked, None, ctx.compare_variants())
            assert isinstance(run, service.Comparison)
            run.require_answer()
            return reply(run.payload(ctx.ground_truth(path)), request)  # type: ignore[no-any-return]

    compare.__annotations__["task"] = Literal[tuple(tasks.TASKS)]  # type: ignore[valid-type]
    about = (
        f"Run {tasks.known()} on every compared variant ({', '.join(ctx.compare_variants())}) and say "
        'how far they agree. Each result is that task\'s JSON with its "windows" or "moments"; a long video '
        "is decoded once per window and every variant answers the same windows. "
        f"{VIDEO_NOTE} {limits_text(ctx)}"
    )
    args = {
        "video": VIDEO_ARG,
        "task": f"Which task: {tasks.known()}.",
        "query": "For a task that takes one (find): the event in plain words (not empty); else ignored.",
        **RANGE_ARGS,
    }
    return named(compare, "compare", ctx, about, args, COMPARE_RETURNS)


def search_endpoint(ctx: UIContext, tab: LibraryTab) -> Callable[..., Any]:
    def search(
        query: str,
        top_k: float = DEFAULT_TOP_K,
        request: gr.Request = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        k = DEFAULT_TOP_K if top_k is None else int(top_k)
        if not 1 <= k <= 50:
            raise gr.Error(f"top_k must be between 1 and 50, got {top_k:g}.", title="", print_exception=False)
        with api_errors():
            clean = model_io.sanitize_query(query or "", ctx.engine.settings.max_query_chars)
            for _ in tab.source.progress():
                pass
            answer = public_answer(tab.source, tab.source.run_search(clean, k), tab.gallery)
            return reply(answer, request)  # type: ignore[no-any-return]

    about = (
        "Find a described moment across every video of this server's library (its example clips unless it "
        "serves another): the words of every caption window first (full text), then find in the best "
        f"{ctx.settings.search_candidates} windows only. {limits_text(ctx)}"
    )
    args = {
        "query": 'The event in plain words, e.g. "a ball rolls across the floor" (not empty).',
        "top_k": "Most moments to return (1-50, default 10).",
    }
    return named(search, "search", ctx, about, args, SEARCH_RETURNS)


def declare(ctx: UIContext, library_tab: LibraryTab) -> list[str]:
    """Declare every endpoint (inside the Blocks), in the MCP tool list's order; their API names."""
    endpoints = [(task.name, task_endpoint(ctx, task)) for task in tasks.TASKS.values()]
    endpoints += [("compare", compare_endpoint(ctx)), ("search", search_endpoint(ctx, library_tab))]
    endpoints += [("caption_stream", caption_stream_endpoint(ctx))]
    for name, fn in endpoints:
        gr.api(fn, api_name=name, **GPU_EVENT)
    return [name for name, _ in endpoints]
