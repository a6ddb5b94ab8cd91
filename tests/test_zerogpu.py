"""Nothing ZeroGPU refuses: compile and compiler-built kernels refused at start-up, GPTQ's kernel chosen
from the platform (never by finding nvcc), ``spaces`` before torch, and the app served through the
ZeroGPU stand-in (``tests/stand_ins/spaces``: each GPU call in a forked process, as ZeroGPU runs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gradio_client import Client, handle_file
from ui_support import EXAMPLES, start_app, stop_app, zero_gpu_env

from marlin_demo.models import kernels
from marlin_demo.service import capacity, startup, zerogpu
from marlin_demo.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


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
    kernels.allow_compiler_builds(True)  # the process's default again


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
    table = zerogpu.spaces_card_table()
    assert table, "spaces is installed on both lanes: its per-card table must be found"
    for row in table:
        assert zerogpu.duration_factor(row["model"]) == row["duration_factor"]
    assert zerogpu.duration_factor("a card spaces does not list") == table[0]["duration_factor"]


def test_duration_factor_without_spaces_is_the_documented_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zerogpu, "spaces_card_table", lambda: None)
    assert zerogpu.duration_factor() == zerogpu.facts()["duration_factor"]["fallback"] == 1.5


# --------------------------------------------------------------------------------- the app on ZeroGPU
@pytest.mark.slow
def test_app_serves_a_caption_through_zero_gpu_calls(tmp_path: Path) -> None:
    log = tmp_path / "gpu.jsonl"
    # 149 s left, each call charged 40 s x1.5 of use: one caption call, and then too little for the next
    env = {**zero_gpu_env(log), "MARLIN_STAND_IN_QUOTA_S": "149", "MARLIN_STAND_IN_USED_S": "40"}
    server = start_app(tmp_path / "app", "--variants", "bf16", extra_env=env, address_flags=False)
    try:
        client = Client(server.url, verbose=False)
        result = client.predict(handle_file(str(EXAMPLES / "flower.mp4")), "bf16", api_name="/caption")
        assert result["variant"] == "bf16" and result["raw"], result
        for _ in range(2):  # the quota is spent: refused in one sentence, and the server keeps serving
            with pytest.raises(Exception, match="ZeroGPU refused the next GPU call: it needs") as refused:
                client.predict(handle_file(str(EXAMPLES / "flower.mp4")), "bf16", api_name="/caption")
        assert server.proc.poll() is None
    finally:
        stop_app(server)
    entries = _entries(log)
    assert entries[0] == {"imported": True, "torch_already_imported": False}  # app.py: spaces before torch
    calls = [e for e in entries if e.get("call")]
    assert len(calls) == 1, entries  # a 5 s clip is one window: one GPU call
    (settled,) = [e for e in entries if e.get("settled")]
    held = round(calls[0]["duration"] * 1.5)
    assert (
        settled["held"] == held and settled["charged_s"] == 60.0
    )  # admitted on its request, charged its use
    said = f"it needs {held} s of your free account's daily GPU quota left to start, and 89 s are left"
    assert said in str(refused.value)
    assert len([e for e in entries if e.get("refused")]) == 2  # refused before any process started
    assert 0 < calls[0]["duration"] <= capacity.MAX_GPU_S
    assert calls[0]["child"] != calls[0]["parent"] == server.proc.pid  # ran in a forked process


@pytest.mark.slow
def test_a_visitor_without_an_account_compares_both_variants(tmp_path: Path) -> None:
    """120 s left and no account: each caption call needs more than half of that left to start (66 s x1.5
    for a full window), yet both variants run, since ZeroGPU charges what a call used, not its request."""
    log = tmp_path / "gpu.jsonl"
    day = zerogpu.daily_quota_s("unauthenticated")
    env = {**zero_gpu_env(log), "MARLIN_STAND_IN_QUOTA_S": str(day), "MARLIN_STAND_IN_VISITOR": "ip"}
    server = start_app(tmp_path / "app", "--variants", "gptq,bnb4", extra_env=env, address_flags=False)
    try:
        client = Client(server.url, verbose=False)
        d = client.predict(handle_file(str(EXAMPLES / "flower.mp4")), "caption", "", api_name="/compare")
    finally:
        stop_app(server)
    assert set(d["results"]) == {"gptq", "bnb4"} and not d.get("errors"), d.get("errors")
    entries = _entries(log)
    calls, settled = [e for e in entries if e.get("call")], [e for e in entries if e.get("settled")]
    assert len(calls) == len(settled) == 2 and not [e for e in entries if e.get("refused")]
    for call, done in zip(calls, settled, strict=True):
        held = round(call["duration"] * 1.5)  # admitted on its request: it needs this much left to start
        assert done["held"] == held and 2 * held > day  # two requests added up are more than the day
        assert done["charged_s"] == pytest.approx(done["took_s"] * 1.5, abs=0.01)  # charged its use
        assert done["took_s"] < call["duration"] and done["charged_s"] < held
    # the first call's use left room for the second's request (charged as requested, it would not have)
    assert day - settled[0]["charged_s"] >= settled[1]["held"] > day - settled[0]["held"]
