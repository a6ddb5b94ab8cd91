"""A task is one entry in ``tasks``: a third task (the free-form detailed caption, a trivial prompt) is
registered in a few lines and runs through the service, the long-video runner, the CLI, batch and the
limits with no other change to the code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from marlin_demo import agreement, cli, contract, service, tasks
from marlin_demo.engine import Engine
from marlin_demo.longvideo import policy
from marlin_demo.results import CaptionResult
from marlin_demo.service import capacity, cost, space
from marlin_demo.settings import Settings
from marlin_demo.tasks import Task

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "blue_square.mp4"  # 10 s
FLAGS = ["--model", "tiny", "--device", "cpu", "--variant", "bf16", "--caption-max-new-tokens", "8"]

DESCRIBE = Task(
    name="describe",
    help="a free-form detailed caption of a video",
    prompt=lambda _query: contract.DETAILED_PROMPT,
    parse=contract.parse_caption,
    repair=contract.repair_caption,
    answer=tasks.CAPTION.answer,
    max_new_tokens="caption_max_new_tokens",
    window_s="caption_window_s",
    noun="a description",
    plural="descriptions",
)


@pytest.fixture
def describe() -> Iterator[Task]:
    tasks.register_task(DESCRIBE)
    yield DESCRIBE
    tasks.unregister_task(DESCRIBE.name)


def test_an_unknown_task_names_the_known_ones(describe: Task) -> None:
    with pytest.raises(ValueError, match=r"Unknown task 'dance': choose caption, find or describe\."):
        tasks.get_task("dance")
    assert tasks.get_task("describe") is describe and list(tasks.TASKS) == ["caption", "find", "describe"]


def test_unregistered_task_is_refused_everywhere() -> None:
    assert "describe" not in tasks.TASKS
    with pytest.raises(ValueError, match="Unknown task 'describe'"):
        policy.plan_for("describe", 60.0, Settings())
    with pytest.raises(ValueError, match="Unknown task 'describe'"):
        agreement.agreement("describe", {})
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["describe", str(CLIP)])


def test_the_limits_count_it(describe: Task) -> None:
    """Its windows, token limit, GPU call and the header's limits come from its entry's settings."""
    s = Settings(caption_window_s=20.0, max_windows=3, caption_max_new_tokens=100)
    assert [(w.start, w.end) for w in policy.plan_for("describe", 50.0, s)] == [(0, 20), (20, 40), (40, 50)]
    assert capacity.max_new_tokens("describe", s) == 100
    assert capacity.longest_video_s("describe", s) == 60.0
    assert capacity.limits_line(s).endswith(", descriptions up to 60 s")
    assert space.call_seconds("describe", s) == space.call_seconds("caption", s)
    cheaper = s.with_(caption_max_new_tokens=10)
    assert capacity.window_s("describe", cheaper, capacity.speeds()["h200"]) < capacity.window_s(
        "describe", s, capacity.speeds()["h200"]
    )
    line = cost.request_gpu_line("describe", 50.0, s)
    assert line.startswith("This run makes 3 GPU calls of up to ")


@pytest.mark.slow
def test_service_and_the_long_video_runner(describe: Task, tiny_settings: Settings) -> None:
    """A short clip whole and a clip in windows (and a time range): its own prompt in every window."""
    engine = Engine(tiny_settings.with_(device="cpu", caption_max_new_tokens=8, caption_window_s=4.0))
    whole = service.run(engine, "describe", CLIP, "bf16", start_s=0.0, end_s=3.0)
    assert isinstance(whole, CaptionResult) and whole.range_s == (0.0, 3.0)
    assert contract.DETAILED_PROMPT in whole.info.prompt and contract.CAPTION_PROMPT not in whole.info.prompt
    windows = service.run(engine, "describe", CLIP, "bf16")
    assert [(w["start"], w["end"]) for w in windows.windows] == [(0.0, 4.0), (4.0, 8.0), (8.0, 10.0)]
    assert all(contract.DETAILED_PROMPT in info.prompt for info in windows.info.windows)
    short = Engine(tiny_settings.with_(device="cpu", caption_max_new_tokens=8))
    one = service.run(short, "describe", CLIP, "bf16")
    assert contract.DETAILED_PROMPT in one.info.prompt and len(one.windows) == 1
    payload = agreement.compare_payload("describe", None, {"a": one, "b": windows})
    assert set(payload["agreement"]["a|b"]) == {"event_iou", "event_f1", "rouge_l"}


@pytest.mark.slow
def test_cli_and_batch(describe: Task, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its own sub-command (readable and JSON, the caption's shape) and ``batch --task describe``."""
    assert cli.main(["describe", str(CLIP), *FLAGS]) == 0
    assert "Describe · bf16 · " in capsys.readouterr().out
    assert cli.main(["describe", str(CLIP), *FLAGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["variant"] == "bf16" and {"scene", "events", "chapters"} <= set(data)
    out = tmp_path / "out"
    assert cli.main(["batch", str(CLIP), "--task", "describe", "--out", str(out), *FLAGS]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["task"], r["status"]) for r in rows] == [("describe", "ok")]
    assert "events" in rows[0] and "query" not in rows[0]
