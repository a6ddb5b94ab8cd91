"""The one request path (marlin_demo.service): staged stream, and the compare runner on a failing variant."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from ui_support import EXAMPLES

from marlin_demo import service
from marlin_demo.engine import Engine, EngineError, graphs
from marlin_demo.longvideo import runner
from marlin_demo.results import Done, Loaded, Prepared, Progress
from marlin_demo.settings import Settings

pytestmark = pytest.mark.slow

CLIP = EXAMPLES / "ball_rolls.mp4"


@pytest.fixture(scope="module")
def engine(tiny_settings: Settings) -> Engine:
    return Engine(tiny_settings.with_(caption_max_new_tokens=24, find_max_new_tokens=12,
                                      extra_variants="broken=/nonexistent/marlin-variant"))  # fmt: skip


def test_stream_yields_the_stages_in_order(engine: Engine) -> None:
    engine.unload("gptq")
    stages = list(service.stream(engine, "caption", CLIP, "gptq"))
    assert isinstance(stages[0], Prepared) and stages[0].plan.video_tokens > 0
    assert isinstance(stages[1], Loaded) and stages[1].cold and stages[1].variant == "gptq"
    assert isinstance(stages[-1], Done)
    texts = [s.text for s in stages if isinstance(s, Progress)]
    assert texts and texts[-1].strip() == stages[-1].result.raw
    again = list(service.stream(engine, "caption", CLIP, "gptq"))
    assert isinstance(again[0], Prepared) and again[0].cached_video
    assert isinstance(again[1], Loaded) and not again[1].cold


def test_compare_keeps_the_answers_of_the_variants_that_ran(engine: Engine) -> None:
    *_, run = service.compare(engine, "find", CLIP, ["gptq", "broken"], "the ball rolls")
    assert isinstance(run, service.Comparison)
    assert list(run.results) == ["gptq"] and list(run.errors) == ["broken"]
    assert "broken" in run.errors["broken"] or "/nonexistent" in run.errors["broken"]
    payload = run.payload(None)
    assert set(payload["results"]) == {"gptq"} and payload["errors"] == run.errors
    run.require_answer()  # one variant answered: no error


def test_compare_live_streams_each_variant_between_its_start_and_finish(engine: Engine) -> None:
    events = list(service.compare(engine, "find", CLIP, ["gptq", "broken"], "the ball rolls", live=True))
    kinds = [type(e).__name__ for e in events]
    started = kinds.index("VariantStarted")
    finished = kinds.index("VariantFinished")
    between = events[started + 1 : finished]
    assert isinstance(between[0], Loaded) and between[0].variant == "gptq"
    texts = [e.text for e in between if isinstance(e, Progress)]
    run = events[-1]
    assert isinstance(run, service.Comparison) and texts and texts[-1].strip() == run.results["gptq"].raw
    assert list(run.errors) == ["broken"]  # a failing variant is still kept, not raised


def test_compare_bad_input_fails_before_any_variant(engine: Engine) -> None:
    with pytest.raises(ValueError, match="query is empty"):
        next(service.compare(engine, "find", CLIP, ["gptq", "broken"], "  "))
    only_broken = list(service.compare(engine, "caption", CLIP, ["broken"]))[-1]
    with pytest.raises(EngineError, match="No variant could answer: broken"):
        only_broken.require_answer()


def test_compare_times_cold_answers_again_warm_so_the_warm_figures_compare_like_with_like(
    engine: Engine,
) -> None:
    """bnb4 loads for this request (its first run pays first-use costs beyond the load): it is timed again
    once loaded. gptq was warm but read the clip afresh while bnb4's re-run reused its reading, so gptq is
    timed again too. Each variant's own size is its weights' footprint, measured at its load."""
    engine.load("gptq")
    engine.unload("bnb4")
    engine.prefixes.clear()
    events = list(service.compare(engine, "find", CLIP, ["gptq", "bnb4"], "the ball rolls", warm_reruns=True))
    run = events[-1]
    assert isinstance(run, service.Comparison) and run.cold == {"gptq": False, "bnb4": True}
    assert [e.variant for e in events if isinstance(e, service.WarmRerun)] == ["bnb4", "gptq"]
    assert list(run.reruns) == ["bnb4", "gptq"]
    payload = run.payload(None)
    assert {v: w["rerun"] and w["reused_prefix"] for v, w in payload["warm"].items()} == {
        "gptq": True,
        "bnb4": True,
    }
    assert payload["warm"]["bnb4"]["latency_s"] == round(run.reruns["bnb4"].metrics.latency_s, 3)
    assert payload["footprint_mb"] == {v: round(engine.loaded()[v].footprint_mb, 2) for v in ("gptq", "bnb4")}
    # not asked (the /compare endpoint): no re-run, and a cold run has no warm figure
    engine.unload("bnb4")
    plain = list(service.compare(engine, "find", CLIP, ["gptq", "bnb4"], "the ball rolls"))
    assert not any(isinstance(e, service.WarmRerun) for e in plain)
    assert plain[-1].payload(None)["warm"]["bnb4"] is None


def test_a_call_sized_for_graphs_the_variant_cannot_capture_is_asked_again(engine: Engine) -> None:
    """A ZeroGPU call sized for graphs whose variant cannot capture answers ``GraphsUnavailable`` before its
    prefill: the runner asks for the clip's work once more (the service sizes that call for eager)."""
    calls: list[int] = []

    @contextlib.contextmanager
    def execute(work: Any) -> Iterator[Iterator[Any]]:
        calls.append(len(calls))
        if len(calls) == 1:  # what the call's process says, as an item over its pipe
            yield iter([("error", graphs.GraphsUnavailable("gptq cannot decode in CUDA graphs"))])
            return
        with contextlib.closing(runner.threaded(work, contextlib.nullcontext)) as items:
            yield items

    stages = runner.answer(engine, service.request(engine, "caption", CLIP, "gptq"), execute)
    with pytest.raises(StopIteration) as done:
        while True:
            next(stages)
    assert calls == [0, 1] and done.value.value.raw
