"""Example credits: the About tab's list and the line under a loaded example."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from marlin_demo.settings import Settings
from marlin_demo.ui.common import UIContext, available_examples, start_engine
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
            assert credit_text(ex) in text
            assert credit["license"] in text and credit["author"] in text and credit["changes"] in text
        else:
            assert ex["video"] in text


def test_credit_line_for_a_copied_example_and_none_for_other_clips(
    examples: list[dict], examples_dir: Path, tmp_path: Path
) -> None:
    engine, status = start_engine(Settings().with_(model="tiny"))
    ctx = UIContext(engine=engine, settings=engine.settings, status=status, output_dir=tmp_path)
    real = next(ex for ex in examples if ex["set"] == "real")
    copy = shutil.copy(examples_dir / real["video"], tmp_path / "renamed-upload.bin")
    line = credit_line(ctx, str(copy))
    assert real["credit"]["license"] in line and real["title"] in line
    other = tmp_path / "other.mp4"
    other.write_bytes(b"not an example")
    assert credit_line(ctx, str(other)) == ""


@pytest.mark.slow
def test_every_example_clip_runs_on_the_tiny_model(examples: list[dict], examples_dir: Path) -> None:
    """Each clip probes, plans (frames inside the clip) and answers caption and find."""
    from marlin_demo.engine import Engine
    from marlin_demo.video import plan_sampling, probe

    settings = Settings().with_(model="tiny", caption_max_new_tokens=8, find_max_new_tokens=8)
    engine = Engine(settings)
    variant = engine.variants[0]
    for ex in examples:
        path = examples_dir / ex["video"]
        info = probe(path)
        plan = plan_sampling(info)
        assert plan is not None and info.duration_s > 0, ex["video"]
        caption = engine.caption(path, variant)
        assert all(0.0 <= e.start <= e.end <= info.duration_s + 1e-6 for e in caption.events), ex["video"]
        found = engine.find(path, ex["queries"][0]["query"], variant)
        assert found.span is None or 0.0 <= found.span[0] <= found.span[1] <= info.duration_s + 1e-6
