"""The synthetic long clip: its duration and frame count are the examples' sums; truth is shifted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marlin_demo.bench.longset import EXAMPLES_DIR, build_long_clip, long_clip_truth, rendered
from marlin_demo.video import probe


def test_truth_offsets() -> None:
    examples = rendered(json.loads((EXAMPLES_DIR / "examples.json").read_text()))
    assert examples
    truth = long_clip_truth(examples, 100.0)
    assert truth["duration"] >= 100.0
    ends = [s["end"] for s in truth["segments"]]
    assert [s["start"] for s in truth["segments"]] == [0.0, *ends[:-1]]
    first = next(q for q in truth["queries"] if q["query"] == examples[0]["queries"][0]["query"])
    assert len(first["spans"]) >= 2  # the example recurs: one true span per occurrence
    assert all(0 <= e["start"] <= e["end"] <= truth["duration"] for e in truth["events"])


def test_build_long_clip(tmp_path: Path) -> None:
    truth = build_long_clip(tmp_path / "long.mp4", target_s=70.0)
    info = probe(tmp_path / "long.mp4")
    assert info.duration_s == pytest.approx(truth["duration"], abs=1e-6)
    assert info.num_frames == round(truth["duration"] * 10)
    assert json.loads((tmp_path / "long.json").read_text())["segments"] == truth["segments"]
