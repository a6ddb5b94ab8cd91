"""A new kind of variant is one entry in ``variants``: a real fourth kind (Marlin's 16-bit weights loaded
in float16 by the existing transformers loader) shows up in the CLI, the bench and the page with no
other change to the code."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import pytest

from marlin_demo import cli, variants
from marlin_demo.engine import Engine
from marlin_demo.models import compute
from marlin_demo.settings import Settings
from marlin_demo.variants import VariantKind

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CLIP = EXAMPLES / "blue_square.mp4"
FP16 = VariantKind(
    name="fp16",
    label="fp16 (16-bit, float16)",
    short="fp16",
    color="#e11d48",
    loader="transformers",
    repo_field="bf16_id",
    revision_field="revision",
    tiny_folder="bf16",
    package="transformers",
    dtype="float16",
)
FLAGS = (
    "--model",
    "tiny",
    "--device",
    "cpu",
    "--caption-max-new-tokens",
    "32",
    "--find-max-new-tokens",
    "24",
)


@pytest.fixture
def fp16() -> Iterator[VariantKind]:
    variants.register(FP16)
    yield FP16
    variants.unregister(FP16.name)


def _short(dtype: str) -> str:
    return compute.Choice(dtype, "").short


def test_the_kind_loads_with_its_own_dtype(fp16: VariantKind, tiny_settings: Settings) -> None:
    """Its weights' type where this CPU computes it natively (else float32, like every kind); forced with
    MARLIN_COMPUTE_DTYPE, its own type everywhere."""
    import torch

    engine = Engine(tiny_settings.with_(variants="bf16,fp16", device="cpu"))
    loaded = engine.load("fp16")
    want = compute.choose("cpu", "float16").dtype
    assert loaded.kernel == _short(want) and loaded.compute_dtype == want
    assert {p.dtype for p in loaded.model.parameters()} == {getattr(torch, want)}
    bf16 = compute.choose("cpu", "bfloat16").dtype
    assert next(engine.load("bf16").model.parameters()).dtype == getattr(torch, bf16)
    forced = Engine(tiny_settings.with_(variants="fp16", device="cpu", compute_dtype="float16")).load("fp16")
    assert forced.kernel == "fp16" and {p.dtype for p in forced.model.parameters()} == {torch.float16}


def test_unregistered_kind_is_refused() -> None:
    assert variants.kind_of("fp16") is None
    assert cli.main(["caption", str(CLIP), *FLAGS, "--variants", "fp16", "--variant", "fp16", "--json"]) != 0


def test_cli_answers_with_the_new_kind(fp16: VariantKind, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli.main(["caption", str(CLIP), *FLAGS, "--variants", "gptq,fp16", "--variant", "fp16", "--json"])
        == 0
    )
    answer = json.loads(capsys.readouterr().out)
    assert answer["variant"] == "fp16" and answer["metrics"]["device"] == "cpu"


def test_bench_measures_the_new_kind(fp16: VariantKind, tmp_path: Path) -> None:
    entries = json.loads((EXAMPLES / "examples.json").read_text(encoding="utf-8"))
    chosen = [e for e in entries if e["video"] == CLIP.name]
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(CLIP, data / CLIP.name)
    (data / "examples.json").write_text(json.dumps(chosen), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["bench", *FLAGS, "--variants", "fp16,bf16", "--data", str(data), "--repeats", "1"]
    assert cli.main([*argv, "--tasks", "find", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["variants"]["fp16"]["load"]["kernel"] == _short(compute.choose("cpu", "float16").dtype)
    assert results["variants"]["fp16"]["requests"]["failed"] == 0
    assert "fp16" in (out / "summary.md").read_text(encoding="utf-8")


def test_page_offers_the_new_kind(fp16: VariantKind, tmp_path: Path, tiny_settings: Settings) -> None:
    from marlin_demo.ui.blocks import build_demo

    settings = tiny_settings.with_(variants="gptq,fp16", output_dir=str(tmp_path), examples_dir=str(tmp_path))
    demo, _ = build_demo(Engine(settings), settings)
    radios = [b for b in demo.blocks.values() if isinstance(b, gr.Radio) and b.label == "Variant"]
    assert radios, "no Variant choice on the page"
    for radio in radios:
        assert (FP16.label, "fp16") in [tuple(c) for c in radio.choices]
    header = next(b for b in demo.blocks.values() if isinstance(b, gr.HTML) and FP16.label in str(b.value))
    assert header is not None
    plot = next(b for b in demo.blocks.values() if isinstance(b, gr.BarPlot))  # Compare's charts
    assert plot.color_map == {"gptq": "#0d9488", "fp16": FP16.color}
