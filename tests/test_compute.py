"""The compute type follows the device: bf16 on CUDA, on a CPU only where the processor runs it natively."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
import torch
from script_loader import run_fresh

from marlin_demo.cli import format_run
from marlin_demo.models import compute, compute_choice
from marlin_demo.results import RunInfo, Runtime
from marlin_demo.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

#: every capability torch can report on x86, as ATen's dispatch level and the 16-bit instruction checks
X86_LEVELS = ("DEFAULT", "AVX2", "AVX512")


@pytest.mark.parametrize(
    ("aten", "avx512_bf16", "amx", "fp16"), list(itertools.product(X86_LEVELS, *[(False, True)] * 3))
)
def test_x86_choice_for_each_capability(aten: str, avx512_bf16: bool, amx: bool, fp16: bool) -> None:
    """bf16 only with AVX512 kernels and AVX512-BF16 or AMX; fp16 only with native fp16; else float32."""
    caps = compute.CpuCaps(
        x86=True, aten=aten, avx512_bf16=avx512_bf16, amx_tile=amx, mkldnn_bf16=True, mkldnn_fp16=fp16
    )
    bf16 = compute.choose("cpu", "bfloat16", caps=caps)
    native_bf16 = aten == "AVX512" and (avx512_bf16 or amx)
    assert bf16.dtype == ("bfloat16" if native_bf16 else "float32")
    assert ("natively" in bf16.reason) == native_bf16
    if not native_bf16:  # the reason names what the CPU lacks, in the facts torch gave
        assert f"ATen {aten}" in bf16.reason and "no native bfloat16" in bf16.reason
    fp16_choice = compute.choose("cpu", "float16", caps=caps)
    assert fp16_choice.dtype == ("float16" if fp16 and aten == "AVX512" else "float32")
    # CUDA never changes: the weights' own type whatever the CPU is
    assert compute.choose("cuda", "bfloat16", caps=caps).dtype == "bfloat16"
    assert compute.choose("cuda", "float16", caps=caps).dtype == "float16"


@pytest.mark.parametrize(("bf16", "fp16"), list(itertools.product((False, True), repeat=2)))
def test_arm_choice_follows_onednn(bf16: bool, fp16: bool) -> None:
    caps = compute.CpuCaps(x86=False, aten="SVE256", mkldnn_bf16=bf16, mkldnn_fp16=fp16)
    assert compute.choose("cpu", "bfloat16", caps=caps).dtype == ("bfloat16" if bf16 else "float32")
    assert compute.choose("cpu", "float16", caps=caps).dtype == ("float16" if fp16 else "float32")


def test_the_setting_overrides_everywhere_and_bad_values_are_named() -> None:
    slow = compute.CpuCaps(x86=True, aten="AVX2")
    for value, want in (
        ("bfloat16", "bfloat16"),
        ("bf16", "bfloat16"),
        ("fp32", "float32"),
        ("float16", "float16"),
    ):
        for device in ("cpu", "cuda"):
            choice = compute.choose(device, "bfloat16", value, caps=slow)
            assert (choice.dtype, choice.reason) == (want, "set by MARLIN_COMPUTE_DTYPE")
    assert compute.choose("cpu", "bfloat16", " AUTO ", caps=slow).dtype == "float32"
    with pytest.raises(ValueError, match=r"MARLIN_COMPUTE_DTYPE='int8' .*auto, bfloat16, float16 or float32"):
        compute.choose("cpu", "bfloat16", "int8", caps=slow)


def test_the_probe_asks_torch() -> None:
    """The real probe reports what torch's own checks say on this machine."""
    caps = compute.probe()
    assert caps.aten == torch.backends.cpu.get_cpu_capability()
    assert caps.mkldnn_bf16 == torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if caps.x86:
        assert caps.avx512_bf16 == torch.cpu._is_avx512_bf16_supported()
        assert caps.amx_tile == torch.cpu._is_amx_tile_supported()


def test_the_machine_line_names_the_cores_the_processor_and_the_choice() -> None:
    """The line CI and the suite's summary print: what a bf16 checkpoint computes in here, and why."""
    line = compute.machine_line()
    name = compute.cpu_name()
    assert name and f"{os.cpu_count()} cores, {name}, " in line
    assert f"compute in {compute.choose('cpu', 'bfloat16').dtype}; {compute.probe().describe()}" in line


def test_settings_variants_and_the_fingerprint(tiny_settings: Settings) -> None:
    """A variant keeps its name; the choice is per variant (its weights' type) and in the fingerprint."""
    from marlin_demo.models import stack_fingerprint

    settings = tiny_settings.with_(device="cpu", compute_dtype="float32")
    assert compute_choice(settings, "gptq", "cpu").dtype == "float32"
    stack = stack_fingerprint(settings)
    assert stack["compute_dtype"] == {"bfloat16": "float32"}  # what bf16 weights compute in here
    auto = stack_fingerprint(settings.with_(compute_dtype="auto"))["compute_dtype"]
    assert auto == {"bfloat16": compute.choose("cpu", "bfloat16").dtype}
    assert stack_fingerprint(settings.with_(variants="gptq")) == stack  # fewer variants: the same set-up


# One fresh process as an AVX2-only CPU: each loader as the app loads it, the override, and the CLI's answer.
AS_AVX2 = """
import contextlib, io, json, sys
from marlin_demo import cli
from marlin_demo.models import load_variant
from marlin_demo.settings import from_env

settings = from_env()
out = {}
for v in ("gptq", "bnb4", "bf16"):
    m = load_variant(settings, v)
    floats = sorted({str(p.dtype) for p in m.model.parameters() if p.is_floating_point()})
    out[v] = {"compute": m.compute_dtype, "reason": m.compute_reason, "floats": floats, "kernel": m.kernel}
forced = load_variant(settings.with_(compute_dtype="bf16"), "bf16")
out["forced"] = {"compute": forced.compute_dtype, "reason": forced.compute_reason,
                 "floats": sorted({str(p.dtype) for p in forced.model.parameters()})}
text = io.StringIO()
with contextlib.redirect_stdout(text):
    code = cli.main(["caption", sys.argv[1], "--variant", "bf16", "--json"])
out["cli"] = {"code": code, "json": json.loads(text.getvalue())}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_an_avx2_only_cpu_computes_in_float32_and_says_so(examples_dir: Path) -> None:
    """With ATen held to AVX2 (as on an AVX2-only processor) every loader computes in float32: the
    16-bit weights, bnb4's compute type and GPTQ's dequantized matmuls; the variants keep their names,
    the override still gives bf16, and the CLI's JSON (the API's shape) says what ran."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARLIN_COMPUTE")}
    env.update(MARLIN_MODEL="tiny", MARLIN_DEVICE="cpu", ATEN_CPU_CAPABILITY="avx2")
    out = run_fresh(AS_AVX2, "RESULT", str(examples_dir / "blue_square.mp4"), cwd=ROOT, env=env)
    for variant in ("gptq", "bnb4", "bf16"):
        got = out[variant]
        assert got["compute"] == "float32", (variant, got)
        assert "no native bfloat16" in got["reason"] and "ATen AVX2" in got["reason"]
        assert "torch.bfloat16" not in got["floats"], (variant, got)  # nothing left computing in bf16
    assert out["bf16"]["kernel"] == "fp32"
    assert out["bnb4"]["kernel"] == "bitsandbytes-nf4"
    assert out["gptq"]["kernel"] == "TorchFusedLinear"  # GPTQModel's CPU kernel that computes in float32
    assert out["forced"] == {
        "compute": "bfloat16",
        "reason": "set by MARLIN_COMPUTE_DTYPE",
        "floats": ["torch.bfloat16"],
    }
    assert out["cli"]["code"] == 0
    runtime = out["cli"]["json"]["runtime"]
    assert runtime == {
        "device": "cpu",
        "compute_dtype": "float32",
        "kernel": "fp32",
        "gpu_calls": {"calls": 0, "asked_s": 0.0, "used_s": 0.0},
    }


def test_the_readable_run_line_names_the_compute_type() -> None:
    info = RunInfo(kernel="fp32", attention="sdpa", runtime=Runtime(device="cpu", compute_dtype="float32"))
    assert "kernel fp32 · attention sdpa · computed in float32" in format_run(info)


@pytest.mark.slow
def test_the_side_by_side_benchmark_reports_both_types(tmp_path: Path) -> None:
    """benchmarks/bench_compute_dtype.py on one clip and variant: each row ran in the type it names."""
    from script_loader import load_script

    bench = load_script(ROOT / "benchmarks" / "bench_compute_dtype.py")
    out = tmp_path / "report.json"
    assert (
        bench.main(
            ["--variants", "bf16", "--clips", "examples/blue_square.mp4", "--repeats", "1", "--out", str(out)]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert {r["dtype"] for r in report["rows"]} == {"bfloat16", "float32"}
    (row,) = [t for t in report["table"] if t["task"] == "caption"]
    assert row["float32_speedup"] == round(row["bfloat16_s"] / row["float32_s"], 2)
    assert report["auto_choice"] == compute.choose("cpu", "bfloat16").dtype
