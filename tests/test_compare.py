"""Agreement between variants and scores against ground truth, and what the Compare tab says it found, on
hand-computed cases (no model)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from marlin_demo import agreement, service, tasks
from marlin_demo.model_io import Event
from marlin_demo.results import CaptionResult, FindResult, Metrics, RunInfo
from marlin_demo.tasks import CAPTION, FIND
from marlin_demo.ui import about
from marlin_demo.ui.compare_html import (
    CHARTS,
    FIGURES_HEADING,
    chart_frame,
    cold_warm_frame,
    metrics_frame,
    session_rows,
    summary_html,
    titled,
    verdict,
)
from marlin_demo.ui.compare_tab import _chart_update

ROOT = Path(__file__).resolve().parents[1]


def _metrics(**changes: Any) -> Metrics:
    base = Metrics(
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
    return dataclasses.replace(base, **changes)


def _find(variant: str, span: tuple[float, float] | None, query: str = "the ball rolls") -> FindResult:
    raw = "nothing" if span is None else f"From {span[0]} to {span[1]}."
    ok = span is not None
    return FindResult(
        variant=variant, model="m", query=query, span=span, format_ok=ok, raw=raw, metrics=_metrics()
    )


def _caption(variant: str, scene: str, events: list[tuple[float, float, str]]) -> CaptionResult:
    evs = [Event(s, e, d) for s, e, d in events]
    return CaptionResult(variant=variant, model="m", scene=scene, events=evs, raw="raw", metrics=_metrics())


# --------------------------------------------------------------------------- agreement


def test_find_agreement_hand_computed() -> None:
    # [2, 8] vs [4, 10]: intersection 4, hull 8 -> 0.5
    results = {"gptq": _find("gptq", (2.0, 8.0)), "bnb4": _find("bnb4", (4.0, 10.0))}
    assert agreement.agreement("find", results) == {"gptq|bnb4": {"span_iou": pytest.approx(0.5)}}


def test_find_agreement_missing_span_is_zero_and_every_pair_is_listed() -> None:
    results = {
        "gptq": _find("gptq", (0.0, 4.0)),
        "bnb4": _find("bnb4", None),
        "bf16": _find("bf16", (1.0, 3.0)),
    }
    got = agreement.agreement("find", results)
    assert list(got) == ["gptq|bnb4", "gptq|bf16", "bnb4|bf16"]
    assert got["gptq|bnb4"]["span_iou"] == 0.0
    assert got["gptq|bf16"]["span_iou"] == pytest.approx(0.5)  # 2 / 4
    assert got["bnb4|bf16"]["span_iou"] == 0.0


def test_caption_agreement_hand_computed() -> None:
    a = _caption("gptq", "a red ball", [(0.0, 2.0, "ball rests"), (2.0, 8.0, "ball rolls")])
    # (0,2)~(0,3): 2/3; (2,8)~(3,8): 5/6; mean = (2/3 + 5/6) / 2 = 0.75
    b = _caption("bnb4", "a red ball", [(0.0, 3.0, "ball rests"), (3.0, 8.0, "ball rolls")])
    got = agreement.agreement("caption", {"gptq": a, "bnb4": b})
    assert got["gptq|bnb4"]["event_iou"] == pytest.approx(0.75)
    assert got["gptq|bnb4"]["rouge_l"] == pytest.approx(1.0)  # identical texts
    assert got["gptq|bnb4"]["event_f1"] == pytest.approx(1.0)  # both events matched at IoU >= 0.3


def test_caption_agreement_rouge_and_no_match() -> None:
    a = _caption("gptq", "red ball", [(0.0, 1.0, "x")])
    b = _caption("bnb4", "blue ball", [(5.0, 6.0, "x")])
    got = agreement.agreement("caption", {"gptq": a, "bnb4": b})["gptq|bnb4"]
    assert got["event_iou"] == 0.0  # no overlapping events
    assert got["event_f1"] == 0.0
    # tokens "red ball x" vs "blue ball x": LCS 2 -> P = R = F = 2/3
    assert got["rouge_l"] == pytest.approx(2 / 3)


def test_agreement_accepts_dict_shapes_and_single_variant() -> None:
    a = _find("gptq", (0.0, 2.0)).to_dict()
    b = _find("bnb4", (0.0, 2.0)).to_dict()
    assert agreement.agreement("find", {"gptq": a, "bnb4": b}) == {"gptq|bnb4": {"span_iou": 1.0}}
    assert agreement.agreement("find", {"gptq": a}) == {}


def test_unknown_task_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=re.escape(f"choose {tasks.known()}.")):
        agreement.agreement("summarize", {})


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
    found = agreement.ground_truth_for(upload, examples_dir / "examples.json")
    assert found is not None and found["video"] == "clip.mp4"


def test_same_name_different_content_is_not_matched(examples_dir: Path, tmp_path_factory) -> None:
    other = tmp_path_factory.mktemp("upload") / "clip.mp4"
    other.write_bytes(b"not the same clip")
    assert agreement.ground_truth_for(other, examples_dir / "examples.json") is None


def test_name_match_when_reference_clip_is_absent(examples_dir: Path, tmp_path_factory) -> None:
    (examples_dir / "clip.mp4").unlink()
    upload = tmp_path_factory.mktemp("upload") / "clip.mp4"
    upload.write_bytes(b"anything")
    found = agreement.ground_truth_for(upload, examples_dir / "examples.json")
    assert found is not None and found["video"] == "clip.mp4"


def test_no_truth_without_file_or_json(tmp_path: Path) -> None:
    assert agreement.ground_truth_for(None) is None
    assert agreement.ground_truth_for(tmp_path / "missing.mp4") is None
    clip = tmp_path / "a.mp4"
    clip.write_bytes(b"x")
    assert agreement.ground_truth_for(clip, tmp_path / "no.json") is None


def test_real_examples_json_matches_its_clips() -> None:
    examples = agreement.load_examples()
    if not examples:
        pytest.skip("examples/examples.json is not there yet")
    for example in examples:
        clip = ROOT / "examples" / example["video"]
        if clip.is_file():
            assert agreement.ground_truth_for(clip) == example


# --------------------------------------------------------------------------- scores


def test_find_score_against_truth() -> None:
    # [2, 8] vs [4, 10] -> IoU 0.5: passes R1@0.3 and R1@0.5, fails R1@0.7
    got = FIND.answer.score(_find("gptq", (4.0, 10.0)), EXAMPLE, "The ball rolls.")
    assert got["miou"] == pytest.approx(0.5)
    assert got["r1@0.3"] == 1.0 and got["r1@0.5"] == 1.0 and got["r1@0.7"] == 0.0
    assert got["parse_rate"] == 1.0 and got["n"] == 1 and got["ref_span"] == [2.0, 8.0]


def test_find_score_uses_result_query_and_unknown_query_gives_empty() -> None:
    assert FIND.answer.score(_find("gptq", None), EXAMPLE, None)["miou"] == 0.0
    assert FIND.answer.score(_find("gptq", (2.0, 8.0), "a dog barks"), EXAMPLE, None) == {}


def test_caption_score_against_truth() -> None:
    result = _caption("gptq", "red ball", [(0.0, 1.0, "ball rests")])
    got = CAPTION.answer.score(result, EXAMPLE, None)
    assert got["rouge_l"] == pytest.approx(1.0)
    assert got["keyword_coverage"] == pytest.approx(1.0)
    assert got["mean_matched_iou"] == pytest.approx(0.5)  # (0,1) vs (0,2)
    assert got["precision"] == 1.0 and got["recall"] == 1.0


# --------------------------------------------------------------------------- payload


def test_compare_payload_shape_with_and_without_truth() -> None:
    results = {"gptq": _find("gptq", (2.0, 8.0)), "bnb4": _find("bnb4", (4.0, 10.0))}
    payload = agreement.compare_payload("find", "the ball rolls", results)
    assert set(payload) == {"task", "query", "results", "agreement"}
    assert payload["results"]["gptq"] == results["gptq"].to_dict()
    assert payload["agreement"] == {"gptq|bnb4": {"span_iou": pytest.approx(0.5)}}
    with_truth = agreement.compare_payload("find", "the ball rolls", results, EXAMPLE)
    assert with_truth["scores"]["gptq"]["miou"] == pytest.approx(1.0)
    assert with_truth["scores"]["bnb4"]["miou"] == pytest.approx(0.5)
    # a query the example does not know: nothing to score, no "scores" key
    assert "scores" not in agreement.compare_payload("find", "a dog", results, EXAMPLE)


def test_compare_payload_caption_query_is_none() -> None:
    results = {"gptq": _caption("gptq", "a", []), "bnb4": _caption("bnb4", "a", [])}
    payload = agreement.compare_payload("caption", "ignored", results)
    assert payload["query"] is None
    assert json.loads(json.dumps(payload)) == payload  # plain JSON


# --------------------------------------------------------------------------- what Compare says it found


def _run(latency: float, reused: bool = True, **metrics: Any) -> CaptionResult:
    """A caption answer that took ``latency`` s (load excluded), ``reused``: it reused the clip's reading."""
    res = _caption("v", "a red ball", [(0.0, 2.0, "ball rests")])
    res.metrics = _metrics(latency_s=latency, **metrics)
    res.info = RunInfo(reused_prefix=reused)
    return res


def _comparison(
    cold: dict[str, bool],
    latency: dict[str, float],
    reruns: dict[str, float] | None = None,
    footprint: dict[str, float] | None = None,
    reused: dict[str, bool] | None = None,
) -> service.Comparison:
    """gptq and bnb4 as ``service.compare`` leaves them: a process-wide peak RSS the same for both."""
    reused = reused or {}
    run = service.Comparison("caption", None, None, ["gptq", "bnb4"])  # type: ignore[arg-type]
    for v in ("gptq", "bnb4"):
        run.results[v] = _run(latency[v], reused.get(v, True), peak_memory_mb=2556.4, load_s=3.0)
    run.cold = dict(cold)
    run.footprint_mb = dict(footprint or {"gptq": 1200.0, "bnb4": 2000.0})
    run.reruns = {v: _run(s) for v, s in (reruns or {}).items()}
    return run


def _payload(run: service.Comparison, rouge_l: float = 0.82) -> dict[str, Any]:
    payload = run.payload(None)
    payload["agreement"]["gptq|bnb4"]["rouge_l"] = rouge_l  # a figure the sentence must quote
    return payload


def test_compare_payload_only_adds_keys_for_cold_memory_and_warm_figures() -> None:
    run = _comparison({"gptq": False, "bnb4": True}, {"gptq": 5.36, "bnb4": 23.35}, reruns={"bnb4": 4.1})
    payload = run.payload(None)
    before = agreement.compare_payload("caption", None, run.results)
    assert {k: payload[k] for k in before} == before  # the keys /compare had keep their values
    assert payload["cold"] == {"gptq": False, "bnb4": True}
    assert payload["footprint_mb"] == {"gptq": 1200.0, "bnb4": 2000.0}
    assert payload["warm"] == {
        "gptq": {"latency_s": 5.36, "rerun": False, "reused_prefix": True},  # its own run was warm
        "bnb4": {"latency_s": 4.1, "rerun": True, "reused_prefix": True},  # its re-run, once loaded
    }
    only_cold = _comparison({"gptq": False, "bnb4": True}, {"gptq": 5.36, "bnb4": 23.35}).payload(None)
    assert only_cold["warm"]["bnb4"] is None  # a cold run is no warm figure
    assert json.loads(json.dumps(payload)) == payload


def test_cost_table_shows_each_variants_own_memory_and_what_the_shared_peak_spans() -> None:
    """The same process RSS for both variants is not either one's size: the weights' footprint is."""
    run = _comparison({"gptq": False, "bnb4": False}, {"gptq": 1.0, "bnb4": 1.0})
    frame = metrics_frame(run.results, run.cold, run.payload(None))
    assert list(frame["footprint_mb"]) == [1200.0, 2000.0]
    assert "Memory: weights' footprint (MB)" in titled(frame).columns
    assert list(frame["peak_memory_mb"]) == [2556.4, 2556.4]
    assert list(frame["memory"]) == ["process peak RSS (CPU)"] * 2
    assert "Peak measured (not one variant's own)" in titled(frame).columns


def test_memory_chart_is_drawn_beside_latency_on_a_cpu_and_names_its_measure() -> None:
    first_row = [key for key, _ in CHARTS[:4]]
    assert "latency_s" in first_row and "footprint_mb" in first_row
    assert "weights' footprint" in dict(CHARTS)["footprint_mb"]
    run = _comparison({"gptq": False, "bnb4": False}, {"gptq": 1.0, "bnb4": 1.0})
    frame = metrics_frame(run.results, run.cold, run.payload(None))
    chart = _chart_update(chart_frame(frame, "footprint_mb"), "footprint_mb", "cpu_peak_rss", False)
    assert chart["visible"] and list(chart["value"]["footprint_mb"]) == [1200.0, 2000.0]
    # the process-wide peak stays undrawn on a CPU; no run was cold: no warm chart repeating latency's
    assert (
        _chart_update(chart_frame(frame, "peak_memory_mb"), "peak_memory_mb", "cpu_peak_rss")["visible"]
        is False
    )
    assert (
        _chart_update(chart_frame(frame, "warm_latency_s"), "warm_latency_s", "cpu_peak_rss", False)[
            "visible"
        ]
        is False
    )


def test_a_cold_row_says_so_and_the_warm_line_uses_its_warm_rerun() -> None:
    run = _comparison({"gptq": False, "bnb4": True}, {"gptq": 5.36, "bnb4": 23.35}, reruns={"bnb4": 4.1})
    payload = _payload(run)
    frame = metrics_frame(run.results, run.cold, payload)
    assert list(frame["run"]) == ["warm", "cold"]
    assert "Run (cold: loaded for this request)" in titled(frame).columns
    assert list(frame["warm_latency_s"]) == [5.36, 4.1]
    warm_chart = _chart_update(chart_frame(frame, "warm_latency_s"), "warm_latency_s", "cpu_peak_rss", True)
    assert warm_chart["visible"] and list(warm_chart["value"]["warm_latency_s"]) == [5.36, 4.1]
    assert "GPTQ was 1.3× slower than bnb4 warm (5.36 s vs 4.10 s; bnb4 timed again, warm)" in verdict(
        payload
    )
    # the session keeps the re-run as a warm run of its own: the cold/warm table sets them apart
    rows = session_rows([], "clip.mp4", "caption", None, run.results, run.cold, payload, run.reruns)
    assert [(r["variant"], r["run"]) for r in rows] == [
        ("gptq", "warm"),
        ("bnb4", "cold"),
        ("bnb4", "warm re-run"),
    ]
    table = cold_warm_frame(rows).set_index("Variant")
    assert table.loc["bnb4", "cold runs"] == 1 and table.loc["bnb4", "warm: mean latency (s)"] == 4.1


def test_without_a_warm_rerun_a_cold_run_is_not_set_against_a_warm_one() -> None:
    run = _comparison({"gptq": False, "bnb4": True}, {"gptq": 5.36, "bnb4": 23.35})
    said = verdict(_payload(run))
    assert "took 5.36 s and bnb4 23.35 s, but bnb4 ran cold (loaded for this request)" in said
    assert "no warm comparison" in said and "faster" not in said and "slower" not in said
    frame = metrics_frame(run.results, run.cold, run.payload(None))
    assert list(chart_frame(frame, "warm_latency_s")["variant"]) == ["gptq"]  # no bar of 0 s for bnb4


def test_verdict_says_speed_memory_and_agreement_and_links_the_published_figures() -> None:
    run = _comparison({"gptq": False, "bnb4": False}, {"gptq": 4.0, "bnb4": 5.2})
    payload = _payload(run)
    assert verdict(payload) == (
        "On this clip GPTQ was 1.3× faster than bnb4 warm (4.00 s vs 5.20 s) and held 40% less memory "
        "(weights' footprint 1,200.0 MB vs 2,000.0 MB); their answers agree 0.82 (caption ROUGE-L, 1 = "
        "identical)."
    )
    page = summary_html(payload)
    assert 'id="compare-verdict"' in page and 'data-mr-tab="about"' in page
    assert f'data-mr-heading="{FIGURES_HEADING}"' in page
    # the heading the link scrolls to is the About tab's section holding the card's figures
    assert "11.78" in about.SEED_FIGURES.split(f"## {FIGURES_HEADING}", 1)[1]
    assert verdict({**payload, "results": {"gptq": payload["results"]["gptq"]}}) == ""  # one answer: none


def test_verdict_says_when_one_warm_figure_reused_the_clips_reading() -> None:
    run = _comparison(
        {"gptq": False, "bnb4": False}, {"gptq": 4.0, "bnb4": 4.1}, reused={"gptq": True, "bnb4": False}
    )
    said = verdict(_payload(run))
    assert "about as fast as bnb4 warm" in said
    assert "GPTQ reused its earlier reading of the clip, bnb4 read it afresh" in said
