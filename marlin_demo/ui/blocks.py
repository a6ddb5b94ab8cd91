"""Assemble the app: header, the four tabs, the queue, and what ``launch()`` needs (theme, css, js, head).

In Gradio 6 the theme, CSS, JS and head go to ``launch()``, not ``Blocks()``,
so ``build_demo`` returns them beside the Blocks for ``app.py`` to pass on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gradio as gr

from marlin_demo.engine import Engine
from marlin_demo.service import space
from marlin_demo.service.startup import ModelStatus
from marlin_demo.settings import EXAMPLES_FILE, Settings
from marlin_demo.ui import (
    about,
    api_docs,
    caption,
    compare,
    example_notes,
    find,
    header,
    library,
    mcp_tools,
    one_clip,
    timeline,
)
from marlin_demo.ui.common import (
    UIContext,
    available_examples,
    cache_mode_from_env,
    default_output_dir,
    example_cache_root,
    examples_dir_for,
    prune_stale_example_cache,
)

TITLE = "Marlin-2B · what happens, and when"

CSS = Path(__file__).with_name("style.css").read_text(encoding="utf-8") + timeline.TIMELINE_CSS + library.CSS

HEAD = (
    '<meta name="description" content="Marlin-2B: video captions with timed events, and temporal grounding. '
    'Compare GPTQ and bnb4 4-bit variants.">'
)


def theme() -> gr.themes.Base:
    """Soft theme with system fonts only (no web-font download: the app must work offline)."""
    fonts = [
        "ui-sans-serif",
        "system-ui",
        "-apple-system",
        "Segoe UI",
        "Roboto",
        "Helvetica",
        "Arial",
        "sans-serif",
    ]
    mono = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]
    return gr.themes.Soft(
        primary_hue="teal", secondary_hue="sky", neutral_hue="slate", font=fonts, font_mono=mono
    )


@contextmanager
def _examples_cache(root: Path) -> Iterator[None]:
    """Point Gradio's example cache at ``root`` while the Examples are created (they read it then)."""
    old = os.environ.get("GRADIO_EXAMPLES_CACHE")
    os.environ["GRADIO_EXAMPLES_CACHE"] = str(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("GRADIO_EXAMPLES_CACHE", None)
        else:
            os.environ["GRADIO_EXAMPLES_CACHE"] = old


def make_context(engine: Engine, settings: Settings, status: ModelStatus | None = None) -> UIContext:
    """The shared context: engine, settings, output folder, examples and how they are cached."""
    status = status or ModelStatus(requested=settings.model)
    out = default_output_dir(settings)
    out.mkdir(parents=True, exist_ok=True)
    examples_dir = examples_dir_for(settings)
    return UIContext(
        engine=engine,
        settings=settings,
        status=status,
        output_dir=out,
        cache_mode=cache_mode_from_env(space.on_space()),
        examples=available_examples(examples_dir / EXAMPLES_FILE),
        examples_dir=examples_dir,
    )


def build_demo(
    engine: Engine, settings: Settings, status: ModelStatus | None = None
) -> tuple[gr.Blocks, dict[str, Any]]:
    """The Blocks app and the keyword arguments its ``launch()`` needs.

    ``settings`` are the settings asked for; ``engine.settings`` may differ
    (the tiny stand-in after a failed load), and ``status`` says why.
    """
    ctx = make_context(engine, settings, status)
    cache_root = example_cache_root(ctx)
    prune_stale_example_cache(cache_root)
    with _examples_cache(cache_root), gr.Blocks(title=TITLE, analytics_enabled=False) as demo:
        head = header.render(ctx)
        # on a phone the tabs wrap onto a second row instead of hiding in Gradio's "..." menu
        with gr.Tabs(elem_id="marlin-tabs", overflow_behavior="wrap") as tabs:
            with gr.Tab("Caption · what happens", id="caption", elem_id="tab-caption"):
                cap = caption.render(ctx)
            with gr.Tab("Find · when", id="find", elem_id="tab-find"):
                fnd = find.render(ctx)
            with gr.Tab("Compare · GPTQ vs bnb4", id="compare", elem_id="tab-compare"):
                cmp_tab = compare.render(ctx)
            with gr.Tab("Library · search all", id="library", elem_id="tab-library"):
                lib = library.render(ctx)
            with gr.Tab("About", id="about", elem_id="tab-about"):
                abt = about.render(ctx)
        # the chips follow the engine: a result in any tab may have loaded (or failed) a variant
        # (components set once per result, not per streamed token)
        header.listen(ctx, demo, head, after=[cap.metrics, fnd.metrics, cmp_tab.metrics_table])
        one_clip.follow([cap.video, fnd.video, cmp_tab.video])  # one clip for every tab
        api_docs.use_local_examples([cap.video, fnd.video, cmp_tab.video], [fnd.query, cmp_tab.query])
        example_notes.one_progress_area(demo, cap.examples, cap.timeline)
        example_notes.one_progress_area(demo, fnd.examples, fnd.headline)
        caption.listen(ctx, cap)
        find.listen(ctx, fnd)
        compare.listen(ctx, cmp_tab)
        about.listen(ctx, abt)
        library.listen(ctx, lib, tabs, fnd.video, fnd.query)
    demo.queue(max_size=settings.queue_size, default_concurrency_limit=4)
    launch_kwargs: dict[str, Any] = {
        "theme": theme(),
        "css": CSS,
        "js": None,
        "head": HEAD,
        "allowed_paths": [str(ctx.examples_dir), str(ctx.output_dir), *lib.source.allowed_paths()],
        "max_file_size": f"{settings.max_upload_mb:g}mb",
        "show_error": True,
        "mcp_server": mcp_tools.enable(demo, ctx),
    }
    return demo, launch_kwargs
