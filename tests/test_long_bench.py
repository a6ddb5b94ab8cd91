"""The benchmark on long videos: the long set's truth, several true spans per query, per-window cost.

Aggregation is pure (records in, figures out), so it is checked on fixed records; the set builder
runs ffmpeg on the project's rendered examples with short clips (a few seconds of encoding).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from marlin_demo import bench, cli
from marlin_demo.bench import longset as longclip
from marlin_demo.bench.longrecords import record_moments, window_cost
from marlin_demo.datasets import Example, Query, load_dataset

needs_examples = pytest.mark.skipif(
    not (longclip.EXAMPLES_DIR / "examples.json").is_file(), reason="examples/examples.json is not rendered"
)


def _example() -> Example:
    q1 = Query("the ball rolls", (2.0, 8.0), ((2.0, 8.0), (62.0, 68.0)))  # happens twice
    q2 = Query("the lamp turns on", (30.0, 34.0))
    return Example("long.mp4", Path("long.mp4"), "long", 120.0, queries=[q1, q2], set="long")


def _rec(query: str, span: Any, moments: list[tuple[float, float, float]], windows: int) -> dict[str, Any]:
    return {
        "variant": "gptq",
        "task": "find",
        "video": "long.mp4",
        "query": query,
        "repeat": 0,
        "ok": True,
        "metrics": {"latency_s": 2.0 * windows, "memory_kind": "cpu_peak_rss", "device": "cpu"},
        "decode_s": 0.5 * windows,
        "format_ok": True,
        "raw": "",
        "span": span,
        "windows": windows,
        "moments": [{"start": s, "end": e, "score": c} for s, e, c in moments],
    }


def test_aggregate_scores_the_best_moment_and_the_top_five() -> None:
    records = [
        # best moment on the second occurrence (IoU 1), the first occurrence found too (IoU 5/6)
        _rec("the ball rolls", [62.0, 68.0], [(62.0, 68.0, 0.9), (3.0, 8.0, 0.7)], 5),
        # best moment wrong (IoU 0), the third moment right (IoU 1)
        _rec("the lamp turns on", [90.0, 95.0], [(90.0, 95.0, 0.8), (10.0, 12.0, 0.5), (30.0, 34.0, 0.4)], 5),
    ]
    agg = bench.aggregate([_example()], ["gptq"], ["find"], 1, records, [])
    q = agg["variants"]["gptq"]["quality"]["find"]
    assert q["r1@0.5"] == pytest.approx(0.5) and q["r1@0.7"] == pytest.approx(0.5)
    assert q["miou"] == pytest.approx(0.5)
    assert q["r5@0.5"] == pytest.approx(1.0)
    assert q["occurrence_recall@0.5"] == pytest.approx(1.0)  # all three true spans matched
    items = {i["query"]: i for i in agg["items"]}
    assert items["the ball rolls"]["iou"] == pytest.approx(1.0)  # against the nearest true span
    assert items["the ball rolls"]["references"] == [[2.0, 8.0], [62.0, 68.0]]
    sp = agg["variants"]["gptq"]["speed"]["find"]
    assert sp["windows"]["mean"] == 5.0
    assert sp["latency_per_window_s"]["median"] == pytest.approx(2.0)
    assert sp["decode_per_window_s"]["median"] == pytest.approx(0.5)
    assert [r[0] for r in bench.QUALITY_ROWS].count("find") >= 6


def test_record_moments_and_window_cost_of_short_and_old_records() -> None:
    # a short video's record without moments (no score) still ranks its span
    assert record_moments({"span": [1.0, 2.0], "moments": []}) == [(1.0, 2.0)]
    assert record_moments({"span": None}) == []
    assert record_moments({"span": [1.0, 2.0], "moments": [{"start": 3, "end": 4, "score": 0.5}]}) == [
        (3.0, 4.0)
    ]
    cost = window_cost({"metrics": {"latency_s": 3.0}})  # a record from before windows: one window
    assert cost == {"windows": 1.0, "latency_per_window_s": 3.0, "decode_per_window_s": None}


def test_long_set_truth_is_pure_and_rotated() -> None:
    examples = longclip.rendered(json.loads((longclip.EXAMPLES_DIR / "examples.json").read_text()))
    a = longclip.long_set_entry(examples, 150.0, 0)
    b = longclip.long_set_entry(examples, 150.0, 1)
    assert a["segments"][0]["video"] != b["segments"][0]["video"]  # clip k starts the cycle at example k
    assert a["set"] == "long" and a["duration"] >= 150.0
    # a query of every example recurs: one true span per occurrence, each inside its segment
    for q in a["queries"]:
        assert len(q["spans"]) >= 2
        for s, e in q["spans"]:
            seg = next(g for g in a["segments"] if g["start"] <= s < g["end"])
            assert e <= seg["end"]
    # the reference scene names each example once
    assert len(a["scene"]) < sum(len(e["scene"]) for e in examples) + len(examples)
    one = longclip.long_set_entry(examples, 150.0, 0, queries_per_example=1)
    assert len(one["queries"]) == len(examples)


@needs_examples
def test_build_long_set_loads_as_bench_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "long-set"
    assert cli.main(["bench", "build-long-set", "--out", str(out), "--durations", "12,13"]) == 0
    examples = load_dataset(out)
    assert [ex.set for ex in examples] == ["long", "long"]
    assert all(ex.video.is_file() and ex.duration >= 12.0 for ex in examples)
    assert all(e <= ex.duration for ex in examples for q in ex.queries for _, e in q.spans)
    first = examples[0].video.stat().st_mtime_ns
    longclip.build_long_set(out, (12.0, 13.0))  # same truth: the clip is not encoded again
    assert examples[0].video.stat().st_mtime_ns == first
    # `bench --data long` builds the default set into the cache (here: made short)
    monkeypatch.setenv("MARLIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(longclip, "LONG_SET_DURATIONS", (12.0,))
    root = longclip.resolve_data("long")
    assert root == tmp_path / "cache" / f"long-set-v{longclip.LONG_SET_VERSION}"
    assert len(load_dataset(root)) == 1
    assert longclip.resolve_data(str(out)) is None
    assert cli.main(["bench", "build-long-set", "--out", str(out), "--durations", "0"]) == 2
