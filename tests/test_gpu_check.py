"""The prepared GPU check: its row plan, and its --dry-run end to end on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _gpu_check():
    return load_script(SCRIPT)


def test_cuda_plan_covers_every_combination_goal_rows_first() -> None:
    plan = _gpu_check().plan_rows("cuda", ["gptq_marlin", "gptq_triton"], fla=True, dry_run=False)
    assert plan[0] == {  # the Marlin kernel (nvcc: off ZeroGPU) in CUDA graphs, with the long caption
        "variant": "gptq",
        "gptq_backend": "gptq_marlin",
        "fla": True,
        "compile": False,
        "decode": "graphs",
        "long_caption": 768,
    }
    assert [(r["variant"], r["decode"]) for r in plan[1:4]] == [  # then compiled: Marlin, bnb4, bf16
        ("gptq", "compiled"),
        ("bnb4", "compiled"),
        ("bf16", "compiled"),
    ]
    keys = {(r["variant"], r["gptq_backend"], r["fla"], r["decode"]) for r in plan}
    assert len(keys) == len(plan)  # no row measured twice
    for variant, backend in (
        ("bf16", "auto"),
        ("bnb4", "auto"),
        ("gptq", "gptq_marlin"),
        ("gptq", "gptq_triton"),
    ):
        assert (variant, backend, True, "eager") in keys and (variant, backend, False, "eager") in keys
        assert (variant, backend, True, "compiled") in keys
    assert ("gptq", "gptq_marlin", False, "compiled") in keys and ("bf16", "auto", False, "compiled") in keys
    assert all(r["compile"] == (r["decode"] == "compiled") for r in plan)


def test_cuda_plan_without_fla_has_no_fla_rows() -> None:
    plan = _gpu_check().plan_rows("cuda", ["gptq_marlin"], fla=False, dry_run=False)
    assert plan and not any(r["fla"] for r in plan)
    assert {r["decode"] for r in plan} == {"graphs", "compiled", "eager"}


def test_a_row_past_the_budget_is_skipped_and_one_done_before_is_taken_as_it_was(tmp_path: Path) -> None:
    """A second command over the same --work continues where the first stopped: rows measured before are
    taken from the build's ``rows.json``, rows past the budget are said to be skipped (no model loaded)."""
    gc = _gpu_check()
    done, pending = {"variant": "bf16", "decode": "graphs"}, {"variant": "gptq", "decode": "graphs"}
    progress = tmp_path / "rows.json"
    progress.write_text(json.dumps({gc.row_key(done, "m", 4): {"model": "m", **done, "caption": {"x": 1}}}))
    rows: list[dict] = []
    run = gc.Pass("m", None, None, 4, lambda: None, 0.0, tmp_path, progress)  # its budget already spent
    gc.run_rows(run, [done, pending], rows)
    assert rows[0] == {"model": "m", **done, "caption": {"x": 1}, "resumed": True}
    assert rows[1] == {"model": "m", **pending, "skipped": "time budget spent"}


@pytest.mark.slow
def test_dry_run_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    env = dict(os.environ)
    env.setdefault("MARLIN_CACHE_DIR", str(Path.home() / ".cache" / "marlin-demo"))  # reuse the tiny build
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--dry-run",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "w"),
            "--caption-tokens",
            "4",
            "--gptq-backends",
            "auto",
            "--random-gptq",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["dry_run"] is True
    assert not report["steps"]["full_reused"] and report["steps"]["full_gptq"]["quantized_linears"] > 0
    rows = report["full"]
    assert [(r["variant"], r["decode"]) for r in rows] == [
        (p["variant"], p["decode"]) for p in report["plan"]
    ]
    for row in rows:
        assert "error" not in row, row.get("error")
        assert "gated-deltanet:torch" in row["attention"]
        for task in ("caption", "find"):
            m = row[task]
            assert m["output_tokens"] >= 1 and m["latency_s"] > 0 and m["ttft_s"] is not None
        if row["compile"]:
            assert row["compile_state"].startswith("static cache + torch.compile"), row["compile_state"]
            assert row["compile_s"] > 0 and row["decode_ran"] == "compiled"
            assert row["caption_long"]["output_tokens"] >= 1  # the long-caption step ran
        else:
            assert row["compile_state"] == "off" and row["decode_ran"] == "eager"
        assert len(row["dynamo_compiles"]["caption"]) == 2  # per call: the first, then the measured one
    (bnb,) = [r["bitsandbytes"] for r in rows if r["variant"] == "bnb4"]
    assert bnb["calls"]["other"] > 0 and bnb["calls"]["cuda"] == 0 and bnb["ran_cuda_kernels"] is False
    _check_the_space_rows(tmp_path, env)
    _check_speeds(report, out, tmp_path)
    _check_second_pass_reuses_the_build(tmp_path, env, report)


def _check_the_space_rows(tmp_path: Path, env: dict[str, str]) -> None:
    """``--zero-gpu`` over the same --work: the Space's row decoding in graphs (on a CPU its step runs
    uncaptured), its tokens compared with eager decoding's, then the start-up call and a visitor's first call,
    each in a fresh process."""
    out = tmp_path / "zero.json"
    argv = [sys.executable, str(SCRIPT), "--dry-run", "--zero-gpu", "--random-gptq", "--out", str(out),
            "--work", str(tmp_path / "w"), "--caption-tokens", "4", "--gptq-backends", "auto"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["steps"]["full_reused"] is True and "not on the Space's card" in report["zero_gpu"]
    graph_row, warm_row = report["full"]
    assert "error" not in graph_row and "error" not in warm_row, (graph_row, warm_row)
    assert graph_row["decode_ran"] == "static" and graph_row["capture_s"] > 0  # the step, made once
    assert graph_row["identity"]["identical"] and graph_row["identity"]["tokens"] >= 1
    assert graph_row["identity"]["eager_tokens_per_s"] and graph_row["caption"]["peak_memory_mb"] > 0
    assert graph_row["caption_long"]["output_tokens"] >= 1
    # every decode step of every call replayed the step; the start-up check passed; nothing compiled
    for calls in graph_row["replayed"].values():
        assert all(c["replayed"] == c["steps"] for c in calls), graph_row["replayed"]
    assert graph_row["check"]["passed"] is True, graph_row["check"]
    assert graph_row["dynamo_compiles"] == {"caption": [0, 0], "find": [0, 0]}
    assert [w["variant"] for w in warm_row["start_up"]["variants"]] == ["bf16"]
    assert not any(w["error"] for w in warm_row["start_up"]["variants"])
    assert all(w["verdict"]["passed"] for w in warm_row["start_up"]["variants"]), warm_row["start_up"]
    assert warm_row["start_up"]["dynamo_compiles"] == {"start_up": [0]}
    visitor = warm_row["visitor"]
    assert visitor["dynamo_compiles"] == {"visitor": [0, 0]}
    assert visitor["first_latency_s"] > 0 and visitor["latency_s"] > 0 and visitor["tokens_per_s"]
    assert warm_row["first_call_over_warm_s"] == round(visitor["first_latency_s"] - visitor["latency_s"], 2)


def _check_second_pass_reuses_the_build(tmp_path: Path, env: dict[str, str], first: dict) -> None:
    """A second command over the same --work (a short lease: the Space's rows, then the others) builds
    nothing again and measures nothing again: each row the first measured is taken as it was."""
    gc = _gpu_check()
    again = tmp_path / "again.json"
    work = ["--work", str(tmp_path / "w")]
    # the first pass's rows, with no time left to measure any
    args = ["--dry-run", "--random-gptq", "--out", str(again), *work, "--budget-s", "0",
            "--caption-tokens", "4", "--gptq-backends", "auto"]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        for key in ("MARLIN_CACHE_DIR", "MARLIN_GPTQ_BUILD_DIR"):
            mp.setenv(key, env.get(key, str(tmp_path / "w" / "gptq-kernels")))
        assert gc.main(args) == 0
    report = json.loads(again.read_text())
    assert report["steps"]["full_reused"] is True and "full_gptq_s" not in report["steps"]
    assert [row.pop("resumed") for row in report["full"]] == [True] * len(first["full"])
    assert report["full"] == first["full"]


def _check_speeds(report: dict, out: Path, tmp_path: Path) -> None:
    """The report's figures for speeds.json, and ``--apply-speeds``: refused for a dry run; a CUDA
    run's report (here the dry run's rows, marked as one) is written under h200, other figures kept."""
    from marlin_demo.service.capacity import Speed

    gc = _gpu_check()
    entry = report["speeds_entry"]
    firsts = [row[t]["ttft_s"] for row in report["full"] for t in ("caption", "find")]
    assert entry["decode_tokens_per_s"] > 0 and entry["prefill_s"] >= max(firsts) > 0
    assert report["clip"]["video_tokens"] < gc.largest_window_tokens()  # the scale only ever grows
    assert "scripts/gpu_check.py" in entry["source"]
    speeds = tmp_path / "speeds.json"
    shutil.copy(gc.SPEEDS_FILE, speeds)
    before = json.loads(speeds.read_text())
    assert gc.main(["--apply-speeds", str(out)]) == 2  # a dry run: one line, nothing written
    assert json.loads(gc.SPEEDS_FILE.read_text()) == before
    cuda = tmp_path / "cuda.json"
    graph_row = json.loads((tmp_path / "zero.json").read_text())["full"][0]  # on CUDA its step is captured
    graph_row["decode_ran"] = "graphs"
    combined = {**report, "full": [*report["full"], graph_row], "dry_run": False, "device": "cuda"}
    cuda.write_text(json.dumps(combined))
    got = gc.apply_speeds(cuda, speeds_file=speeds)
    after = json.loads(speeds.read_text())
    assert after["h200"] == got == {**before["h200"], **gc.speeds_entry(combined)}
    assert got["prepare_s"] == before["h200"]["prepare_s"] and after["cpu-tiny"] == before["cpu-tiny"]
    assert Speed(name="h200", **got).graphs_capture_s == got["graphs_capture_s"]  # the app reads it
    graphs_rate = min(graph_row[t]["tokens_per_s"] for t in ("caption", "find"))
    assert got["graphs_decode_tokens_per_s"] == round(graphs_rate, 1)  # what calls sized for graphs use
    assert got["graphs_capture_s"] == round(graph_row["capture_s"], 2)
    rates = [r[t]["tokens_per_s"] for r in report["full"] for t in ("caption", "find")]
    eager = min(x for x in [graph_row["identity"]["eager_tokens_per_s"], *rates] if x)
    assert got["decode_tokens_per_s"] == round(eager, 1)  # eager's slowest: a graphs row's eager run counts


def test_zero_gpu_plan_is_what_the_space_runs() -> None:
    """The Space's rows: decoding in CUDA graphs (ZeroGPU has no torch.compile), GPTQ by ``auto`` (Triton,
    then torch there) and ``gptq_torch``, never a kernel nvcc builds; then the start-up call's row; each
    row says it is a ZeroGPU row."""
    plan = _gpu_check().plan_rows("cuda", ["gptq_marlin"], fla=True, dry_run=False, zero_gpu=True)
    *rows, warm = plan
    assert [(r["variant"], r["gptq_backend"]) for r in rows] == [
        ("gptq", "auto"),
        ("gptq", "gptq_torch"),
        ("bnb4", "auto"),
        ("bf16", "auto"),
    ]
    assert all(r["zero_gpu"] and r["fla"] and not r["compile"] and r["decode"] == "graphs" for r in rows)
    assert rows[0]["long_caption"] == 768  # the 768-token caption goal, on the Space's path
    assert warm == {"warm_up": True, "variants": ["gptq", "bnb4", "bf16"], "fla": True, "zero_gpu": True}
    assert "not on the Space's card" in _gpu_check().ZERO_GPU_NOTE
