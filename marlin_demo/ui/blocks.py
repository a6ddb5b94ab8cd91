"""Assemble the app, and what ``launch()`` needs (Gradio 6 takes theme, css, js and head there)."""

from __future__ import annotations

import functools
import importlib.util
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

import gradio as gr
from gradio.blocks import Block

from marlin_demo import service, tasks
from marlin_demo.engine import Engine
from marlin_demo.service import gpu_calls
from marlin_demo.service.startup import ModelStatus
from marlin_demo.settings import EXAMPLES_FILE, Settings
from marlin_demo.ui import (
    about,
    api,
    compare_tab,
    find,
    gradio_hooks,
    header,
    library,
    run_tab,
    shared_clip,
    task_views,
    timeline,
)
from marlin_demo.ui.assets import asset
from marlin_demo.ui.context import (
    PRIVATE_UI,
    UIContext,
    available_examples,
    cache_mode_from_env,
    default_output_dir,
)
from marlin_demo.ui.running import Updates

TITLE = "Marlin-2B · what happens, and when"

log = logging.getLogger(__name__)

CSS = asset("style.css") + timeline.TIMELINE_CSS + library.CSS

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
    soft = gr.themes.Soft(
        primary_hue="teal", secondary_hue="sky", neutral_hue="slate", font=fonts, font_mono=mono
    )
    # WCAG AA (4.5:1) in both modes (axe-core checks it): the Soft theme's greys and teals measure 2.2-3.7:1
    return soft.set(
        body_text_color_subdued="*neutral_600",
        body_text_color_subdued_dark="*neutral_400",
        color_accent="*primary_700",
        block_label_text_color="*primary_800",
        block_label_text_color_dark="white",
        block_label_background_fill_dark="*primary_800",
        block_title_text_color="*primary_800",
        block_title_text_color_dark="*primary_200",
        link_text_color="*secondary_700",
        link_text_color_visited="*secondary_800",
        link_text_color_dark="*secondary_300",
        link_text_color_visited_dark="*secondary_300",
        button_primary_background_fill="*primary_700",
        button_primary_background_fill_hover="*primary_800",
        button_primary_background_fill_dark="*primary_700",
        button_primary_background_fill_hover_dark="*primary_800",
        checkbox_label_background_fill_selected="*primary_700",
        checkbox_label_background_fill_selected_dark="*primary_700",
        checkbox_label_text_color_selected_dark="white",
    )


def answer_examples_at_start(ctx: UIContext) -> threading.Thread:
    """``MARLIN_CACHE_EXAMPLES=eager``: every example answered once in the background, and kept."""

    def run() -> None:
        for example in ctx.examples:
            path = str(ctx.clip(example))
            jobs = [(task.name, q) for task in tasks.TASKS.values() for q in task.examples(example)[:1]]
            for task, query in jobs:
                key = ctx.answers.key(task, example, ctx.default_variant, query)
                if ctx.answers.get(key) is not None:
                    continue
                cold = not ctx.engine.is_loaded(ctx.default_variant)
                try:
                    result = service.run(ctx.engine, task, path, ctx.default_variant, query)
                except Exception:  # an example that cannot be answered runs live on its click
                    log.exception("example %s (%s) could not be answered at start-up", example["video"], task)
                    continue
                ctx.answers.keep(key, result, cold)

    return gpu_calls.uncharged(run, "marlin-examples")


def mcp_on(settings: Settings) -> bool:
    """The ``mcp_server`` launch argument: the setting, when ``gradio[mcp]`` is installed."""
    if settings.mcp and importlib.util.find_spec("mcp") is None:
        log.warning("MARLIN_MCP is on but the mcp package is missing (pip install 'gradio[mcp]')")
        return False
    return settings.mcp


def make_context(engine: Engine, settings: Settings, status: ModelStatus | None = None) -> UIContext:
    """The shared context: engine, settings, output folder, examples and how they are cached."""
    status = status or ModelStatus(requested=settings.model)
    out = default_output_dir(settings)
    out.mkdir(parents=True, exist_ok=True)
    return UIContext(
        engine=engine,
        settings=settings,
        status=status,
        output_dir=out,
        cache_mode=cache_mode_from_env(),
        examples=available_examples(settings.examples_path / EXAMPLES_FILE),
        examples_dir=settings.examples_path,
    )


def build_demo(
    engine: Engine, settings: Settings, status: ModelStatus | None = None
) -> tuple[gr.Blocks, dict[str, Any]]:
    """The Blocks app and its ``launch()`` keywords (``engine`` may be the stand-in: ``status`` says why)."""
    ctx = make_context(engine, settings, status)
    gradio_hooks.remember_playable()  # before the examples are shown: each clip probed once
    with gr.Blocks(title=TITLE, analytics_enabled=False) as demo:
        head = header.render(ctx)
        clip = shared_clip.render(ctx)  # above the tabs: the clip Caption, Find and Compare share
        # on a phone the tabs wrap onto a second row instead of hiding in Gradio's "..." menu
        with gr.Tabs(elem_id="marlin-tabs", overflow_behavior="wrap") as tabs:
            runs = task_views.render(ctx, clip)  # a tab per task: Caption, Find (and any task registered)
            with gr.Tab("Compare · GPTQ vs bnb4", id="compare", elem_id="tab-compare"), run_tab.page():
                cmp_tab = compare_tab.render(ctx, clip)
            with gr.Tab("Library · search all", id="library", elem_id="tab-library"):
                lib = library.render(ctx)
            with gr.Tab("About", id="about", elem_id="tab-about"):
                about.render(ctx)
        # the chips follow the engine: a result in any tab may have loaded (or failed) a variant
        header.listen(ctx, demo, head, after=[*(run.metrics for run in runs.values()), cmp_tab.metrics_table])
        compare_cleared = functools.partial(compare_tab.cleared_outputs, cmp_tab)
        cleared: dict[str, tuple[list[Block], Callable[[], Updates]]] = {
            run.name: (run.results, run.cleared) for run in runs.values()
        }
        cleared["compare"] = (list(compare_cleared()), compare_cleared)
        shared_clip.listen(ctx, clip, cleared, tabs, [cmp_tab.task, cmp_tab.include_bf16])
        for run in runs.values():
            run.listen(ctx)
        compare_tab.listen(ctx, cmp_tab)
        library.listen(ctx, lib, tabs, clip, cast(find.FindTab, runs["find"]).query)
        # a private load step (a callable value would be a public endpoint of its own)
        demo.load(functools.partial(library.cost_html, lib.source), None, lib.cost, **PRIVATE_UI)
        api.declare(ctx, lib)  # the public endpoints, and so the MCP tools
    gradio_hooks.refuse_url_downloads(demo)
    # the one gate that bounds what waits before any of our code runs; the scheduler orders the model work
    demo.queue(max_size=settings.queue_size, default_concurrency_limit=4)
    gradio_hooks.quiet_queue(demo)
    if ctx.cache_mode == "eager":
        answer_examples_at_start(ctx)
    return demo, {
        "theme": theme(),
        "css": CSS,
        "js": None,
        "head": HEAD,
        "allowed_paths": [str(ctx.examples_dir), str(ctx.output_dir), *lib.source.allowed_paths()],
        "max_file_size": f"{settings.max_upload_mb:g}mb",
        "show_error": True,
        "mcp_server": mcp_on(settings),
    }
