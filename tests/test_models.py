"""What the loader reports about the kernels that run: checked in fresh processes, real loads."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import torch
from script_loader import run_fresh

from marlin_demo.models import _gptq_kernel

ROOT = Path(__file__).resolve().parents[1]

# Loads the tiny gptq variant first (gptqmodel imported before anything else), then bf16,
# and prints what the loader reported and which causal_conv1d the process ended up with.
LOAD_BOTH = textwrap.dedent(
    """
    import json, sys
    from marlin_demo.models import load_variant
    from marlin_demo.settings import Settings

    settings = Settings(model="tiny")
    out = {v: load_variant(settings, v).attention for v in ("gptq", "bf16")}
    mod = sys.modules.get("causal_conv1d")
    out["causal_conv1d"] = getattr(mod, "__file__", None)
    print("RESULT " + json.dumps(out))
    """
)


def _load_in_fresh_process(extra_path: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH", "")]))
    result: dict[str, str] = run_fresh(LOAD_BOTH, "RESULT", cwd=ROOT, env=env)
    return result


def _kernel_package(root: Path, body: str) -> Path:
    """A package named ``causal_conv1d`` on a private path: the loader must bind it or report the fallback."""
    pkg = root / "causal_conv1d"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(body), encoding="utf-8")
    return root


@pytest.mark.slow
def test_fallback_reported_and_not_shadowed_by_gptqmodel() -> None:
    """No kernels installed here: transformers' own fallback for every variant, even after gptqmodel.

    gptqmodel puts its own PyTorch port in sys.modules["causal_conv1d"] when imported; the
    loader fixes transformers' binding first, so bf16 and gptq run the same conv1d code.
    """
    out = _load_in_fresh_process()
    for variant in ("gptq", "bf16"):
        assert out[variant] == "sdpa / gated-deltanet:torch, conv1d:torch", out


@pytest.mark.slow
def test_installed_kernel_is_bound_even_when_gptq_loads_first(tmp_path: Path) -> None:
    path = _kernel_package(
        tmp_path,
        """
        def causal_conv1d_fn(x, weight, bias=None, activation=None, seq_idx=None):
            raise RuntimeError("a stand-in: only its binding is checked")

        def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None):
            raise RuntimeError("a stand-in: only its binding is checked")
        """,
    )
    out = _load_in_fresh_process(path)
    assert out["causal_conv1d"] == str(path / "causal_conv1d" / "__init__.py")
    for variant in ("gptq", "bf16"):
        assert out[variant] == "sdpa / gated-deltanet:torch, conv1d:causal_conv1d", out


@pytest.mark.slow
def test_installed_but_broken_kernel_is_reported_as_the_fallback(tmp_path: Path) -> None:
    """Like a CUDA extension built for another torch: installed, fails to import, so not used."""
    path = _kernel_package(tmp_path, 'raise ImportError("undefined symbol: _ZN3c10 (another torch)")\n')
    out = _load_in_fresh_process(path)
    assert out["bf16"] == "sdpa / gated-deltanet:torch, conv1d:torch", out


def test_gptq_kernel_names_every_class_that_runs() -> None:
    def qlinear(name: str) -> type[torch.nn.Module]:
        return type(name, (torch.nn.Module,), {"__module__": f"gptqmodel.nn_modules.qlinear.{name.lower()}"})

    marlin, torch_kernel = qlinear("MarlinLinear"), qlinear("TorchLinear")
    model = torch.nn.Sequential(marlin(), torch_kernel(), marlin(), torch.nn.Linear(2, 2))
    assert _gptq_kernel(model) == "MarlinLinear+TorchLinear"
    assert _gptq_kernel(torch.nn.Sequential(torch.nn.Linear(2, 2))) == "unknown"
