"""Drive the real app in Debian's chromium (Playwright): every tab, as a visitor would use it.

Screenshots of each tab go to ``test-artifacts/screenshots/`` for a person to
review. Tabs render their contents only once selected (``render_children=False``),
so each test selects its tab first. Waits are on page state, never fixed sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_support import ARTIFACTS, EXAMPLES, AppServer, app_server  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ARTIFACTS / "screenshots"
CLIP = EXAMPLES / "ball_rolls.mp4"
RUN_TIMEOUT_MS = 240_000

if not CHROMIUM.exists():
    pytest.skip("Debian chromium (/usr/bin/chromium) is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--autoplay-policy=no-user-gesture-required",
            ],
        )
        yield b
        b.close()


@pytest.fixture()
def page(browser, app_server: AppServer) -> Iterator[object]:  # noqa: F811 - the imported fixture
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(app_server.url)
    pg.wait_for_selector("#caption-run", timeout=60_000)
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def _shot(pg, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _select_tab(pg, name: str) -> None:
    pg.get_by_role("tab", name=name).click()


def _upload(pg, root: str, path: Path) -> None:
    pg.set_input_files(f"{root} input[type=file]", str(path))
    pg.wait_for_selector(f"{root} video", timeout=60_000)


def test_caption_timeline_seeks_the_player(page) -> None:
    pg = page
    _upload(pg, "#caption-video", CLIP)
    pg.click("#caption-run")
    pg.wait_for_selector("#caption-timeline .mt-event", timeout=RUN_TIMEOUT_MS)
    assert "SCENE" in pg.inner_text("#caption-scene").upper()
    assert pg.locator("#caption-table tbody tr").count() >= 1
    for name in ("events.json", "events.vtt", "events.srt"):
        pg.wait_for_selector(f'#caption-files td.filename[aria-label="{name}"]', timeout=30_000)
    # the player carries the events as captions (a WebVTT track)
    pg.wait_for_selector("#caption-player video track", state="attached", timeout=60_000)
    assert "random weights" in pg.inner_text("#marlin-header")
    cards = pg.inner_text("#caption-metrics")
    assert "FIRST TEXT" in cards.upper() and "KERNEL" in cards.upper() and "gated-deltanet:" in cards, cards

    event = pg.locator("#caption-timeline .mt-event").first
    start = float(event.get_attribute("data-start"))
    # move the player away from the event first, so the click has to bring it back
    away = start + 1.5
    pg.evaluate(f"document.querySelector('#caption-player video').currentTime = {away}")
    pg.wait_for_function(
        f"Math.abs(document.querySelector('#caption-player video').currentTime - {away}) < 0.05"
    )
    event.click()
    pg.wait_for_function(
        f"Math.abs(document.querySelector('#caption-player video').currentTime - {start}) < 0.3",
        timeout=10_000,
    )
    assert "mt-active" in (event.get_attribute("class") or "")
    _shot(pg, "1_caption")


def test_caption_cached_example_loads(page, app_server: AppServer) -> None:  # noqa: F811
    pg = page
    pg.locator("#caption-examples").get_by_text("A red ball rolls across a field").click()
    pg.wait_for_selector("#caption-scene .mc-scene", timeout=RUN_TIMEOUT_MS)
    pg.wait_for_selector("#caption-player video", timeout=60_000)
    if pg.locator("#caption-table tbody tr").count():  # events -> the follow-up step adds the captions
        pg.wait_for_selector("#caption-player video track", state="attached", timeout=30_000)
    assert list(app_server.examples_cache.rglob("log.csv")), "the example was not cached"
    # honest labels: the examples say when they run the model; the figures say they are the cached run's
    assert "first click runs the model" in pg.inner_text("#caption-examples")
    badge = pg.inner_text("#caption-metrics .md-run")
    assert "Cached example" in badge and "when this answer was cached" in badge, badge
    _shot(pg, "1b_caption_example")


def test_find_highlights_the_span_jumps_and_offers_the_clip(page) -> None:
    pg = page
    _select_tab(pg, "Find · when")
    _upload(pg, "#find-video", CLIP)
    # the clip is a bundled example: its ground-truth queries are offered
    pg.wait_for_selector("#find-suggestions", state="visible", timeout=30_000)
    pg.locator("#find-query textarea, #find-query input").first.fill("the red ball rolls across the field")
    pg.click("#find-run")
    pg.wait_for_selector("#find-headline .mf-head:not(.mf-wait)", timeout=RUN_TIMEOUT_MS)
    if pg.locator("#find-headline .mf-none").count():
        assert pg.locator("#find-timeline .mt-span").count() == 0  # never a made-up span
    else:
        span = pg.locator("#find-timeline .mt-span")
        assert span.count() == 1
        start = float(span.get_attribute("data-start"))
        pg.wait_for_selector("#find-clip a[download$='.mp4']", timeout=60_000)
        # the follow-up update moved the player to the span's start
        pg.wait_for_function(
            f"Math.abs(document.querySelector('#find-video video').currentTime - {start}) < 0.3",
            timeout=30_000,
        )
        assert pg.locator("#find-timeline .mt-ref").count() == 1  # the example's ground truth is drawn too
    _shot(pg, "2_find")


BADGE_LOG_JS = """() => { window.__badges = [];
  const seen = () => document.querySelectorAll('#compare-cards .cc-card').forEach(c =>
    window.__badges.push(c.dataset.variant + ':' + (c.querySelector('.md-badge')?.textContent || '')));
  new MutationObserver(seen).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""
"""Record every badge each Compare card shows, so a state that lasted only a moment is still checked."""


def _chip_state(pg, variant: str) -> str:
    return pg.get_attribute(f'#marlin-header .mh-chip[data-variant="{variant}"]', "data-state")


def test_compare_shows_both_variants_and_charts(page) -> None:
    pg = page
    # one clip for every tab: uploaded in Caption, it is already in Compare
    _upload(pg, "#caption-video", CLIP)
    _select_tab(pg, "Compare · GPTQ vs bnb4")
    pg.wait_for_selector("#compare-video video", timeout=30_000)
    assert pg.locator("#compare-plot-latency_s").count() == 0 or not pg.is_visible("#compare-plot-latency_s")
    before = {v: _chip_state(pg, v) for v in ("gptq", "bnb4")}
    pg.evaluate(BADGE_LOG_JS)
    pg.click("#compare-run")
    pg.wait_for_function(
        "document.querySelectorAll('#compare-cards .cc-card .cc-stats').length === 2", timeout=RUN_TIMEOUT_MS
    )
    variants = pg.locator("#compare-cards .cc-card").evaluate_all("cs => cs.map(c => c.dataset.variant)")
    assert variants == ["gptq", "bnb4"]
    # a variant is "queued" until it starts, then cold (it was loaded for this request) or warm
    badges = pg.evaluate("window.__badges")
    for v in ("gptq", "bnb4"):
        seen = {b.split(":", 1)[1].strip() for b in badges if b.startswith(v + ":")}
        cold = before[v] == "loads on first use"
        assert ("warm" in seen) is not cold and ("cold" in seen) is cold, (v, before[v], seen)
        assert seen <= {"cold", "warm", "queued · will be loaded first", "queued · already loaded"}, seen
    assert any(b.startswith("bnb4:queued") for b in badges), badges  # bnb4 waited while gptq ran
    # the header follows the engine without a reload
    pg.wait_for_function(
        """() => ['gptq', 'bnb4'].every(v => document.querySelector(
             `#marlin-header .mh-chip[data-variant="${v}"]`)?.dataset.state === 'loaded')""",
        timeout=30_000,
    )
    assert pg.locator("#compare-summary .cs-chip").count() == 3  # matched-event IoU, event F1, ROUGE-L
    pg.wait_for_selector("#compare-plot-latency_s canvas, #compare-plot-latency_s svg", timeout=60_000)
    pg.wait_for_selector("#compare-csv a", timeout=60_000)
    pg.wait_for_selector("#compare-scores", state="visible", timeout=30_000)
    pg.wait_for_selector("#compare-run", state="visible", timeout=10_000)
    # readable column titles, as the charts have; a warm run loaded nothing in this request
    metrics = pg.inner_text("#compare-metrics")
    assert "Load time in this request (s)" in metrics and "load_s" not in metrics, metrics
    _shot(pg, "3_compare")
    session = pg.inner_text("#compare-session")
    assert "gptq" in session and "bnb4" in session and "ttft_s" not in session, session

    # Stop: the running comparison is cancelled, the page says so and is ready for the next one
    rows = pg.locator("#compare-session tbody tr").count()
    if pg.locator("#compare-bf16 input").count():
        pg.check("#compare-bf16 input")  # a third variant: the run lasts long enough to be stopped
    pg.click("#compare-run")
    pg.wait_for_selector("#compare-summary .cs-running", timeout=30_000)
    pg.click("#compare-stop", force=True)  # at once: a warm tiny run lasts only seconds
    pg.wait_for_function(
        "document.querySelector('#compare-summary').innerText.includes('Stopped')", timeout=30_000
    )
    assert pg.is_enabled("#compare-run")
    assert pg.locator("#compare-session tbody tr").count() == rows  # the stopped run added nothing
    _shot(pg, "3b_compare_stopped")
    assert "Stopped" in pg.inner_text("#compare-summary")  # no late message of the stopped run replaced it


def test_about_tab(page) -> None:
    pg = page
    _select_tab(pg, "About")
    pg.wait_for_selector("#about-facts", timeout=30_000)
    pg.wait_for_selector("#about-run >> text=/caption_stream", timeout=30_000)
    text = pg.inner_text("#tab-about")
    assert "seeds/" not in text and "93%" in text  # the card's claim is explained, not repeated as a fact
    assert pg.get_attribute("#about-facts a[href*='Marlin-2B-GPTQ']", "href").startswith("https://")
    assert "11.78" in text and "12.44" in text
    for endpoint in ("/caption", "/caption_stream", "/find", "/compare"):
        assert endpoint in text
    _shot(pg, "4_about")


def test_api_page_snippet_uploads_a_local_file(page) -> None:
    """Gradio's "Use via API" page: its Python snippet uploads a local file (the app takes uploads only),
    and opening it fetches nothing that fails (no 404 for the MCP schema)."""
    pg = page
    failed: list[str] = []
    pg.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    pg.get_by_text("Use via API").first.click()
    pg.locator("li.snippet", has_text="Python").first.click()  # the page opens on MCP
    pg.wait_for_selector("text=handle_file('clip.mp4')", timeout=30_000)
    code = pg.inner_text("body")
    assert "github.com" not in code and "Hello!!" not in code
    assert not failed, failed


# ---------------------------------------------------------------------------
# Example credits: the About list and the line under a loaded real example
# ---------------------------------------------------------------------------

DESKTOP = {"width": 1400, "height": 1000}
PHONE = {"width": 420, "height": 900}


def _real_examples() -> list[dict]:
    import json

    entries = json.loads((EXAMPLES / "examples.json").read_text(encoding="utf-8"))
    return [e for e in entries if e.get("set") == "real" and (EXAMPLES / e["video"]).is_file()]


OVERFLOWING_JS = """(sel) => [...document.querySelectorAll(sel + ', ' + sel + ' *')]
     .filter(el => el.offsetParent !== null && el.getBoundingClientRect().width > 0)
     .filter(el => el.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
     .map(el => `${el.tagName}.${el.className} right=${Math.round(el.getBoundingClientRect().right)}`)
     .slice(0, 5)"""


def _no_sideways_overflow(pg, selector: str) -> None:
    """Once the layout settles, nothing in ``selector`` is wider than the window (no text cut off)."""
    try:
        pg.wait_for_function(f"(sel) => ({OVERFLOWING_JS})(sel).length === 0", arg=selector, timeout=15_000)
    except sync_api.TimeoutError:
        wide = pg.evaluate(OVERFLOWING_JS, selector)
        wide += pg.evaluate(
            """(sel) => { const out = []; let e = document.querySelector(sel);
              while (e) { const r = e.getBoundingClientRect();
                out.push(`${e.tagName}#${e.id} ${Math.round(r.left)}-${Math.round(r.right)}`);
                e = e.parentElement; }
              return out; }""",
            selector,
        )
        pytest.fail(f"{selector} overflows the {pg.viewport_size['width']} px window: {wide}")


def _open_tab(pg, name: str) -> None:
    """Select a tab; on a narrow window Gradio moves the tabs that do not fit into its "..." menu."""
    tab = pg.locator(".tab-container:not(.visually-hidden) [role=tab]", has_text=name)
    if tab.count():
        tab.first.click()
        return
    pg.click(".overflow-menu > button")
    pg.locator(".overflow-dropdown button", has_text=name).click()


# Open issue: run alone, the 420 px About tab fits; after the 1400 px case in the same session
# the 420 px page lays .gradio-container out 631 px wide (not understood yet, see the report).
PHONE_AFTER_DESKTOP = pytest.mark.xfail(
    reason="after a 1400 px visit the 420 px page is laid out 631 px wide", strict=False
)


@pytest.mark.parametrize(
    ("size", "viewport"), [("desktop", DESKTOP), pytest.param("phone", PHONE, marks=PHONE_AFTER_DESKTOP)]
)
def test_about_lists_every_credit(browser, app_server: AppServer, size: str, viewport: dict) -> None:  # noqa: F811
    from marlin_demo.ui.credits import credit_text

    real = _real_examples()
    if not real:
        pytest.skip("no real example clips")
    context = browser.new_context(viewport=viewport)
    pg = context.new_page()
    try:
        pg.goto(app_server.url)
        pg.wait_for_selector("#caption-run", timeout=60_000)
        _open_tab(pg, "About")
        pg.wait_for_selector("#about-credits", timeout=30_000)
        text = " ".join(pg.inner_text("#about-credits").split())
        for ex in real:
            credit = ex["credit"]
            for part in (ex["title"], credit["author"], credit["license"]):
                assert " ".join(part.split()) in text, (ex["video"], part)
            assert " ".join(credit_text(ex).split()[:4]) in text
        _no_sideways_overflow(pg, "#about-credits")
        # the page clipped to the list (an element screenshot lays a tall element out again, wider)
        box = pg.evaluate(
            """() => { const r = document.querySelector('#about-credits').getBoundingClientRect();
              return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; }"""
        )
        SHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SHOTS / f"5_about_credits_{size}.png"), full_page=True, clip=box)
    finally:
        context.close()


@pytest.mark.parametrize(("size", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_caption_real_example_shows_its_credit(
    browser,
    app_server: AppServer,  # noqa: F811
    size: str,
    viewport: dict,
) -> None:
    real = _real_examples()
    if not real:
        pytest.skip("no real example clips")
    ex = min(real, key=lambda e: e["duration"])  # the shortest clip: the lazy cache runs it once
    context = browser.new_context(viewport=viewport)
    pg = context.new_page()
    try:
        pg.goto(app_server.url)
        pg.wait_for_selector("#caption-run", timeout=60_000)
        pg.locator("#caption-examples").get_by_text(ex["title"]).first.click()
        pg.wait_for_selector("#caption-credit .mf-credit", timeout=RUN_TIMEOUT_MS)
        line = " ".join(pg.inner_text("#caption-credit").split())
        assert ex["title"] in line and ex["credit"]["license"] in line and ex["credit"]["author"] in line
        pg.wait_for_selector("#caption-scene .mc-scene", timeout=RUN_TIMEOUT_MS)
        _no_sideways_overflow(pg, "#caption-credit")
        # the header is one compact block with the duration limit; every tab is shown (no "..." menu)
        assert "videos up to" in pg.inner_text("#marlin-header .mh-limits summary")
        height = pg.evaluate("document.querySelector('#marlin-header').getBoundingClientRect().height")
        assert height < {"desktop": 200, "phone": 280}[size], height
        for name in ("Caption", "Find", "Compare", "About"):
            assert pg.locator(".tab-container:not(.visually-hidden) [role=tab]", has_text=name).is_visible()
        _shot(pg, f"6_caption_real_example_{size}")
        # the example's clip followed the visitor into Compare
        _open_tab(pg, "Compare")
        pg.wait_for_selector("#compare-video video", timeout=30_000)
        _shot(pg, f"6b_compare_same_clip_{size}")
    finally:
        context.close()
