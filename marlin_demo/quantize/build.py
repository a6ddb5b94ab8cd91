"""One quantization run: load, calibrate, quantize, save, verify (``run(Options)``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marlin_demo.engine.generation import peak_memory
from marlin_demo.models import ModelLoadError, pick_device
from marlin_demo.models.kernels import import_gptqmodel
from marlin_demo.quantize.artifact import (
    _read_quant_log,
    _report_md,
    _strip_weights,
    inspect_artifact,
    verify_artifact,
    versions,
    write_recipe,
)
from marlin_demo.quantize.calibration import _VisionProbe, build_calibration, load_pairs
from marlin_demo.quantize.recipes import RECIPES, QuantizeError, Recipe, parse_memory
from marlin_demo.settings import EXAMPLES_DIR

log = logging.getLogger(__name__)


@dataclass
class Options:
    """Everything one quantization run needs (the CLI flags, resolved)."""

    model: str
    out: Path
    recipe: str
    calibration: Path = EXAMPLES_DIR
    samples: int | None = None
    max_gpu_memory: str | None = "5GiB"
    device: str = "auto"
    overwrite: bool = False
    progress: bool = True
    calibration_mode: str = "video"  # "video" (falls back to text on failure) or "text"


def resolve_model(model: str) -> str:
    """'tiny' -> the offline tiny checkpoint folder; a folder stays a folder; anything else is a Hub id."""
    if model == "tiny":
        from marlin_demo.models.tiny import ensure_tiny

        return str(ensure_tiny(with_gptq=False)["bf16"])
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ValueError(f"--model {model}: the folder has no config.json, so it is not a checkpoint.")
        return str(path.resolve())
    if model.count("/") != 1 or model.startswith((".", "/")):
        raise ValueError(
            f"--model {model!r} is neither 'tiny', an existing checkpoint folder nor a Hub id (org/name)."
        )
    return model


def _device(setting: str) -> str:
    """--device auto|cpu|cuda -> "cuda" or "cpu" (models.pick_device; its error as bad input)."""
    try:
        return pick_device(setting)
    except ModelLoadError:
        raise ValueError("--device cuda but no CUDA GPU is visible: use --device cpu or auto.") from None


def _apply_gpu_cap(device: str, cap: int | None) -> dict[str, Any]:
    """Honour --max-gpu-memory on CUDA by a per-process allocator cap; record that it is inert on CPU."""
    import torch

    requested = None if cap is None else f"{cap / 2**30:.2f} GiB"
    if cap is None:
        return {"requested": None, "effect": "no cap"}
    if device != "cuda":
        return {"requested": requested, "effect": "none: quantizing on the CPU, the GPU cap does not apply"}
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = min(1.0, cap / total)
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    return {
        "requested": requested,
        "effect": f"torch.cuda.set_per_process_memory_fraction({fraction:.4f}) of {total / 2**30:.1f} GiB: "
        "allocations past the cap raise OOM instead of growing. The cap is an allocator limit: gptqmodel "
        "loads the checkpoint lazily and materializes one decoder layer at a time on the GPU, so a 2B model "
        "fits; the peak is in peak_memory_mb",
        "fraction": fraction,
    }


def _vision_rtn(model: Any, source: str, progress: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Vision linears' RTN INT8, read from the files (gptqmodel loads lazily: weights may be on meta)."""
    from marlin_demo.models.rtn import checkpoint_weights, quantize_modules, vision_linear_names

    names = vision_linear_names(model.model)
    if not names:
        raise QuantizeError("the mixed recipe found no vision linears under model.visual")
    folder = Path(getattr(model, "model_local_path", None) or source)
    return quantize_modules(checkpoint_weights(folder, names), progress=progress)


def _quantize_config(recipe: Recipe, device: str) -> Any:
    from gptqmodel import QuantizeConfig

    qkw: dict[str, Any] = {
        "bits": recipe.bits,
        "group_size": recipe.group_size,
        "desc_act": recipe.desc_act,
        "sym": recipe.sym,
        "dynamic": dict(recipe.dynamic) or None,
        # QuantizeConfig(device=...) and a load-time device/device_map together raise: only here
        "device": "cuda:0" if device == "cuda" else "cpu",
    }
    if device == "cpu":
        qkw["pack_impl"] = "original"  # avoids a one-off C++ extension build (~60 s)
    return QuantizeConfig(**qkw)


def _gptq_pass(
    source: str,
    recipe: Recipe,
    device: str,
    rows: list[dict[str, Any]],
    probe_token: int | None,
    scratch: Path,
) -> tuple[Any, _VisionProbe, float]:
    """Load the 16-bit model (lazily) with gptqmodel and run GPTQ on our rows: (model, probe, load_s)."""
    from gptqmodel import GPTQModel

    t0 = time.perf_counter()
    with contextlib.chdir(scratch), contextlib.redirect_stdout(sys.stderr):  # quantize() writes ./logs
        model = GPTQModel.load(
            source, quantize_config=_quantize_config(recipe, device), trust_remote_code=False
        )
    load_s = time.perf_counter() - t0

    def prepared_rows(**_: Any) -> list[dict[str, Any]]:
        # the rows are processor outputs already: gptqmodel's own text preparation would keep only
        # input_ids/attention_mask (no pixel_values_videos, video_grid_thw, mm_token_type_ids: no vision)
        return [dict(r) for r in rows]

    model.prepare_dataset = prepared_rows
    probe = _VisionProbe(model.model, probe_token)
    with contextlib.chdir(scratch), contextlib.redirect_stdout(sys.stderr), probe:
        model.quantize(rows, batch_size=1)
    return model, probe, load_s


@dataclass
class _Calibration:
    """The rows GPTQ ran on: video rows, or text rows after a documented fallback (and why)."""

    mode: str
    rows: list[dict[str, Any]]
    rows_info: list[dict[str, Any]]
    fallback_reason: str | None = None


def _output_folder(opts: Options) -> Path:
    """The resolved --out, refused before any slow step when it holds files and --overwrite is off."""
    out = Path(opts.out).expanduser().resolve()
    if out.exists() and any(out.iterdir()) and not opts.overwrite:
        raise ValueError(f"{out} exists and is not empty: choose a new --out or pass --overwrite.")
    return out


def _save_artifact(
    model: Any, processor: Any, rtn_tensors: dict[str, Any], partial: Path, scratch: Path
) -> None:
    """Save the checkpoint and processor; RTN vision weights go to the sidecar only (loaded once)."""
    with contextlib.chdir(scratch), contextlib.redirect_stdout(sys.stderr):
        model.save(str(partial))
    processor.save_pretrained(str(partial))
    if rtn_tensors:
        from marlin_demo.models.rtn import save_sidecar

        _strip_weights(
            partial, [k[: -len(".weight_int8")] for k in rtn_tensors if k.endswith(".weight_int8")]
        )
        save_sidecar(partial, rtn_tensors)


@dataclass
class _Quantized:
    """What the weight stages leave for the records: the calibration used and the quantizers' logs."""

    calib: _Calibration
    probe: _VisionProbe
    gptq_log: list[dict[str, Any]]
    rtn_rows: list[dict[str, Any]]


def _quantize_into(
    partial: Path,
    source: str,
    recipe: Recipe,
    device: str,
    processor: Any,
    pairs: list[Any],
    calib: _Calibration,
    progress: bool,
    stages: Any,
    times: dict[str, float],
) -> _Quantized:
    """GPTQ, RTN and save into a fresh ``partial``, timing each stage; failed video rows rerun GPTQ on a fresh
    load with the pairs as text. A failure removes ``partial``: no half-written artifact lands at --out."""
    import torch

    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    scratch = Path(tempfile.mkdtemp(prefix="marlin-quantize-"))
    try:
        stages.set_description("quantize: gptq")
        t0 = time.perf_counter()
        token = getattr(processor, "video_token_id", None)
        try:
            model, probe, times["load"] = _gptq_pass(source, recipe, device, calib.rows, token, scratch)
        except Exception as exc:
            if calib.mode != "video":
                raise
            reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.warning("video calibration failed (%s): falling back to text calibration", reason)
            calib = _Calibration("text", *build_calibration(processor, pairs, "text"), fallback_reason=reason)
            model, probe, times["load"] = _gptq_pass(source, recipe, device, calib.rows, token, scratch)
        times["gptq"] = time.perf_counter() - t0 - times["load"]
        stages.update()

        rtn_tensors: dict[str, torch.Tensor] = {}
        rtn_rows: list[dict[str, Any]] = []
        if recipe.vision_rtn_int8:
            stages.set_description("quantize: rtn int8")
            t0 = time.perf_counter()
            rtn_tensors, rtn_rows = _vision_rtn(model, source, progress)
            times["rtn"] = time.perf_counter() - t0
        stages.update()

        stages.set_description("quantize: save")
        t0 = time.perf_counter()
        _save_artifact(model, processor, rtn_tensors, partial, scratch)
        times["save"] = time.perf_counter() - t0
        gptq_log = _read_quant_log(model, partial)
        stages.update()
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _Quantized(calib, probe, gptq_log, rtn_rows)


def _calibration_record(opts: Options, calib: _Calibration) -> dict[str, Any]:
    """How the calibration data was made (recipe.yaml and the report), so a run can be reproduced."""
    return {
        "mode": calib.mode,
        "source": str(Path(opts.calibration)),
        "samples": len(calib.rows_info),
        "order": "examples.json order: caption pairs, then find pairs; the first --samples are kept",
        "path": "chat template + processor(text, videos=[frames], video_metadata, do_sample_frames=False, "
        "do_resize=False) as in Engine.build_inputs, the answer appended after the generation prompt",
        "total_tokens": sum(r["tokens"] for r in calib.rows_info),
        "total_video_tokens": sum(r["video_tokens"] for r in calib.rows_info),
        "fallback_reason": calib.fallback_reason,
    }


def _write_records(
    partial: Path, recipe: Recipe, model: str, source: str, calibration: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """recipe.yaml and versions.txt beside the weights: (recipe data, problems found checking against it)."""
    found = inspect_artifact(partial)
    recipe_data = write_recipe(partial, recipe, model if model == "tiny" else source, calibration, found)
    (partial / "versions.txt").write_text(
        "".join(f"{k}: {v}\n" for k, v in versions().items()), encoding="utf-8"
    )
    return recipe_data, verify_artifact(partial, found)


def _memory_fields(device: str) -> dict[str, Any]:
    """The run's peak memory and what that figure measured (CPU RSS counts the libraries too)."""
    peak, kind = peak_memory(device)
    note = "torch.cuda.max_memory_allocated over the whole run"
    if kind == "cpu_peak_rss":
        note = "process peak RSS, which includes torch/transformers/gptqmodel themselves"
    return {"peak_memory_mb": round(peak, 1), "memory_kind": kind, "memory_note": note}


def _publish(partial: Path, report: dict[str, Any], out: Path) -> None:
    """report.json / report.md, then the finished folder replaces --out in one rename."""
    (partial / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (partial / "report.md").write_text(_report_md(report), encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    os.replace(partial, out)


def run(opts: Options) -> dict[str, Any]:
    """Quantize, write the artifact and its records, verify, return the report (report.json)."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoProcessor

    recipe = RECIPES[opts.recipe]
    out = _output_folder(opts)
    cap = parse_memory(opts.max_gpu_memory)
    device = _device(opts.device)
    pairs = load_pairs(Path(opts.calibration), opts.samples)
    source = resolve_model(opts.model)

    stages = tqdm(total=5, desc="quantize", unit="stage", disable=not opts.progress, file=sys.stderr)
    times: dict[str, float] = {"load": 0.0, "calibration_data": 0.0, "gptq": 0.0, "rtn": 0.0, "save": 0.0}
    t_start = time.perf_counter()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    gpu_cap = _apply_gpu_cap(device, cap)
    gptqmodel = import_gptqmodel()

    stages.set_description("quantize: calibration data")
    t0 = time.perf_counter()
    processor = AutoProcessor.from_pretrained(source)
    calib = _Calibration(opts.calibration_mode, *build_calibration(processor, pairs, opts.calibration_mode))
    times["calibration_data"] = time.perf_counter() - t0
    stages.update()

    partial = out.with_name(out.name + ".partial")
    weights = _quantize_into(
        partial, source, recipe, device, processor, pairs, calib, opts.progress, stages, times
    )

    stages.set_description("quantize: records")
    calibration = _calibration_record(opts, weights.calib)
    recipe_data, problems = _write_records(partial, recipe, opts.model, source, calibration)
    memory = _memory_fields(device)
    report = {
        "recipe": recipe.name,
        "summary": recipe.summary,
        "source": source,
        "out": str(out),
        "device": device,
        "time_s": {
            **{k: round(v, 3) for k, v in times.items()},
            "total": round(time.perf_counter() - t_start, 3),
        },
        **memory,
        "max_gpu_memory": gpu_cap,
        "calibration": {
            **calibration,
            "per_sample": weights.calib.rows_info,
            "evidence": weights.probe.summary() if weights.calib.mode == "video" else None,
        },
        "counts": {m: len(v.get("modules", [])) for m, v in recipe_data["methods"].items()}
        | {"kept_16bit": len(recipe_data["kept_16bit"]["modules"])},
        "gptq_log": weights.gptq_log,
        "rtn_log": weights.rtn_rows,
        "problems": problems,
        "gptqmodel": getattr(gptqmodel, "__version__", "unknown"),
    }
    _publish(partial, report, out)
    stages.update()
    stages.close()
    if problems:
        raise QuantizeError("the artifact does not match its recipe.yaml: " + "; ".join(problems))
    return report
