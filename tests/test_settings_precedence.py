"""Where the server address comes from: flag, ``MARLIN_*``, Gradio's ``GRADIO_SERVER_*``, default."""

from __future__ import annotations

import argparse

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
