"""``python -m marlin_demo quantize``: every recipe end to end on the tiny checkpoint, on the CPU.

Each recipe is built once (module-scoped; 2 video calibration samples for the seed recipe, 1 for the
others, whose checks are their own tensors) and then
checked three ways: recipe.yaml against the saved tensors, the artifact loading
through the app as an extra variant and captioning a clip, and the records
(report, versions, evidence that vision tokens reached the calibrated layers).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from media_factory import examples_subset
from result_shapes import CAPTION_KEYS
from safetensors import safe_open

from marlin_demo import model_io, quantize
from marlin_demo.cli import main
from marlin_demo.models import rtn
from marlin_demo.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "ball_rolls.mp4"
EXAMPLES = ROOT / "examples"
RECIPES = ["seed-w4g128", "mlp-only-w4g128", "mixed-w4-vision-int8"]
NAMES = {"seed-w4g128": "seed", "mlp-only-w4g128": "mlponly", "mixed-w4-vision-int8": "mixed"}
#: calibration samples per recipe: two where several samples must all reach the layers, else one
SAMPLES = {"seed-w4g128": 2, "mlp-only-w4g128": 1, "mixed-w4-vision-int8": 1}
SEED_TARGETS = ("in_proj_qkv", "in_proj_z", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


# --------------------------------------------------------------------------- fast unit tests


def test_rtn_weight_is_scale_times_int8() -> None:
    torch.manual_seed(0)
    w = torch.randn(16, 64) * torch.linspace(0.01, 3, 16)[:, None]
    q, scale = rtn.quantize_weight(w)
    assert q.dtype == torch.int8 and scale.shape == (16,)
    assert int(q.abs().max()) <= rtn.QMAX
    assert (q.abs().amax(dim=1) == rtn.QMAX).all()  # every row uses its full range
    deq = rtn.dequantize(q, scale)
    assert ((w - deq).abs() <= scale[:, None] / 2 + 1e-6).all()  # round to nearest
    for row in deq:
        assert len(torch.unique(row)) <= 255


def test_rtn_linear_matches_dequantized_linear() -> None:
    torch.manual_seed(1)
    lin = torch.nn.Linear(32, 8)
    q, scale = rtn.quantize_weight(lin.weight)
    layer = rtn.RTNInt8Linear(q, scale, lin.bias)
    x = torch.randn(3, 32)
    expected = torch.nn.functional.linear(x, rtn.dequantize(q, scale), lin.bias)
    assert torch.allclose(layer(x), expected, atol=1e-6)
    assert layer.weight_int8.dtype == torch.int8


def test_parse_memory() -> None:
    assert quantize.parse_memory("5GiB") == 5 * 2**30
    assert quantize.parse_memory("5.0GiB") == 5 * 2**30
    assert quantize.parse_memory("4500MiB") == 4500 * 2**20
    assert quantize.parse_memory("5GB") == 5 * 10**9
    assert quantize.parse_memory("5") == 5 * 2**30
    assert quantize.parse_memory(None) is None
    with pytest.raises(ValueError, match="not a size"):
        quantize.parse_memory("lots")


def test_calibration_pairs_are_ordered_and_capped() -> None:
    data = json.loads((EXAMPLES / "examples.json").read_text())
    pairs = quantize.load_pairs(EXAMPLES)
    n_captions = len(data)
    assert [p.kind for p in pairs[:n_captions]] == ["caption"] * n_captions
    assert all(p.kind == "find" for p in pairs[n_captions:])
    assert [p.video.name for p in pairs[:n_captions]] == [d["video"] for d in data]
    first = pairs[0]
    assert first.prompt == model_io.CAPTION_PROMPT
    assert first.answer.startswith("Scene: ") and "\n\nEvents:\n<0.0 - " in first.answer
    assert quantize.load_pairs(EXAMPLES, samples=3) == pairs[:3]
    assert quantize.load_pairs(EXAMPLES) == pairs  # deterministic
    assert pairs[n_captions].answer.startswith("From ") and pairs[n_captions].answer.endswith(".")


def test_calibration_bad_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"examples\.json"):
        quantize.load_pairs(tmp_path)
    (tmp_path / "examples.json").write_text('[{"video": "nope.mp4", "scene": "s", "events": []}]')
    with pytest.raises(ValueError, match="no video file"):
        quantize.load_pairs(tmp_path)


def test_cli_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["quantize", "--model", "tiny", "--out", str(tmp_path / "o"), "--recipe", "w3"])
    assert exc.value.code == 2
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    rc = main(["quantize", "--model", "tiny", "--out", str(busy), "--recipe", "seed-w4g128"])
    assert rc == 2 and "not empty" in capsys.readouterr().err
    rc = main(
        [
            "quantize",
            "--model",
            "tiny",
            "--out",
            str(tmp_path / "o"),
            "--recipe",
            "seed-w4g128",
            "--calibration",
            str(tmp_path),
        ]
    )
    assert rc == 2 and "examples.json" in capsys.readouterr().err
    rc = main(
        [
            "quantize",
            "--model",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "o"),
            "--recipe",
            "seed-w4g128",
        ]
    )
    assert rc == 2 and "--model" in capsys.readouterr().err


# --------------------------------------------------------------------------- end to end (slow)


@pytest.fixture(scope="module")
def tiny_bf16() -> Path:
    from marlin_demo.models.tiny import ensure_tiny

    return ensure_tiny(with_gptq=False)["bf16"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_bf16: Path) -> dict[str, Path]:
    """Each recipe quantized once through the CLI, on one or two short video samples."""
    root = tmp_path_factory.mktemp("quantized")
    # the two shortest examples, one real and one rendered: the examples in their order would calibrate
    # on the 70 s clip first (12,600 video tokens a sample, minutes of GPTQ passes on two cores)
    calibration = examples_subset(root / "calibration", ("flower.mp4", "ball_rolls.mp4"))
    out: dict[str, Path] = {}
    for recipe in RECIPES:
        folder = root / NAMES[recipe]
        rc = main(
            [
                "quantize",
                "--model",
                "tiny",
                "--out",
                str(folder),
                "--recipe",
                recipe,
                "--samples",
                str(SAMPLES[recipe]),
                "--calibration",
                str(calibration),
                "--no-progress",
            ]
        )
        assert rc == 0, recipe
        out[recipe] = folder
    return out


@pytest.fixture(scope="module")
def engine(built: dict[str, Path], tiny_settings: Settings):
    from marlin_demo.engine import Engine

    extra = ",".join(f"{NAMES[r]}={p}" for r, p in built.items())
    return Engine(tiny_settings.with_(variants="bf16", extra_variants=extra))


def _saved(folder: Path) -> dict[str, torch.dtype]:
    dtypes = {}
    for f in sorted(folder.glob("*.safetensors")):
        if f.name == rtn.SIDECAR:
            continue
        with safe_open(str(f), framework="pt") as fh:
            for k in fh.keys():
                dtypes[k] = fh.get_tensor(k).dtype
    return dtypes


def _expected_gptq(recipe: str, all_linears: list[str]) -> set[str]:
    text = [n for n in all_linears if ".language_model.layers." in n]
    targets = MLP if recipe == "mlp-only-w4g128" else SEED_TARGETS + MLP
    return {n for n in text if n.rsplit(".", 1)[1] in targets}


@pytest.fixture(scope="module")
def linears(tiny_bf16: Path) -> list[str]:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_bf16)
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_lists_exactly_the_quantized_tensors(
    recipe: str, built: dict[str, Path], linears: list[str], tiny_bf16: Path
) -> None:
    folder = built[recipe]
    spec = yaml.safe_load((folder / "recipe.yaml").read_text())
    assert spec["recipe"] == recipe
    g = spec["methods"]["gptq"]
    assert (g["bits"], g["group_size"], g["desc_act"], g["sym"]) == (4, 128, True, True)
    dtypes = _saved(folder)

    # GPTQ: exactly the listed modules carry qweight/qzeros/scales/g_idx, and no 16-bit weight
    saved_gptq = {k[: -len(".qweight")] for k in dtypes if k.endswith(".qweight")}
    assert set(g["modules"]) == saved_gptq == _expected_gptq(recipe, linears)
    for m in saved_gptq:
        assert (
            all(f"{m}.{s}" in dtypes for s in ("qzeros", "scales", "g_idx")) and f"{m}.weight" not in dtypes
        )
    assert not any(x in m for m in saved_gptq for x in ("in_proj_a", "in_proj_b", "visual", "lm_head"))

    # RTN INT8: only the mixed recipe, exactly the vision encoder linears, merger excluded
    listed_rtn = set(spec["methods"].get("rtn_int8", {}).get("modules", []))
    sidecar = folder / rtn.SIDECAR
    if recipe == "mixed-w4-vision-int8":
        vision = {n for n in linears if ".visual." in n and "merger" not in n}
        assert vision and listed_rtn == vision
        with safe_open(str(sidecar), framework="pt") as fh:
            keys = set(fh.keys())
            assert keys == {f"{m}.{s}" for m in vision for s in ("weight_int8", "weight_scale")}
            src = rtn.checkpoint_weights(tiny_bf16, sorted(vision))
            for m in vision:
                q, scale = fh.get_tensor(f"{m}.weight_int8"), fh.get_tensor(f"{m}.weight_scale")
                assert q.dtype == torch.int8 and scale.shape == (q.shape[0],)
                err = (src[m].float() - rtn.dequantize(q, scale)).abs()
                assert (err <= scale[:, None] / 2 + 1e-6).all()
        assert not any(f"{m}.weight" in dtypes for m in vision)  # no 16-bit copy left behind
        assert all(f"{m}.bias" in dtypes for m in vision)  # biases stay 16-bit
        assert any(
            "visual.merger" in k and k.endswith(".weight") and dtypes[k] == torch.bfloat16 for k in dtypes
        )
    else:
        assert not listed_rtn and not sidecar.exists()

    # nothing else is quantized: every other weight is 16-bit, and listed as kept
    kept = set(spec["kept_16bit"]["modules"])
    float_weights = {k[: -len(".weight")] for k, dt in dtypes.items() if k.endswith(".weight")}
    assert all(dtypes[f"{m}.weight"] == torch.bfloat16 for m in float_weights)
    assert kept == float_weights
    assert not kept & (saved_gptq | listed_rtn)
    assert set(linears) - {"lm_head"} <= kept | saved_gptq | listed_rtn  # lm_head is tied to embed_tokens
    assert quantize.verify_artifact(folder) == []


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_records_beside_the_artifact(recipe: str, built: dict[str, Path]) -> None:
    folder = built[recipe]
    report = json.loads((folder / "report.json").read_text())
    assert report["recipe"] == recipe and report["problems"] == []
    assert report["time_s"]["total"] > 0 and report["peak_memory_mb"] > 0
    assert report["memory_kind"] == "cpu_peak_rss" and report["device"] == "cpu"
    assert report["max_gpu_memory"]["effect"].startswith("none")
    cal = report["calibration"]
    assert cal["mode"] == "video" and cal["samples"] == SAMPLES[recipe] and cal["fallback_reason"] is None
    # vision tokens reached the calibrated layers: every video position of the first layer's
    # input held a vision feature, positions were 3-axis M-RoPE, and gptqmodel's per-module
    # sample count is the full token count (video tokens included)
    ev = cal["evidence"]
    assert cal["total_video_tokens"] > 0
    assert ev["vision_tower_calls"] == SAMPLES[recipe]
    assert ev["vision_feature_rows"] == cal["total_video_tokens"]
    assert ev["video_rows_reaching_layers"] == cal["total_video_tokens"]
    assert all(s["position_axes"] == 3 and s["mrope_axes_differ"] for s in ev["first_layer_inputs"])
    assert all(s["timestamps"] > 0 and "pixel_values_videos" in s["keys"] for s in cal["per_sample"])
    assert report["gptq_log"] and all(int(r["samples"]) == cal["total_tokens"] for r in report["gptq_log"])
    assert (folder / "quant_log.csv").exists() and (folder / "report.md").read_text().startswith(
        "# Quantization"
    )
    versions = dict(line.split(": ", 1) for line in (folder / "versions.txt").read_text().splitlines())
    assert {"python", "torch", "transformers", "gptqmodel", "cuda"} <= set(versions)
    assert versions["cuda"] == "none"
    if recipe == "mixed-w4-vision-int8":
        assert len(report["rtn_log"]) == 4 and all(r["rel_error"] < 0.05 for r in report["rtn_log"])


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_output_loads_as_a_variant_and_captions(recipe: str, engine) -> None:
    name = NAMES[recipe]
    result = engine.caption(CLIP, name)
    d = result.to_dict()
    assert set(d) == CAPTION_KEYS
    assert d["variant"] == name and d["raw"]
    for e in d["events"]:
        assert set(e) == {"start", "end", "description"}
    model = engine.load(name).model
    kinds = {n: type(m).__name__ for n, m in model.named_modules()}
    quantized = [n for n, m in model.named_modules() if hasattr(m, "qweight")]
    assert set(quantized) == set(
        yaml.safe_load((Path(engine.settings.extra_variant_dirs[name]) / "recipe.yaml").read_text())[
            "methods"
        ]["gptq"]["modules"]
    )
    if recipe == "mlp-only-w4g128":
        assert all(".mlp." in n for n in quantized)
        assert kinds["model.language_model.layers.1.self_attn.q_proj"] == "Linear"
    if recipe == "mixed-w4-vision-int8":
        assert kinds["model.visual.blocks.0.attn.qkv"] == "RTNInt8Linear"
        assert kinds["model.visual.merger.linear_fc1"] == "Linear"
        assert "+rtn-int8" in engine.load(name).kernel
    else:
        assert "RTNInt8Linear" not in kinds.values()


EPS32 = torch.finfo(torch.float32).eps


def _gamma(n: int) -> float:
    """Higham's gamma_n: the relative error bound of an n-term float32 dot product, in any order."""
    return n * EPS32 / (1 - n * EPS32)


@pytest.mark.slow
def test_mixed_vision_int8_weights_are_within_half_a_step(engine, tiny_bf16: Path) -> None:
    """What RTN guarantees, checked exactly: scale = max|w| / 127 per output channel and every
    stored weight within scale/2 of the 16-bit weight (plus the float32 rounding of w / scale)."""
    entries = rtn.read_sidecar(Path(engine.settings.extra_variant_dirs["mixed"]))
    weights = rtn.checkpoint_weights(tiny_bf16, entries)
    assert entries and set(entries) == set(rtn.vision_linear_names(engine.load("bf16").model))
    for name, (q, scale) in entries.items():
        w = weights[name].to(torch.float32)
        absmax = w.abs().amax(dim=1)
        assert torch.equal(scale, absmax / rtn.QMAX), name
        err = (w - rtn.dequantize(q, scale)).abs()
        # w / scale is rounded once in float32 (<= 127 ulp-sized steps of scale), q * scale once more
        bound = scale / 2 + 2 * EPS32 * absmax
        assert (err <= bound[:, None]).all(), name


def _float32_towers(engine) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Float32 copies of the loaded int8 tower and of the 16-bit tower: no bf16 kernel in the comparison."""
    import copy

    int8 = copy.deepcopy(engine.load("mixed").model.model.visual).float()
    reference = copy.deepcopy(engine.load("bf16").model.model.visual).float()
    return int8.eval(), reference.eval()


@pytest.mark.slow
def test_mixed_vision_tower_computes_with_the_int8_weights(engine) -> None:
    """The loaded int8 tower computes the 16-bit tower's function with the dequantized weights, each of
    its linears stays within the error RTN allows, and the tower's output error is what those add up to.

    Everything runs in float32, so the bounds hold whichever CPU (or summation order) runs them.
    """
    int8, reference = _float32_towers(engine)
    modules = {n: m for n, m in int8.named_modules() if isinstance(m, rtn.RTNInt8Linear)}
    assert modules
    torch.manual_seed(0)
    grid = torch.tensor([[2, 8, 8]])
    pixels = torch.randn(int(grid.prod()), 3 * 2 * 16 * 16)
    inputs: dict[str, torch.Tensor] = {}
    hooks = [
        m.register_forward_hook(lambda _m, args, _out, name=n: inputs.__setitem__(name, args[0].detach()))
        for n, m in modules.items()
    ]
    with torch.no_grad():
        got = int8(pixels, grid_thw=grid).pooler_output
        for h in hooks:
            h.remove()
        before = reference(pixels, grid_thw=grid).pooler_output

        # 1. Each int8 linear, on the input it really received: |y_int8 - y_16| <= scale/2 * ||x||_1 per
        #    output (Hoelder on the per-weight bound), plus both products' float32 rounding.
        relative_bounds = []
        for name, module in modules.items():
            x = inputs[name].reshape(-1, module.in_features)
            w16 = reference.get_submodule(name).weight
            bias = reference.get_submodule(name).bias
            y16 = torch.nn.functional.linear(x, w16, bias)
            yq = module(x)
            scale = module.weight_scale
            step = x.abs().sum(dim=1, keepdim=True) * (scale / 2)[None, :]
            magnitude = x.abs() @ w16.abs().T + (0 if bias is None else bias.abs())
            rounding = 2 * _gamma(module.in_features + 1) * (magnitude + step)
            assert ((yq - y16).abs() <= step + rounding).all(), name
            relative_bounds.append(float(step.norm() / y16.norm()))

        # 2. The loaded module is the 16-bit tower with the dequantized weights swapped in, nothing else.
        for name, module in modules.items():
            reference.get_submodule(name).weight.copy_(
                rtn.dequantize(module.weight_int8, module.weight_scale)
            )
        fake = reference(pixels, grid_thw=grid).pooler_output
    assert torch.allclose(got, fake, rtol=1e-5, atol=1e-5 * float(fake.abs().max()))

    # 3. First-order propagation: the layers' worst-case relative errors add up (the norms rescale, GELU
    #    is 1-Lipschitz, the residuals pass errors through), so the tower's relative error stays below
    #    their sum. Random int8 rounding errors partly cancel, so the measured error is far below it.
    measured = float((got - before).norm() / before.norm())
    bound = sum(relative_bounds)
    assert 0 < measured <= bound, (measured, relative_bounds)
