"""Where the server address comes from: flag, ``MARLIN_*``, Gradio's ``GRADIO_SERVER_*``, default."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from marlin_demo import settings as settings_mod


def _resolve(argv: list[str], env: dict[str, str]) -> settings_mod.Settings:
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    return settings_mod.from_args(parser.parse_args(argv), settings_mod.from_env(env))


@pytest.mark.parametrize(
    ("argv", "env", "host", "port"),
    [
        ([], {}, "127.0.0.1", 7860),
        ([], {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "7896"}, "0.0.0.0", 7896),
        (
            [],
            {
                "GRADIO_SERVER_NAME": "0.0.0.0",
                "GRADIO_SERVER_PORT": "7896",
                "MARLIN_HOST": "::1",
                "MARLIN_PORT": "7001",
            },
            "::1",
            7001,
        ),
        (
            ["--host", "localhost", "--port", "7002"],
            {"GRADIO_SERVER_PORT": "7896", "MARLIN_PORT": "7001", "MARLIN_HOST": "::1"},
            "localhost",
            7002,
        ),
        ([], {"GRADIO_SERVER_PORT": "", "MARLIN_PORT": ""}, "127.0.0.1", 7860),  # empty means unset
    ],
)
def test_server_address_precedence(argv: list[str], env: dict[str, str], host: str, port: int) -> None:
    s = _resolve(argv, env)
    assert (s.host, s.port) == (host, port)


def test_bad_gradio_port_names_the_variable() -> None:
    with pytest.raises(ValueError, match="GRADIO_SERVER_PORT='http' is not a valid int"):
        settings_mod.from_env({"GRADIO_SERVER_PORT": "http"})


def test_help_names_both_variables() -> None:
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    text = " ".join(parser.format_help().split())  # argparse wraps at the terminal's width
    assert "$MARLIN_PORT or $GRADIO_SERVER_PORT" in text and "$MARLIN_HOST or $GRADIO_SERVER_NAME" in text


@pytest.mark.parametrize(
    ("argv", "env", "limit"),
    [
        ([], {}, 1800.0),  # locally: 30 minutes
        ([], {"SPACE_ID": "owner/space"}, 600.0),  # on a Space: what a visitor's GPU slot affords
        ([], {"SPACE_ID": "owner/space", "MARLIN_MAX_DURATION_S": "900"}, 900.0),
        (["--max-duration-s", "120"], {"SPACE_ID": "owner/space"}, 120.0),
    ],
)
def test_duration_limit_locally_and_on_a_space(argv: list[str], env: dict[str, str], limit: float) -> None:
    assert _resolve(argv, env).max_duration_s == limit


def test_default_limits_agree_with_the_window_limit() -> None:
    """The longest accepted video never needs more windows than allowed; 30 min is exactly 72 find windows."""
    from marlin_demo.longvideo import policy
    from marlin_demo.service import gpu_calls

    for s in (settings_mod.from_env({}), settings_mod.from_env({"SPACE_ID": "owner/space"})):
        # each raises when over
        policy.plan_windows(s.max_duration_s, s.caption_window_s, 0.0, max_windows=s.max_windows)
        policy.plan_windows(s.max_duration_s, s.find_window_s, s.find_overlap_s, max_windows=s.max_windows)
    s = settings_mod.Settings()
    assert (
        len(policy.plan_windows(s.max_duration_s, s.find_window_s, s.find_overlap_s)) == s.max_windows == 72
    )
    with pytest.raises(policy.WindowLimitError, match=r"needs 73 windows .* at most 72 windows are allowed"):
        policy.plan_windows(
            s.max_duration_s + 6, s.find_window_s, s.find_overlap_s, max_windows=s.max_windows
        )
    # the GPU slot asked on ZeroGPU grows with the windows a long video needs, within the cap
    assert gpu_calls.estimate_gpu_seconds(30, s, task="find") < gpu_calls.estimate_gpu_seconds(
        600, s, task="find"
    )
    each = gpu_calls.call_seconds("caption", s)  # one call per window, each within a call's cap
    assert each <= gpu_calls.MAX_GPU_S and gpu_calls.estimate_gpu_seconds(600, s, task="caption") == 10 * each


def _settings_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The ``Settings`` field names a parser offers as flags (``--max-upload-mb`` -> max_upload_mb)."""
    names = {f.name for f in settings_mod.fields(settings_mod.Settings)}
    opts = {o[2:].replace("-", "_") for a in parser._actions for o in a.option_strings if o.startswith("--")}
    return opts & names


@pytest.mark.parametrize(
    ("command", "group"), [("caption", "run"), ("find", "run"), ("bench", "bench"), ("batch", "batch")]
)
def test_command_flags_come_from_settings_metadata(command: str, group: settings_mod.Command) -> None:
    """Every command offers exactly the settings whose ``commands`` metadata names it: one list, no copies."""
    from marlin_demo import cli

    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    wanted = set(settings_mod.flags_for(group))
    assert wanted, group
    own = {"bench": {"variants"}}.get(command, set())  # bench's --variants is its own list to compare
    assert _settings_flags(sub.choices[command]) - own == wanted
    assert "model" in wanted and "cache_dir" in wanted  # every command picks its model and cache


def test_gpu_estimate_follows_the_window_settings() -> None:
    """The ZeroGPU request is sized from the windows the settings give, not from default lengths."""
    from marlin_demo.service import gpu_calls

    s = settings_mod.Settings()
    # 200 s: four 60 s caption windows by default, ten with 20 s windows (each window's fixed part)
    assert gpu_calls.estimate_gpu_seconds(
        200, s.with_(caption_window_s=20.0)
    ) > gpu_calls.estimate_gpu_seconds(200, s)
    # 100 s: four find windows with 5 s overlap, six with 15 s
    more = gpu_calls.estimate_gpu_seconds(100, s.with_(find_overlap_s=15.0), task="find")
    assert more > gpu_calls.estimate_gpu_seconds(100, s, task="find")


def test_readme_configuration_table_lists_every_setting() -> None:
    """docs/CONFIGURATION.md's table names every setting's variable and flag (``settings_table``)."""
    readme = (Path(__file__).resolve().parents[1] / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| `MARLIN_")]
    missing = [
        (env, flag)
        for env, flag, _default, _help in settings_mod.settings_table()
        if not any(f"`{env}`" in row and f"`{flag}" in row for row in rows)
    ]
    assert missing == []
