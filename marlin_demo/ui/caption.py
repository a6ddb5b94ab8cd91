"""Caption tab: "what happens": scene paragraph, a clickable timeline, a table, captions on the clip."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
from dataclasses import dataclass
from typing import Any, cast

import gradio as gr

from marlin_demo import service, subtitles
from marlin_demo.model_io import Event, clock_span
from marlin_demo.results import CaptionResult, Partial, Result, Window
from marlin_demo.tasks import CAPTION
from marlin_demo.tasks.caption import chapters_of
from marlin_demo.ui import run_tab, timeline
from marlin_demo.ui.context import CLIP_ID, PRIVATE_UI, UIContext, clip_stem
from marlin_demo.ui.inputs import session_of
from marlin_demo.ui.run_tab import RunTab, RunView
from marlin_demo.ui.running import RunState, StageView, Updates, scroll_mark
from marlin_demo.ui.shared_clip import Clip
from marlin_demo.ui.status import notice_html

PLACEHOLDER = "Choose a clip and caption it: its events appear here on a time axis; click one to play it."
GHOST = ((0.03, 0.28), (0.34, 0.61), (0.67, 0.96))  # the empty timeline's faint bars: timed events
TABLE_HEADERS = ["#", "Start (s)", "End (s)", "Event"]
STOPPED_HTML = (
    '<div class="mc-scene mc-stopped"><div class="mc-label">Stopped</div>'
    "<p>You stopped this caption before it finished. Run it again for a full answer.</p></div>"
)


class CaptionView(RunView):
    """The Caption tab while the model writes; a long video's answered windows join the timeline."""

    tab: CaptionTab

    def __init__(self, ctx: UIContext, tab: CaptionTab, req: service.Request) -> None:
        budget = max(1, CAPTION.tokens(ctx.settings)) * 4  # ~characters per token
        super().__init__(
            ctx, tab, req, written=lambda text: min(1.0, len(text) / budget), window_step=": writing"
        )
        self.windows: list[Window] = []  # a long video's windows (none: answered whole)
        self.events: list[Event] = []  # the answered windows' events, merged by the runner
        self.duration = 0.0

    def start(self) -> Updates:
        t = self.tab
        writes = timeline.placeholder("The events appear here as the model writes them.")
        return {**super().start(), t.answer: live_html("", "Reading the video…"), t.timeline: writes}

    def prepared(self, run: RunState) -> Updates | None:
        assert run.prepared is not None
        self.duration = run.prepared.video.duration_s
        self.windows = list(run.prepared.windows)
        return super().prepared(run)

    def loaded(self, run: RunState) -> Updates | None:
        assert run.prepared is not None
        plan = run.prepared.plan
        what = f"{plan.nframes} frames ({plan.video_tokens} video tokens)"
        if self.windows:
            what = f"window 1 of {len(self.windows)}"
        return self.bar(0.15, f"Reading the video: {what}…")

    def window_starts(self, run: RunState) -> Updates:
        """Window k starts: window k-1 is answered, its events join the timeline."""
        k, n = run.window or 0, run.windows
        updates: Updates = {self.tab.answer: live_html("", f"{self.v} is reading window {k} of {n}…")}
        if self.windows:
            updates[self.tab.timeline] = timeline.timeline_html(
                self.duration,
                self.events,
                player=f"#{CLIP_ID}",
                windows=[(w.start, w.end) for w in self.windows],
                windows_done=k - 1,
            )
        return {**updates, **super().window_starts(run)}

    def window_done(self, run: RunState, merged: Result) -> Updates | None:
        """Window k is answered: the table and downloads hold windows 1..k at once (a Stop keeps them)."""
        caption = cast(CaptionResult, merged)
        self.events = list(caption.events)
        k, n = run.window or 0, run.windows or 0
        if k >= n or not self.windows:
            return None  # the last window: the finished result follows at once
        covered = clock_span(self.windows[0].start, self.windows[k - 1].end)
        so_far = Partial(f"The events, the table and the downloads cover {covered} of the video only.", k, n)
        caption = dataclasses.replace(caption, partial=so_far)
        return {
            self.tab.table: _rows(self.events),
            self.tab.files: _downloads(self.ctx, caption, self.path),
            self.tab.notice: notice_html(self.ctx, caption, self.tab.name),
        }

    def writing(self, run: RunState) -> Updates:
        window = f" (window {run.window} of {run.windows})" if run.windowed else ""
        stage = f"{self.v} is writing{window}…"
        return {self.tab.answer: live_html(run.text, stage), **super().writing(run)}  # (and the raw text)


@dataclass(kw_only=True)
class CaptionTab(RunTab):
    name = "caption"
    placeholder = PLACEHOLDER
    ghost = GHOST
    stopped = STOPPED_HTML
    answer_id = "scene"
    view_type = CaptionView
    table: gr.Dataframe
    files: gr.File

    @property
    def results(self) -> list[Any]:
        return [*super().results, self.table, self.files, self.clip.video]  # the clip: its captions

    def cleared(self) -> Updates:
        return {**super().cleared(), self.table: _rows([]), self.files: None, self.clip.video: no_captions()}

    def final(self, ctx: UIContext, result: CaptionResult, path: str, cold: bool) -> Updates:
        duration = result.info.duration_s
        if result.events:  # (the timeline draws no windows for a video answered whole)
            windows = [(w["start"], w["end"]) for w in result.windows]
            tl = timeline.timeline_html(duration, result.events, player=f"#{CLIP_ID}", windows=windows)
        else:
            tl = timeline.placeholder(
                "No timed events could be read from the answer, so there is nothing to draw."
            )
        return {
            **self.answered(ctx, result, cold),
            self.answer: scene_html(result.scene) + chapters_html(result),
            self.timeline: tl,
            self.table: _rows(result.events),
            self.files: _downloads(ctx, result, path),
        }

    def after_run(self, ctx: UIContext, end: Any) -> None:
        """The clip's player shows the table's events as WebVTT captions (or none) while it is on screen."""

        def captions(table: Any, video: str | None, request: gr.Request) -> Any:
            if not video or not ctx.results_clip.shows(session_of(request), video):
                return gr.skip()
            events = _events_from_table(table)
            if not events:
                return no_captions()
            path = ctx.new_run_dir("subtitles") / "events.vtt"
            path.write_text(subtitles.to_webvtt(events), encoding="utf-8")
            return gr.update(subtitles=str(path))

        end.then(captions, [self.table, self.clip.video], self.clip.video, **PRIVATE_UI)


def scene_html(scene: str) -> str:
    """A finished result's scene paragraph, brought into view with the timeline above it."""
    text = html.escape(scene) if scene.strip() else "<i>The answer had no scene paragraph.</i>"
    mark = scroll_mark("#caption-timeline")
    return f'<div class="mc-scene"{mark}><div class="mc-label">Scene</div><p>{text}</p></div>'


def live_html(text: str, stage: str) -> str:
    body = f"<pre>{html.escape(text)}</pre>" if text else ""
    return f'<div class="mc-scene mc-live"><div class="mc-label">{html.escape(stage)}</div>{body}</div>'


def stream_message(
    text: str, result: CaptionResult | None = None, window: int | None = None, windows: int | None = None
) -> dict[str, Any]:
    """One message of ``/caption_stream``: the text so far; the last adds ``/caption``'s JSON beside it."""
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
        "result": CAPTION.answer.to_json(result),
    }


def _rows(events: list[Event]) -> Any:
    """The events table, hidden by ``visible="hidden"``, not CSS: hidden so, it sometimes never drew a row."""
    rows = [[i + 1, round(e.start, 1), round(e.end, 1), e.description] for i, e in enumerate(events)]
    return gr.update(value=rows, visible=True if rows else "hidden")


def _downloads(ctx: UIContext, result: CaptionResult, video: str) -> list[str]:
    """The caption as JSON (with its chapters), WebVTT, SRT and YouTube chapters, named after the clip."""
    folder = ctx.new_run_dir("caption")
    stem = clip_stem(video)
    part = result.partial  # windows 1..k of a long video: each file's name says so, the JSON and WebVTT why
    if part is not None:
        stem += f".windows-1-{part.windows_done}-of-{part.windows_total}"
    data = CAPTION.answer.to_json(result)  # ``/caption``'s JSON, the CLI's too
    vtt = subtitles.to_webvtt(result.events)
    if part is not None and vtt:
        vtt = vtt.replace("WEBVTT\n", f"WEBVTT\n\nNOTE {part.note()}\n", 1)
    texts = {  # an empty one is not written (SRT without cues, no chapters)
        "events.json": json.dumps(data, ensure_ascii=False, indent=2) + "\n",
        "vtt": vtt,
        "srt": subtitles.to_srt(result.events),
        "chapters.txt": "".join(line + "\n" for line in data["chapters"]["lines"]),
    }
    files = {folder / f"{stem}.{ext}": text for ext, text in texts.items() if text}
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    return [str(f) for f in files]


def chapters_html(result: CaptionResult) -> str:
    """The chapters a video description takes, ready to copy; or the sentence saying why there are none."""
    ch = chapters_of(result)
    text = html.escape("\n".join(ch.lines) if ch.lines else ch.reason)
    label = "Chapters (paste into a video description)" if ch.lines else "Chapters"
    body = f"<pre>{text}</pre>" if ch.lines else f"<p>{text}</p>"
    return f'<div class="mc-chapters"><div class="mc-label">{label}</div>{body}</div>'


def _events_from_table(table: Any) -> list[Event]:
    events = []
    for row in table.values.tolist() if hasattr(table, "values") else list(table or []):
        with contextlib.suppress(TypeError, ValueError, IndexError):
            events.append(Event(float(row[1]), float(row[2]), str(row[3])))
    return events


def no_captions() -> gr.Video:
    """The clip without captions (Gradio drops ``gr.update(subtitles=None)`` as "not set")."""
    return gr.Video(subtitles=None)


def render(ctx: UIContext, clip: Clip) -> CaptionTab:
    """Lay out the tab (inside the caller's ``gr.Tab``): under it, the events table beside the figures."""
    table = gr.Dataframe(
        headers=TABLE_HEADERS,
        datatype=["number", "number", "number", "str"],
        interactive=False,
        wrap=True,
        label="Events",
        visible="hidden",  # until a result has events (see _rows)
        elem_id="caption-table",
        # shares of the width (a px width leaves the table short of its box); "Start" was cut at 14%
        column_widths=["10%", "17%", "15%", "58%"],
        render=False,
    )
    files = gr.File(
        label="Downloads: events as JSON, WebVTT and SRT",
        file_count="multiple",
        interactive=False,
        elem_id="caption-files",
        render=False,
    )
    shown = ("progress", "timeline", "answer", "notice")
    tab = run_tab.lay_out(ctx, CaptionTab, clip, "Caption this video", 6, shown, table=table, files=files)
    with gr.Row(equal_height=False):
        with gr.Column(scale=7, min_width=360):
            table.render()
        with gr.Column(scale=5, min_width=320):
            tab.metrics.render()
            files.render()
    run_tab.raw_output(tab)
    return tab


class StreamMessages(StageView[dict[str, Any]]):
    """``/caption_stream``: a message per text as it is written, then the finished result."""

    def writing(self, run: RunState) -> dict[str, Any]:
        return stream_message(run.text, window=run.window, windows=run.windows)

    window_starts = writing

    def done(self, run: RunState, result: Result) -> dict[str, Any]:
        return stream_message(result.raw, cast(CaptionResult, result))
