"""Marlin-2B demo: settings -> engine -> Blocks -> launch (``python app.py`` and ``marlin-demo app``);
without Hub access or local weights the model falls back to the tiny stand-in, and the page says why."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from marlin_demo import settings as settings_mod
from marlin_demo.exits import fail
from marlin_demo.service import gpu_calls
from marlin_demo.ui import gradio_hooks

gradio_hooks.skip_stub_rewrite()  # before anything imports Gradio (``spaces`` does, on ZeroGPU)
if gpu_calls.zero_gpu():
    import spaces  # noqa: F401

log = logging.getLogger("marlin_demo.app")


def parse_args(argv: Sequence[str] | None = None, prog: str = "python app.py") -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Marlin-2B video demo (Gradio): captions with timed events, temporal grounding, "
        "GPTQ vs bnb4 comparison.",
    )
    settings_mod.add_arguments(parser)
    return parser.parse_args(argv)


def build(
    argv: Sequence[str] | None = None, prog: str = "python app.py"
) -> tuple[Any, dict[str, Any], settings_mod.Settings]:
    """Settings from env + flags, an engine (or the tiny fallback), the Blocks and its launch kwargs."""
    from marlin_demo.service.startup import check_limits, preload, prepare_zero_gpu, start_engine
    from marlin_demo.ui.blocks import build_demo

    settings = settings_mod.from_args(parse_args(argv, prog))
    try:
        settings = check_limits(settings, gpu_calls.zero_gpu())
    except ValueError as exc:  # settings that contradict the speeds or ZeroGPU: one line, exit 2
        raise SystemExit(fail(str(exc))) from None
    if gpu_calls.zero_gpu():
        prepare_zero_gpu()  # before any load: GPTQ's kernel is chosen from the platform, not by finding nvcc
    engine, status = start_engine(settings)
    if status.fell_back:
        log.warning("Marlin-2B unavailable, serving the tiny stand-in: %s", status.fallback_reason)
    if gpu_calls.on_space():
        preload(engine)  # on a Space the first visitor must not wait for the load
    if gpu_calls.zero_gpu():
        gpu_calls.gpu_function()  # ZeroGPU reports the decorated function when the app launches
        # one GPU call before launch runs every variant, so no visitor pays the first launch's compile
        status.warm_up_note = gpu_calls.warm_up(engine)
    demo, launch_kwargs = build_demo(engine, settings, status)
    return demo, launch_kwargs, settings


def main(argv: Sequence[str] | None = None, prog: str = "python app.py") -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    demo, launch_kwargs, settings = build(argv, prog=prog)
    host = settings.host  # flag, MARLIN_HOST, GRADIO_SERVER_NAME, default (see settings.from_env)
    if gpu_calls.on_space() and host == settings_mod.Settings.host and not settings_mod.env_value("host"):
        host = "0.0.0.0"  # a Space's proxy reaches the app from outside the container
    demo.launch(server_name=host, server_port=settings.port, **launch_kwargs)


if __name__ == "__main__":
    main()
