"""The saved artifact: inspect and verify it against recipe.yaml, write recipe.yaml, the report."""

from __future__ import annotations

import contextlib
import csv
import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from marlin_demo.quantize.recipes import GPTQ_SUFFIXES, Recipe


def versions() -> dict[str, str]:
    """Package versions that decide the artifact's bytes (written to versions.txt)."""
    import safetensors
    import torch
    import transformers

    out = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() and torch.version.cuda else "none",
    }
    try:
        from importlib.metadata import version

        out["gptqmodel"] = version("gptqmodel")
        out["marlin-demo"] = version("marlin-demo")
    except Exception:
        out.setdefault("gptqmodel", "unknown")
        out.setdefault("marlin-demo", "source checkout")
    if out["cuda"] != "none":
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def _weight_files(folder: Path) -> list[Path]:
    from marlin_demo.models.rtn import SIDECAR  # rtn imports torch: not at import time (the CLI's --help)

    return sorted(p for p in Path(folder).glob("*.safetensors") if p.name != SIDECAR)


def inspect_artifact(folder: Path) -> dict[str, Any]:
    """What the saved tensors say: GPTQ modules, int8 RTN modules, 16-bit weights (no model load)."""
    from safetensors import safe_open

    from marlin_demo.models.rtn import read_sidecar

    dtypes: dict[str, str] = {}
    for f in _weight_files(folder):
        with safe_open(str(f), framework="pt") as fh:
            for key in fh.keys():
                dtypes[key] = str(fh.get_slice(key).get_dtype())
    gptq = sorted({k.rsplit(".", 1)[0] for k in dtypes if k.endswith(".qweight")})
    incomplete = [m for m in gptq if not all(f"{m}.{s}" in dtypes for s in GPTQ_SUFFIXES)]
    rtn_entries = read_sidecar(Path(folder)) or {}
    rtn = sorted(rtn_entries)
    bad_rtn = [
        m for m, (q, s) in rtn_entries.items() if str(q.dtype) != "torch.int8" or s.shape != (q.shape[0],)
    ]
    float_weights = sorted(
        k[: -len(".weight")]
        for k, dt in dtypes.items()
        if k.endswith(".weight") and dt.upper() in ("BF16", "F16", "F32", "BFLOAT16", "FLOAT16", "FLOAT32")
    )
    return {
        "gptq": gptq,
        "gptq_incomplete": incomplete,
        "rtn_int8": rtn,
        "rtn_bad": bad_rtn,
        "float_weights": float_weights,
        "keys": len(dtypes),
    }


def verify_artifact(folder: Path, found: dict[str, Any] | None = None) -> list[str]:
    """Problems: recipe.yaml must list exactly what the saved tensors quantize (``found``: pre-read)."""
    import yaml

    folder = Path(folder)
    recipe_path = folder / "recipe.yaml"
    if not recipe_path.exists():
        return [f"{recipe_path} is missing"]
    recipe = yaml.safe_load(recipe_path.read_text(encoding="utf-8"))
    found = inspect_artifact(folder) if found is None else found
    methods = recipe.get("methods", {})
    listed_gptq = set(methods.get("gptq", {}).get("modules", []))
    listed_rtn = set(methods.get("rtn_int8", {}).get("modules", []))
    kept = set(recipe.get("kept_16bit", {}).get("modules", []))
    problems = []
    for label, listed, saved in (
        ("gptq", listed_gptq, set(found["gptq"])),
        ("rtn_int8", listed_rtn, set(found["rtn_int8"])),
    ):
        missing, extra = sorted(listed - saved), sorted(saved - listed)
        if missing:
            problems.append(f"{label}: listed but not quantized in the saved tensors: {missing}")
        if extra:
            problems.append(f"{label}: quantized in the saved tensors but not listed: {extra}")
    if found["gptq_incomplete"]:
        problems.append(f"gptq modules missing qzeros/scales/g_idx: {found['gptq_incomplete']}")
    if found["rtn_bad"]:
        problems.append(f"rtn modules not int8 + per-row scale: {found['rtn_bad']}")
    floats = set(found["float_weights"])
    both = (set(found["gptq"]) | set(found["rtn_int8"])) & floats
    if both:
        problems.append(f"quantized modules also stored 16-bit: {sorted(both)}")
    if kept != floats:
        problems.append(
            "kept_16bit differs from the saved 16-bit weights: "
            f"missing {sorted(floats - kept)}, extra {sorted(kept - floats)}"
        )
    if listed_gptq & listed_rtn:
        problems.append(f"modules listed under two methods: {sorted(listed_gptq & listed_rtn)}")
    return problems


# --------------------------------------------------------------------------- writing the artifact


def _strip_weights(folder: Path, names: list[str]) -> int:
    """Drop the 16-bit ``<name>.weight`` of RTN modules from the main checkpoint: the int8 copy is the one."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    drop = {f"{n}.weight" for n in names}
    removed = 0
    for f in _weight_files(folder):
        with safe_open(str(f), framework="pt") as fh:
            keys = list(fh.keys())
            if not drop & set(keys):
                continue
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in keys if k not in drop}
        removed += len(keys) - len(tensors)
        save_file(tensors, str(f), metadata=meta)
        f.chmod(0o644)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"] = {k: v for k, v in data.get("weight_map", {}).items() if k not in drop}
        index.write_text(json.dumps(data, indent=2) + "\n")
    return removed


def _gptq_fallback(folder: Path) -> Any:
    """gptqmodel's own rule for modules that saw too few calibration tokens (from quantize_config.json)."""
    try:
        meta = json.loads((folder / "quantize_config.json").read_text()).get("meta", {})
    except (OSError, json.JSONDecodeError):
        return None
    return meta.get("fallback")


def write_recipe(
    folder: Path,
    recipe: Recipe,
    source: str,
    calibration: dict[str, Any],
    found: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """recipe.yaml from the saved tensors, so it cannot list what was not done (``found``: as verify's)."""
    import yaml

    from marlin_demo.models.rtn import SIDECAR

    found = inspect_artifact(folder) if found is None else found
    methods: dict[str, Any] = {
        "gptq": {
            "tool": "gptqmodel",
            "bits": recipe.bits,
            "group_size": recipe.group_size,
            "desc_act": recipe.desc_act,
            "sym": recipe.sym,
            "format": "gptq",
            "storage": "qweight (int32-packed 4-bit), qzeros, scales (fp16), g_idx in model*.safetensors",
            "dynamic": recipe.dynamic or None,
            "gptqmodel_fallback": _gptq_fallback(folder),
            "modules": found["gptq"],
        }
    }
    if recipe.vision_rtn_int8:
        methods["rtn_int8"] = {
            "tool": "marlin_demo.models.rtn",
            "bits": 8,
            "granularity": "per-output-channel",
            "sym": True,
            "range": "[-127, 127], scale = max|w_row| / 127, round to nearest",
            "calibration": "none (round-to-nearest needs no Hessian)",
            "storage": f"{SIDECAR}: <module>.weight_int8 (int8, out x in) + <module>.weight_scale "
            "(float32, out); the module's 16-bit weight is removed from the main checkpoint; "
            "biases stay 16-bit there. marlin_demo.models applies it at load (RTNInt8Linear); a loader "
            "that ignores this file finds no weight for these modules and leaves them randomly initialised.",
            "modules": found["rtn_int8"],
        }
    data = {
        "recipe": recipe.name,
        "summary": recipe.summary,
        "source": source,
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "methods": methods,
        "kept_16bit": {
            "dtype": "bfloat16",
            "note": "every module below has its weight saved in 16-bit; 1-D tensors (norms, biases, A_log, "
            "dt_bias) are 16-bit too. lm_head is tied to embed_tokens when the config ties them.",
            "exceptions": recipe.exceptions,
            "modules": found["float_weights"],
        },
        "calibration": calibration,
    }
    (folder / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False, width=110), encoding="utf-8")
    return data


def _read_quant_log(model: Any, folder: Path) -> list[dict[str, Any]]:
    keys = ("layer", "module", "loss", "samples", "damp", "time")
    rows = [{k: entry.get(k) for k in keys} for entry in getattr(model, "quant_log", None) or []]
    if not rows and (folder / "quant_log.csv").exists():
        with (folder / "quant_log.csv").open() as fh:
            rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("loss", "damp", "time"):
            with contextlib.suppress(TypeError, ValueError):
                r[k] = float(r[k])
    return rows


def _report_md(report: dict[str, Any]) -> str:
    cal = report["calibration"]
    t = report["time_s"]
    lines = [
        f"# Quantization report: {report['recipe']}",
        "",
        f"- source: `{report['source']}`",
        f"- device: {report['device']}; time {t['total']:.1f} s "
        f"(load {t['load']:.1f}, calibration data {t['calibration_data']:.1f}, "
        f"gptq {t['gptq']:.1f}, rtn {t['rtn']:.1f}, save {t['save']:.1f})",
        f"- peak memory: {report['peak_memory_mb']:.0f} MB ({report['memory_kind']})",
        f"- max GPU memory: {report['max_gpu_memory']['requested']} -> {report['max_gpu_memory']['effect']}",
        f"- calibration: {cal['mode']}, {cal['samples']} samples from `{cal['source']}` "
        f"({cal['total_tokens']} tokens, {cal['total_video_tokens']} video tokens)",
    ]
    probe = cal.get("evidence") or {}
    if probe:
        lines.append(
            f"- vision reached the layers: vision tower ran {probe['vision_tower_calls']} times, "
            f"{probe['video_rows_reaching_layers']} video-token rows of the first decoder layer's input "
            "carried vision features (not the pad embedding)"
        )
    if cal.get("fallback_reason"):
        lines.append(f"- text fallback because: {cal['fallback_reason']}")
    lines += ["", f"Quantized: {report['counts']}", ""]
    log_rows = report.get("gptq_log") or []
    if log_rows:
        losses = [r["loss"] for r in log_rows if isinstance(r.get("loss"), float)]
        lines += [
            "## GPTQ per-module loss (gptqmodel)",
            "",
            f"mean {sum(losses) / max(len(losses), 1):.3g}, max {max(losses, default=0):.3g} "
            f"over {len(losses)} modules",
            "",
            "| layer | module | loss | samples |",
            "|---|---|---|---|",
        ]
        for r in log_rows:
            lines.append(f"| {r.get('layer')} | {r.get('module')} | {r.get('loss')} | {r.get('samples')} |")
        lines.append("")
    if report.get("rtn_log"):
        lines += [
            "## RTN INT8 per-module error",
            "",
            "| module | rel. error | max abs error |",
            "|---|---|---|",
        ]
        for r in report["rtn_log"]:
            lines.append(f"| {r['module']} | {r['rel_error']:.3e} | {r['max_abs_error']:.3e} |")
        lines.append("")
    lines += [
        f"Verification against the saved tensors: {'OK' if not report['problems'] else report['problems']}"
    ]
    return "\n".join(lines) + "\n"
