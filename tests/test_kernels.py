"""Kernel choice: GPTQ order, GPTQModel's offline switch (no network attempt), fla only on CUDA."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from script_loader import run_fresh

from marlin_demo.models.kernels import GPTQ_CUDA_ORDER, gptq_kernel_plan
from marlin_demo.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("device", "available", "setting", "expected"),
    [
        ("cuda", {"gptq_marlin", "gptq_triton", "gptq_torch"}, "auto", list(GPTQ_CUDA_ORDER)),
        ("cuda", {"gptq_torch", "gptq_triton"}, "auto", ["gptq_triton", "gptq_torch"]),  # no nvcc
        ("cuda", {"gptq_torch"}, "auto", ["gptq_torch"]),
        ("cuda", set(), "auto", ["gptq_torch"]),  # the portable kernel is always the last resort
        ("cuda", {"gptq_marlin", "gptq_triton", "gptq_torch"}, "gptq_triton", ["gptq_triton"]),
        ("cpu", set(), "auto", ["auto"]),  # GPTQModel's CPU pick (no download path there)
        ("cpu", set(), "gptq_torch", ["gptq_torch"]),
    ],
)
def test_gptq_kernel_plan(device: str, available: set[str], setting: str, expected: list[str]) -> None:
    assert gptq_kernel_plan(device, available, setting) == expected


def test_gptq_kernel_plan_never_offers_auto_on_cuda() -> None:
    """AUTO on Hopper picks Machete, which downloads CUTLASS: the CUDA plan never hands over to it."""
    for available in ({"gptq_marlin"}, {"gptq_triton"}, set()):
        assert "auto" not in gptq_kernel_plan("cuda", available, "auto")


# Runs in a fresh interpreter: records GPTQMODEL_OFFLINE as gptqmodel is first imported and every
# non-loopback connect / name lookup, then loads the tiny gptq variant on the CPU and answers once.
_AUDIT = r"""
import json, os, sys
seen = {"offline_at_import": "not imported", "network": []}
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
def hook(event, args):
    if event == "import" and args[0] == "gptqmodel" and seen["offline_at_import"] == "not imported":
        seen["offline_at_import"] = os.environ.get("GPTQMODEL_OFFLINE")
    elif event == "socket.connect":
        addr = args[1]
        host = addr[0] if isinstance(addr, tuple) else str(addr)
        if isinstance(addr, tuple) and host not in LOOPBACK:
            seen["network"].append(f"connect {host}")
    elif event == "socket.getaddrinfo" and args[0] not in LOOPBACK and args[0] is not None:
        seen["network"].append(f"lookup {args[0]}")
sys.addaudithook(hook)
from marlin_demo.engine import Engine
from marlin_demo.settings import Settings
engine = Engine(Settings(model="tiny", device="cpu", find_max_new_tokens=4), prefix_cache_size=0)
loaded = engine.load("gptq")
res = engine.find(sys.argv[1], "the ball", "gptq")
seen["kernel"] = loaded.kernel
seen["build_dir"] = os.environ.get("GPTQMODEL_TORCH_EXTENSIONS_DIR")
print("AUDIT " + json.dumps(seen))
"""


@pytest.mark.slow
def test_gptq_load_is_offline_and_touches_no_network(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPTQMODEL_")}
    env.update(
        MARLIN_GPTQ_BUILD_DIR=str(tmp_path / "kernels"),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )
    seen = run_fresh(_AUDIT, "AUDIT", str(ROOT / "examples" / "ball_rolls.mp4"), cwd=tmp_path, env=env)
    assert seen["offline_at_import"] == "1"
    assert seen["network"] == []
    assert seen["build_dir"] == str(tmp_path / "kernels")
    assert seen["kernel"] and seen["kernel"] != "unknown"


# Runs in a fresh interpreter (nothing of transformers' Qwen3.5 module bound yet); prints what was bound.
_BINDING = r"""
import importlib, json, sys
import torch
from marlin_demo.models.kernels import FLA_OPS, QWEN35_MODELING, bind_linear_kernels, import_real_kernels
from marlin_demo.models.kernels import linear_kernel_for
if sys.argv[1] == "cuda-steps":  # what import_real_kernels does on a CUDA machine: fla first, then bind
    import fla
    module = importlib.import_module(QWEN35_MODELING)
    bind_linear_kernels(module)
else:  # this machine as it is
    import_real_kernels()
    module = importlib.import_module(QWEN35_MODELING)
out = {"fla_imported": "fla" in sys.modules and sys.modules["fla"] is not None,
       "kernels": {n: [linear_kernel_for(module, n, d) for d in ("cuda", "cpu")] for n in FLA_OPS}}
torch.manual_seed(0)
q, k, v = (torch.randn(1, 6, 2, 16) for _ in range(3))
g, beta = -torch.rand(1, 6, 2), torch.rand(1, 6, 2)
kw = {"g": g, "beta": beta, "initial_state": None, "output_final_state": True,
      "use_qk_l2norm_in_kernel": True, "cu_seqlens": None}
o, st = module.torch_chunk_gated_delta_rule(q, k, v, **kw)
ref = module.torch_chunk_gated_delta_rule.__wrapped__
ro, rs = ref(q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
out["cpu_equals_reference"] = bool(torch.equal(o, ro) and torch.equal(st, rs))
import fla  # importable afterwards, whatever the binding left
print("BINDING " + json.dumps(out))
"""


def test_fla_runs_only_on_cuda_tensors() -> None:
    """On a CUDA machine transformers binds fla for every device; CPU calls must stay on PyTorch."""
    pytest.importorskip("fla")
    got = run_fresh(_BINDING, "BINDING", "cuda-steps", cwd=ROOT)
    assert got["kernels"] == {"torch_chunk_gated_delta_rule": ["fla", "torch"],
                              "torch_recurrent_gated_delta_rule": ["fla", "torch"]}  # fmt: skip
    assert got["cpu_equals_reference"]


def test_without_cuda_fla_is_not_imported() -> None:
    """fla could never run without CUDA: the binding leaves it out (no import, transformers' own ops)."""
    pytest.importorskip("fla")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine binds fla")
    got = run_fresh(_BINDING, "BINDING", "as-is", cwd=ROOT)
    assert not got["fla_imported"]
    assert got["kernels"] == {"torch_chunk_gated_delta_rule": ["torch", "torch"],
                              "torch_recurrent_gated_delta_rule": ["torch", "torch"]}  # fmt: skip
    assert got["cpu_equals_reference"]


@pytest.mark.slow
def test_cpu_variants_report_the_torch_path_with_fla_installed(tiny_settings: Settings) -> None:
    pytest.importorskip("fla")
    from marlin_demo.engine import Engine

    engine = Engine(tiny_settings.with_(device="cpu", find_max_new_tokens=4), prefix_cache_size=0)
    for variant in ("bf16", "gptq"):
        res = engine.find(ROOT / "examples" / "ball_rolls.mp4", "the ball", variant)
        assert "gated-deltanet:torch" in res.info.attention
        assert "fla" not in res.info.attention
        assert res.metrics.output_tokens >= 1
