"""The Caption/Find tabs' pure pieces: timeline windows and moments, the stream throttle, the reuse note.

No server and no model: the HTML the tabs yield and the stages they read, checked directly (the
browser tests drive the same pieces on a real page).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from marlin_demo.results import Done, Loaded, Moment, Progress, RunInfo, Stage
from marlin_demo.tasks import CAPTION
from marlin_demo.ui import caption, find, timeline
from marlin_demo.ui.context import UIContext
from marlin_demo.ui.running import BarView, RunState, StageView, Throttle, follow, progress_html
from marlin_demo.ui.status import clip_status, metrics_html, status_html
from marlin_demo.video import VideoInfo

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "ball_rolls.mp4"


def test_moments_are_drawn_best_first_and_listed_with_their_clips() -> None:
    moments = [Moment(10.0, 12.0, 0.9), Moment(2.0, 5.0, 0.4), Moment(6.0, 7.0, 0.2)]
    out = timeline.timeline_html(12.0, moments=moments, clips=["/out/m 1.mp4", None, "/out/m3.mp4"])
    # the best one is the span (highlighted), the others are moment bars
    # 10-12 s of 12 s is too narrow for its label: the label goes beside it, left (near the end)
    assert out.count('class="mt-item mt-span mt-best mt-out mt-out-left"') == 1
    assert re.search(r'mt-span mt-best mt-out mt-out-left" data-start="10\.000"', out)
    assert out.count('class="mt-item mt-moment"') == 2
    # listed best first, each row seeking to its start; a clip link only where a clip was cut
    starts = re.findall(r'class="mt-mlink" data-start="([\d.]+)"', out)
    assert starts == ["10.000", "2.000", "6.000"]
    links = re.findall(r'class="mt-dl" href="([^"]+)"', out)
    assert links == ["gradio_api/file=/out/m%201.mp4", "gradio_api/file=/out/m3.mp4"]
    assert "score 0.90" in out and "score 0.40" in out


def test_a_narrow_span_has_its_label_beside_it() -> None:
    def span_class(start: float, end: float) -> str:
        m = re.search(r'class="mt-item (mt-span[^"]*)"', timeline.timeline_html(100.0, span=(start, end)))
        assert m
        return m.group(1)

    assert span_class(10, 60) == "mt-span"  # wide: the label fits inside
    assert span_class(10, 12) == "mt-span mt-out"  # narrow, early: to its right
    assert span_class(90, 95) == "mt-span mt-out mt-out-left"  # narrow, late: to its left


def test_windows_strip_marks_answered_and_running_windows() -> None:
    windows = [(0.0, 5.0), (4.0, 9.0), (8.0, 12.0)]
    out = timeline.timeline_html(12.0, [], windows=windows, windows_done=1)
    cells = re.findall(r'<span class="mt-win([^"]*)" data-window="(\d)"', out)
    assert cells == [(" mt-win-done", "1"), (" mt-win-now", "2"), ("", "3")]
    assert 'style="height:24px"' in out  # overlapping (find) windows alternate between two rows
    assert "mt-windows" not in timeline.timeline_html(12.0, [], windows=[(0.0, 12.0)])  # one window: none


def test_event_labels_are_escaped_and_numbered() -> None:
    events = [{"start": 0.0, "end": 1.0, "description": "<b>x</b> & y"}]
    out = timeline.timeline_html(4.0, events)
    assert "<b>x</b>" not in out and "1. &lt;b&gt;x&lt;/b&gt; &amp; y" in out
    assert 'class="mt-detail"' in out


def _stages(items: list[Any]) -> Generator[Any, None, None]:
    yield from items


def _throttled(items: list[Any], every: float) -> list[Any]:
    throttle = Throttle[Any](every)
    return [passed for stage in items for passed in throttle.passed(stage)]


def test_throttle_keeps_each_windows_last_text() -> None:
    """Texts are thinned out, but the text a window ended on is always passed on before the next window."""
    items: list[Stage] = [Progress("", 1, 2), *(Progress("a" * i, 1, 2) for i in range(1, 6))]
    items += [Progress("", 2, 2), Progress("b", 2, 2)]
    got = _throttled(items, every=3600.0)
    texts = [(s.window, s.text) for s in got if isinstance(s, Progress)]
    # "aa".."aaaa" are thinned out; "b" waits too (the Done stage carries the whole answer)
    assert texts == [(1, ""), (1, "a"), (1, "aaaaa"), (2, "")]


def test_throttle_drops_a_held_text_when_another_stage_comes() -> None:
    """Compare's stream: a variant's held text is never shown under the next variant's window 1."""
    loaded = Loaded("bnb4", cold=False, load_s=0.0)
    items: list[Any] = [Progress("a", 1, 2), Progress("ab", 1, 2), loaded, Progress("", 1, 2)]
    got = _throttled(items, every=3600.0)
    assert got == [Progress("a", 1, 2), loaded, Progress("", 1, 2)]


class _Recorder(StageView[str]):
    """Says which hook ``follow`` called, with what it knew then."""

    def loaded(self, run: RunState) -> str:
        return f"loaded cold={run.cold}"

    def window_starts(self, run: RunState) -> str:
        return f"window {run.window}/{run.windows}"

    def writing(self, run: RunState) -> str | None:
        return f"writing {run.text!r} windowed={run.windowed}" if run.text else None

    def done(self, run: RunState, result: Any) -> str:
        return f"done {result}"

    def other(self, run: RunState, event: Any) -> str:
        return f"other {event}"


def test_follow_calls_the_views_hook_for_each_stage() -> None:
    items: list[Any] = [
        Loaded("gptq", cold=True, load_s=1.0),
        Progress("", 1, 2),
        Progress("x", 1, 2),
        Progress(""),  # the view shows nothing for it: nothing is yielded
        Progress("y"),
        "a compare event",
        Done("result"),  # type: ignore[arg-type]
    ]
    assert list(follow(_stages(items), _Recorder(), None)) == [
        "loaded cold=True",
        "window 1/2",
        "writing 'x' windowed=True",
        "writing 'y' windowed=False",
        "other a compare event",
        "done result",
    ]


def test_caption_and_find_share_the_progress_bar_wording() -> None:
    bar = object()
    find = BarView(bar, "gptq", lambda: True, written=lambda text: 0.5)  # type: ignore[arg-type]
    caption = BarView(bar, "gptq", lambda: False, written=lambda t: len(t) / 10, window_step=": writing")
    assert "Loading gptq (first use of this variant)" in find.prepared(RunState())[bar]
    assert caption.prepared(RunState()) is None  # already loaded: nothing to say
    windowed = RunState(text="abcde", window=2, windows=3)
    line = find.writing(windowed)[bar]
    assert 'aria-valuenow="50"' in line and ">Window 2 of 3<" in line  # halfway through window 2 of 3
    assert ">Window 2 of 3: writing<" in caption.writing(windowed)[bar]
    assert 'aria-valuenow="33"' in caption.window_starts(RunState(window=2, windows=3))[bar]
    whole = RunState(text="abcde")
    assert 'aria-valuenow="60"' in find.writing(whole)[bar] and ">Writing<" in find.writing(whole)[bar]


def test_reuse_note_compares_with_the_first_reading(tmp_path: Path) -> None:
    ctx = UIContext(engine=None, settings=None, status=None, output_dir=tmp_path)  # type: ignore[arg-type]
    video = VideoInfo(str(CLIP), 1, "mp4", 12.0, 10.0, 120, 480, 270, 480, 270, 0, "h264")
    first = RunInfo(video=video)
    assert ctx.reuse_note("gptq", first, 1.49) == ""  # a full reading says nothing, but is remembered
    again = RunInfo(video=video, cached_video=True, reused_prefix=True)
    note = ctx.reuse_note("gptq", again, 0.05)
    assert "already read by gptq" in note and "0.05 s instead of 1.49 s" in note
    other = ctx.reuse_note("bnb4", RunInfo(video=video, reused_prefix=True), 0.07)
    assert "instead of" not in other and "0.07 s" in other  # no earlier reading of bnb4 to compare with


def test_status_and_progress_lines_escape_their_text() -> None:
    assert "ms-error" in status_html("<bad>", error=True) and "&lt;bad&gt;" in status_html("<bad>")
    assert 'aria-valuenow="50"' in progress_html(0.5, "Window 2 of 3")
    assert 'style="width:100.0%"' in progress_html(7, "x")  # clamped


def test_clip_status_without_a_clip_is_empty(tmp_path: Path) -> None:
    ctx = UIContext(engine=None, settings=None, status=None, output_dir=tmp_path)  # type: ignore[arg-type]
    assert clip_status(ctx, None) == ""


def test_compare_charts_leave_headroom_and_a_flat_chart_gets_a_unit_axis() -> None:
    import pandas as pd

    from marlin_demo.ui.compare_tab import CHART_HEADROOM, _chart_update

    frame = pd.DataFrame({"variant": ["gptq", "bnb4"], "latency_s": [2.0, 4.0]})
    upd = _chart_update(frame, "latency_s")
    assert upd["visible"] and upd["y_lim"] == [0, 4.0 * CHART_HEADROOM] and CHART_HEADROOM > 1
    flat = pd.DataFrame({"variant": ["gptq", "bnb4"], "output_tokens": [0.0, 0.0]})
    assert _chart_update(flat, "output_tokens")["y_lim"] == [0, 1]


def test_compare_draws_no_empty_or_process_wide_chart() -> None:
    """No load-time chart when nothing loaded; CPU peak memory (the whole process, the same for every
    variant) is not drawn; a GPU memory chart names what it measures."""
    import pandas as pd

    from marlin_demo.ui.compare_tab import _chart_update

    warm = pd.DataFrame({"variant": ["gptq", "bnb4"], "load_s": [0.0, 0.0]})
    assert _chart_update(warm, "load_s")["visible"] is False
    mem = pd.DataFrame({"variant": ["gptq", "bnb4"], "peak_memory_mb": [900.0, 900.0]})
    assert _chart_update(mem, "peak_memory_mb", "cpu_peak_rss")["visible"] is False
    gpu = _chart_update(mem, "peak_memory_mb", "cuda_peak_allocated")
    assert gpu["visible"] and "GPU peak allocated" in gpu["title"]


def test_the_empty_timeline_shows_the_shape_of_the_result_to_come() -> None:
    """Before a run the result column is a faint preview (Caption: timed events; Find: one span),
    not a bare dashed box, and its sentence says what will appear."""
    for tab, bars in ((caption, 3), (find, 1)):
        page = timeline.placeholder(tab.PLACEHOLDER, tab.GHOST)
        ghost = re.search(r'<div class="mt-ghost" aria-hidden="true">(.*?)</div>', page)
        assert ghost is not None, page
        spans = re.findall(r'style="left:(\d+)%;width:(\d+)%"', ghost.group(1))
        assert len(spans) == bars
        assert all(0 <= int(a) and int(a) + int(w) <= 100 and int(w) > 0 for a, w in spans)
        assert tab.PLACEHOLDER in page
    assert "mt-ghost" not in timeline.placeholder("No result.")  # after an error: the sentence only
    assert "dashed" not in timeline.TIMELINE_CSS.split(".mt-timeline.mt-empty")[1].split("}")[0]


def test_times_are_written_one_way_everywhere() -> None:
    """One formatter, tenths at most: a window ending at 70.458 s read "60-70.458 s", a library caption
    window "0–46.916 s"; the timeline, the notes and the messages now write times alike."""
    from marlin_demo.model_io import Event, clock, clock_part, clock_span, parse_caption, repair_caption
    from marlin_demo.results import Window
    from marlin_demo.tasks.caption import map_caption

    assert [clock(t) for t in (0, 9, 46.916, 59.96, 70.458, 127)] == [
        "0 s",
        "9 s",
        "46.9 s",
        "1:00",
        "1:10.5",
        "2:07",
    ]
    assert clock_span(0, 46.916) == "0–46.9 s" and clock_span(60, 70.458) == "1:00–1:10.5"
    assert clock_span(55, 70) == "0:55–1:10"  # one unit for both ends
    assert clock_part(3, 9) == "3–9 s (6 s long)"
    parse = parse_caption("Scene: x.\nEvents:\n<0.0 - 30.0> A ball rolls.\n<2.0 - 3.0> It rolls.")
    window = Window(1, 60.0, 70.458)
    notes = map_caption(repair_caption(parse, window.duration), window).repairs  # as the engine repaired it
    assert notes and all(n.startswith("window 2 (1:00–1:10.5): ") for n in notes), notes
    out = timeline.timeline_html(70.458, [Event(60.0, 70.458, "a")], windows=[(0.0, 60.0), (60.0, 70.458)])
    assert 'title="1. 1:00–1:10.5 · a"' in out and 'title="window 2: 1:00–1:10.5"' in out


def test_a_range_speaks_of_the_range_asked_not_the_clip() -> None:
    """A 3-9 s range of a 12 s clip said "No chapters: this clip is 12 s long" and "clamped 1 event to
    the clip's 6.0 s" (the range cut as a clip): the chapters and the notes say the range instead."""
    from marlin_demo.model_io import Event, parse_caption, repair_caption
    from marlin_demo.results import CaptionResult, Metrics, RunInfo, Window
    from marlin_demo.tasks.caption import map_caption

    metrics = Metrics(1.0, 0.1, 10, 10.0, 100, 1.0, "cpu_peak_rss", 0.0, "cpu")
    result = CaptionResult(
        variant="gptq", model="m", scene="s", events=[Event(3.0, 9.0, "a")], raw="raw", metrics=metrics,
        info=RunInfo(duration_s=12.0),
    )  # fmt: skip
    assert "this clip is 12 s long" in caption.chapters_html(result)  # the whole clip: its own length
    result.range_s = (3.0, 9.0)
    said = caption.chapters_html(result)
    assert "3–9 s (6 s long)" in said and "12 s" not in said, said
    assert CAPTION.answer.to_json(result)["chapters"]["reason"] in said  # the API says the same
    # the range answered as its own 6 s clip: the note names no 6 s "clip", only the range's end
    parse = parse_caption("Scene: x.\nEvents:\n<0.0 - 8.0> A ball rolls.")
    notes = map_caption(repair_caption(parse, 6.0), Window(0, 3.0, 9.0)).repairs  # as the engine repaired it
    assert notes == ["window 1 (3–9 s): clamped 1 event that ran past the end"], notes


def test_about_offers_to_duplicate_the_space_only_on_a_space() -> None:
    """Served locally, About told the visitor "On this Space, Duplicate this Space"."""
    from marlin_demo.ui import about

    here, space = about.run_yourself(on_space=False), about.run_yourself(on_space=True)
    assert "Space" not in here.split("```")[-1] and "--queue-size" in here
    assert "**Duplicate this Space**" in space and "--queue-size" not in space


def test_every_page_script_parses(tmp_path: Path) -> None:
    """The page's scripts are files (ui/*.js, read by ``ui.assets``): node parses each one as Gradio runs
    it, a ``js_on_load`` body or an event's function, so a syntax error fails here, not in a visitor's
    browser. A script broken on purpose fails the same check."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/dev.sh installs it)")
    scripts = sorted((ROOT / "marlin_demo" / "ui").glob("*.js"))
    assert len(scripts) >= 6
    broken = tmp_path / "broken.js"
    broken.write_text(timeline.TIMELINE_JS.replace("=>", "=", 1))
    for script in [*scripts, broken]:
        wrapped = tmp_path / f"wrapped_{script.name}"
        wrapped.write_text(f"(async function (element, trigger, props) {{\n{script.read_text()}\n}});\n")
        parsed = subprocess.run([node, "--check", str(wrapped)], capture_output=True, text=True)
        assert (parsed.returncode == 0) == (script != broken), f"{script.name}: {parsed.stderr[-600:]}"


def test_the_cards_add_up_to_the_requests_time_and_say_what_they_leave_out() -> None:
    """Issue 52: a cold run took 6.96 s from the click, 2.41 s of it loading, and the page said "Latency
    0.77 s, request end to end": 3.8 s were in no figure. The Total card is the server's time on the
    request, and its note adds it up from the figures shown beside it."""
    m = {"latency_s": 0.77, "ttft_s": 0.5, "load_s": 2.41, "output_tokens": 12, "device": "cpu"}
    cards = metrics_html(m, True, "gptq", RunInfo(total_s=6.96))
    total = re.search(r'md-k">Total</div><div class="md-v">([\d.]+) s</div><div class="md-h">([^<]+)<', cards)
    assert total, cards
    parts = [float(x) for x in re.findall(r"(\d+\.\d+) s", total.group(2))]
    assert float(total.group(1)) == 6.96 and parts == [2.41, 0.77, 3.78]
    assert sum(parts) == pytest.approx(6.96) and "not counted: its upload" in total.group(2)
    # a warm run paid no load: the note does not add the variant's earlier one
    warm = metrics_html(m, False, "gptq", RunInfo(total_s=1.0))
    assert "load 2.41" not in warm and "latency 0.77 s + 0.23 s" in warm


def test_each_timeline_bar_is_spoken_by_the_label_it_shows() -> None:
    """Issue 52: a bar showing "1. A dog runs" was spoken "Play from 2.0 s: A dog runs" (WCAG 2.5.3, label
    in name: a voice user says what they see). Each bar's spoken name starts with its visible label, the
    whole one, and holds the number a narrow bar shows instead."""
    events = [
        {"start": 2.0, "end": 5.0, "description": "A dog runs"},
        {"start": 6, "end": 9, "description": "Rain"},
    ]
    moments = [Moment(1.0, 3.0, 0.9), Moment(7.0, 8.0, 0.4)]
    for out in (timeline.timeline_html(12.0, events), timeline.timeline_html(12.0, moments=moments)):
        bars = re.findall(
            r'<button type="button" class="mt-item ([^"]+)"[^>]*aria-label="([^"]+)"[^>]*>(.*?)</button>', out
        )
        assert len(bars) == 2, out
        for cls, spoken, inner in bars:
            long = re.search(r'class="mt-long">([^<]*)<', inner)
            shown = long.group(1) if long else re.sub(r"<[^>]+>", "", inner)  # the span's one label
            assert spoken.startswith(shown), (cls, spoken, shown)
            short = re.search(r'class="mt-short">([^<]*)<', inner)
            assert short is None or short.group(1) in spoken, (cls, spoken)
