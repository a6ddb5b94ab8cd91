"""Limits that agree: the duration limit, the per-window time limit and the ZeroGPU calls, derived from the
measured speeds (service/speeds.json), never contradict each other; contradicting settings are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from marlin_demo import cli
from marlin_demo import settings as settings_mod
from marlin_demo.service import capacity, space
from marlin_demo.service.startup import check_limits
from marlin_demo.settings import Settings

LOCAL = settings_mod.from_env({})
ON_SPACE = settings_mod.from_env({"SPACE_ID": "owner/space"})


def test_speeds_table_has_every_figure() -> None:
    table = capacity.speeds()
    assert {"h200", "cpu-tiny"} <= set(table)
    for speed in table.values():
        assert speed.decode_tokens_per_s > 0 and speed.prefill_s > 0 and speed.source


@pytest.mark.parametrize(
    ("settings", "device", "zero_gpu"),
    [(LOCAL, "cuda", False), (LOCAL.with_(model="tiny"), "cpu", False), (ON_SPACE, "cuda", True)],
    ids=["local-gpu", "local-tiny-cpu", "space-zerogpu"],
)
def test_defaults_agree_with_the_estimate(settings: Settings, device: str, zero_gpu: bool) -> None:
    assert capacity.conflicts(settings, device, zero_gpu) == []
    speed = capacity.speed_for(settings, device)
    assert speed is not None
    for task in ("caption", "find"):
        # one window, its frames included, always fits the per-window time limit
        assert capacity.window_s(task, settings, speed) <= settings.request_timeout_s
        # the duration limit accepts nothing the windows cannot cover
        assert capacity.longest_video_s(task, settings) == settings.max_duration_s
        # every ZeroGPU call of the longest accepted video fits one call's cap, and they add up
        per_call = capacity.gpu_call_s(task, settings, speed)
        assert capacity.MIN_GPU_S <= per_call <= capacity.MAX_GPU_S
        windows = len(settings_mod_windows(task, settings.max_duration_s, settings))
        assert capacity.request_gpu_s(task, settings.max_duration_s, settings, speed) == windows * per_call


def settings_mod_windows(task: str, duration: float, settings: Settings) -> list[object]:
    from marlin_demo.longvideo.plan import plan_for

    return list(plan_for("caption" if task == "caption" else "find", duration, settings))


def test_header_states_each_tasks_longest_video() -> None:
    assert capacity.limits_line(LOCAL) == "captions up to 30 min, find up to 30 min"
    assert capacity.limits_line(ON_SPACE) == "captions up to 10 min, find up to 10 min"
    # fewer windows allowed: each task's own longest video, shorter than the duration limit
    few = LOCAL.with_(max_windows=5)
    assert capacity.limits_line(few) == "captions up to 5 min, find up to 130 s"


def test_a_short_time_limit_is_refused_naming_the_conflict() -> None:
    found = capacity.conflicts(LOCAL.with_(request_timeout_s=20.0), "cuda")
    assert found and all("MARLIN_REQUEST_TIMEOUT_S=20" in s for s in found)
    assert "caption window" in found[0] and "MARLIN_CAPTION_MAX_NEW_TOKENS" in found[0]
    with pytest.raises(ValueError, match="raise it to at least"):
        check_limits(LOCAL.with_(model="tiny", device="cpu", request_timeout_s=5.0))


def test_a_zero_gpu_call_over_the_cap_is_refused() -> None:
    greedy = ON_SPACE.with_(caption_max_new_tokens=8000, request_timeout_s=3600.0)
    found = capacity.conflicts(greedy, "cuda", zero_gpu=True)
    assert len(found) == 1 and "MARLIN_CAPTION_MAX_NEW_TOKENS=8000" in found[0] and "300 s" in found[0]
    assert capacity.conflicts(greedy, "cuda", zero_gpu=False) == []  # no ZeroGPU call off a Space


def test_cli_refuses_contradicting_settings_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        ["caption", "examples/flower.mp4", "--model", "tiny", "--device", "cpu", "--request-timeout-s", "5"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: MARLIN_REQUEST_TIMEOUT_S=5 ") and "\n" not in err


def test_gpu_request_follows_windows_and_the_note_says_it(monkeypatch: pytest.MonkeyPatch) -> None:
    s = ON_SPACE
    each = space.call_seconds("caption", s)
    assert space.estimate_gpu_seconds(600, s, task="caption") == 10 * each  # ten 60 s caption windows
    assert space.estimate_gpu_seconds(30, s, task="caption") == each
    monkeypatch.setattr(space, "zero_gpu", lambda: True)
    assert space.gpu_note("find", 30, s) == ""  # one short call: nothing to announce
    assert (
        space.gpu_note("caption", 30, s)
        == f"This run asks ZeroGPU for about {each} s of GPU (1 call of up to {each} s)."
    )
    note = space.gpu_note("caption", 600, s)
    assert f"about {10 * each} s of GPU" in note and f"10 calls of up to {each} s" in note
    monkeypatch.setattr(space, "zero_gpu", lambda: False)
    assert space.gpu_note("caption", 600, s) == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["batch", "examples/flower.mp4", "--task", "caption", "--out", "{tmp}/out"],
        ["index", "examples/flower.mp4", "--library", "{tmp}/lib"],
        ["bench", "--out", "{tmp}/bench"],
        ["bench", "search", "--out", "{tmp}/search"],
    ],
    ids=["batch", "index", "bench", "bench-search"],
)
def test_every_command_refuses_contradicting_settings_before_it_runs(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """batch, index and bench check the settings against the speeds as caption/find and the app do,
    in one line, before any model loads or any output is written."""
    monkeypatch.setenv("MARLIN_MODEL", "tiny")
    monkeypatch.setenv("MARLIN_DEVICE", "cpu")
    monkeypatch.setenv("MARLIN_REQUEST_TIMEOUT_S", "5")
    code = cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error: MARLIN_REQUEST_TIMEOUT_S=5 ") and "\n" not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written
