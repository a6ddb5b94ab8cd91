"""When ZeroGPU refuses a call: one sentence for the visitor, the windows already answered kept (``partial``).

The stand-in ``spaces`` (``tests/stand_ins/spaces``) keeps a visitor's quota as ZeroGPU does: a call starts
only when its request is left (else ``spaces``' very ``gr.Error``, title and words) and is then charged the
time it used; each granted call runs in a forked process, as on ZeroGPU. Here each call is charged its
whole request (``Quota.used_s``) so the quota runs out at a known call.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stand_ins.spaces
from result_shapes import PARTIAL_KEYS
from stand_ins.spaces import Quota

from marlin_demo import service
from marlin_demo.engine import USER_ERRORS, Engine
from marlin_demo.results import CaptionResult, FindResult
from marlin_demo.service import gpu_calls, zerogpu_rules
from marlin_demo.service.scheduler import scheduler_for
from marlin_demo.settings import Settings
from marlin_demo.ui import compare_html
from marlin_demo.ui.blocks import answer_examples_at_start
from marlin_demo.ui.context import UIContext

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

LONG = ROOT / "examples" / "ball_rolls.mp4"  # 12 s: three 4 s caption windows, four find windows below
SHORT = ROOT / "examples" / "flower.mp4"  # 5 s: one window


@pytest.fixture(scope="module")
def engine(tiny_settings: Settings) -> Engine:
    settings = tiny_settings.with_(device="cpu", caption_window_s=4.0, caption_max_new_tokens=16,
                                   find_window_s=4.0, find_overlap_s=1.0, find_max_new_tokens=12)  # fmt: skip
    eng = Engine(settings)
    for v in ("bf16", "gptq"):
        eng.load(v)  # on a Space the variants are loaded at start-up, before any call
    return eng


@pytest.fixture
def quota(monkeypatch: pytest.MonkeyPatch) -> Iterator[Quota]:
    """ZeroGPU as the stand-in ``spaces`` runs it, the test running as one visitor's request (Gradio's
    context variable set, as for an event), with a quota the test sets."""
    q = Quota()
    monkeypatch.setitem(sys.modules, "spaces", stand_ins.spaces)
    monkeypatch.setattr(gpu_calls, "zero_gpu", lambda: True)
    monkeypatch.setattr(gpu_calls, "_DECORATED", [])  # decorated by the stand-in, once, as at start-up
    with stand_ins.spaces.visiting("a-visitor") as (key, _):
        monkeypatch.setattr(stand_ins.spaces, "QUOTAS", {key: q})
        yield q


def charged(engine: Engine, task: str = "caption") -> int:
    """What one window's call needs left of the quota to start: its duration (the floor with these token
    limits, whatever its frames) times the card's factor."""
    return round(gpu_calls.call_seconds(task, engine.settings) * Quota().factor)  # type: ignore[arg-type]


def test_every_refusal_spaces_raises_is_read_and_said_in_one_sentence() -> None:
    for kind, fact in zerogpu_rules.facts()["refusals"].items():
        if isinstance(fact, dict):
            exc = RuntimeError(fact["example"])
            exc.title = fact["title"]  # type: ignore[attr-defined]  # as spaces' gr.Error carries it
            refusal = zerogpu_rules.read_refusal(exc)
            assert refusal is not None and refusal.kind == kind, kind
            sentence = zerogpu_rules.refusal_sentence(refusal)
            assert sentence.startswith("ZeroGPU") and sentence.endswith(".") and sentence.count(". ") == 0
    over = zerogpu_rules.read_refusal(Quota(left_s=21, visitor="ip").refusal(99))
    assert over == zerogpu_rules.Refusal("over_quota", "", 99, 21, "13:12:05")
    said = zerogpu_rules.refusal_sentence(over)
    assert "it needs 99 s of your daily GPU quota left to start, and 21 s are left" in said
    assert "try again in 13 h 12 min" in said  # a wait, not a clock time
    assert "sign in to Hugging Face (5 min of GPU a day with a free account, 2 min without)" in said
    refusal = zerogpu_rules.read_refusal(Quota(left_s=3, visitor="free").refusal(22))
    assert refusal is not None and refusal.tier == "free"
    free = zerogpu_rules.refusal_sentence(refusal)
    assert "needs 22 s of your free account's daily GPU quota left to start, and 3 s" in free
    assert "sign in" not in free
    assert zerogpu_rules.read_refusal(RuntimeError("CUDA out of memory")) is None
    mislabelled = RuntimeError("GPU task aborted")
    mislabelled.title = "Something else"  # type: ignore[attr-defined]
    assert zerogpu_rules.read_refusal(mislabelled) is None


def test_a_refusal_names_the_calls_size_and_what_still_starts_as_the_stand_in_then_does() -> None:
    """A call is admitted on its own request: with 93 s left a 66 s call (99 s at x1.5) is refused, and a
    call of up to 62 s still starts; the sentence says that, not a wait or the Space's limit."""
    refusal = zerogpu_rules.read_refusal(Quota(left_s=93, visitor="free").refusal(99))
    assert refusal is not None
    said = zerogpu_rules.refusal_sentence(refusal, 66, 15)
    assert "it needs 99 s of your free account's daily GPU quota left to start (66 s times" in said, said
    assert "and 93 s are left; a call of up to 62 s can still start now" in said, said
    assert "try again" not in said and "shared GPU limit" not in said, said
    for seconds, starts in ((62, True), (63, False)):  # what the stand-in then does with 93 s left
        q = Quota(left_s=93, visitor="free")
        try:
            q.schedule(seconds)
            started = True
        except Exception:
            started = False
        assert started is starts, seconds
    # nothing this Space makes fits: ZeroGPU's own wait, attributed to it
    spent = zerogpu_rules.read_refusal(Quota(left_s=20, visitor="free").refusal(23))
    assert spent is not None and "ZeroGPU says try again in 13 h 12 min" in zerogpu_rules.refusal_sentence(
        spent, 15, 15
    )
    # no visitor token: spaces says no figures, so the call's size and that a smaller one may start
    none = zerogpu_rules.read_refusal(Quota(left_s=0, visitor="none").refusal(99))
    assert none is not None
    said = zerogpu_rules.refusal_sentence(none, 66, 15)
    assert said.startswith("ZeroGPU refused the next GPU call of 66 s: without a signed-in visitor"), said
    assert "a smaller call may still start" in said and "used up" not in said, said


def test_refused_midway_the_windows_answered_return_as_a_partial_answer(engine: Engine, quota: Quota) -> None:
    each = charged(engine)
    # each call charged its whole request (as if it used all of it): two windows' calls, not three
    quota.left_s, quota.visitor, quota.used_s = 2 * each + 5, "free", each / quota.factor
    res = service.run(engine, "caption", str(LONG), "bf16")
    assert isinstance(res, CaptionResult) and res.partial is not None
    assert (res.partial.windows_done, res.partial.windows_total) == (2, 3)
    assert f"needs {each} s of your free" in res.partial.reason and "and 5 s are left" in res.partial.reason
    assert [w["end"] for w in res.windows] == [4.0, 8.0]  # nothing of the third window
    assert all(e.end <= 8.0 for e in res.events)
    d = res.to_dict()
    assert set(d["partial"]) == PARTIAL_KEYS and d["partial"]["windows_done"] == 2
    assert d["runtime"]["gpu_calls"]["calls"] == 2  # the refused call asked nothing of the quota
    assert res.partial.note().startswith("Partial answer: 2 of 3 windows answered. ZeroGPU refused")


def test_refused_before_any_window_is_the_error_and_the_service_keeps_serving(
    engine: Engine, quota: Quota
) -> None:
    quota.left_s, quota.visitor = 0, "none"  # no visitor token: spaces names the Space's limit
    with pytest.raises(gpu_calls.GpuRefused) as refused:
        service.run(engine, "caption", str(SHORT), "bf16")
    assert isinstance(refused.value, USER_ERRORS)  # shown as the page's and the API's error
    said = str(refused.value)
    assert "without a signed-in visitor" in said and "sign in to Hugging Face" in said
    assert refused.value.refusal.kind == "space_limit"
    assert scheduler_for(engine).held() == 0  # the refused request let go of its turn
    quota.left_s = None  # the next visitor has quota: served as usual
    again = service.run(engine, "caption", str(SHORT), "bf16")
    assert again.partial is None and again.to_dict()["partial"] is None


def test_compare_keeps_each_variants_partial_answer_or_its_sentence(engine: Engine, quota: Quota) -> None:
    each = charged(engine, "find")
    quota.left_s, quota.visitor, quota.used_s = 2 * each, "ip", each / quota.factor  # two calls' worth
    events = list(service.compare(engine, "find", str(LONG), ["bf16", "gptq"], "the ball rolls"))
    out = events[-1]
    assert isinstance(out, service.Comparison)
    first = out.results["bf16"]
    assert isinstance(first, FindResult) and first.partial is not None
    assert (first.partial.windows_done, first.partial.windows_total) == (2, 4)
    assert all(m.end <= 7.0 for m in first.moments)  # only the two windows searched (0-4 s, 3-7 s)
    card = compare_html._card("bf16", first, False, 12.0, None, compare_html.find_card)  # it says it too
    assert "Partial answer: 2 of 4 windows answered. ZeroGPU" in card
    assert "gptq" not in out.results and "and 0 s are left" in out.errors["gptq"]
    refused = compare_html._card("gptq", out.errors["gptq"], False, 12.0, None, compare_html.find_card)
    assert "no answer" in refused and "warm" not in refused  # it did not run: neither warm nor cold
    payload = out.payload(None)
    assert payload["errors"]["gptq"] == out.errors["gptq"]


def test_every_call_of_a_visitors_request_is_charged_to_that_visitor_and_the_examples_to_no_one(
    engine: Engine, quota: Quota, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``spaces`` reads the visitor from Gradio's request context variable in the thread that calls: a
    streamed run (the page, ``/caption_stream``) answers in a thread of its own, window by window, and
    Compare streams each variant; every call must be charged to the visitor who asked. The examples' cache
    runs for no visitor, even when a visitor's request builds the page."""
    log = tmp_path / "gpu.jsonl"
    monkeypatch.setenv("MARLIN_STAND_IN_GPU_LOG", str(log))
    (visitor,) = stand_ins.spaces.QUOTAS  # the fixture's visitor, whose request the test runs as
    stages = list(service.stream(engine, "caption", str(LONG), "bf16"))  # three windows, three calls
    assert isinstance(stages[-1].result, CaptionResult) and stages[-1].result.partial is None
    events = list(service.compare(engine, "find", str(SHORT), ["bf16", "gptq"], "a flower", live=True))
    assert set(events[-1].results) == {"bf16", "gptq"}
    asked = [e["visitor"] for e in _entries(log) if "visitor_request" in e]
    results = [stages[-1].result, *events[-1].results.values()]
    windows = sum(r.to_dict()["runtime"]["gpu_calls"]["calls"] for r in results)  # one call per window
    assert asked == windows * [visitor] and windows >= 5, asked
    example = _example("flower.mp4")
    ctx = UIContext(engine, engine.settings, None, tmp_path / "out", examples=[example])  # type: ignore[arg-type]
    quota.left_s = 0  # the visitor's day is spent: the examples are not theirs to pay
    answer_examples_at_start(ctx).join(timeout=600)
    cached = [e["visitor"] for e in _entries(log) if "visitor_request" in e][windows:]
    assert len(cached) >= 2 and set(cached) == {None}, cached  # a caption and a find, charged to no one
    query = example["queries"][0]["query"]
    for task, q in (("caption", None), ("find", query)):  # answered, so the clicks show them at once
        assert ctx.answers.get(ctx.answers.key(task, example, ctx.default_variant, q)) is not None, task


def _entries(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _example(video: str) -> dict[str, Any]:
    examples = json.loads((ROOT / "examples" / "examples.json").read_text())
    return next(e for e in examples if e["video"] == video)


def test_a_compare_refused_for_every_variant_says_the_sentence_once() -> None:
    from marlin_demo.engine import EngineError

    run = service.Comparison("caption", None, None, ["gptq", "bnb4"])  # type: ignore[arg-type]
    said = "ZeroGPU refused the next GPU call: it needs 94 s of your daily GPU quota left to start."
    run.errors = {"gptq": said, "bnb4": said}
    with pytest.raises(EngineError) as refused:
        run.require_answer()
    assert str(refused.value) == f"No variant could answer: {said}"
