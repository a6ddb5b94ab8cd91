"""A task is one entry in ``tasks`` with its answer type: the suite's third task (a free-form question about
the clip, ``question_task.py``: its own result, parser and repair, a query and a span) is registered as a
built-in is, by its module, and answers through the service (a short clip and one in windows), the CLI (text
and JSON), batch, the bench, the API endpoint and the MCP tools, Compare and a page tab the tab builder makes
for it (the generic view: its text and JSON), with no other change to the code. Caption's and find's answers
keep their shape."""

from __future__ import annotations

import dataclasses
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from gradio_client import Client, handle_file
from media_factory import examples_subset
from result_shapes import METRIC_KEYS
from test_mcp import with_session
from ui_support import free_port

from marlin_demo import agreement, cli, models, service, tasks
from marlin_demo import settings as settings_mod
from marlin_demo.engine import Engine
from marlin_demo.longvideo import policy
from marlin_demo.service import capacity, cost, gpu_calls
from marlin_demo.settings import Settings
from marlin_demo.ui.blocks import build_demo

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "blue_square.mp4"  # 10 s
ASK = "what colour is the square?"
FLAGS = ["--model", "tiny", "--device", "cpu", "--variant", "bf16", "--question-max-new-tokens", "8"]
QUESTION_KEYS = "variant model query answer span raw format_ok repaired metrics runtime partial range".split()
#: the public JSON of caption and find, key by key in order (``results`` to_dict; the API adds chapters)
CAPTION_ORDER = "variant model scene events raw repaired metrics runtime windows partial range".split()
FIND_ORDER = "variant model query span format_ok raw metrics runtime moments partial range".split()


def with_questions(folder: Path) -> Path:
    """An examples folder of the blue square whose entry has a question with its truth (its examples)."""
    examples_subset(folder, (CLIP.name,))
    entries = json.loads((folder / "examples.json").read_text())
    entries[0]["questions"] = [{"query": ASK, "span": [0.0, 10.0]}]
    (folder / "examples.json").write_text(json.dumps(entries))
    return folder


def test_tasks_come_in_their_order_not_their_import_order(question: ModuleType) -> None:
    names = list(tasks.TASKS)
    assert names == sorted(names, key=lambda n: tasks.TASKS[n].order) and names.index("find") < names.index(
        "question"
    )
    with pytest.raises(
        ValueError, match=rf"Unknown task 'dance': choose {', '.join(names[:-1])} or question\."
    ):
        tasks.get_task("dance")
    assert tasks.get_task("question") is question.QUESTION
    tasks.register_task(dataclasses.replace(question.QUESTION, order=-1))  # registered last, placed first
    assert list(tasks.TASKS) == ["question", *(n for n in names if n != "question")]
    assert cli.build_parser().parse_args(["question", str(CLIP), ASK]).query == ASK


def test_unregistered_task_is_refused_everywhere() -> None:
    assert "question" not in tasks.TASKS
    with pytest.raises(ValueError, match="Unknown task 'question'"):
        policy.plan_for("question", 60.0, Settings())
    with pytest.raises(ValueError, match="Unknown task 'question'"):
        agreement.agreement("question", {})
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["question", str(CLIP)])


def test_its_own_parser_and_repair(question: ModuleType) -> None:
    parse, fix, parsed = question.parse_question, question.repair_question, question.QuestionParse
    assert parse("Answer: It is blue.\nFrom 1.5 to 4.0.") == parsed("It is blue.", (1.5, 4.0), True)
    assert parse("blue, I think") == parsed("blue, I think", None, False)
    fixed = fix(parse("Answer: blue.\nFrom 2.0 to 40.0."), 10.0)
    assert (fixed.span, fixed.repaired, fixed.answer) == ((2.0, 10.0), True, "blue.") and fixed.repairs


def test_its_entry_words_its_query_and_names_its_settings_and_examples(question: ModuleType) -> None:
    """Its windows, token limit, GPU call and the header's limits come from the settings its entry names;
    its wording and examples are its own."""
    entry = tasks.get_task("question")
    assert entry.env() == {
        "question_max_new_tokens": "MARLIN_QUESTION_MAX_NEW_TOKENS",
        "question_window_s": "MARLIN_QUESTION_WINDOW_S",
        "question_overlap_s": "MARLIN_QUESTION_OVERLAP_S",
    }
    s = Settings(max_windows=3, find_max_new_tokens=100).with_(
        question_window_s=20.0, question_overlap_s=0.0, question_max_new_tokens=100
    )
    assert [(w.start, w.end) for w in policy.plan_for("question", 50.0, s)] == [(0, 20), (20, 40), (40, 50)]
    assert entry.tokens(s) == 100 and capacity.longest_video_s("question", s) == 60.0
    assert ", questions up to 60 s" in capacity.limits_line(s)
    assert gpu_calls.call_seconds("question", s) == gpu_calls.call_seconds("find", s)
    assert cost.request_gpu_line("question", 50.0, s).startswith("This run makes 3 GPU calls of up to ")
    example = {"video": "a.mp4", "queries": [{"query": "a door opens", "span": [1, 2]}],
               "questions": [{"query": ASK, "span": [0, 3]}]}  # fmt: skip
    asked = [tasks.get_task(name).examples(example) for name in ("caption", "find", "question")]
    assert asked == [[], ["a door opens"], [ASK]]
    assert entry.answer.truth(example, ASK) == (0.0, 3.0) and entry.query_label != tasks.FIND.query_label


def test_its_settings_are_its_entrys_own(question: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings its entry brings work as a field's: variable, flag, the bench's fingerprint and the
    docs' table; they go with the task."""
    monkeypatch.setenv("MARLIN_QUESTION_WINDOW_S", "12.5")
    assert settings_mod.from_env().value("question_window_s") == 12.5
    args = cli.build_parser().parse_args(["question", str(CLIP), ASK, "--question-max-new-tokens", "9"])
    assert tasks.get_task("question").tokens(settings_mod.from_args(args)) == 9
    assert models.fingerprint(Settings(), "d")["question_max_new_tokens"] == 64
    assert "MARLIN_QUESTION_OVERLAP_S" in {row[0] for row in settings_mod.settings_table()}
    tasks.unregister_task("question")
    assert "question_window_s" not in settings_mod.flags_for("run")
    with pytest.raises(ValueError, match="already a setting"):
        settings_mod.register_setting(settings_mod.TaskSetting("find_window_s", 1.0, "X", "x"))


def test_every_run_tab_is_styled_by_class(question: ModuleType) -> None:
    """Stop's colours, the examples and the radios on a phone are keyed on the run tab's classes, so a third
    tab gets them: the stylesheet names no task's Stop, examples, variant or progress by its id."""
    css = (ROOT / "marlin_demo" / "ui" / "style.css").read_text()
    shared = re.findall(rf"#(?:{'|'.join(tasks.TASKS)})-(?:stop|examples|variant|progress)\b", css)
    assert shared == []
    assert all(f".mr-{part}" in css for part in ("stop", "run-examples", "variant", "progress"))


@pytest.mark.slow
def test_service_a_short_clip_and_one_in_windows(question: ModuleType, tiny_settings: Settings) -> None:
    """Its own prompt in every window; the first window's answer that saw it; Compare's JSON."""
    settings = tiny_settings.with_(device="cpu", question_max_new_tokens=8)
    windows = service.run(
        Engine(settings.with_(question_window_s=4.0, question_overlap_s=1.0)), "question", CLIP, "bf16", ASK
    )
    assert isinstance(windows, question.QuestionResult) and len(windows.info.windows) == 3
    assert all(ASK in info.prompt for info in windows.info.windows) and windows.raw.count("[window ") == 3
    assert windows.span is None or 0.0 <= windows.span[0] <= windows.span[1] <= 10.0
    short = service.run(Engine(settings), "question", CLIP, "bf16", ASK)
    assert (
        isinstance(short, question.QuestionResult)
        and question.PROMPT.format(question=ASK) in short.info.prompt
    )
    payload = agreement.compare_payload("question", ASK, {"a": short, "b": windows})
    assert set(payload["agreement"]["a|b"]) == {"span_iou"}
    assert payload["results"]["b"] == windows.to_dict() and list(payload["results"]["a"]) == QUESTION_KEYS


@pytest.mark.slow
def test_cli_batch_and_bench(
    question: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its own sub-command (readable: its answer type's text; JSON: its shape), ``batch --task question`` and
    the bench, which asks it its own examples' questions."""
    assert cli.main(["question", str(CLIP), ASK, *FLAGS]) == 0
    text = capsys.readouterr().out
    assert "Question · bf16 · " in text and f"\nQuestion: {ASK}\n" in text and "\nSeen: " in text
    assert cli.main(["question", str(CLIP), ASK, *FLAGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == QUESTION_KEYS and data["query"] == ASK and set(data["metrics"]) == METRIC_KEYS
    out = tmp_path / "out"
    assert (
        cli.main(["batch", str(CLIP), "--task", "question", "--query", ASK, "--out", str(out), *FLAGS]) == 0
    )
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["task"], r["status"]) for r in rows] == [("question", "ok")]
    assert "answer" in rows[0] and "events" not in rows[0]
    data_dir = with_questions(tmp_path / "data")
    bench_out = tmp_path / "bench"
    argv = ["bench", "--data", str(data_dir), "--tasks", "question", "--variants", "bf16", "--repeats", "1"]
    assert cli.main([*argv, "--out", str(bench_out), "--model", "tiny", "--device", "cpu", *FLAGS[-2:]]) == 0
    asked = [json.loads(line) for line in (bench_out / "requests.jsonl").read_text().splitlines()]
    assert [(r["task"], r["query"], r["ok"]) for r in asked] == [
        ("question", ASK, True)
    ] and "answer" in asked[0]


@pytest.mark.slow
def test_the_api_mcp_compare_and_its_page_tab(
    question: ModuleType,
    tiny_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    browser: Any,
) -> None:
    """The app built with it: an endpoint and an MCP tool of its own worded by its entry, a Compare task,
    and a tab (the tab builder's, shown by the generic view) that a browser runs."""
    monkeypatch.setenv("MARLIN_CACHE_EXAMPLES", "off")
    examples = with_questions(tmp_path / "examples")
    settings = tiny_settings.with_(
        output_dir=str(tmp_path / "out"), examples_dir=str(examples), question_max_new_tokens=8
    )
    demo, launch = build_demo(Engine(settings), settings)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch)
    url = f"http://127.0.0.1:{port}/"
    entry = question.QUESTION
    try:
        with ThreadPoolExecutor(1) as pool:  # its own event loop: Playwright's runs in this thread
            listed = pool.submit(with_session, url, lambda s: s.list_tools()).result()
        tools = {t.name: t for t in listed.tools}
        assert [name for name in tools if name in tasks.TASKS] == list(tasks.TASKS)
        schema = tools["question"].inputSchema["properties"]
        assert list(schema) == ["video", "query", "variant", "start", "end"]
        assert schema["query"]["description"] == entry.query_help.split("\n")[0]
        assert "The event in plain words" not in json.dumps(schema)
        assert tools["question"].description.startswith(entry.summary)
        client = Client(url, verbose=False)
        d = client.predict(handle_file(CLIP), ASK, "bf16", api_name="/question")
        assert list(d) == QUESTION_KEYS and d["query"] == ASK
        c = client.predict(handle_file(CLIP), "question", ASK, api_name="/compare")
        assert c["task"] == "question" and c["query"] == ASK and len(c["results"]) >= 2
        assert all(list(r) == QUESTION_KEYS for r in c["results"].values())
        assert all(set(pair) == {"span_iou"} for pair in c["agreement"].values())

        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.goto(url)
        pg.get_by_role("tab", name="Compare").click()
        pg.locator("#compare-task label", has_text="question").click()  # Compare's box: its wording
        pg.get_by_label(entry.query_label).first.wait_for(timeout=10_000)
        pg.get_by_role("tab", name="Question").click()
        pg.locator("#question-examples button").first.click()  # fills the page's clip and runs
        pg.wait_for_selector("#question-answer pre", timeout=180_000)
        shown = pg.inner_text("#question-answer")
        assert f"Question: {ASK}" in shown and '"answer":' in shown and '"span":' in shown
        pg.wait_for_selector("#question-metrics .md-card", timeout=30_000)
        assert pg.locator("#question-variant.mr-variant").count() == 1  # styled as every run tab (by class)
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
