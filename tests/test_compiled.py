"""MARLIN_COMPILE: static cache + torch.compile decoding gives eager's tokens (tiny checkpoint, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marlin_demo.engine import Engine
from marlin_demo.settings import Settings

pytestmark = pytest.mark.slow

CLIP = Path(__file__).resolve().parents[1] / "examples" / "ball_rolls.mp4"


@pytest.mark.parametrize("variant", ["bf16", "gptq", "bnb4"])
def test_compiled_tokens_equal_eager(variant: str, tiny_settings: Settings) -> None:
    settings = tiny_settings.with_(device="cpu", caption_max_new_tokens=12)
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


def test_cli_compile_flag_reports_the_compile_state(capsys: pytest.CaptureFixture[str]) -> None:
    """``--compile`` through the CLI's ``main`` in this process (the settings and the bf16 graph of the
    test above: what it adds is the flag and the readable line, not another compile)."""
    from marlin_demo import cli

    argv = ["caption", str(CLIP), "--model", "tiny", "--variant", "bf16", "--compile"]
    assert cli.main([*argv, "--caption-max-new-tokens", "12"]) == 0
    out = capsys.readouterr().out
    assert "compile static cache + torch.compile" in out
    assert "nothing reused" in out


def test_compiled_decoding_keeps_its_switches_after_the_gptq_cpu_kernel_flips_them() -> None:
    """gptqmodel's CPU kernel sets inductor's ``freezing`` and ``max_autotune`` for the whole process at its
    first forward (a gptq request computing in float32); a linear compiled the way transformers compiles the
    decode step, with our options, is then still compiled without autotuning."""
    import torch
    from torch._dynamo.utils import counters

    from marlin_demo.engine.compiled import compile_config

    linear = torch.nn.Linear(64, 96).eval()
    kwargs = compile_config("cpu").to_dict()  # what transformers passes to torch.compile
    with torch._inductor.config.patch(freezing=True, max_autotune=True), torch.inference_mode():
        torch._dynamo.reset()
        counters.clear()
        out = torch.compile(linear, **kwargs)(torch.randn(1, 64))
        assert out.shape == (1, 96)
        assert counters["inductor"]["select_algorithm_autotune"] == 0
    torch._dynamo.reset()


def test_compile_off_by_default() -> None:
    assert Settings().compile is False
