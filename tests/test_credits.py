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
