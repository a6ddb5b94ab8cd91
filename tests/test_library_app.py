"""The library in the app: ``/search`` over gradio_client and the MCP tool ``search`` on a server whose
default library (its example clips, indexed once per server at the first search) is two of the app's
short examples (all twelve cost two minutes of the suite to index, for the same checks), and the Library
tab in the real browser on a ``--library`` of three clips with known captions (written by the indexer's
own writer, so stage 1 has words to rank; stage 2 is the tiny model's find).

The tiny model's answers are meaningless: only shapes, bounds and the hand-offs are checked.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from test_mcp import call, text_of, with_session
from ui_support import (
    ARTIFACTS,
    CHROMIUM,
    EXAMPLES,
    LIBRARY_SELECTOR,
    AppServer,
    gradio_selectors,
    launch_chromium,
    start_app,
    stop_app,
)

from marlin_demo.library import index
from marlin_demo.library.app_library import LibrarySource
from marlin_demo.library.database import Store
from marlin_demo.library.inputs import Item
from marlin_demo.ui.library import cost_html

pytestmark = pytest.mark.slow

MOMENT_KEYS = {"video", "id", "start", "end", "score", "retrieval_score", "window", "thumbnail"}
SHOTS = ARTIFACTS / "screenshots"


#: the examples of ``examples_server``: a real clip and a rendered one, the shortest of each set
SHORT_EXAMPLES = ("flower.mp4", "ball_rolls.mp4")


def example_names() -> set[str]:
    return set(SHORT_EXAMPLES)


@pytest.fixture(scope="module")
def examples_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    """The app with an examples folder of ``SHORT_EXAMPLES`` (their entries as examples.json has them)."""
    root = tmp_path_factory.mktemp("marlin-examples")
    folder = root / "examples"
    folder.mkdir()
    every = json.loads((EXAMPLES / "examples.json").read_text())
    entries = [e for e in every if e["video"] in SHORT_EXAMPLES]
    assert {e["video"] for e in entries} == set(SHORT_EXAMPLES)
    (folder / "examples.json").write_text(json.dumps(entries))
    for name in SHORT_EXAMPLES:
        shutil.copy(EXAMPLES / name, folder / name)
    server = start_app(root / "app", extra_env={"MARLIN_EXAMPLES_DIR": str(folder)})
    yield server
    stop_app(server)


def built_scene(server: AppServer) -> str:
    """A caption window's scene from the library the server built (a query stage 1 surely matches)."""
    (db,) = list(server.examples_cache.glob("marlin-library-*/library.sqlite"))
    con = sqlite3.connect(db)
    try:
        return str(con.execute("SELECT scene FROM windows WHERE scene != '' LIMIT 1").fetchone()[0])[:200]
    finally:
        con.close()


def check_answer(d: dict[str, Any], server: AppServer, top_k: int) -> None:
    assert set(d) == {"query", "library", "searched_windows", "moments"}
    assert (
        d["library"]["videos"] == len(example_names()) and d["library"]["windows"] >= d["library"]["videos"]
    )
    assert len(d["moments"]) <= top_k
    for m in d["moments"]:
        assert set(m) == MOMENT_KEYS and m["video"] in example_names() and not Path(m["id"]).is_absolute()
        assert m["window"][0] - 1e-6 <= m["start"] <= m["end"] <= m["window"][1] + 1e-6
        assert 0 <= m["score"] <= 1
        assert m["thumbnail"].startswith("/gradio_api/file=") and "marlin-library-" not in m["thumbnail"]
        got = httpx.get(server.url.rstrip("/") + m["thumbnail"], timeout=30)
        assert got.status_code == 200 and got.content[:3] == b"\xff\xd8\xff"  # a JPEG the app serves


def test_search_endpoint_over_gradio_client(examples_server: AppServer) -> None:
    client = Client(examples_server.url, verbose=False)
    first = client.predict("a ball rolls", 2, api_name="/search")  # builds the examples' library once
    assert first["library"]["videos"] == len(example_names())
    scene = built_scene(examples_server)
    d = client.predict(scene, 3, api_name="/search")
    check_answer(d, examples_server, 3)
    assert d["searched_windows"] >= 1  # its own scene's words: stage 1 chose windows and find ran
    for bad, sentence in (("   ", "empty"), ("x" * 2000, "")):
        with pytest.raises(AppError) as info:
            client.predict(bad, 3, api_name="/search")
        assert str(info.value).strip().endswith(".") and sentence in str(info.value).lower()
    with pytest.raises(AppError, match="top_k must be between 1 and 50"):
        client.predict(scene, 0, api_name="/search")


def test_search_tool_with_a_real_mcp_client(examples_server: AppServer) -> None:
    tools = {t.name: t for t in with_session(examples_server, lambda s: s.list_tools()).tools}
    schema = tools["search"].inputSchema
    assert list(schema["properties"]) == ["query", "top_k"] and "Returns: JSON" in tools["search"].description
    Client(examples_server.url, verbose=False).predict(
        "a ball rolls", 1, api_name="/search"
    )  # the library is built
    query = built_scene(examples_server)
    d = json.loads(text_of(call(examples_server, "search", {"query": query, "top_k": 2})))
    check_answer(d, examples_server, 2)


# ---------------------------------------------------------------------------- the tab in the browser

KNOWN = {
    "garden/pool.mp4": (
        "ball_rolls.mp4",
        "A sunny garden with a swimming pool.",
        "A dog jumps into the pool.",
    ),
    "park.mp4": ("people_meet.mp4", "A city park in autumn.", "A dog chases a ball."),
    "sofa.mp4": ("lamp_on_off.mp4", "A living room at night.", "A cat sleeps on the sofa."),
}


def known_library(root: Path) -> Path:
    """Three clips whose one caption window each is a known sentence (the indexer's writer)."""
    store = Store(root / "lib")
    for name, (clip, scene, event) in KNOWN.items():
        path = root / "videos" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(EXAMPLES / clip, path)
        duration = json.loads((EXAMPLES / "examples.json").read_text())
        seconds = next(float(e["duration"]) for e in duration if e["video"] == clip)
        row = {
            "duration_s": seconds,
            "scene": scene,
            "windows": [{"start": 0.0, "end": seconds, "scene": scene}],
            "events": [{"start": 1.0, "end": 3.0, "description": event}],
        }
        item = Item(id=name, video=name, path=str(path), query=None)
        index.store_caption(
            store, index.Pending(item, name.encode().hex().ljust(64, "0")[:64], 1, 1, None), row
        )
    store.close()
    return root / "lib"


def test_the_note_on_indexing_goes_once_the_library_holds_every_clip(tmp_path: Path) -> None:
    """What building the library costs is said until it is built (or found built on disk), not after."""
    store = Store(tmp_path / "lib")
    items = []
    for name in SHORT_EXAMPLES:  # each stored as the indexer stores it, with the file's own stamp
        path = tmp_path / name
        shutil.copy(EXAMPLES / name, path)
        item, st = Item(id=name, video=name, path=str(path), query=None), path.stat()
        row = {"duration_s": 5.0, "scene": "A scene.", "windows": [{"start": 0.0, "end": 5.0}], "events": []}
        index.store_caption(
            store,
            index.Pending(item, name.encode().hex().ljust(64, "0"), st.st_size, st.st_mtime_ns, None),
            row,
        )
        items.append(item)
    store.close()
    price = "No prebuilt library matches this model, so the first search indexes the example clips"
    missing = [
        *items,
        Item(id="new.mp4", video="new.mp4", path=str(EXAMPLES / "people_meet.mp4"), query=None),
    ]
    before = LibrarySource(tmp_path / "lib", "bf16", missing, None, "three clips", price)
    assert not before.indexed() and price in cost_html(before)  # one clip still to caption
    built = LibrarySource(tmp_path / "lib", "bf16", items, None, "two clips", price)
    assert built.indexed() and cost_html(built) == ""  # a later page load no longer says it
    (tmp_path / "flower.mp4").write_bytes((EXAMPLES / "people_meet.mp4").read_bytes())  # changed since
    assert not LibrarySource(tmp_path / "lib", "bf16", items, None, "two clips", price).indexed()


@pytest.fixture(scope="module")
def library_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    root = tmp_path_factory.mktemp("marlin-library")
    server = start_app(
        root / "app",
        "--library",
        str(known_library(root)),
        "--find-max-new-tokens",
        "12",
        "--search-candidates",
        "2",
        "--variants",
        "bf16,gptq",
        extra_env={"MARLIN_CACHE_EXAMPLES": "off"},
    )
    yield server
    stop_app(server)


#: every time the page's clip player lands on a time (seeked does not bubble: caught on its way down)
SEEKS_JS = """window.__clipSeeks = [];
document.addEventListener('seeked', (e) => {
  if (e.target.closest && e.target.closest('#clip-video')) window.__clipSeeks.push(e.target.currentTime);
}, true);"""


#: every thumbnail's spoken name is its visible caption
NAMED_JS = """() => { const items = [...document.querySelectorAll('#library-moments .thumbnail-item')];
  return items.length > 0 && items.every(b =>
    b.getAttribute('aria-label') === b.querySelector('.caption-label')?.textContent.trim()); }"""
#: the gallery's box height, and its rows' height
GALLERY_FIT_JS = """(() => { const w = document.querySelector('#library-moments .grid-wrap');
  const rows = w.querySelector('.grid-container');
  return [w.getBoundingClientRect().height, rows.getBoundingClientRect().height]; })()"""


def test_library_tab_searches_plays_and_opens_in_find(library_server: AppServer) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.goto(library_server.url)
        pg.get_by_role("tab", name="Library · search all").click()
        pg.wait_for_selector("#library-about")
        assert "the library at lib" in pg.inner_text("#library-about")
        pg.fill("#library-query textarea", "a dog jumped into the pool")
        pg.click("#library-run")
        pg.wait_for_selector("#library-moments img", timeout=240_000)
        head = pg.inner_text("#library-headline")
        assert "“a dog jumped into the pool”" in head
        assert "3 videos, 3 caption windows; find was asked in 2 windows" in head  # --search-candidates 2
        captions = pg.locator("#library-moments .caption-label").all_inner_texts()
        assert captions and all(" s · score " in c and "text " in c for c in captions)
        assert captions[0].startswith("garden/pool.mp4")  # dog + jump + pool: the best text and a head start
        pg.wait_for_selector("#library-run", state="visible")  # Run is back: the search is over
        # each thumbnail is spoken as its moment (its caption: clip, time, score), not "Thumbnail 1 of 3"
        pg.wait_for_function(NAMED_JS, timeout=10_000)
        # the gallery's box is as tall as its rows, none cut or scrolled inside it (Gradio fixed it at 550 px)
        box, rows = pg.evaluate(GALLERY_FIT_JS)
        assert rows <= box + 1 and box <= rows + 40, (box, rows)
        # the Library's selectors into Gradio's markup (style.css) each match (the rest: test_browser.py)
        library_selectors = [s for s in gradio_selectors() if s.startswith(LIBRARY_SELECTOR)]
        assert library_selectors, "the Library's gallery rules are gone from style.css: update this check"
        unmatched = pg.evaluate("(s) => s.filter(x => !document.querySelector(x))", library_selectors)
        assert not unmatched, f"selectors into Gradio's markup that match nothing: {unmatched}"
        pg.locator("#library-moments .thumbnail-item").first.click()
        pg.wait_for_selector("#library-video video")
        assert "garden/pool.mp4" in pg.inner_text("#library-chosen")
        pg.screenshot(path=str(SHOTS / "6_library_desktop.png"), full_page=True)
        pg.set_viewport_size({"width": 420, "height": 900})
        pg.wait_for_function("document.documentElement.scrollWidth <= window.innerWidth", timeout=30_000)
        pg.screenshot(path=str(SHOTS / "6_library_phone.png"), full_page=True)
        pg.set_viewport_size({"width": 1400, "height": 1000})
        start = float(re.search(r"· ([\d.]+) s →", pg.inner_text("#library-chosen")).group(1))
        pg.evaluate(SEEKS_JS)
        pg.click("#library-open-find")
        pg.wait_for_selector("#clip-video video", timeout=60_000)
        assert pg.input_value("#find-query textarea") == "a dog jumped into the pool"
        # Find runs on the clip with the query (its answer arrives), and the clip was at the moment first
        pg.wait_for_selector("#find-metrics .md-card", timeout=240_000)
        assert "“a dog jumped into the pool”" in pg.inner_text("#find-headline")
        seeks = pg.evaluate("window.__clipSeeks")
        assert any(abs(t - start) < 0.3 for t in seeks), (start, seeks)
        # honest states: no match in a library larger than N is said, not an error
        pg.get_by_role("tab", name="Library · search all").click()
        pg.fill("#library-query textarea", "helicopter")
        pg.click("#library-run")
        pg.wait_for_selector("#library-headline .ml-none", timeout=60_000)
        # the next search's own cost is said before it runs: find in the windows its words pick
        pg.fill("#library-query textarea", "a dog jumped")
        pg.wait_for_function(
            "document.querySelector('#library-status')?.innerText.includes('This search runs find in')",
            timeout=30_000,
        )
        browser.close()
    assert not errors, errors
