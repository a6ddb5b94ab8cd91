"""The page's small pure pieces (issue 16): the one clip's results, API snippet examples, labels.

The browser tests (tests/test_browser.py) drive the same behaviour in a real page; these pin the
rules without a server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from marlin_demo.ui import example_runs, header, running
from marlin_demo.ui.compare_html import COLUMN_TITLES, SESSION_COLUMNS, titled
from marlin_demo.ui.context import ResultsClip, UIContext

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CLIP = EXAMPLES / "ball_rolls.mp4"


def test_results_belong_to_the_clip_on_screen(tmp_path: Path) -> None:
    """One clip per session: a new clip makes every tab's results of another clip stale (once), the same
    clip copied elsewhere by Gradio does not, and a request stops showing once its clip is gone."""
    copy = tmp_path / "copy" / CLIP.name
    copy.parent.mkdir()
    copy.write_bytes(CLIP.read_bytes())
    clips = ResultsClip()
    assert clips.shows("s1", str(CLIP))  # before the page said which clip it shows
    assert clips.seen("s1", str(CLIP), 1) == []  # no results yet
    assert clips.start("caption", "s1", str(CLIP), 2)
    assert clips.start("find", "s1", str(CLIP), 3)
    assert clips.start("find", "s2", str(CLIP), 1)  # another visitor
    assert clips.seen("s1", str(copy), 4) == []  # the same file in another folder
    assert clips.shows("s1", str(CLIP))
    assert sorted(clips.seen("s1", "/elsewhere/other.mp4", 5)) == ["caption", "find"]
    assert not clips.shows("s1", str(CLIP)) and clips.shows("s2", str(CLIP))
    assert clips.seen("s1", None, 6) == []  # cleared: nothing left to clear
    assert not clips.shows("s1", "/elsewhere/other.mp4")
    assert clips.seen("s2", None, 2) == ["find"]


def test_the_browsers_order_wins_over_the_servers(tmp_path: Path) -> None:
    """Events reach the server in any order; the browser's numbers say which clip came last. These are
    the orders a visitor met: a second example's run before its clip's change event, a run that waited
    in the queue while the visitor uploaded another clip, an old change event arriving late."""
    parking, ball = str(EXAMPLES / "parking_lot.mp4"), str(EXAMPLES / "ball_rolls.mp4")
    upload = str(tmp_path / "mine.mp4")
    Path(upload).write_bytes(b"not the same size as any example")
    clips = ResultsClip()
    clips.seen("s", parking, 1)
    assert clips.start("caption", "s", parking, 2)  # the first example runs
    # the second example: its run (number 4) reaches the server before its change event (number 3)
    assert clips.start("caption", "s", ball, 4)
    assert clips.seen("s", ball, 3) == []  # late and older: changes nothing, clears nothing
    assert clips.shows("s", ball) and not clips.shows("s", parking)
    # a run of the ball clip (number 5) waits in the queue; the visitor uploads a clip meanwhile (6)
    assert clips.seen("s", upload, 6) == ["caption"]
    assert not clips.start("caption", "s", ball, 5)  # when it starts, its clip is gone: nothing shown
    assert clips.shows("s", upload)
    # the upload's run, then an example: the example's change clears the upload's answer
    assert clips.start("caption", "s", upload, 7)
    assert clips.seen("s", parking, 8) == ["caption"]
    assert clips.start("caption", "s", parking, 9)
    # a report without a number (a page from before numbers) never overrides a numbered one
    assert clips.seen("s", upload, None) == [] and clips.shows("s", parking)


def test_a_run_that_overtakes_the_clips_change_leaves_the_other_tabs_to_clear() -> None:
    """Issue 52 item 3: Compare answered the upload; an example clicked on Caption runs at once, and its
    run's report (number 4) reaches the server before the clip's change event (number 5, the browser
    fires it after the example's steps): the change event still clears Compare's comparison (and
    Find's answer), not the example's answer just shown."""
    upload, parking = "/uploads/mine.mp4", str(EXAMPLES / "parking_lot.mp4")
    clips = ResultsClip()
    clips.seen("s", upload, 1)
    assert clips.start("compare", "s", upload, 2) and clips.start("find", "s", upload, 3)
    assert clips.start("caption", "s", parking, 4)  # the example's run (or its kept answer) first
    assert clips.seen("s", parking, 5) == ["compare", "find"]
    assert clips.seen("s", parking, 6) == []  # said once
    # a tab asked again on the new clip before the change event came is the new clip's: not cleared
    ball = str(EXAMPLES / "ball_rolls.mp4")
    clips.seen("s", upload, 7)
    assert clips.start("compare", "s", upload, 8) and clips.start("find", "s", upload, 9)
    assert clips.start("caption", "s", ball, 10) and clips.start("find", "s", ball, 11)
    assert clips.seen("s", ball, 12) == ["compare"]


def test_a_request_whose_clip_is_replaced_shows_nothing_more_and_stops(tmp_path: Path) -> None:
    ctx = UIContext(engine=None, settings=None, status=None, output_dir=tmp_path)  # type: ignore[arg-type]
    request = SimpleNamespace(session_hash="s1")
    closed: list[bool] = []

    def updates() -> Iterator[dict]:
        try:
            for i in range(3):
                yield {"step": i}
        finally:
            closed.append(True)

    ctx.results_clip.seen("s1", str(CLIP), 1)
    begin = lambda request, values: running.Run(str(CLIP), {}, updates(), stamp=2)  # noqa: E731
    listener = running.streamed(ctx, "find", ["run", "stop"], begin, {"gone": True}, lambda said: {})  # type: ignore[arg-type,list-item]
    shown = listener(request)
    assert next(shown) == {"step": 0}
    ctx.results_clip.seen("s1", "/elsewhere/other.mp4", 3)  # the visitor chose another clip
    assert list(shown) == [{"gone": True}, running.run_buttons(["run", "stop"], False)]  # type: ignore[list-item]
    assert closed == [True]  # the request was closed: its model stops


def test_cached_badge_only_while_a_kept_answer_is_shown_again() -> None:
    """A live run (an example's first click included) has the ordinary badge; a kept answer shown
    again says that the model did not run now and when its figures were measured."""
    metrics = {"load_s": 2.5}
    answers = example_runs.ExampleAnswers(limit=2)
    key = answers.key("find", {"video": "ball.mp4"}, "gptq", " the ball ")
    assert key == ("find", "ball.mp4", "gptq", "the ball") and answers.get(key) is None
    kept = answers.keep(key, object(), cold=True)
    assert answers.get(key) is kept
    assert example_runs.cached_badge(metrics, True, "gptq") is None
    with example_runs.replaying(kept):
        badge = example_runs.cached_badge(metrics, True, "gptq")
    assert badge is not None and "did not run now" in badge and kept.stamp in badge and "2.50 s" in badge
    assert example_runs.cached_badge(metrics, True, "gptq") is None
    for i in range(3):  # bounded
        answers.keep(("caption", f"{i}.mp4", "gptq", ""), object(), cold=False)
    assert answers.get(key) is None


def test_duration_limit_reads_as_a_person_would() -> None:
    assert header.duration_text(600) == "10 min"
    assert header.duration_text(90) == "90 s"
    assert header.duration_text(125.5) == "125.5 s"


def test_compare_tables_have_readable_titles() -> None:
    import pandas as pd

    frame = titled(pd.DataFrame(columns=SESSION_COLUMNS))
    assert not {"load_s", "ttft_s", "peak_memory_mb", "latency_s"} & set(frame.columns)
    assert COLUMN_TITLES["peak_memory_mb"] in frame.columns
