"""Caption tab: "what happens" — scene paragraph, a clickable timeline, a table, captions on the player.

The UI event streams the text as the model writes it (private); the public
``/caption`` endpoint returns ``CaptionResult.to_dict()`` and nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import html
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from marlin_demo import service, space, subtitles
from marlin_demo.contract import Event
from marlin_demo.results import CaptionResult, Done, Loaded, Prepared, Progress, Stage
from marlin_demo.ui import timeline
from marlin_demo.ui.common import (
    GPU_EVENT,
    PRIVATE_UI,
    UIContext,
    error_html,
    example_cache_kwargs,
    metrics_html,
    notice_html,
    pick_variant,
    require_upload,
    run_example,
    tiny_in_use,
    upload_video,
    user_errors,
    write_json,
)
from marlin_demo.ui.credits import credit_box, credit_line

PLAYER_ID = "caption-player"
TABLE_HEADERS = ["#", "Start (s)", "End (s)", "Event"]


@dataclass
class CaptionTab:
    video: gr.Video
    variant: gr.Radio
    run: gr.Button
    player: gr.Video
    timeline: gr.HTML
    scene: gr.HTML
    notice: gr.HTML
    table: gr.Dataframe
    metrics: gr.HTML
    files: gr.File
    raw: gr.Textbox
    api_button: gr.Button
    api_out: gr.JSON
    api_stream_button: gr.Button
    examples: gr.helpers.Examples | None = None

    @property
    def outputs(self) -> list[Any]:
        return [
            self.scene,
            self.timeline,
            self.table,
            self.player,
            self.metrics,
            self.files,
            self.raw,
            self.notice,
        ]


def scene_html(scene: str) -> str:
    text = html.escape(scene) if scene.strip() else "<i>The answer had no scene paragraph.</i>"
    return f'<div class="mc-scene"><div class="mc-label">Scene</div><p>{text}</p></div>'


def live_html(text: str, stage: str) -> str:
    body = f"<pre>{html.escape(text)}</pre>" if text else ""
    return f'<div class="mc-scene mc-live"><div class="mc-label">{html.escape(stage)}</div>{body}</div>'


def throttled(stages: Generator[Stage, None, None], every: float) -> Iterator[Stage]:
    """The request's stages with its texts at most every ``every`` s (no redraw per token)."""
    last = 0.0
    with contextlib.closing(stages):  # closing this closes the request: its generation stops
        for stage in stages:
            if isinstance(stage, Progress):
                now = time.monotonic()
                if stage.text and now - last >= every:
                    last = now
                    yield stage
                elif not stage.text and stage.window is not None:  # a long video's next window starts
                    yield stage
            else:
                yield stage


def stream_message(
    text: str, result: CaptionResult | None = None, window: int | None = None, windows: int | None = None
) -> dict[str, Any]:
    """One message of ``/caption_stream``: the text so far; the last one adds the finished result.

    The result is exactly ``/caption``'s JSON; ``first_text_s`` (seconds from the request's
    start to the first visible text) sits beside it so that shape stays the same. On a long
    video a message also has ``window`` and ``windows`` (window k of n, 1-based); ``text`` is
    then that window's answer so far.
    """
    if result is None:
        msg: dict[str, Any] = {"done": False, "text": text}
        if window is not None:
            msg.update(window=window, windows=windows)
        return msg
    first = result.info.first_text_s
    return {
        "done": True,
        "text": text,
        "first_text_s": None if first is None else round(first, 3),
        "result": result.to_dict(),
    }


def final_outputs(ctx: UIContext, result: CaptionResult, video: str, cold: bool) -> tuple[Any, ...]:
    """Every output of a finished caption: also what the cached examples store."""
    folder = ctx.new_run_dir("caption")
    data = result.to_dict()
    files = [str(write_json(folder / "events.json", data))]
    vtt_path = folder / "events.vtt"
    vtt_path.write_text(subtitles.to_webvtt(result.events), encoding="utf-8")
    files.append(str(vtt_path))
    srt = subtitles.to_srt(result.events)
    if srt:
        (folder / "events.srt").write_text(srt, encoding="utf-8")
        files.append(str(folder / "events.srt"))
    duration = result.info.duration_s
    # Plain values only (the captions are attached by the `with_subtitles` follow-up): Gradio 6.31's
    # lazy example caching cannot apply prop updates ("'Video' object has no attribute 'info'").
    if result.events:
        tl = timeline.timeline_html(duration, result.events, player=f"#{PLAYER_ID}")
    else:
        tl = timeline.placeholder(
            "No timed events could be read from the answer, so there is nothing to draw."
        )
    rows = [[i + 1, round(e.start, 2), round(e.end, 2), e.description] for i, e in enumerate(result.events)]
    notice = notice_html(
        tiny=tiny_in_use(ctx),
        format_ok=result.format_ok,
        repaired=result.repaired,
        repairs=result.info.repairs,
        what="caption",
    )
    return (
        scene_html(result.scene),
        tl,
        rows,
        video,
        metrics_html(data["metrics"], cold, result.variant, result.info),
        files,
        result.raw,
        notice,
    )


def _events_from_table(table: Any) -> list[Event]:
    """The events back from the table's value (a DataFrame, or rows), skipping unreadable rows."""
    rows = table.values.tolist() if hasattr(table, "values") else list(table or [])
    events = []
    for row in rows:
        try:
            events.append(Event(float(row[1]), float(row[2]), str(row[3])))
        except (TypeError, ValueError, IndexError):
            continue
    return events


def with_subtitles(ctx: UIContext, table: Any) -> Any:
    """Follow-up step: the player shows the table's events as captions (WebVTT), or none."""
    events = _events_from_table(table)
    if not events:
        return gr.update(subtitles=None)
    path = ctx.new_run_dir("subtitles") / "events.vtt"
    path.write_text(subtitles.to_webvtt(events), encoding="utf-8")
    return gr.update(subtitles=str(path))


def render(ctx: UIContext) -> CaptionTab:
    """Lay out the tab (inside the caller's ``gr.Tab``); outputs are made first so examples can name them."""
    player = gr.Video(
        label="Playback, with the events as captions",
        interactive=False,
        elem_id=PLAYER_ID,
        height=300,
        render=False,
    )
    tl = gr.HTML(
        timeline.placeholder(
            "Run a caption: its events appear here on a time axis; click one to jump there."
        ),
        js_on_load=timeline.TIMELINE_JS,
        elem_id="caption-timeline",
        render=False,
    )
    scene = gr.HTML("", elem_id="caption-scene", render=False)
    notice = gr.HTML("", elem_id="caption-notice", render=False)
    table = gr.Dataframe(
        headers=TABLE_HEADERS,
        datatype=["number", "number", "number", "str"],
        interactive=False,
        wrap=True,
        label="Events",
        elem_id="caption-table",
        column_widths=["8%", "14%", "14%", "64%"],
        render=False,
    )
    metrics = gr.HTML("", elem_id="caption-metrics", render=False)
    files = gr.File(
        label="Downloads: events as JSON, WebVTT and SRT",
        file_count="multiple",
        interactive=False,
        elem_id="caption-files",
        height=210,
        render=False,
    )
    raw = gr.Textbox(
        label="Exactly what the model wrote",
        lines=6,
        interactive=False,
        buttons=["copy"],
        elem_id="caption-raw",
        render=False,
    )
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=320):
            video = upload_video(label="Video", sources=["upload"], elem_id="caption-video", height=280)
            credit = credit_box("caption-credit")
            video.change(functools.partial(credit_line, ctx), video, credit, **PRIVATE_UI)
            variant = gr.Radio(
                ctx.variant_choices(), value=ctx.default_variant, label="Variant", elem_id="caption-variant"
            )
            run = gr.Button("Caption this video", variant="primary", elem_id="caption-run")
            api_button = gr.Button("api", visible=False)
            api_out = gr.JSON(label="caption", visible=False)
            tab = CaptionTab(
                video,
                variant,
                run,
                player,
                tl,
                scene,
                notice,
                table,
                metrics,
                files,
                raw,
                api_button,
                api_out,
                gr.Button("api-stream", visible=False),
            )
            tab.examples = _examples(ctx, tab)
        with gr.Column(scale=7, min_width=360):
            player.render()
            tl.render()
            scene.render()
            notice.render()
    with gr.Row(equal_height=False):
        with gr.Column(scale=7, min_width=360):
            table.render()
        with gr.Column(scale=5, min_width=320):
            metrics.render()
            files.render()
    with gr.Accordion("Raw model output", open=False, elem_id="caption-raw-acc"):
        raw.render()
    return tab


def _examples(ctx: UIContext, tab: CaptionTab) -> gr.helpers.Examples | None:
    if not ctx.examples:
        return None

    def example_fn(video: str, variant: str) -> tuple[Any, ...]:
        def run(path: str, v: str) -> CaptionResult:
            result = service.run(ctx.engine, "caption", path, v)
            assert isinstance(result, CaptionResult)
            return result

        return run_example(ctx, video, variant, run, final_outputs)

    return gr.Examples(
        examples=[[str(ctx.clip(e)), ctx.default_variant] for e in ctx.examples],
        inputs=[tab.video, tab.variant],
        outputs=tab.outputs,
        fn=example_fn,
        example_labels=[f"▶ {e.get('title') or e['video']}" for e in ctx.examples],
        elem_id="caption-examples",
        **example_cache_kwargs(ctx),
    )


def listen(ctx: UIContext, tab: CaptionTab) -> None:
    """Wire the UI streaming event and the public ``/caption`` endpoint."""

    @space.gpu(space.duration_for("caption"))
    def caption_ui(video: str | None, variant: str, progress: gr.Progress = gr.Progress()) -> Iterator[Any]:  # noqa: B008
        skip = gr.skip()
        try:
            path = require_upload(video, ctx)
            v = pick_variant(variant, ctx)
            yield (live_html("", "Reading the video…"), skip, skip, skip, "", None, "", "")
            with user_errors():
                progress(0.05, desc="Checking and decoding the video")
                budget = max(1, ctx.settings.caption_max_new_tokens) * 4  # ~characters per token
                stages = service.stream(ctx.engine, "caption", path, v)
                for stage in throttled(stages, ctx.settings.stream_every_s):
                    if isinstance(stage, Prepared):
                        frames, tokens = stage.plan.nframes, stage.plan.video_tokens
                        if service.is_cold(ctx.engine, v):
                            progress(0.2, desc=f"Loading {v} (first use of this variant)")
                    elif isinstance(stage, Loaded):
                        cold = stage.cold
                        progress(0.35, desc=f"Prefill: reading {frames} frames ({tokens} video tokens)")
                    elif isinstance(stage, Progress):
                        text = stage.text
                        if stage.window is not None and stage.windows:  # window k of n of a long video
                            done = (stage.window - 1 + min(1.0, len(text) / budget)) / stage.windows
                            progress(
                                min(0.98, 0.5 + 0.48 * done), desc=f"Window {stage.window} of {stage.windows}"
                            )
                        else:
                            progress(min(0.98, 0.5 + 0.48 * len(text) / budget), desc="Generating")
                        yield (live_html(text, f"{v} is writing…"), skip, skip, skip, skip, skip, text, skip)
                    elif isinstance(stage, Done):
                        assert isinstance(stage.result, CaptionResult)
                        yield final_outputs(ctx, stage.result, path, cold)
        except gr.Error as exc:
            yield (
                error_html(exc.message),
                timeline.placeholder("No result."),
                skip,
                skip,
                "",
                None,
                skip,
                "",
            )
            raise

    @space.gpu(space.duration_for("caption"))
    def caption(video: str | None, variant: str = "gptq") -> dict[str, Any]:
        """Describe what happens in a video: a scene paragraph and its events with start and end times.

        Args:
            video: The clip (MP4, WebM, MOV or MKV) as an uploaded file; a path on the server is refused.
            variant: Which copy of Marlin-2B answers: "gptq" (GPTQ 4-bit, the default), "bnb4"
                (bitsandbytes nf4 4-bit) or "bf16" (16-bit), among those this server offers.

        Returns:
            JSON {"variant": str, "model": str, "scene": str, "events": [{"start": float, "end": float,
            "description": str}], "raw": str, "repaired": bool, "metrics": {"latency_s": float,
            "ttft_s": float, "output_tokens": int, "tokens_per_s": float, "video_tokens": int,
            "peak_memory_mb": float, "memory_kind": str, "load_s": float|null, "device": str}}.
            Times are seconds from the start of the clip and lie inside it; "raw" is exactly what the
            model wrote; "repaired" is true when events were clamped into the clip or de-duplicated.
        """
        path = require_upload(video, ctx)
        v = pick_variant(variant, ctx)
        with user_errors():
            return service.run(ctx.engine, "caption", path, v).to_dict()

    def subtitles_step(table: Any) -> Any:
        return with_subtitles(ctx, table)

    follow_up: dict[str, Any] = {
        "fn": subtitles_step,
        "inputs": tab.table,
        "outputs": tab.player,
        **PRIVATE_UI,
    }
    tab.run.click(
        caption_ui,
        [tab.video, tab.variant],
        tab.outputs,
        api_visibility="private",
        show_progress_on=[tab.timeline],
        **GPU_EVENT,
    ).then(**follow_up)
    if tab.examples is not None and tab.examples.cache_event is not None:
        tab.examples.cache_event.then(**follow_up)  # cached outputs are plain values: add the captions
    tab.api_button.click(
        caption,
        [tab.video, tab.variant],
        tab.api_out,
        api_name="caption",
        api_description="Scene paragraph and timed events: "
        "{variant, model, scene, events, raw, repaired, metrics}",
        **GPU_EVENT,
    )

    @space.gpu(space.duration_for("caption"))
    def caption_stream(video: str | None, variant: str = "gptq") -> Iterator[dict[str, Any]]:
        """The caption as the model writes it, then the finished result (see stream_message)."""
        path = require_upload(video, ctx)
        v = pick_variant(variant, ctx)
        with user_errors():
            stages = service.stream(ctx.engine, "caption", path, v)
            for stage in throttled(stages, ctx.settings.stream_every_s):
                if isinstance(stage, Progress):
                    yield stream_message(stage.text, window=stage.window, windows=stage.windows)
                elif isinstance(stage, Done):
                    assert isinstance(stage.result, CaptionResult)
                    yield stream_message(stage.result.raw, stage.result)

    tab.api_stream_button.click(
        caption_stream,
        [tab.video, tab.variant],
        tab.api_out,
        api_name="caption_stream",
        api_description="The caption while it is written: {done: false, text} messages, then "
        "{done: true, text, first_text_s, result} with result as /caption returns it",
        **GPU_EVENT,
    )
