"""A task is one entry in ``tasks`` with its answer type: a third task answering in a shape of its own (a
count of events, ``count_answer.py``: its own result, parser and repair) is registered here and answers
through the service (a short clip and one in windows), the CLI (text and JSON), batch, the API endpoint and
the MCP tools, Compare's JSON and a page tab the tab builder makes for it (the generic view: its text and
JSON), with no other change to the code. Caption's and find's answers keep their shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from count_answer import COUNT, PROMPT, CountParse, CountResult, parse_count, repair_count
from gradio_client import Client, handle_file
from result_shapes import METRIC_KEYS
from test_mcp import with_session
from ui_support import free_port

from marlin_demo import agreement, cli, service, tasks
from marlin_demo.engine import Engine
from marlin_demo.longvideo import policy
from marlin_demo.service import capacity, cost, gpu_calls
from marlin_demo.settings import Settings
from marlin_demo.tasks import Task
from marlin_demo.ui.blocks import build_demo

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "blue_square.mp4"  # 10 s
FLAGS = ["--model", "tiny", "--device", "cpu", "--variant", "bf16", "--caption-max-new-tokens", "8"]
COUNT_KEYS = "variant model count windows raw format_ok repaired metrics partial range".split()
#: the public JSON of caption and find, key by key in order (``results`` to_dict; the API adds chapters)
CAPTION_ORDER = "variant model scene events raw repaired metrics runtime windows partial range".split()
FIND_ORDER = "variant model query span format_ok raw metrics runtime moments partial range".split()


@pytest.fixture
def count() -> Iterator[Task]:
    tasks.register_task(COUNT)
    yield COUNT
    tasks.unregister_task(COUNT.name)


def test_an_unknown_task_names_the_known_ones(count: Task) -> None:
    with pytest.raises(ValueError, match=r"Unknown task 'dance': choose caption, find or count\."):
        tasks.get_task("dance")
    assert tasks.get_task("count") is count and list(tasks.TASKS) == ["caption", "find", "count"]


def test_unregistered_task_is_refused_everywhere() -> None:
    assert "count" not in tasks.TASKS
    with pytest.raises(ValueError, match="Unknown task 'count'"):
        policy.plan_for("count", 60.0, Settings())
    with pytest.raises(ValueError, match="Unknown task 'count'"):
        agreement.agreement("count", {})
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["count", str(CLIP)])


def test_its_own_parser_and_repair() -> None:
    assert parse_count("3") == CountParse(3, True)
    assert parse_count("About 4 events.") == CountParse(4, False)
    assert parse_count("Scene: a square.") == CountParse(None, False)
    capped = repair_count(CountParse(40, True), 10.0)
    assert (capped.count, capped.repaired, capped.repairs) == (10, True, ["capped 40 events at 10"])


def test_the_limits_count_it(count: Task) -> None:
    """Its windows, token limit, GPU call and the header's limits come from its entry's settings."""
    s = Settings(caption_window_s=20.0, max_windows=3, caption_max_new_tokens=100)
    assert [(w.start, w.end) for w in policy.plan_for("count", 50.0, s)] == [(0, 20), (20, 40), (40, 50)]
    assert tasks.get_task("count").tokens(s) == 100
    assert capacity.longest_video_s("count", s) == 60.0
    assert capacity.limits_line(s).endswith(", counts up to 60 s")
    assert gpu_calls.call_seconds("count", s) == gpu_calls.call_seconds("caption", s)
    cheaper = s.with_(caption_max_new_tokens=10)
    assert capacity.window_s("count", cheaper, capacity.speeds()["h200"]) < capacity.window_s(
        "count", s, capacity.speeds()["h200"]
    )
    line = cost.request_gpu_line("count", 50.0, s)
    assert line.startswith("This run makes 3 GPU calls of up to ")


@pytest.mark.slow
def test_service_a_short_clip_and_one_in_windows(count: Task, tiny_settings: Settings) -> None:
    """Its own prompt in every window; the windows' counts summed by its answer type; Compare's JSON."""
    engine = Engine(tiny_settings.with_(device="cpu", caption_max_new_tokens=8, caption_window_s=4.0))
    windows = service.run(engine, "count", CLIP, "bf16")
    assert isinstance(windows, CountResult) and len(windows.windows) == len(windows.info.windows) == 3
    assert all(PROMPT in info.prompt for info in windows.info.windows) and windows.raw.count("[window ") == 3
    known = [c for c in windows.windows if c is not None]
    assert windows.count == (sum(known) if known else None)
    short = service.run(
        Engine(tiny_settings.with_(device="cpu", caption_max_new_tokens=8)), "count", CLIP, "bf16"
    )
    assert isinstance(short, CountResult) and short.windows == [short.count] and PROMPT in short.info.prompt
    payload = agreement.compare_payload("count", None, {"a": short, "b": windows})
    assert payload["agreement"] == {"a|b": {"same_count": float(short.count == windows.count)}}
    assert payload["results"]["b"] == windows.to_dict() and list(payload["results"]["a"]) == COUNT_KEYS


@pytest.mark.slow
def test_cli_and_batch(count: Task, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its own sub-command (readable: its answer type's text; JSON: its shape) and ``batch --task count``."""
    assert cli.main(["count", str(CLIP), *FLAGS]) == 0
    text = capsys.readouterr().out
    assert "Count · bf16 · " in text and "\nEvents counted: " in text
    assert cli.main(["count", str(CLIP), *FLAGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == COUNT_KEYS and data["variant"] == "bf16" and set(data["metrics"]) == METRIC_KEYS
    out = tmp_path / "out"
    assert cli.main(["batch", str(CLIP), "--task", "count", "--out", str(out), *FLAGS]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["task"], r["status"]) for r in rows] == [("count", "ok")]
    assert "count" in rows[0] and "events" not in rows[0] and "query" not in rows[0]


@pytest.mark.slow
def test_the_api_mcp_compare_and_its_page_tab(
    count: Task, tiny_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, browser: Any
) -> None:
    """The app built with it: an endpoint and an MCP tool of its own, a Compare task, and a tab (the tab
    builder's, shown by the generic view) that a browser runs on an example."""
    monkeypatch.setenv("MARLIN_CACHE_EXAMPLES", "off")
    settings = tiny_settings.with_(output_dir=str(tmp_path / "out"), caption_max_new_tokens=8)
    demo, launch = build_demo(Engine(settings), settings)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch)
    url = f"http://127.0.0.1:{port}/"
    try:
        with ThreadPoolExecutor(1) as pool:  # its own event loop: Playwright's runs in this thread
            listed = pool.submit(with_session, url, lambda s: s.list_tools()).result()
        tools = {t.name: t for t in listed.tools}
        assert list(tools)[:3] == ["caption", "find", "count"]
        assert list(tools["count"].inputSchema["properties"]) == ["video", "variant", "start", "end"]
        assert tools["count"].description.startswith("How many distinct events happen in a video.")
        client = Client(url, verbose=False)
        d = client.predict(handle_file(CLIP), "bf16", api_name="/count")
        assert list(d) == COUNT_KEYS and d["windows"] == [d["count"]]
        c = client.predict(handle_file(CLIP), "count", "", api_name="/compare")
        assert c["task"] == "count" and c["query"] is None and len(c["results"]) >= 2
        assert all(list(r) == COUNT_KEYS for r in c["results"].values())
        assert all(set(pair) == {"same_count"} for pair in c["agreement"].values())

        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.goto(url)
        pg.get_by_role("tab", name="Count").click()
        pg.locator("#count-examples button").first.click()  # fills the page's clip and runs
        pg.wait_for_selector("#count-answer pre", timeout=180_000)
        shown = pg.inner_text("#count-answer")
        assert "Events counted: " in shown and '"count":' in shown and '"windows":' in shown
        pg.wait_for_selector("#count-metrics .md-card", timeout=30_000)
        context.close()
        assert not errors, f"JavaScript errors on the page: {errors}"
    finally:
        demo.close()


@pytest.mark.slow
def test_caption_and_find_keep_their_shape(tiny_settings: Settings) -> None:
    """Their JSON key by key (a short clip and one in windows), as before answer types owned it: the same
    keys in the same order, and the CLI's readable form, whatever the stand-in's words."""
    short = Engine(tiny_settings.with_(device="cpu", caption_max_new_tokens=16, find_max_new_tokens=8))
    windowed = Engine(short.settings.with_(caption_window_s=4.0, find_window_s=4.0, find_overlap_s=1.0))
    for engine, n in ((short, 1), (windowed, 3)):
        cap = service.run(engine, "caption", CLIP, "bf16")
        data = tasks.CAPTION.answer.to_json(cap)
        assert list(data) == [*CAPTION_ORDER, "chapters"] and list(data["chapters"]) == ["lines", "reason"]
        assert all(list(e) == ["start", "end", "description"] for e in data["events"])
        assert len(data["windows"]) == n and all(
            list(w) == ["start", "end", "scene"] for w in data["windows"]
        )
        text = cli.format_answer(cap, "caption").splitlines()
        assert text[0].startswith("Caption · bf16 · ") and "Events:" in text and text[2].startswith("Scene: ")
        found = service.run(engine, "find", CLIP, "bf16", "the blue square enters")
        data = found.to_dict()
        assert list(data) == FIND_ORDER and all(list(m) == ["start", "end", "score"] for m in data["moments"])
        text = cli.format_answer(found, "find").splitlines()
        assert text[0].startswith("Find · bf16 · ") and text[1] == "Query: the blue square enters"
        payload = agreement.compare_payload("find", "q", {"a": found, "b": found})
        assert payload["agreement"] == {"a|b": {"span_iou": 1.0 if found.span else 0.0}}
