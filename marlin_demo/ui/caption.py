"""Caption tab: "what happens" — scene paragraph, a clickable timeline, a table, captions on the player.

The UI event streams the text as the model writes it (private); the public
``/caption`` endpoint returns ``CaptionResult.to_dict()`` and nothing else.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from marlin_demo import service, subtitles
from marlin_demo.contract import Event
from marlin_demo.results import CaptionResult, Result, Window
from marlin_demo.ui import example_notes, timeline
from marlin_demo.ui.common import (
    GPU_EVENT,
    PRIVATE_UI,
    STATUS_JS,
    UIContext,
    clip_status,
    clip_stem,
    example_labels,
    examples_label,
    examples_note,
    kept_answer,
    metrics_html,
    notice_html,
    pick_variant,
    require_upload,
    status_html,
    tiny_in_use,
    upload_video,
    user_errors,
    write_json,
)
from marlin_demo.ui.credits import credit_box, credit_line
from marlin_demo.ui.running import (
    BarView,
    RunState,
    StageView,
    Updates,
    clear_when_clip_changes,
    follow,
    owns,
    scroll_mark,
    waiting_updates,
    wire_run_and_stop,
    with_buttons,
)

PLAYER_ID = "caption-player"
PLACEHOLDER = "Choose a clip and caption it: its events appear here on a time axis; click one to play it."
GHOST = ((0.03, 0.28), (0.34, 0.61), (0.67, 0.96))  # the empty timeline's faint bars: timed events
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
    status: gr.HTML
    progress: gr.HTML
    stop: gr.Button
    examples: gr.helpers.Examples | None = None

    @property
    def outputs(self) -> list[Any]:
        """What a finished caption fills (also what a cached example stores)."""
        return [
            self.scene,
            self.timeline,
            self.table,
            self.player,
            self.metrics,
            self.files,
            self.raw,
            self.notice,
            self.progress,
        ]


def scene_html(scene: str, scroll: bool = False) -> str:
    """The scene paragraph; ``scroll``: a finished result, brought into view with the player above it."""
    text = html.escape(scene) if scene.strip() else "<i>The answer had no scene paragraph.</i>"
    mark = scroll_mark(f"#{PLAYER_ID}") if scroll else ""
    return f'<div class="mc-scene"{mark}><div class="mc-label">Scene</div><p>{text}</p></div>'


def live_html(text: str, stage: str) -> str:
    body = f"<pre>{html.escape(text)}</pre>" if text else ""
    return f'<div class="mc-scene mc-live"><div class="mc-label">{html.escape(stage)}</div>{body}</div>'


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
        "result": caption_json(result),
    }


def stopped_html() -> str:
    return (
        '<div class="mc-scene mc-stopped"><div class="mc-label">Stopped</div>'
        "<p>You stopped this caption before it finished. Run it again for a full answer.</p></div>"
    )


def _windows_of(result: CaptionResult) -> list[tuple[float, float]]:
    return [(w["start"], w["end"]) for w in result.windows] if len(result.windows) > 1 else []


def _rows(events: list[Event]) -> Any:
    """The events table (times rounded to tenths, as the timeline shows them), shown only with rows.

    Hidden by ``visible="hidden"``, not by CSS on its own rows: a table hidden until it has drawn a
    row sometimes never drew one (Gradio draws the rows that fit the table's height, zero while hidden).
    """
    rows = [[i + 1, round(e.start, 1), round(e.end, 1), e.description] for i, e in enumerate(events)]
    return gr.update(value=rows, visible=True if rows else "hidden")


def _downloads(ctx: UIContext, result: CaptionResult, video: str) -> list[str]:
    """The caption as JSON (with its chapters), WebVTT, SRT and YouTube chapters, named after the clip."""
    folder = ctx.new_run_dir("caption")
    stem = clip_stem(video)
    data = caption_json(result)
    files = [str(write_json(folder / f"{stem}.events.json", data))]
    vtt_path = folder / f"{stem}.vtt"
    vtt_path.write_text(subtitles.to_webvtt(result.events), encoding="utf-8")
    files.append(str(vtt_path))
    srt = subtitles.to_srt(result.events)
    if srt:
        (folder / f"{stem}.srt").write_text(srt, encoding="utf-8")
        files.append(str(folder / f"{stem}.srt"))
    if data["chapters"]["lines"]:
        path = folder / f"{stem}.chapters.txt"
        path.write_text("\n".join(data["chapters"]["lines"]) + "\n", encoding="utf-8")
        files.append(str(path))
    return files


caption_json = service.caption_json  # ``/caption``'s JSON, the CLI's too


def chapters_html(result: CaptionResult) -> str:
    """The chapters a video description takes, ready to copy; or the sentence saying why there are none."""
    ch = subtitles.chapters(result.events, result.info.duration_s)
    if not ch.lines:
        reason = html.escape(ch.reason)
        return f'<div class="mc-chapters"><div class="mc-label">Chapters</div><p>{reason}</p></div>'
    text = html.escape("\n".join(ch.lines))
    return (
        '<div class="mc-chapters"><div class="mc-label">Chapters (paste into a video description)</div>'
        f"<pre>{text}</pre></div>"
    )


def final_outputs(tab: CaptionTab, ctx: UIContext, result: CaptionResult, video: str, cold: bool) -> Updates:
    """Every output of a finished caption (also what a kept example answer shows again)."""
    duration = result.info.duration_s
    if result.events:
        tl = timeline.timeline_html(
            duration, result.events, player=f"#{PLAYER_ID}", windows=_windows_of(result)
        )
    else:
        tl = timeline.placeholder(
            "No timed events could be read from the answer, so there is nothing to draw."
        )
    notice = notice_html(
        tiny=tiny_in_use(ctx),
        format_ok=result.format_ok,
        repaired=result.repaired,
        repairs=result.info.repairs,
        what="caption",
    )
    return {
        tab.scene: scene_html(result.scene, scroll=True) + chapters_html(result),
        tab.timeline: tl,
        tab.table: _rows(result.events),
        tab.player: video,
        tab.metrics: metrics_html(
            result.to_dict()["metrics"],
            cold,
            result.variant,
            result.info,
            reuse=ctx.reuse_note(result.variant, result.info, result.metrics.ttft_s),
        ),
        tab.files: _downloads(ctx, result, video),
        tab.raw: result.raw,
        tab.notice: notice,
        tab.progress: "",
    }


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
        label="Playback · events as captions",  # short: a phone fits it beside the download button
        interactive=False,
        elem_id=PLAYER_ID,
        height=300,
        render=False,
    )
    tl = gr.HTML(
        timeline.placeholder(PLACEHOLDER, GHOST),
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
        visible="hidden",  # until a result has events (see _rows)
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
        render=False,
    )
    progress = gr.HTML("", elem_id="caption-progress", render=False)
    raw = gr.Textbox(
        label="Exactly what the model wrote",
        lines=6,
        interactive=False,
        buttons=["copy"],
        elem_id="caption-raw",
        render=False,
    )
    with gr.Row(equal_height=False, elem_classes="mr-tab"):
        with gr.Column(scale=5, min_width=320, elem_classes="mr-inputs"):
            video = upload_video(label="Video", sources=["upload"], elem_id="caption-video", height=280)
            status = gr.HTML("", js_on_load=STATUS_JS, elem_id="caption-status", elem_classes="mr-slim")
            credit = credit_box("caption-credit")
            video.change(functools.partial(credit_line, ctx), video, credit, **PRIVATE_UI)
            video.change(functools.partial(clip_status, ctx, task="caption"), video, status, **PRIVATE_UI)
            variant = gr.Radio(
                ctx.variant_choices(),
                value=ctx.default_variant,
                label="Variant",
                info=ctx.status.withheld_note or None,  # a variant this machine cannot run: why
                elem_id="caption-variant",
            )
            with gr.Row(elem_classes="mr-buttons"):
                run = gr.Button("Caption this video", variant="primary", elem_id="caption-run")
                stop = gr.Button("Stop", variant="stop", visible=False, elem_id="caption-stop")
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
                status=status,
                progress=progress,
                stop=stop,
            )
            with gr.Column(elem_classes="mr-examples"):  # on a phone: after the result (style.css)
                tab.examples = _examples(ctx, tab)
        with gr.Column(scale=7, min_width=360, elem_classes="mr-results"):
            progress.render()
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
    """The examples fill the inputs; the run after that is Run's own (see ``_listen_ui``)."""
    if not ctx.examples:
        return None
    examples = gr.Examples(
        examples=[[str(ctx.clip(e)), ctx.default_variant] for e in ctx.examples],
        inputs=[tab.video, tab.variant],
        example_labels=example_labels([f"▶ {e.get('title') or e['video']}" for e in ctx.examples]),
        label=examples_label(ctx),
        examples_per_page=8,
        elem_id="caption-examples",
    )
    gr.HTML(examples_note(ctx), elem_id="caption-examples-note")
    return examples


class CaptionView(BarView):
    """The Caption tab while the model writes: the text as it comes; on a long video each answered
    window's events join the timeline."""

    def __init__(self, ctx: UIContext, tab: CaptionTab, path: str, variant: str) -> None:
        budget = max(1, ctx.settings.caption_max_new_tokens) * 4  # ~characters per token
        super().__init__(
            tab.progress,
            variant,
            functools.partial(service.is_cold, ctx.engine, variant),
            written=lambda text: min(1.0, len(text) / budget),
            window_step=": writing",
        )
        self.ctx, self.tab, self.path = ctx, tab, path
        self.windows: list[Window] = []  # a long video's windows (none: answered whole)
        self.events: list[Event] = []  # the answered windows' events, merged by the runner
        self.duration = 0.0
        self.result: CaptionResult | None = None  # the finished answer (kept when it is an example's)
        self.cold = False

    def start(self) -> Updates:
        """The last result is cleared as the request starts."""
        t = self.tab
        cleared: Updates = {
            t.timeline: timeline.placeholder("The events appear here as the model writes them."),
            t.table: _rows([]),
            t.player: None,
            t.metrics: "",
            t.files: None,
            t.raw: "",
            t.notice: "",
        }
        return {t.scene: live_html("", "Reading the video…"), **cleared, **self.reading()}

    def prepared(self, run: RunState) -> Updates | None:
        assert run.prepared is not None
        self.duration = run.prepared.video.duration_s
        self.windows = list(run.prepared.windows)
        return super().prepared(run)

    def loaded(self, run: RunState) -> Updates | None:
        assert run.prepared is not None
        plan = run.prepared.plan
        what = (
            f"window 1 of {len(self.windows)}"
            if self.windows
            else f"{plan.nframes} frames ({plan.video_tokens} video tokens)"
        )
        return self.bar(0.15, f"Reading the video: {what}…")

    def window_starts(self, run: RunState) -> Updates:
        """Window k starts: window k-1 is answered, its events join the timeline."""
        k, n = run.window or 0, run.windows
        updates: Updates = {self.tab.scene: live_html("", f"{self.v} is reading window {k} of {n}…")}
        if self.windows:
            updates[self.tab.timeline] = timeline.timeline_html(
                self.duration,
                self.events,
                player=f"#{PLAYER_ID}",
                windows=[(w.start, w.end) for w in self.windows],
                windows_done=k - 1,
            )
        return {**updates, **super().window_starts(run)}

    def window_done(self, run: RunState, merged: Result) -> Updates | None:
        """Window k is answered: its events join the timeline when window k+1 starts; the table and
        downloads hold windows 1..k at once (a caption stopped later keeps them)."""
        assert isinstance(merged, CaptionResult)
        self.events = list(merged.events)
        if run.window is not None and run.windows is not None and run.window >= run.windows:
            return None  # the last window: the finished result follows at once
        return {self.tab.table: _rows(self.events), self.tab.files: _downloads(self.ctx, merged, self.path)}

    def writing(self, run: RunState) -> Updates:
        if run.windowed:
            stage = f"{self.v} is writing (window {run.window} of {run.windows})…"
        else:
            stage = f"{self.v} is writing…"
        return {self.tab.scene: live_html(run.text, stage), self.tab.raw: run.text, **super().writing(run)}

    def done(self, run: RunState, result: Result) -> Updates:
        assert isinstance(result, CaptionResult)
        self.result, self.cold = result, run.cold
        return final_outputs(self.tab, self.ctx, result, self.path, run.cold)


class StreamMessages(StageView[dict[str, Any]]):
    """``/caption_stream``: a message per text as it is written, then the finished result."""

    def window_starts(self, run: RunState) -> dict[str, Any]:
        return stream_message(run.text, window=run.window, windows=run.windows)

    def writing(self, run: RunState) -> dict[str, Any]:
        return stream_message(run.text, window=run.window, windows=run.windows)

    def done(self, run: RunState, result: Result) -> dict[str, Any]:
        assert isinstance(result, CaptionResult)
        return stream_message(result.raw, result)


def caption_updates(
    ctx: UIContext,
    tab: CaptionTab,
    video: str | None,
    variant: str,
    request: gr.Request | None = None,
    example: bool = False,
) -> Iterator[Updates]:
    """The caption as it is written (``CaptionView``); an example's answer is kept for its next click.

    A bad clip or request is said once, in the line under the video (no toast, no error pill).
    """
    try:
        path = require_upload(video, ctx)
        v = pick_variant(variant, ctx)
    except gr.Error as exc:
        yield {tab.progress: "", tab.status: status_html(exc.message, error=True)}
        return
    key, kept = kept_answer(ctx, "caption", path, v) if example else (None, None)
    if kept is not None:
        return  # the first step showed it
    owns(ctx, "caption", request, path)
    view = CaptionView(ctx, tab, path, v)
    yield view.start()
    try:
        with user_errors():
            stages = service.stream(ctx.engine, "caption", path, v)
            yield from follow(stages, view, ctx.settings.stream_every_s)
    except gr.Error as exc:  # said once, under the video
        yield {
            tab.scene: "",
            tab.timeline: timeline.placeholder("No result."),
            tab.metrics: "",
            tab.files: None,
            tab.notice: "",
            tab.progress: "",
            tab.status: status_html(exc.message, error=True),
        }
        return
    if key is not None and view.result is not None:
        ctx.answers.keep(key, view.result, view.cold)


def kept_example(
    ctx: UIContext, tab: CaptionTab, video: str | None, variant: str, request: gr.Request
) -> Updates:
    """An example's first step: its kept answer at once (the model does not run), else the wait."""
    buttons = [tab.run, tab.stop]
    try:
        path = require_upload(video, ctx)
        _, kept = kept_answer(ctx, "caption", path, pick_variant(variant, ctx))
    except gr.Error:
        kept = None
    if kept is None:
        return waiting_updates(buttons, tab.progress)
    owns(ctx, "caption", request, path)
    with example_notes.replaying(kept):
        return {**final_outputs(tab, ctx, kept.result, path, kept.cold), tab.status: gr.skip()}


def listen(ctx: UIContext, tab: CaptionTab) -> None:
    """Wire the UI streaming event and the public ``/caption`` and ``/caption_stream`` endpoints."""
    _listen_ui(ctx, tab)
    _listen_api(ctx, tab)


def cleared_outputs(tab: CaptionTab) -> Updates:
    """Nothing of an earlier clip's caption (its clip changed)."""
    return {
        tab.scene: "",
        tab.timeline: timeline.placeholder(PLACEHOLDER, GHOST),
        tab.table: _rows([]),
        tab.player: None,
        tab.metrics: "",
        tab.files: None,
        tab.raw: "",
        tab.notice: "",
    }


def _listen_ui(ctx: UIContext, tab: CaptionTab) -> None:
    """Run/Stop with the caption streamed into the tab, then the events as captions on the player;
    an example click runs the same way (``wire_run_and_stop``)."""
    buttons = [tab.run, tab.stop]

    def caption_ui(video: str | None, variant: str, request: gr.Request) -> Iterator[Updates]:
        yield from with_buttons(caption_updates(ctx, tab, video, variant, request), buttons)

    def caption_example(video: str | None, variant: str, request: gr.Request) -> Iterator[Updates]:
        yield from with_buttons(caption_updates(ctx, tab, video, variant, request, example=True), buttons)

    def subtitles_step(table: Any) -> Any:
        return with_subtitles(ctx, table)

    def first_step(video: str | None, variant: str, request: gr.Request) -> Updates:
        return kept_example(ctx, tab, video, variant, request)

    example = None
    if tab.examples is not None:
        example = (tab.examples.load_input_event, first_step, caption_example)
    ends = wire_run_and_stop(
        [tab.run.click],
        caption_ui,
        [tab.video, tab.variant],
        [*tab.outputs, tab.status, *buttons],
        buttons,
        tab.progress,
        stopped_html,
        tab.scene,
        example,
    )
    for end in ends:
        end.then(subtitles_step, tab.table, tab.player, **PRIVATE_UI)
    clear = functools.partial(cleared_outputs, tab)
    clear_when_clip_changes(ctx, "caption", tab.video, list(clear()), clear)


def _listen_api(ctx: UIContext, tab: CaptionTab) -> None:
    """The public endpoints: plain JSON only (the tab's own updates are private events)."""

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
            "peak_memory_mb": float, "memory_kind": str, "load_s": float|null, "device": str},
            "windows": [{"start": float, "end": float, "scene": str}]}.
            Times are seconds from the start of the clip and lie inside it; "raw" is exactly what the
            model wrote; "repaired" is true when events were clamped into the clip or de-duplicated.
            A video longer than one caption window is captioned window by window: "windows" lists
            them (one entry for a short clip) and the events of all windows share one timeline.
        """
        path = require_upload(video, ctx)
        v = pick_variant(variant, ctx)
        with user_errors():
            result = service.run(ctx.engine, "caption", path, v)
            assert isinstance(result, CaptionResult)
            return caption_json(result)

    tab.api_button.click(
        caption,
        [tab.video, tab.variant],
        tab.api_out,
        api_name="caption",
        api_description="Scene paragraph and timed events: "
        "{variant, model, scene, events, raw, repaired, metrics}",
        **GPU_EVENT,
    )

    def caption_stream(video: str | None, variant: str = "gptq") -> Iterator[dict[str, Any]]:
        """The caption as the model writes it, then the finished result (see stream_message)."""
        path = require_upload(video, ctx)
        v = pick_variant(variant, ctx)
        with user_errors():
            stages = service.stream(ctx.engine, "caption", path, v)
            yield from follow(stages, StreamMessages(), ctx.settings.stream_every_s)

    tab.api_stream_button.click(
        caption_stream,
        [tab.video, tab.variant],
        tab.api_out,
        api_name="caption_stream",
        api_description="The caption while it is written: {done: false, text} messages, then "
        "{done: true, text, first_text_s, result} with result as /caption returns it",
        **GPU_EVENT,
    )
