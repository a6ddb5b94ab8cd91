"""Library tab: one question across every video of a library the server chose (docs/LIBRARY.md)."""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from marlin_demo import model_io
from marlin_demo.library import index, prebuilt
from marlin_demo.library.app_library import LibrarySource
from marlin_demo.library.database import LibraryError, Store
from marlin_demo.library.inputs import Item
from marlin_demo.library.search import DEFAULT_TOP_K, SearchAnswer, search_windows
from marlin_demo.service import cost, gpu_calls
from marlin_demo.ui.assets import asset
from marlin_demo.ui.context import PRIVATE_UI, UIContext
from marlin_demo.ui.inputs import session_of
from marlin_demo.ui.running import Run, Updates, progress_html, streamed, wire_run_and_stop
from marlin_demo.ui.shared_clip import Clip
from marlin_demo.ui.status import status_html

PLAYER_ID = "library-video"
CSS = asset("library.css")
#: ``js_on_load`` of the tab's first line: the gallery's thumbnails named by their moments
LABELS_JS = asset("library.js")


def default_source(ctx: UIContext) -> LibrarySource:
    """``--library DIR``, else the examples, indexed in a folder keyed by model and caption settings."""
    s = ctx.engine.settings
    if s.library_dir:
        folder = Path(s.library_dir).expanduser().resolve()
        setup: dict[str, Any] = {}
        with contextlib.suppress(LibraryError), contextlib.closing(Store(folder, create=False)) as store:
            setup = store.meta().get("setup", {})
        variant = setup.get("variant") if setup.get("variant") in ctx.variants else ctx.default_variant
        return LibrarySource(folder, str(variant), None, ctx.engine, f"the library at {folder.name}")
    variant = ctx.default_variant
    clips = [(e["video"], ctx.clip(e).stat().st_size if ctx.clip(e).exists() else 0) for e in ctx.examples]
    key = json.dumps([index.setup_fingerprint(s, variant), clips], sort_keys=True, default=str)
    # one folder per model, settings and example set, beside Gradio's cache: kept across restarts
    root = Path(os.environ.get("GRADIO_EXAMPLES_CACHE", ".gradio/cached_examples"))
    folder = root.resolve() / f"marlin-library-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    items = [
        Item(id=str(e["video"]), video=str(e["video"]), path=str(ctx.clip(e).resolve()), query=None)
        for e in ctx.examples
    ]
    # the Space ships its examples' library: loaded when it was built with what changes captions here
    found = prebuilt.install(prebuilt.shipped_folder(ctx.examples_dir), folder, s, variant)
    durations = [float(e.get("duration") or 0.0) for e in ctx.examples]
    price = "" if found.loaded else cost.index_cost_line(durations, s)
    label = f"the app's {len(items)} example clips"
    said = found.sentence() if found.found else ""  # none shipped: the cost line says what follows
    return LibrarySource(folder, variant, items, ctx.engine, label, price, said)


def gpu_here() -> bool:
    """A GPU this process holds now (not ZeroGPU's, lent per call): the index is then built at start-up."""
    if gpu_calls.zero_gpu():
        return False
    import torch

    return bool(torch.cuda.is_available())


def public_answer(
    source: LibrarySource, answer: SearchAnswer, block: gr.components.Component
) -> dict[str, Any]:
    """The JSON, each thumbnail a URL to a copy in Gradio's cache (the library's folder is never named)."""
    out = answer.to_dict()
    for m in out["moments"]:
        thumb = m.get("thumbnail")
        cached = block.move_resource_to_block_cache(str(source.folder / thumb)) if thumb else None
        m["thumbnail"] = f"/gradio_api/file={cached}" if cached else None
    return out


@dataclass
class LibraryTab:
    query: gr.Textbox
    run: gr.Button
    stop: gr.Button
    progress: gr.HTML
    headline: gr.HTML
    status: gr.HTML
    gallery: gr.Gallery
    player: gr.Video
    chosen: gr.HTML
    open_in_find: gr.Button
    cost: gr.HTML
    moments: gr.State
    picked: gr.State
    source: LibrarySource


def about_html(source: LibrarySource) -> str:
    return (
        f'<div class="ml-about">Searches {html.escape(source.label)}: first the words of every caption '
        "window (full text), then Marlin's find only in the best "
        f"{source.engine.settings.search_candidates} windows. Each moment shows its score (find and text "
        "combined) and its text relevance; choose one to play it.</div>"
    )


def cost_html(source: LibrarySource) -> str:
    """Under Run: whether the examples' library ships with the app, else what building it costs."""
    price = "" if not source.cost or source.indexed() else source.cost
    notes = " ".join(html.escape(n) for n in (source.shipped, price) if n)
    return f'<p class="mx-note">{notes}</p>' if notes else ""


def headline_html(answer: dict[str, Any], tiny: bool, failures: list[str] | None = None) -> str:
    """The answer's head: how many moments in how many videos, or why none (``failures``: the build's)."""
    lib, n = answer["library"], len(answer["moments"])
    q, cls = html.escape(answer["query"]), " ml-none"
    if not lib["windows"]:
        why = f" {len(failures)} could not be indexed; the last: {failures[-1]}" if failures else ""
        body = html.escape(f"The library is empty: no video has been indexed yet.{why}")
    elif not n:
        body = "No moment found: no caption window matches these words, or find gave no span."
    else:
        videos = len({m["id"] for m in answer["moments"]})
        found = f"{n} moment{'s' if n != 1 else ''} in {videos} video{'s' if videos != 1 else ''}"
        body, cls = f"{found}: choose one to play it", ""
    asked = answer["searched_windows"]
    extra = (
        f"{lib['videos']} videos, {lib['windows']} caption windows; find was asked in {asked} "
        f"window{'s' if asked != 1 else ''} inside the best of them."
    )
    if tiny:
        extra += " Tiny stand-in: its captions and spans are meaningless."
    return (
        f'<div class="ml-head{cls}"><div class="ml-q">“{q}”</div><div>{body}</div>'
        f'<div class="ml-h">{extra}</div></div>'
    )


def gallery_items(source: LibrarySource, moments: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(thumbnail, caption) per moment: video, time span and both scores."""
    return [
        (
            str(source.folder / m["thumbnail"]),
            f"{m['video']} · {model_io.clock_span(m['start'], m['end'])} · score {m['score']:.2f} · "
            f"text {m['retrieval_score']:.2f}",
        )
        for m in moments
        if m.get("thumbnail") and (source.folder / m["thumbnail"]).is_file()
    ]


def search_updates(
    ctx: UIContext, tab: LibraryTab, query: str, visitor: str | None = None
) -> Generator[Updates, None, None]:
    """Build the library if needed, then search it window by window (failures raised for ``streamed``)."""
    source = tab.source
    clean = model_io.sanitize_query(query, ctx.engine.settings.max_query_chars)
    yield {
        tab.status: "",
        tab.gallery: None,
        tab.moments: [],
        tab.open_in_find: gr.update(visible=False),
        tab.chosen: "",
        tab.headline: '<div class="ml-head">Searching…</div>',
        tab.progress: progress_html(0.02, "Opening the library…"),
    }
    for done, failed, total in source.progress():  # the library is built: the videos captioned so far
        text = f"Indexing {source.label} once for this model: {done} of {total} videos captioned"
        if failed:
            text += f", {failed} could not be ({source.failures[-1] if source.failures else ''})"
        yield {tab.progress: progress_html(0.02 + 0.3 * (done + failed) / max(1, total), text + "…")}
    yield {tab.cost: cost_html(source)}  # built: what building it costs is no longer ahead
    yield from _stages(ctx, tab, clean, visitor)


def _stages(ctx: UIContext, tab: LibraryTab, clean: str, visitor: str | None) -> Iterator[Updates]:
    """The search as it runs (``LibrarySource.searching``); closing this (Stop) stops it."""
    stop = threading.Event()
    events = tab.source.searching(clean, DEFAULT_TOP_K, stop, visitor)
    try:
        for kind, value in events:
            if kind == "text":  # window k of n is asked
                k, n = value
                text = f"find answered in {k} of {n} windows…"
                if k == 0:  # the count the cost line said: find windows (search_windows)
                    text = f"Stage 1: the captions chose where to look; asking find in {n} window"
                    text += "s…" if n != 1 else "…"
                yield {tab.progress: progress_html(0.35 + 0.65 * k / max(1, n), text)}
            elif kind == "error":
                raise value
            else:
                yield _answer_updates(ctx, tab, value)
                return
    finally:
        stop.set()
        events.close()


def _answer_updates(ctx: UIContext, tab: LibraryTab, answer: SearchAnswer) -> Updates:
    d = answer.to_dict()
    with contextlib.closing(Store(tab.source.folder, create=False)) as store:
        paths = {h["id"]: h["path"] for h in store.videos()}
    moments = [{**m, "path": paths.get(m["id"], "")} for m in d["moments"]]
    return {
        tab.progress: "",
        tab.headline: headline_html(d, ctx.engine.settings.is_tiny, tab.source.failures),
        tab.gallery: gallery_items(tab.source, moments) or None,
        tab.moments: moments,
    }


STOPPED_HTML = (
    '<div class="ml-head ml-none"><div>Stopped</div><div class="ml-h">You stopped this search; '
    "an index being built goes on in the background.</div></div>"
)


def render(ctx: UIContext) -> LibraryTab:
    """Lay out the tab (its CSS comes with it: ``CSS``, scoped to ``#library-tab``)."""
    source = default_source(ctx)
    if source.items is not None and gpu_here():
        source.start()  # a GPU is here now: the index is ready before the first visitor asks
    with gr.Column(elem_id="library-tab"):
        gr.HTML(about_html(source), elem_id="library-about", js_on_load=LABELS_JS)
        with gr.Row(equal_height=False):
            with gr.Column(scale=5, min_width=320):
                query = gr.Textbox(
                    label="What happens? One question across every video",
                    placeholder="e.g. a ball rolls across the floor",
                    max_length=ctx.settings.max_query_chars,
                    lines=1,
                    elem_id="library-query",
                )
                status = gr.HTML("", elem_id="library-status")
                with gr.Row(elem_classes="mr-buttons"):
                    run = gr.Button("Search the library", variant="primary", elem_id="library-run")
                    stop = gr.Button("Stop", variant="stop", visible=False, elem_id="library-stop")
                # said again at each page load (blocks.py): once the index is built, building it is not ahead
                cost = gr.HTML(cost_html(source), elem_id="library-cost")
                progress = gr.HTML("", elem_id="library-progress")
                headline = gr.HTML("", elem_id="library-headline")
                gallery = gr.Gallery(
                    label="Moments, best first",  # the headline says to choose one
                    columns=3,
                    buttons=[],  # choosing is all a tile does; a button would sit on the label
                    height="auto",
                    allow_preview=False,
                    elem_id="library-moments",
                )
            with gr.Column(scale=5, min_width=320):
                player = gr.Video(label="The chosen moment", interactive=False, elem_id=PLAYER_ID, height=300)
                chosen = gr.HTML("", elem_id="library-chosen")
                open_in_find = gr.Button("Open in Find", visible=False, elem_id="library-open-find")
    return LibraryTab(
        query,
        run,
        stop,
        progress,
        headline,
        status,
        gallery,
        player,
        chosen,
        open_in_find,
        cost,
        gr.State([]),
        gr.State(None),
        source,
    )


def listen(ctx: UIContext, tab: LibraryTab, tabs: gr.Tabs, clip: Clip, find_query: gr.Textbox) -> None:
    """Run/Stop, choosing a moment (plays it there), "Open in Find" (Find run on it with the query)."""
    buttons = [tab.run, tab.stop]

    def begin(request: gr.Request, values: tuple[Any, ...]) -> Run:
        (query,) = values
        return Run("", {}, search_updates(ctx, tab, query, session_of(request)))  # no clip: until it ends

    def failed(said: str) -> Updates:
        return {tab.progress: "", tab.headline: "", tab.status: status_html(said, error=True)}

    outputs = [
        tab.progress,
        tab.headline,
        tab.status,
        tab.gallery,
        tab.moments,
        tab.open_in_find,
        tab.chosen,
        tab.cost,
        *buttons,
    ]
    wire_run_and_stop(
        [tab.run.click, tab.query.submit],
        streamed(ctx, "library", buttons, begin, {}, failed),
        [tab.query],
        outputs,
        buttons,
        tab.progress,
        lambda request: {tab.headline: STOPPED_HTML},
    )

    def priced(query: str) -> str:
        """A search's own cost before it runs, once the library is built (before, the tab's note says)."""
        if not (query or "").strip() or not tab.source.ready:
            return ""
        # no library yet, or a bad query (Run says why): nothing to price
        with (
            contextlib.suppress(LibraryError, ValueError),
            contextlib.closing(Store(tab.source.folder, create=False)) as store,
        ):
            windows = search_windows(store, query, ctx.engine.settings)
            return status_html(cost.search_cost_line(windows, ctx.engine.settings))
        return ""

    tab.query.change(priced, tab.query, tab.status, trigger_mode="always_last", **PRIVATE_UI)

    def choose(moments: list[dict[str, Any]], evt: gr.SelectData) -> Updates:
        m = moments[evt.index] if isinstance(evt.index, int) and evt.index < len(moments) else None
        if m is None or not m.get("path"):
            return {tab.chosen: status_html("This moment's video is not available.", error=True)}
        text = (
            f"<b>{html.escape(m['video'])}</b> · {model_io.clock(m['start'])} → {model_io.clock(m['end'])} · "
            f"score {m['score']:.2f} (text {m['retrieval_score']:.2f}; caption window "
            f"{model_io.clock_span(*m['window'])})"
        )
        return {
            tab.player: m["path"],
            tab.picked: m,
            tab.chosen: text,
            tab.open_in_find: gr.update(visible=True),
        }

    def jump(m: dict[str, Any] | None) -> Any:
        """A player seeks to the moment (a follow-up step: it cannot ride on the value update)."""
        return gr.skip() if not m else gr.update(playback_position=float(m["start"]))

    tab.gallery.select(
        choose, tab.moments, [tab.player, tab.picked, tab.chosen, tab.open_in_find], **PRIVATE_UI
    ).then(jump, tab.picked, tab.player, **PRIVATE_UI)

    def open_in_find(m: dict[str, Any] | None, query: str) -> Updates:
        if not m:
            return {}
        return {clip.video: m["path"], find_query: query, tabs: gr.Tabs(selected="find"), clip.tab: "find"}

    tab.open_in_find.click(
        open_in_find,
        [tab.picked, tab.query],
        [clip.video, find_query, tabs, clip.tab],
        api_visibility="private",
        show_progress="hidden",
    ).then(jump, tab.picked, clip.video, **PRIVATE_UI).then(None, js=RUN_FIND_JS, **PRIVATE_UI)


#: after "Open in Find": Find's own Run, clicked once the tab shows it and it accepts the query
RUN_FIND_JS = asset("run_find.js")
