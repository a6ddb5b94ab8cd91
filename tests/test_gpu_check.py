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
    assert plan[0] == {
        "variant": "gptq",
        "gptq_backend": "gptq_marlin",
        "fla": True,
        "compile": True,
        "long_caption": 768,
    }
    keys = {(r["variant"], r["gptq_backend"], r["fla"], r["compile"]) for r in plan}
    assert len(keys) == len(plan)  # no row measured twice
    for variant, backend in (
        ("bf16", "auto"),
        ("bnb4", "auto"),
        ("gptq", "gptq_marlin"),
        ("gptq", "gptq_triton"),
    ):
        assert (variant, backend, True, False) in keys and (variant, backend, False, False) in keys
        assert (variant, backend, True, True) in keys
    assert ("gptq", "gptq_marlin", False, True) in keys and ("bf16", "auto", False, True) in keys


def test_cuda_plan_without_fla_has_no_fla_rows() -> None:
    plan = _gpu_check().plan_rows("cuda", ["gptq_marlin"], fla=False, dry_run=False)
    assert plan and not any(r["fla"] for r in plan)
    assert {r["compile"] for r in plan} == {True, False}


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
    assert [(r["variant"], r["compile"]) for r in rows] == [
        (p["variant"], p["compile"]) for p in report["plan"]
    ]
    for row in rows:
        assert "error" not in row, row.get("error")
        assert "gated-deltanet:torch" in row["attention"]
        for task in ("caption", "find"):
            m = row[task]
            assert m["output_tokens"] >= 1 and m["latency_s"] > 0 and m["ttft_s"] is not None
        if row["compile"]:
            assert row["compile_state"].startswith("static cache + torch.compile"), row["compile_state"]
            assert row["compile_s"] > 0
            assert row["caption_long"]["output_tokens"] >= 1  # the long-caption step ran
        else:
            assert row["compile_state"] == "off"
    _check_speeds(report, out, tmp_path)
    _check_second_pass_reuses_the_build(tmp_path, env)


def _check_second_pass_reuses_the_build(tmp_path: Path, env: dict[str, str]) -> None:
    """A second pass over the same --work (a short lease: the Space's rows, then the others) builds
    nothing again; with no budget left it measures nothing and says so per row."""
    gc = _gpu_check()
    again = tmp_path / "again.json"
    work = ["--work", str(tmp_path / "w")]
    args = ["--dry-run", "--random-gptq", "--out", str(again), *work, "--budget-s", "0"]  # as the first pass
    with pytest.MonkeyPatch.context() as mp:
        for key in ("MARLIN_CACHE_DIR", "MARLIN_GPTQ_BUILD_DIR"):
            mp.setenv(key, env.get(key, str(tmp_path / "w" / "gptq-kernels")))
        assert gc.main(args) == 0
    report = json.loads(again.read_text())
    assert report["steps"]["full_reused"] is True and "full_gptq_s" not in report["steps"]
    assert report["full"] and all(row["skipped"] == "time budget spent" for row in report["full"])


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
    cuda.write_text(json.dumps({**report, "dry_run": False, "device": "cuda"}))
    got = gc.apply_speeds(cuda, speeds_file=speeds)
    after = json.loads(speeds.read_text())
    assert after["h200"] == got and got["decode_tokens_per_s"] == entry["decode_tokens_per_s"]
    assert got["prepare_s"] == before["h200"]["prepare_s"] and after["cpu-tiny"] == before["cpu-tiny"]
    assert Speed(name="h200", **got).prefill_s == entry["prefill_s"]  # the app reads it as before


def test_zero_gpu_plan_is_what_the_space_runs() -> None:
    """The Space's rows: eager only (ZeroGPU has no torch.compile), GPTQ by ``auto`` (Triton, then torch
    there) and ``gptq_torch``, never a kernel nvcc builds; each row says it is a ZeroGPU row."""
    plan = _gpu_check().plan_rows("cuda", ["gptq_marlin"], fla=True, dry_run=False, zero_gpu=True)
    assert [(r["variant"], r["gptq_backend"]) for r in plan] == [
        ("gptq", "auto"),
        ("gptq", "gptq_torch"),
        ("bnb4", "auto"),
        ("bf16", "auto"),
    ]
    assert all(r["zero_gpu"] and r["fla"] and not r["compile"] for r in plan)
    assert "not on the Space's card" in _gpu_check().ZERO_GPU_NOTE
