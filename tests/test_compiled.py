"""MARLIN_COMPILE: static cache + torch.compile decoding gives eager's tokens (tiny checkpoint, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marlin_demo.engine import Engine
from marlin_demo.settings import Settings

pytestmark = pytest.mark.slow

CLIP = Path(__file__).resolve().parents[1] / "examples" / "ball_rolls.mp4"


@pytest.mark.parametrize("variant", ["bf16", "gptq", "bnb4"])
def test_compiled_tokens_equal_eager(variant: str) -> None:
    settings = Settings(model="tiny", device="cpu", caption_max_new_tokens=12)
    eager = Engine(settings).caption(CLIP, variant)
    engine = Engine(settings.with_(compile=True))
    first = engine.caption(CLIP, variant)
    state = first.info.compile
    if state.startswith("eager ("):  # a variant that cannot compile says why and still answers
        assert len(state) > len("eager ()")
        assert first.metrics.output_tokens == eager.metrics.output_tokens
        return
    assert state.startswith("static cache + torch.compile"), state
    assert "prefix reuse off" in state and engine.prefix_cache_len() == 0
    assert first.raw == eager.raw
    assert first.info.compile_s > 0  # paid once, before the request
    second = engine.caption(CLIP, variant)  # same cache size: nothing compiled again
    assert second.raw == eager.raw
    assert second.info.compile_s == first.info.compile_s


def test_cli_compile_flag_reports_the_compile_state() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "marlin_demo",
            "caption",
            str(CLIP),
            "--model",
            "tiny",
            "--variant",
            "bf16",
            "--compile",
            "--caption-max-new-tokens",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=CLIP.parents[1],
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "compile static cache + torch.compile" in proc.stdout
    assert "nothing reused" in proc.stdout


def test_compile_off_by_default() -> None:
    assert Settings().compile is False
