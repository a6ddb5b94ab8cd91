"""Example credits: the About tab's list and the line under a loaded example."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from marlin_demo.service.startup import start_engine
from marlin_demo.settings import Settings
from marlin_demo.ui.context import UIContext, available_examples
from marlin_demo.ui.credits import credit_line, credit_text, credits_markdown


@pytest.fixture(scope="module")
def examples(examples_dir: Path) -> list[dict]:
    found = available_examples(examples_dir / "examples.json")
    if not found:
        pytest.skip("no example clips")
    return found


def test_about_lists_every_real_credit(examples: list[dict]) -> None:
    text = credits_markdown(examples)
    for ex in examples:
        if ex["set"] == "real":
            credit = ex["credit"]
            assert f"**{ex['title']}**" + credit_text(ex)[len(ex["title"]) :] in text  # title in bold
            assert credit["license"] in text and credit["author"] in text and credit["changes"] in text
        else:
            assert ex["video"] in text


def test_attribution_is_a_link_the_app_or_the_space_serves(
    examples: list[dict], examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPACE_ID", raising=False)
    local = credits_markdown(examples, examples_dir)
    served = f"(/gradio_api/file={(examples_dir / 'ATTRIBUTION.md').resolve()})"
    assert f"[examples/ATTRIBUTION.md]{served}" in local
    monkeypatch.setenv("SPACE_ID", "owner/space")
    on_space = credits_markdown(examples, examples_dir)
    assert "(https://huggingface.co/spaces/owner/space/blob/main/examples/ATTRIBUTION.md)" in on_space


def test_credit_line_for_a_copied_example_and_none_for_other_clips(
    examples: list[dict], examples_dir: Path, tmp_path: Path, tiny_settings: Settings
) -> None:
    engine, status = start_engine(tiny_settings)
    ctx = UIContext(engine=engine, settings=engine.settings, status=status, output_dir=tmp_path)
    real = next(ex for ex in examples if ex["set"] == "real")
    copy = shutil.copy(examples_dir / real["video"], tmp_path / "renamed-upload.bin")
    line = credit_line(ctx, str(copy))
    assert real["credit"]["license"] in line and real["title"] in line
    other = tmp_path / "other.mp4"
    other.write_bytes(b"not an example")
    assert credit_line(ctx, str(other)) == ""


def _clip_names() -> list[str]:
    """The example clips, read at collection time so each is its own test (its duration shows)."""
    from marlin_demo.ui.context import EXAMPLES_JSON

    return [str(e["video"]) for e in available_examples(EXAMPLES_JSON)] if EXAMPLES_JSON.is_file() else []


@pytest.fixture(scope="module")
def tiny_engine(tiny_settings: Settings) -> Any:
    """One tiny-checkpoint engine for every clip; answers cut to a few tokens (the prefill is the test)."""
    from marlin_demo.engine import Engine

    return Engine(tiny_settings.with_(caption_max_new_tokens=4, find_max_new_tokens=4))


@pytest.mark.slow
@pytest.mark.parametrize("clip", _clip_names())
def test_every_example_clip_runs_on_the_tiny_model(
    clip: str, examples: list[dict], examples_dir: Path, tiny_engine: Any
) -> None:
    """Each clip probes, plans (frames inside the clip) and answers caption and find from one decode."""
    ex = next(e for e in examples if e["video"] == clip)
    engine = tiny_engine
    variant = engine.variants[0]
    prepared = engine.prepare(examples_dir / clip)  # probe, plan, decode: once for both tasks
    duration = prepared.info.duration_s
    assert duration > 0 and prepared.frames.shape[0] >= 2, clip
    assert all(0.0 <= t <= duration + 1e-6 for t in prepared.plan.timestamps), clip
    caption = engine.caption(prepared, variant)
    assert caption.metrics.video_tokens > 0
    assert all(0.0 <= e.start <= e.end <= duration + 1e-6 for e in caption.events), clip
    found = engine.find(prepared, ex["queries"][0]["query"], variant)
    assert found.span is None or 0.0 <= found.span[0] <= found.span[1] <= duration + 1e-6


def test_example_cache_is_lazy_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager caching runs every example at start-up (minutes on a CPU): only on request."""
    from marlin_demo.ui.context import CACHE_ENV, cache_mode_from_env

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert cache_mode_from_env() == "lazy"
    monkeypatch.setenv("SPACE_ID", "user/space")  # the same default on a Space
    assert cache_mode_from_env() == "lazy"
    monkeypatch.setenv(CACHE_ENV, "Eager")
    assert cache_mode_from_env() == "eager"
    monkeypatch.setenv(CACHE_ENV, "always")
    with pytest.raises(ValueError, match="not one of eager, lazy, off"):
        cache_mode_from_env()
