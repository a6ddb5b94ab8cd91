"""``bench search``: the scoring on known answers, and the mechanics on a small long set with the tiny
model (windows decoded by the search vs the exhaustive find, the report's caveat). The tiny model's
quality figures are meaningless, so they are only checked to be shares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from marlin_demo.bench import search_quality
from marlin_demo.library.database import Hit
from marlin_demo.longvideo.policy import plan_for
from marlin_demo.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
TRUTH = {"a.mp4": [(10.0, 14.0)], "c.mp4": [(2.0, 4.0), (30.0, 34.0)]}


def test_truths_gather_every_span_of_a_query_across_videos() -> None:
    examples = [
        {"video": "a.mp4", "queries": [{"query": "q", "span": [1, 2]}, {"query": "r", "span": [0, 1]}]},
        {"video": "b.mp4", "queries": [{"query": "q", "spans": [[3, 4], [5, 6]]}]},
    ]
    assert search_quality.truths(examples) == {
        "q": {"a.mp4": [(1.0, 2.0)], "b.mp4": [(3.0, 4.0), (5.0, 6.0)]},
        "r": {"a.mp4": [(0.0, 1.0)]},
    }


def test_scores_of_a_ranked_list() -> None:
    def m(video: str, start: float, end: float) -> dict[str, object]:
        return {"video": video, "start": start, "end": end}

    assert search_quality.score_moments([m("c.mp4", 30, 33), m("b.mp4", 0, 1)], TRUTH) == {
        "video@1": True,
        "video@5": True,
        "r5@0.5": True,  # IoU 0.75 with the second occurrence
    }
    wrong_first = [m("b.mp4", 10, 14), m("b.mp4", 20, 24), m("a.mp4", 0, 2)]
    scored = search_quality.score_moments(wrong_first, TRUTH)
    assert scored == {"video@1": False, "video@5": True, "r5@0.5": False}
    six = [m(f"x{k}.mp4", 0, 1) for k in range(5)] + [m("a.mp4", 10, 14)]
    assert search_quality.score_moments(six, TRUTH) == {"video@1": False, "video@5": False, "r5@0.5": False}
    assert search_quality.score_moments([], TRUTH) == {"video@1": False, "video@5": False, "r5@0.5": False}


def test_stage1_recall_needs_a_true_span_inside_a_candidate() -> None:
    def hit(name: str, start: float, end: float) -> Hit:
        return Hit(0, "id", name, "/x", 0, start, end, None, 1.0)

    assert search_quality.stage1_hit([hit("a.mp4", 0, 12)], TRUTH)  # the span's middle (12) is inside
    assert not search_quality.stage1_hit([hit("a.mp4", 0, 11.9)], TRUTH)
    assert not search_quality.stage1_hit([hit("b.mp4", 0, 60)], TRUTH)  # the wrong video


def test_bad_data_exits_2_with_one_sentence(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "marlin_demo", "bench", "search", "--data", str(tmp_path), "--model", "tiny"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --data") and "examples.json" in proc.stderr


@pytest.mark.slow
def test_mechanics_on_a_small_long_set(tmp_path: Path, tiny_settings: Settings) -> None:
    from marlin_demo.bench.longset import build_long_set
    from marlin_demo.engine import Engine

    data = build_long_set(tmp_path / "set", durations=(10, 9), queries_per_example=1)
    # one example per clip (12 s, 10 s); 6 s caption windows, one 6 s find window in each: 4, N = 1
    s = tiny_settings.with_(
        caption_window_s=6.0,
        find_window_s=6.0,
        find_overlap_s=0.0,
        caption_max_new_tokens=16,
        find_max_new_tokens=12,
        search_candidates=1,
    )
    engine = Engine(s)
    r = search_quality.run(data, tmp_path / "lib", engine, "bf16")
    lib = r["library"]
    assert (lib["videos"], lib["added"], lib["failed"]) == (2, 2, 0)
    assert lib["windows"] == 4 > r["search_candidates"] == 1
    every = sum(len(plan_for("find", d, s)) for d in (12.0, 10.0))  # one example each
    assert r["summary"]["queries"] == len(r["queries"]) == 2
    for row in r["queries"]:
        assert (
            row["search"]["searched_windows"] <= 1
            and row["search"]["decoded"] == row["search"]["searched_windows"]
        )
        assert row["exhaustive"]["decoded"] == every == 4  # every find window of both clips
        assert row["exhaustive"]["latency_s"] > 0 and row["search"]["latency_s"] >= 0
    summary = r["summary"]
    for side in ("search", "exhaustive"):
        assert all(0.0 <= summary[side][k] <= 1.0 for k in ("video@1", "video@5", "r5@0.5"))
    assert summary["search"]["decoded_mean"] < summary["exhaustive"]["decoded_mean"]
    text = search_quality.render(r)
    assert search_quality.TINY_NOTE in text and "exhaustive find" in text and "N = 1" in text
    again = search_quality.run(data, tmp_path / "lib", engine, "bf16", with_exhaustive=False, limit=1)
    assert (again["library"]["unchanged"], again["library"]["added"]) == (2, 0)  # indexed once
    assert "exhaustive" not in again["queries"][0] and again["summary"]["queries"] == 1
