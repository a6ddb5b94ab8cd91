"""Agreement between variants and scores against ground truth, on hand-computed cases (no model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from marlin_demo import agreement as compare
from marlin_demo.contract import Event
from marlin_demo.results import CaptionResult, FindResult, Metrics

ROOT = Path(__file__).resolve().parents[1]


def _metrics() -> Metrics:
    return Metrics(
        latency_s=1.0,
        ttft_s=0.5,
        output_tokens=10,
        tokens_per_s=18.0,
        video_tokens=100,
        peak_memory_mb=900.0,
        memory_kind="cpu_peak_rss",
        load_s=0.2,
        device="cpu",
    )


def _find(variant: str, span: tuple[float, float] | None, query: str = "the ball rolls") -> FindResult:
    raw = "nothing" if span is None else f"From {span[0]} to {span[1]}."
    return FindResult(variant, "m", query, span, span is not None, raw, _metrics())


def _caption(variant: str, scene: str, events: list[tuple[float, float, str]]) -> CaptionResult:
    evs = [Event(s, e, d) for s, e, d in events]
    return CaptionResult(variant, "m", scene, evs, "raw", False, _metrics())


# --------------------------------------------------------------------------- agreement


def test_find_agreement_hand_computed() -> None:
    # [2, 8] vs [4, 10]: intersection 4, hull 8 -> 0.5
    results = {"gptq": _find("gptq", (2.0, 8.0)), "bnb4": _find("bnb4", (4.0, 10.0))}
    assert compare.agreement("find", results) == {"gptq|bnb4": {"span_iou": pytest.approx(0.5)}}


def test_find_agreement_missing_span_is_zero_and_every_pair_is_listed() -> None:
    results = {
        "gptq": _find("gptq", (0.0, 4.0)),
        "bnb4": _find("bnb4", None),
        "bf16": _find("bf16", (1.0, 3.0)),
    }
    got = compare.agreement("find", results)
    assert list(got) == ["gptq|bnb4", "gptq|bf16", "bnb4|bf16"]
    assert got["gptq|bnb4"]["span_iou"] == 0.0
    assert got["gptq|bf16"]["span_iou"] == pytest.approx(0.5)  # 2 / 4
    assert got["bnb4|bf16"]["span_iou"] == 0.0


def test_caption_agreement_hand_computed() -> None:
    a = _caption("gptq", "a red ball", [(0.0, 2.0, "ball rests"), (2.0, 8.0, "ball rolls")])
    # (0,2)~(0,3): 2/3; (2,8)~(3,8): 5/6; mean = (2/3 + 5/6) / 2 = 0.75
    b = _caption("bnb4", "a red ball", [(0.0, 3.0, "ball rests"), (3.0, 8.0, "ball rolls")])
    got = compare.agreement("caption", {"gptq": a, "bnb4": b})
    assert got["gptq|bnb4"]["event_iou"] == pytest.approx(0.75)
    assert got["gptq|bnb4"]["rouge_l"] == pytest.approx(1.0)  # identical texts
    assert got["gptq|bnb4"]["event_f1"] == pytest.approx(1.0)  # both events matched at IoU >= 0.3


def test_caption_agreement_rouge_and_no_match() -> None:
    a = _caption("gptq", "red ball", [(0.0, 1.0, "x")])
    b = _caption("bnb4", "blue ball", [(5.0, 6.0, "x")])
    got = compare.agreement("caption", {"gptq": a, "bnb4": b})["gptq|bnb4"]
    assert got["event_iou"] == 0.0  # no overlapping events
    assert got["event_f1"] == 0.0
    # tokens "red ball x" vs "blue ball x": LCS 2 -> P = R = F = 2/3
    assert got["rouge_l"] == pytest.approx(2 / 3)


def test_agreement_accepts_dict_shapes_and_single_variant() -> None:
    a = _find("gptq", (0.0, 2.0)).to_dict()
    b = _find("bnb4", (0.0, 2.0)).to_dict()
    assert compare.agreement("find", {"gptq": a, "bnb4": b}) == {"gptq|bnb4": {"span_iou": 1.0}}
    assert compare.agreement("find", {"gptq": a}) == {}


def test_unknown_task_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="caption or find"):
        compare.agreement("summarize", {})


# --------------------------------------------------------------------------- ground truth

EXAMPLE = {
    "video": "clip.mp4",
    "scene": "red ball",
    "events": [{"start": 0.0, "end": 2.0, "description": "ball rests"}],
    "queries": [{"query": "the ball rolls", "span": [2.0, 8.0]}],
}


@pytest.fixture()
def examples_dir(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "examples" / "ball_rolls.mp4", tmp_path / "clip.mp4")
    (tmp_path / "examples.json").write_text(json.dumps([EXAMPLE]), encoding="utf-8")
    return tmp_path


def test_ground_truth_by_content_hash_under_another_name(examples_dir: Path, tmp_path_factory) -> None:
    upload = tmp_path_factory.mktemp("upload") / "renamed.mp4"
    shutil.copy(examples_dir / "clip.mp4", upload)
    found = compare.ground_truth_for(upload, examples_dir / "examples.json")
    assert found is not None and found["video"] == "clip.mp4"


def test_same_name_different_content_is_not_matched(examples_dir: Path, tmp_path_factory) -> None:
    other = tmp_path_factory.mktemp("upload") / "clip.mp4"
    other.write_bytes(b"not the same clip")
    assert compare.ground_truth_for(other, examples_dir / "examples.json") is None


def test_name_match_when_reference_clip_is_absent(examples_dir: Path, tmp_path_factory) -> None:
    (examples_dir / "clip.mp4").unlink()
    upload = tmp_path_factory.mktemp("upload") / "clip.mp4"
    upload.write_bytes(b"anything")
    found = compare.ground_truth_for(upload, examples_dir / "examples.json")
    assert found is not None and found["video"] == "clip.mp4"


def test_no_truth_without_file_or_json(tmp_path: Path) -> None:
    assert compare.ground_truth_for(None) is None
    assert compare.ground_truth_for(tmp_path / "missing.mp4") is None
    clip = tmp_path / "a.mp4"
    clip.write_bytes(b"x")
    assert compare.ground_truth_for(clip, tmp_path / "no.json") is None


def test_real_examples_json_matches_its_clips() -> None:
    examples = compare.load_examples()
    if not examples:
        pytest.skip("examples/examples.json is not there yet")
    for example in examples:
        clip = ROOT / "examples" / example["video"]
        if clip.is_file():
            assert compare.ground_truth_for(clip) == example


# --------------------------------------------------------------------------- scores


def test_find_score_against_truth() -> None:
    # [2, 8] vs [4, 10] -> IoU 0.5: passes R1@0.3 and R1@0.5, fails R1@0.7
    got = compare.score_against_truth("find", _find("gptq", (4.0, 10.0)), EXAMPLE, "The ball rolls.")
    assert got["miou"] == pytest.approx(0.5)
    assert got["r1@0.3"] == 1.0 and got["r1@0.5"] == 1.0 and got["r1@0.7"] == 0.0
    assert got["parse_rate"] == 1.0 and got["n"] == 1 and got["ref_span"] == [2.0, 8.0]


def test_find_score_uses_result_query_and_unknown_query_gives_empty() -> None:
    assert compare.score_against_truth("find", _find("gptq", None), EXAMPLE)["miou"] == 0.0
    assert compare.score_against_truth("find", _find("gptq", (2.0, 8.0), "a dog barks"), EXAMPLE) == {}


def test_caption_score_against_truth() -> None:
    result = _caption("gptq", "red ball", [(0.0, 1.0, "ball rests")])
    got = compare.score_against_truth("caption", result, EXAMPLE)
    assert got["rouge_l"] == pytest.approx(1.0)
    assert got["keyword_coverage"] == pytest.approx(1.0)
    assert got["mean_matched_iou"] == pytest.approx(0.5)  # (0,1) vs (0,2)
    assert got["precision"] == 1.0 and got["recall"] == 1.0


# --------------------------------------------------------------------------- payload


def test_compare_payload_shape_with_and_without_truth() -> None:
    results = {"gptq": _find("gptq", (2.0, 8.0)), "bnb4": _find("bnb4", (4.0, 10.0))}
    payload = compare.compare_payload("find", "the ball rolls", results)
    assert set(payload) == {"task", "query", "results", "agreement"}
    assert payload["results"]["gptq"] == results["gptq"].to_dict()
    assert payload["agreement"] == {"gptq|bnb4": {"span_iou": pytest.approx(0.5)}}
    with_truth = compare.compare_payload("find", "the ball rolls", results, EXAMPLE)
    assert with_truth["scores"]["gptq"]["miou"] == pytest.approx(1.0)
    assert with_truth["scores"]["bnb4"]["miou"] == pytest.approx(0.5)
    # a query the example does not know: nothing to score, no "scores" key
    assert "scores" not in compare.compare_payload("find", "a dog", results, EXAMPLE)


def test_compare_payload_caption_query_is_none() -> None:
    results = {"gptq": _caption("gptq", "a", []), "bnb4": _caption("bnb4", "a", [])}
    payload = compare.compare_payload("caption", "ignored", results)
    assert payload["query"] is None
    assert json.loads(json.dumps(payload)) == payload  # plain JSON
