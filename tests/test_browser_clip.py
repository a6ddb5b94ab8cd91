"""The answer on screen is always the clip on screen's (issue "The page, round 3", item 1), in a real page.

A visitor clicks example after example, uploads between them, and runs each, on Caption, Find and Compare.
After every step the test reads what the page shows and checks it against the clip in the player: the
downloads are named after it, the timeline's axis is its length, Compare's cards are drawn on it and its
session CSV's newest rows name it. Run alone: ``pytest tests/test_browser_clip.py -n 0``.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from ui_support import EXAMPLES, SHOWS, replace_clip

from marlin_demo.tasks import TASKS
from marlin_demo.video import probe

pytestmark = [pytest.mark.slow, pytest.mark.browser]

RUN_TIMEOUT_MS = 180_000
#: three examples of different lengths (so a timeline drawn for one cannot pass for another's)
PARKING, BALL, FLOWER = "parking_lot.mp4", "ball_rolls.mp4", "flower.mp4"
PEOPLE = "people_table.mp4"  # 70 s, run by no other browser test: its first click runs, and for long
TITLES = {
    PARKING: "Cars cross a parking lot",
    BALL: "A red ball rolls",
    FLOWER: "A flower opens",
    PEOPLE: "People step up to a table",
}


#: what the tab shows right now: the player's clip, the finished answer's downloads and timeline axes
STATE_JS = """(tab) => {
  const all = (selector) => [...document.querySelectorAll(selector)];
  const video = all('#clip-video video').map(v => decodeURIComponent(v.currentSrc || v.src))[0] || '';
  const files = all(`#${tab}-files td.filename`).map(e => e.getAttribute('aria-label'));
  const axes = all(`#${tab}-timeline [data-duration], #${tab}-cards [data-duration]`)
    .map(e => +e.dataset.duration);
  const stop = document.querySelector(`#${tab}-stop`);
  const running = !!stop && stop.offsetParent !== null;
  const done = !!document.querySelector(`#${tab}-metrics .md-card, #${tab}-cards .cc-stats`);
  return {video: video.split('/').pop(), files, axes, running, done};
}"""


def _duration(path: Path) -> float:
    return probe(path).duration_s


def _upload_clip(tmp_path: Path) -> Path:
    """A visitor's own file: an example's frames under a name no example has (its own length)."""
    mine = tmp_path / "my_holiday.mp4"
    shutil.copyfile(EXAMPLES / "lamp_on_off.mp4", mine)
    return mine


def _state(pg: Any, tab: str) -> dict[str, Any]:
    return pg.evaluate(STATE_JS, tab)


def _wait_answered(pg: Any, tab: str, clip: Path) -> dict[str, Any]:
    """Wait until ``tab`` shows a finished answer that is ``clip``'s, with ``clip`` in the player; fail,
    saying what the tab shows instead, when none comes in time (an old answer that stays, a run that never
    starts). Returns what the tab shows."""
    pg.wait_for_function(SHOWS, arg=clip.name, timeout=60_000)
    want = {"tab": tab, "name": clip.name, "duration": _duration(clip)}
    belongs = f"""(want) => {{
      const s = ({STATE_JS})(want.tab);
      const stem = want.name.replace(/\\.[^.]*$/, '');
      return s.done && !s.running && s.video === want.name && (s.files.length || s.axes.length)
        && s.files.every(f => f.startsWith(stem + '.'))
        && s.axes.every(a => Math.abs(a - want.duration) < 0.6);
    }}"""
    try:
        pg.wait_for_function(belongs, arg=want, timeout=RUN_TIMEOUT_MS)
    except PlaywrightTimeout:
        pytest.fail(f"{tab}: no answer of {clip.name} shown; the tab shows {_state(pg, tab)}")
    return _state(pg, tab)


def _assert_cleared(pg: Any, tab: str, clip: Path) -> None:
    """``clip`` is in the player and the tab holds no finished answer (an earlier clip's is gone)."""
    pg.wait_for_function(SHOWS, arg=clip.name, timeout=60_000)
    pg.wait_for_function(f"() => !({STATE_JS})('{tab}').done", timeout=30_000)


def _wait_running(pg: Any, tab: str) -> None:
    """``tab``'s run is under way: Stop shown, and its bar past the wait for its turn."""
    running = """(tab) => { const stop = document.querySelector(`#${tab}-stop`);
      const bar = document.querySelector(`#${tab}-progress`)?.innerText.trim() || '';
      return !!stop && stop.offsetParent !== null && bar !== '' && !bar.includes('Waiting for its turn'); }"""
    pg.wait_for_function(running, arg=tab, timeout=RUN_TIMEOUT_MS)


def _example(pg: Any, tab: str, clip: str) -> None:
    pg.locator(f"#{tab}-examples button", has_text=TITLES[clip]).first.click()


def _open(pg: Any, tab: str) -> None:
    pg.get_by_role("tab", name=tab).first.click()


@pytest.mark.parametrize("tab", list(TASKS))
def test_example_after_example_and_uploads_between_show_the_clip_on_screens_answer(
    page: Any, tmp_path: Path, tab: str
) -> None:
    """Caption and Find: an example's click runs it; a second example clicked while the first runs stops
    the first and runs (issue 52 item 4: it was dropped, nothing ran); a second example's click runs the
    second (its answer, not the first's, under its clip); an upload clears the example's answer and Run
    answers it; an example after the upload runs and replaces the upload's answer."""
    pg = page
    if tab == "find":
        _open(pg, "Find")
    _example(pg, tab, PEOPLE)
    _wait_running(pg, tab)
    for name in (PARKING, BALL):
        _example(pg, tab, name)
        _wait_answered(pg, tab, EXAMPLES / name)
    mine = _upload_clip(tmp_path)
    replace_clip(pg, mine)
    _assert_cleared(pg, tab, mine)
    if tab == "find":
        pg.locator("#find-query textarea, #find-query input").first.fill("the lamp turns on")
    pg.click(f"#{tab}-run")
    _wait_answered(pg, tab, mine)
    _example(pg, tab, FLOWER)
    _wait_answered(pg, tab, EXAMPLES / FLOWER)


def _session_rows(pg: Any) -> list[dict[str, str]]:
    """Compare's session CSV, as the visitor downloads it."""
    href = pg.get_attribute("#compare-csv a", "href")
    assert href, "no session CSV link"
    text = pg.request.get(href).text()
    return list(csv.DictReader(io.StringIO(text)))


def _compare(pg: Any, clip: Path) -> None:
    pg.click("#compare-run")
    shown = _wait_answered(pg, "compare", clip)
    assert len(shown["axes"]) == 2, shown  # one card per variant, each drawn on this clip
    pg.wait_for_selector("#compare-csv a", timeout=30_000)
    rows = _session_rows(pg)
    newest = rows[-2:]
    assert [row["video"] for row in newest] == [clip.name] * 2, rows


def test_compare_cards_and_session_rows_follow_the_clip(page: Any, tmp_path: Path) -> None:
    """Compare: an example fills the clip (its click does not run); each comparison's cards and its session
    rows are the clip on screen's: example -> example, example -> upload -> Compare, a Caption example (a
    clip chosen on another tab) clears the comparison, then an example."""
    pg = page
    _open(pg, "Compare")
    _example(pg, "compare", PARKING)
    pg.wait_for_function(SHOWS, arg=PARKING, timeout=60_000)
    _compare(pg, EXAMPLES / PARKING)
    _example(pg, "compare", BALL)
    _assert_cleared(pg, "compare", EXAMPLES / BALL)
    _compare(pg, EXAMPLES / BALL)
    mine = _upload_clip(tmp_path)
    replace_clip(pg, mine)
    _assert_cleared(pg, "compare", mine)
    _compare(pg, mine)
    # the clip changed from another tab (issue 52 item 3: Compare kept the upload's comparison)
    _open(pg, "Caption")
    _example(pg, "caption", PARKING)
    _wait_answered(pg, "caption", EXAMPLES / PARKING)
    _open(pg, "Compare")
    _assert_cleared(pg, "compare", EXAMPLES / PARKING)
    _example(pg, "compare", FLOWER)
    _assert_cleared(pg, "compare", EXAMPLES / FLOWER)
    _compare(pg, EXAMPLES / FLOWER)
