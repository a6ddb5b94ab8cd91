"""The set-up a run's answers depend on, kept with bench and batch results so two never mix."""

from __future__ import annotations

import importlib.util
from typing import Any

from marlin_demo import settings as settings_mod
from marlin_demo import variants
from marlin_demo.models import ModelLoadError, compute, pick_device
from marlin_demo.models.kernels import available_gptq_kernels, gptq_kernel_plan
from marlin_demo.settings import Settings

#: Settings that change what a request measures (not the limits, nor the cache): a rerun must match them.
FINGERPRINT_FIELDS = tuple(
    name
    for name in settings_mod.flags_for("bench")
    if name not in ("cache_dir", "max_upload_mb", "max_duration_s", "request_timeout_s")
)


def stack_fingerprint(settings: Settings) -> dict[str, Any]:
    """What runs, decided before any load: device, compute types, attention and GPTQ kernels, compile."""
    try:
        device = pick_device(settings.device)
    except ModelLoadError:
        device = settings.device
    fla = device == "cuda" and importlib.util.find_spec("fla") is not None
    return {
        "device": device,
        "gated_deltanet": "fla" if fla else "torch",
        "gptq_kernels": gptq_kernel_plan(device, available_gptq_kernels(device), settings.gptq_backend),
        "compute_dtype": _compute(settings, device),
        "compile": settings.compile,
    }


def _compute(settings: Settings, device: str) -> dict[str, str] | str:
    """What weights of each 16-bit type compute in here (``compute.choose``), for every registered kind
    whichever variants a run asks for (a rerun with fewer variants is the same set-up)."""
    weights = sorted({kind.dtype for kind in variants.kinds()} | {"bfloat16"})
    try:
        return {w: compute.choose(device, w, settings.compute_dtype).dtype for w in weights}
    except ValueError as exc:  # a bad MARLIN_COMPUTE_DTYPE: the load says so; the record keeps the value
        return str(exc)


def fingerprint(settings: Settings, data_digest: str) -> dict[str, Any]:
    fp: dict[str, Any] = {name: getattr(settings, name) for name in FINGERPRINT_FIELDS}
    fp["data_digest"] = data_digest
    fp["stack"] = stack_fingerprint(settings)  # kernels and compile state: set-ups never mix silently
    return fp
