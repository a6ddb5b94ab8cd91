"""The CPU check: its random GPTQ packing, its scaling to a full window, and its --dry-run end to end."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from result_shapes import cpu_kernel
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "cpu_check.py"


def _cpu_check() -> Any:
    return load_script(SCRIPT)


def test_random_gptq_tensors_are_gptqs_v1_layout() -> None:
    """qweight packs 8 codes per int32 along the inputs, zero points are stored minus one (v1), every
    group holds 128 columns and desc_act's g_idx is shuffled, not sorted."""
    import torch

    t = _cpu_check().gpu_check.pack_random_gptq((256, 384), seed=1)
    assert t["qweight"].shape == (48, 256) and t["qweight"].dtype == torch.int32
    assert t["qzeros"].shape == (3, 32) and t["scales"].shape == (3, 256) and t["g_idx"].shape == (384,)
    nibbles = {(int(t["qzeros"][0, 0]) >> (4 * k)) & 0xF for k in range(8)}
    assert nibbles == {7}  # zero point 8, stored as 7
    assert torch.bincount(t["g_idx"].long()).tolist() == [128, 128, 128]
    assert not torch.equal(t["g_idx"], torch.sort(t["g_idx"]).values)
    assert float(t["scales"].float().min()) > 0
    with pytest.raises(ValueError, match="group 128"):
        _cpu_check().gpu_check.pack_random_gptq((256, 100), seed=1)


def _row(load_peak: float = 3000.0) -> dict[str, Any]:
    """A variant's measured row as the check writes it (figures made up, shaped like a real one)."""
    return {
        "variant": "gptq",
        "compute_dtype": "bfloat16",
        "footprint_mb": 4000.0,
        "load_s": 12.0,
        "peak_mb": 3500.0,
        "load_peak_mb": load_peak,
        "rss_loaded_mb": 2500.0,
        "run_peak_mb": 3000.0,
        "prompt_tokens": 792,
        "prefill_tokens_per_s": 79.2,
        "decode_tokens_per_s": 4.0,
        "warmup": {"prompt_tokens": 432, "video_tokens": 360, "peak_mb": 3900.0, "ttft_s": 30.0},
        "clip": {"prompt_tokens": 792, "video_tokens": 720, "peak_mb": 3000.0, "ttft_s": 10.0},
        "long": {"prompt_tokens": 1872, "video_tokens": 1800, "peak_mb": 3600.0, "ttft_s": 22.0},
    }


def test_window_figures_scale_the_clip_up() -> None:
    """The warm-up's one-off time and memory are left out: the clip and the long clip give the lines."""
    cc = _cpu_check()
    text = cc.gpu_check.FULL_TEXT
    fig = cc.window_figures(_row(), text, 23520)
    n = fig["window_tokens"]
    assert n == 23520 + 72
    attn = (1 + cc.attention_share(n, text)) / (1 + cc.attention_share(792, text))
    assert 1.05 < attn < 1.3  # the attention layers add work, not a multiple
    assert fig["prefill_s"] == round((10.0 + 12.0 / 1080 * (n - 792)) * attn, 1)
    assert fig["prefill_rule"].startswith("line")
    assert 3.5 < fig["decode_tokens_per_s"] < 4.0  # reading the window's keys and values slows decode
    # memory: the line through (792, +500 MB) and (1872, +1100 MB) over the loaded 2,500 MB
    assert fig["window_peak_mb"] == round(2500 + 500 + 600 / 1080 * (n - 792))
    assert fig["memory_rule"].startswith("line")
    # a load that peaks higher than the window's run: the load's peak counts
    assert cc.window_figures(_row(load_peak=99_000.0), text, 23520)["window_peak_mb"] == 99_000
    # points that do not rise (noise): the clip's own figures scaled in proportion
    flat = {**_row(), "long": {**_row()["long"], "ttft_s": 9.0, "peak_mb": 2900.0}}
    fig = cc.window_figures(flat, text, 23520)
    assert fig["prefill_s"] == round(10.0 * n / 792 * attn, 1) and fig["prefill_rule"].startswith("the clip")
    assert fig["window_peak_mb"] == round(2500 + 500 * n / 792)


def test_speeds_entry_takes_the_slowest_variant_and_keeps_failures() -> None:
    cc = _cpu_check()
    text = cc.gpu_check.FULL_TEXT
    fast, slow = (
        _row(),
        {**_row(), "variant": "bf16", "decode_tokens_per_s": 2.0, "prefill_tokens_per_s": 40.0},
    )
    rows = [{**r, "window": cc.window_figures(r, text, 23520)} for r in (fast, slow)]
    rows.append({"variant": "bnb4", "error": "RuntimeError: no kernel"})
    report = {
        "variants": rows,
        "cpu": {"model": "Some CPU", "capability": "ATen AVX2", "threads": 2, "isa": "avx2"},
        "date": "2026-12-02",
        "clip": {"seconds": 4.0, "video_tokens": 720},
        "window_video_tokens": 23520,
        "load_before": "0.1",
        "load_after": "0.2",
    }
    entry = cc.speeds_entry(report)
    assert entry["decode_tokens_per_s"] == rows[1]["window"]["decode_tokens_per_s"]
    assert entry["prefill_s"] == rows[1]["window"]["prefill_s"]
    assert entry["variants"]["bnb4"] == {"error": "RuntimeError: no kernel"}
    assert (entry["isa"], entry["threads"]) == ("avx2", 2) and "Some CPU" in entry["source"]


@pytest.mark.slow
def test_dry_run_reports_every_variant_and_applies_only_a_real_run(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    cache = os.environ.get("MARLIN_CACHE_DIR", str(Path.home() / ".cache" / "marlin-demo"))  # the tiny build
    # the parent through ``main`` in this process (its torch and gptqmodel imported already: a subprocess
    # paid ~8 s of imports for them); the variants and the AVX2 slice still run in their fresh children
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MARLIN_CACHE_DIR", cache)
        assert _cpu_check().main(["--dry-run", "--out", str(out), "--work", str(tmp_path / "w")]) == 0
    report = json.loads(out.read_text())
    assert report["dry_run"] is True and report["check"] == "cpu"
    assert report["gptq"]["quantized_linears"] > 0
    assert report["cpu"]["key"].startswith("cpu-") and report["cpu"]["threads"] >= 1
    assert [r["variant"] for r in report["variants"]] == ["gptq", "bnb4", "bf16"]
    for row in report["variants"]:
        assert "error" not in row, row.get("error")
        kernel = {"gptq": cpu_kernel("gptq"), "bnb4": "bitsandbytes-nf4"}.get(row["variant"])
        assert kernel is None or kernel in row["kernel"], row["kernel"]  # the random GPTQ copy loads
        for key in ("load_s", "peak_mb", "load_peak_mb", "prefill_tokens_per_s", "decode_tokens_per_s"):
            assert row[key] > 0, key
        assert row["clip"]["output_tokens"] == 4  # the fixed count, never an early stop
        assert row["window"]["prefill_s"] > 0 and row["window"]["window_peak_mb"] >= row["rss_loaded_mb"]
    for where in ("native", "avx2"):
        sl = report["slice"][where]
        assert "error" not in sl, sl
        assert sl["float32"]["tokens_per_s"] > 0 and sl["bfloat16"]["tokens_per_s"] > 0
    assert report["slice"]["avx2"]["capability"] == "AVX2"
    assert set(report["speeds_entry"]["variants"]) == {"gptq", "bnb4", "bf16"}
    _check_apply(report, out, tmp_path)


def _check_apply(report: dict[str, Any], out: Path, tmp_path: Path) -> None:
    """``--apply-speeds`` refuses a dry run's report (one line, nothing written); a real run's report
    (here the dry run's, marked as one) is written under its CPU key, the other entries kept, and
    ``capacity`` reads it."""
    from marlin_demo.service.capacity import Speed

    cc = _cpu_check()
    before = json.loads(cc.SPEEDS_FILE.read_text())
    assert cc.main(["--apply-speeds", str(out)]) == 2
    assert json.loads(cc.SPEEDS_FILE.read_text()) == before
    speeds = tmp_path / "speeds.json"
    shutil.copy(cc.SPEEDS_FILE, speeds)
    real = tmp_path / "real.json"
    real.write_text(json.dumps({**report, "dry_run": False}))
    key, entry = cc.apply_speeds(real, speeds_file=speeds)
    after = json.loads(speeds.read_text())
    assert key == report["cpu"]["key"] and after[key] == entry
    assert entry["decode_tokens_per_s"] == report["speeds_entry"]["decode_tokens_per_s"]
    assert entry["prepare_s"] > 0 and entry["overhead_s"] > 0  # kept from the recorded CPU figures
    assert {k: v for k, v in after.items() if k != key} == {k: v for k, v in before.items() if k != key}
    speed = Speed(name=key, **entry)
    assert speed.isa == report["cpu"]["isa"] and speed.variants["gptq"]["peak_mb"] > 0


def test_a_measuring_child_gives_each_variant_its_own_row_and_error(tmp_path: Path) -> None:
    """The child that measures several variants (a dry run's) records a variant that cannot load as that
    variant's error, one line, and goes on to the next; its own exit is clean."""
    out = tmp_path / "rows.json"
    argv = ["--measure", "nope1,nope2", "--model-dir", str(tmp_path / "none"), "--dry-run", "--out", str(out)]
    assert _cpu_check().main(argv) == 0
    rows = json.loads(out.read_text())
    assert [r["variant"] for r in rows] == ["nope1", "nope2"]
    for r in rows:
        assert f"Unknown variant '{r['variant']}'" in r["error"] and "\n" not in r["error"], r
