"""Nothing ZeroGPU refuses: compile and compiler-built kernels refused at start-up, GPTQ's kernel chosen
from the platform (never by finding nvcc), ``spaces`` before torch, and the app served through the
ZeroGPU stand-in (``tests/stand_ins/spaces``: each GPU call in a forked process, as ZeroGPU runs it).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stand_ins.spaces
from gradio_client import Client, handle_file
from ui_support import EXAMPLES, start_app, stop_app, zero_gpu_env

from marlin_demo import model_io
from marlin_demo.models import kernels
from marlin_demo.service import capacity, gpu_calls, startup, zerogpu_rules
from marlin_demo.settings import Settings
from marlin_demo.ui import about, compare_html
from marlin_demo.video import plan_sampling, probe

ROOT = Path(__file__).resolve().parents[1]


def _charged(seconds: int) -> int:
    """What a call of ``seconds`` needs left to start on the stand-in (its card's factor, 1.5)."""
    return round(seconds * 1.5)


def _entries(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# ------------------------------------------------------------------------------------- the refusals
def test_compile_and_compiler_kernels_refused_at_start_up_on_zero_gpu(tmp_path: Path) -> None:
    log = tmp_path / "gpu.jsonl"
    env = {**os.environ, **zero_gpu_env(log), "MARLIN_COMPILE": "1", "MARLIN_GPTQ_BACKEND": "gptq_marlin"}
    argv = [sys.executable, "app.py", "--model", "tiny"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]  # one line says it all
    assert "MARLIN_COMPILE (torch.compile) is not supported on ZeroGPU" in line
    assert "MARLIN_GPTQ_BACKEND=gptq_marlin may need nvcc" in line and "gptq_triton" in line
    assert _entries(log)[0] == {"imported": True, "torch_already_imported": False}  # spaces came first


def test_the_same_settings_are_not_refused_off_zero_gpu(tiny_settings: Settings) -> None:
    settings = tiny_settings.with_(device="cpu", compile=True, gptq_backend="gptq_marlin")
    startup.check_limits(settings, zero_gpu=False)  # no exception: a GPU machine with nvcc may do both
    with pytest.raises(ValueError, match="not supported on ZeroGPU"):
        startup.check_limits(settings, zero_gpu=True)
    assert startup.zero_gpu_refusals(tiny_settings) == []  # the defaults run on ZeroGPU


# ------------------------------------------------------------------------------ GPTQ's kernel choice
@pytest.fixture
def hopper_with_nvcc(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """This CPU machine seen as an H200 with nvcc (it has one: /usr/local/bin/nvcc); counts nvcc lookups."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
    looked: list[int] = []
    monkeypatch.setattr(kernels, "_nvcc", lambda: looked.append(1) or "/usr/local/bin/nvcc")
    yield looked
    kernels.allow_compiler_builds(True)  # the process's defaults again
    torch.compiler.set_stance("default")


def test_gptq_kernel_on_zero_gpu_needs_no_compiler(hopper_with_nvcc: list[int]) -> None:
    plan = kernels.gptq_kernel_plan("cuda", kernels.available_gptq_kernels("cuda"), "auto")
    assert plan[0] == "gptq_marlin" and hopper_with_nvcc  # off ZeroGPU nvcc is looked for and Marlin leads
    hopper_with_nvcc.clear()
    startup.prepare_zero_gpu()  # what the app does on ZeroGPU before any load
    plan = kernels.gptq_kernel_plan("cuda", kernels.available_gptq_kernels("cuda"), "auto")
    assert plan == ["gptq_triton", "gptq_torch"]  # Triton JITs with its own compiler; torch needs none
    assert hopper_with_nvcc == []  # decided from the platform: nvcc not even looked for
    assert set(plan) <= set(kernels.GPTQ_NO_COMPILER)


# ------------------------------------------------------------------------------------ the facts, at run time
def test_duration_factor_is_read_from_the_installed_spaces() -> None:
    table = zerogpu_rules.spaces_card_table()
    assert table, "spaces is installed on both lanes: its per-card table must be found"
    for row in table:
        assert zerogpu_rules.duration_factor(row["model"]) == row["duration_factor"]
    assert zerogpu_rules.duration_factor("a card spaces does not list") == table[0]["duration_factor"]


def test_duration_factor_without_spaces_is_the_documented_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zerogpu_rules, "spaces_card_table", lambda: None)
    assert zerogpu_rules.duration_factor() == zerogpu_rules.facts()["duration_factor"]["fallback"] == 1.5


# --------------------------------------------------------------------------------- the app on ZeroGPU
@pytest.mark.slow
def test_app_warms_up_at_start_up_then_serves_captions_through_zero_gpu_calls(tmp_path: Path) -> None:
    """One GPU call before launch runs every offered variant and checks its decode step (the log says which,
    and the verdict); a visitor's calls then ask for their own time only: the calls read [start-up, each,
    each], then the quota refuses."""
    log = tmp_path / "gpu.jsonl"
    settings = Settings(model="tiny", variants="bf16,gptq")
    clip = EXAMPLES / "flower.mp4"
    share = capacity.prefill_share(plan_sampling(probe(clip), model_io.VideoParams()).video_tokens)
    each, start_up = (
        gpu_calls.call_seconds("caption", settings, share),
        gpu_calls.warm_up_seconds(settings, 2),
    )
    held = _charged(each)
    # each visitor call charged 40 s x1.5 of use: two captions, then too little for a third (the start-up
    # call is charged to no visitor)
    quota = 2 * 60 + held - 1
    env = {**zero_gpu_env(log), "MARLIN_STAND_IN_QUOTA_S": str(quota), "MARLIN_STAND_IN_USED_S": "40"}
    env["MARLIN_DECODE"] = "graphs"  # a CPU: the step uncaptured, checked at start-up as on the GPU
    server = start_app(tmp_path / "app", "--variants", "bf16,gptq", extra_env=env, address_flags=False)
    try:
        client = Client(server.url, verbose=False)
        for _ in range(2):
            result = client.predict(handle_file(str(clip)), "bf16", api_name="/caption")
            assert result["variant"] == "bf16" and result["raw"], result
        for _ in range(2):  # the quota is spent: refused in one sentence, and the server keeps serving
            with pytest.raises(Exception, match="ZeroGPU refused the next GPU call: it needs") as refused:
                client.predict(handle_file(str(clip)), "bf16", api_name="/caption")
        assert server.proc.poll() is None
    finally:
        stop_app(server)
    entries = _entries(log)
    assert entries[0] == {"imported": True, "torch_already_imported": False}  # app.py: spaces before torch
    calls = [e for e in entries if e.get("call")]
    assert [c["duration"] for c in calls] == [start_up, each, each], entries  # no compile asked by a visitor
    # each visitor call saw the visitor's request, as spaces reads it (the start-up call had none), and was
    # charged to the client's address (no X-IP-Token header), the start-up call to no visitor
    seen = [e["visitor"] for e in entries if "visitor_request" in e]
    assert seen == [None] + 4 * ["address 127.0.0.1"], entries
    settled = [e for e in entries if e.get("settled")]
    assert [e["held"] for e in settled] == [_charged(start_up), held, held]  # admitted on its request
    assert all(e["charged_s"] == 60.0 for e in settled)  # charged its use
    assert [e["left_s"] for e in settled] == [None, held + 60 - 1, held - 1]  # the start-up: no quota
    said = (
        f"it needs {held} s of your free account's daily GPU quota left to start ({each} s times this card's"
    )
    assert said in str(refused.value) and f"factor), and {held - 1} s are left" in str(refused.value)
    assert len([e for e in entries if e.get("refused")]) == 2  # refused before any process started
    assert all(c["child"] != c["parent"] == server.proc.pid for c in calls)  # each in a forked process
    text = server.log_path.read_text()
    warmed = [line for line in text.splitlines() if "marlin_demo.engine.warmup: warm-up: " in line]
    assert [line.split("warm-up: ")[1].split(":")[0] for line in warmed] == ["bf16", "gptq"], text[-3000:]
    assert "start-up GPU call (" in text and "did not warm" not in text
    for variant in ("bf16", "gptq"):  # the verdict on each variant's step, in the log
        said = f"start-up check of the decode step: {variant}: static (23 decode steps replayed and run"
        assert said in text, text[-3000:]


@pytest.mark.slow
def test_a_visitor_without_an_account_compares_both_variants(tmp_path: Path) -> None:
    """120 s left and no account: each caption call needs more than half of that left to start (66 s x1.5
    for a full window), yet both variants run, since ZeroGPU charges what a call used, not its request."""
    log = tmp_path / "gpu.jsonl"
    day = zerogpu_rules.daily_quota_s("unauthenticated")
    env = {**zero_gpu_env(log), "MARLIN_STAND_IN_QUOTA_S": str(day), "MARLIN_STAND_IN_VISITOR": "ip"}
    server = start_app(tmp_path / "app", "--variants", "gptq,bnb4", extra_env=env, address_flags=False)
    try:
        client = Client(server.url, verbose=False)
        d = client.predict(handle_file(str(EXAMPLES / "flower.mp4")), "caption", "", api_name="/compare")
    finally:
        stop_app(server)
    assert set(d["results"]) == {"gptq", "bnb4"} and not d.get("errors"), d.get("errors")
    entries = _entries(log)
    (start_up, *calls), (warmed, *settled) = ([e for e in entries if e.get(k)] for k in ("call", "settled"))
    assert start_up["duration"] == gpu_calls.warm_up_seconds(Settings(model="tiny", variants="gptq,bnb4"), 2)
    assert len(calls) == len(settled) == 2 and not [e for e in entries if e.get("refused")]
    # each visitor call saw the visitor's request, as spaces reads it: the start-up call had none
    assert [e["visitor_request"] for e in entries if "visitor_request" in e] == [False, True, True], entries
    assert warmed["visitor"] is None and warmed["left_s"] is None  # the start-up call: charged to no one
    left = day
    for call, done in zip(calls, settled, strict=True):
        held = round(call["duration"] * 1.5)  # admitted on its request: it needs this much left to start
        assert done["held"] == held and 2 * held > day  # two requests added up are more than the day
        assert done["charged_s"] == pytest.approx(done["took_s"] * 1.5, abs=0.01)  # charged its use
        assert done["took_s"] < call["duration"] and done["charged_s"] < held
    # the first call's use left room for the second's request (charged as requested, it would not have)
    assert left - settled[0]["charged_s"] >= settled[1]["held"] > left - settled[0]["held"]


# ------------------------------------------------------------------ the start-up call, in this process
@pytest.fixture
def quota(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ZeroGPU as the stand-in ``spaces`` runs it in this process (each call forked from it), no call made
    yet, and every visitor's day already spent (``MARLIN_STAND_IN_QUOTA_S=0``)."""
    monkeypatch.setitem(sys.modules, "spaces", stand_ins.spaces)
    monkeypatch.setattr(stand_ins.spaces, "QUOTAS", {})
    monkeypatch.setenv("MARLIN_STAND_IN_QUOTA_S", "0")
    monkeypatch.setattr(gpu_calls, "_DECORATED", [])  # decorated by the stand-in, once, as at start-up
    monkeypatch.setattr(gpu_calls, "_warm", threading.Event())  # no call has run in this process
    monkeypatch.setenv("MARLIN_STAND_IN_GPU_LOG", str(tmp_path / "gpu.jsonl"))


@pytest.mark.slow
def test_start_up_call_lets_the_first_visitor_ask_for_its_own_time(quota: None, tmp_path: Path) -> None:
    """The start-up call runs before any visitor, with no request: charged to no one, so it runs even when
    every visitor's day is spent."""
    from marlin_demo.engine import Engine

    engine = Engine(Settings(model="tiny", variants="bf16"))
    engine.load("bf16")
    seconds = gpu_calls.call_seconds("caption", engine.settings)
    assert gpu_calls.asked_seconds(seconds, "cuda") > seconds  # before: room for the compile as well
    assert gpu_calls.warm_up(engine) == ""
    assert gpu_calls.asked_seconds(seconds, "cuda") == seconds  # after: the first visitor's own time only
    assert engine.decoded == {"bf16": "eager"}  # what the call answered (a CPU: eager)
    entries = _entries(tmp_path / "gpu.jsonl")
    calls = [e for e in entries if e.get("call")]
    assert [c["duration"] for c in calls] == [gpu_calls.warm_up_seconds(engine.settings, 1)]
    assert [e["visitor"] for e in entries if "visitor" in e] == [None, None], entries  # asked, settled
    assert stand_ins.spaces.QUOTAS == {}  # no visitor's quota was touched


@pytest.mark.slow
def test_a_failed_start_up_call_is_the_owners_to_read_and_a_visitor_reads_one_plain_sentence(
    quota: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from marlin_demo.engine import Engine, warmup

    def broken(*_: Any) -> Any:
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(warmup, "run", broken)  # the call's forked process inherits it
    engine = Engine(Settings(model="tiny", variants="bf16", decode="graphs", caption_max_new_tokens=8))
    engine.load("bf16")
    with caplog.at_level("WARNING"):
        note = gpu_calls.warm_up(engine)  # failed: no exception, the app goes on starting
    assert "did not warm every variant: RuntimeError: no kernel image" in caplog.text  # the owner's log
    assert note == ""  # on a CPU the next call asks for its own time all the same: nothing to tell a visitor
    seconds = gpu_calls.call_seconds("find", engine.settings)
    assert gpu_calls.asked_seconds(seconds, "cuda") > seconds  # on CUDA the first call asks for the compile
    said = gpu_calls.first_call_note("cuda")  # what the page's banner says there, until a call has run
    more = gpu_calls.FIRST_CALL_COMPILE_S
    assert said.startswith(f"The next GPU call asks ZeroGPU for up to {more} s more than its own work")
    assert "Error" not in said and "sign in" not in said and said.count(". ") == 0, said
    gpu_calls._warm.set()  # a call has run: what a call asks no longer changes, the banner goes
    assert gpu_calls.first_call_note("cuda") == ""
    # no verdict on its step: the variant decodes eagerly, and the log and the answer say why
    said = (
        "start-up check of the decode step: bf16: eager (no verdict: the start-up GPU call failed "
        "(RuntimeError: no kernel image"
    )
    assert said in caplog.text
    res = engine.caption(EXAMPLES / "flower.mp4", "bf16")
    assert res.info.decode == "eager" and res.raw
    assert res.info.decode_note.startswith(
        "start-up check: no verdict: the start-up GPU call failed (RuntimeError: no kernel image"
    )


@pytest.mark.slow
def test_the_start_up_check_turns_graphs_off_where_a_replay_differs(
    quota: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up call checks each variant's step: gptq's replay is planted to change one logit (its top
    token's, made the lowest), so replaying differs from running the step uncaptured. gptq falls back to
    eager, the log says why, and it answers as eager decoding does; bf16 and bnb4 pass and keep the step."""
    from marlin_demo.engine import Engine, graphs

    settings = Settings(model="tiny", variants="bf16,gptq,bnb4", decode="graphs", caption_max_new_tokens=12)
    engine = Engine(settings)
    for variant in engine.variants:
        engine.load(variant)
    planted_on = engine.load("gptq").model
    replay = graphs.replay

    def planted(step: graphs.DecodeStep, form: graphs.Form) -> Any:
        out = replay(step, form)
        if step.model is planted_on:
            logits = out.logits[0, -1]
            logits[int(logits.argmax())] = logits.min() - 1.0
        return out

    monkeypatch.setattr(graphs, "replay", planted)
    clip = EXAMPLES / "flower.mp4"
    reference = Engine(settings.with_(decode="eager")).caption(clip, "gptq")
    unchecked = engine.caption(clip, "gptq")  # what a visitor would get without the check
    assert unchecked.info.decode == "static" and unchecked.raw != reference.raw
    with caplog.at_level("INFO"):
        assert gpu_calls.warm_up(engine) == ""  # in the call's forked process, the plant included
    checks = engine.graph_checks or {}
    assert checks["bf16"].passed and checks["bnb4"].passed, checks
    assert not checks["gptq"].passed
    assert checks["gptq"].why.startswith("decode step 1 of 23: its replayed logits differ from uncaptured")
    assert "start-up check of the decode step: gptq: eager (decode step 1 of 23" in caplog.text
    for variant in ("bf16", "bnb4"):
        assert f"start-up check of the decode step: {variant}: static (23 decode steps" in caplog.text
    assert engine.decode_expected("gptq", "cuda") == "eager"  # its calls: sized for eager
    res = engine.caption(clip, "gptq")
    assert res.info.decode == "eager" and res.raw == reference.raw  # eager's answer, the plant unused
    assert res.info.decode_note.startswith("start-up check: decode step 1 of 23: its replayed logits differ")
    ok = engine.caption(clip, "bf16")
    assert ok.info.decode == "static" and ok.info.decode_note == "checked at start-up"
    assert ok.info.replayed_steps == ok.metrics.output_tokens - 1
    # the page says it as a fact, not an error: Compare's decode field and a line on About
    assert "decode: eager (start-up check: decode step 1 of 23" in _card(res)
    assert "decode: static (checked at start-up)" in _card(ok)
    line = about.decoding_line(engine.graph_checks)
    assert "**gptq** eagerly (decode step 1 of 23: its replayed logits differ" in line
    said = "**bf16** in its static step, uncaptured as there is no GPU here (23 decode steps replayed and run"
    assert said in line


def _card(result: Any) -> str:
    """Compare's column for ``result`` (a caption of a 5 s clip, nothing loaded for it)."""
    return compare_html._card(result.variant, result, False, 5.0, None, compare_html.caption_card)


# ------------------------------------------------------------------ nothing compiles on the Space's path
def _compiles_in_call(engine: Any, variant: str, on_text: Any) -> tuple[str, str, dict[str, int]]:
    """Inside a GPU call (forked): one caption, and what dynamo compiled meanwhile in this process."""
    from torch._dynamo.utils import counters

    counters.clear()
    res = engine.caption(EXAMPLES / "flower.mp4", variant)
    return (
        res.raw,
        res.info.kernel,
        {k: counters[g][k] for g, k in (("stats", "unique_graphs"), ("frames", "total"))},
    )


@pytest.mark.slow
def test_nothing_compiles_on_the_space_s_path(
    quota: None, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """GPTQModel's gptq_torch kernel wraps its dequantize in torch.compile (8 to 10 graphs on the tiny here
    without force_eager), bitsandbytes wraps its default ops: through ZeroGPU's calls, after the app's
    start-up preparation, every variant answers and dynamo compiles nothing (each call runs its work in a
    thread of the forked process, as on the Space)."""
    import torch

    from marlin_demo.engine import Engine

    request.addfinalizer(lambda: torch.compiler.set_stance("default"))  # this process's stance again
    monkeypatch.setattr(kernels, "_COMPILER_BUILDS", [*kernels._COMPILER_BUILDS])  # restored after
    startup.prepare_zero_gpu()  # what the app does on ZeroGPU before any load
    engine = Engine(Settings(model="tiny", variants="gptq,bnb4,bf16", gptq_backend="gptq_torch"))
    for variant in engine.variants:  # loaded before the calls, as the app preloads on a Space (and a load in
        engine.load(variant)  # a forked call would wait on the worker pool GPTQModel made in this process)
    for variant in engine.variants:
        with gpu_calls.gpu_call(functools.partial(_compiles_in_call, engine, variant), 60) as items:
            raw, kernel, compiled = dict(items)["done"]  # the call's answer, its last item
        assert raw and compiled == {"unique_graphs": 0, "total": 0}, (variant, compiled)
        if variant == "gptq":
            assert kernel.startswith("TorchLinear"), kernel  # the kernel whose dequantize is wrapped
