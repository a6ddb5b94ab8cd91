"""One loader per variant behind ``load_variant(settings, variant)``: every variant ends as a transformers
``Qwen3_5ForConditionalGeneration`` plus its processor, so the engine has one path for all; and the set-up
a run's answers depend on (``fingerprint``), kept with bench and batch results so two never mix."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marlin_demo import settings as settings_mod
from marlin_demo import variants
from marlin_demo.models import compute
from marlin_demo.models.kernels import (
    FLA_OPS,
    available_gptq_kernels,
    gptq_kernel_plan,
    import_gptqmodel,
    import_real_kernels,
    linear_kernel_for,
)
from marlin_demo.settings import Settings, env_name

log = logging.getLogger(__name__)

_SHA = re.compile(r"^[0-9a-f]{40}$")


class ModelLoadError(RuntimeError):
    """A variant could not be loaded; the message says why and names the fix."""


@dataclass(frozen=True)
class Source:
    """Where a variant's weights come from."""

    variant: str
    location: str  # Hub id or local folder
    revision: str | None
    quantized: str  # "gptq" | "bnb4" | "none"
    is_local: bool


@dataclass
class LoadedModel:
    """A ready model: what the engine needs, plus what the UI and bench report."""

    variant: str
    model: Any
    processor: Any
    source: Source
    load_s: float
    device: str
    footprint_mb: float
    kernel: str = "torch"
    attention: str = "torch"
    #: what it computes in (``compute.choose``): its weights' type, or float32 on a CPU without that type
    compute_dtype: str = "bfloat16"
    compute_reason: str = ""
    keepalive: list[Any] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "source": self.source.location,
            "revision": self.source.revision,
            "load_s": round(self.load_s, 3),
            "device": self.device,
            "footprint_mb": round(self.footprint_mb, 2),
            "kernel": self.kernel,
            "attention": self.attention,
            "compute_dtype": self.compute_dtype,
        }


def pick_device(setting: str) -> str:
    """CUDA when available (or asked for), else CPU."""
    import torch

    if setting == "cpu":
        return "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("MARLIN_DEVICE=cuda but no CUDA GPU is visible: use --device cpu or auto.")
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_source(settings: Settings, variant: str) -> Source:
    """Map (model, variant) to a folder or Hub id; the tiny checkpoint is built here on demand."""
    extra = settings.extra_variant_dirs
    if variant in extra:
        path = extra[variant]
        quantized = "gptq" if (path / "quantize_config.json").exists() else "none"
        return Source(variant, str(path), None, quantized, True)
    kind = variants.kind_of(variant)
    if kind is None:
        raise ModelLoadError(variants.unknown(variant, settings.variant_list))
    quantized = {"gptq": "gptq", "bnb4": "bnb4"}.get(kind.loader, "none")
    if settings.model == "tiny":
        from marlin_demo.models.tiny import ensure_tiny

        paths = ensure_tiny(Path(settings.cache_dir) if settings.cache_dir else None)
        return Source(variant, str(paths[kind.tiny_folder]), None, quantized, True)
    if settings.model == "marlin":
        repo = str(getattr(settings, kind.repo_field))
        revision = str(getattr(settings, kind.revision_field))
        return Source(variant, repo, revision, quantized, Path(repo).is_dir())
    root = Path(settings.model).expanduser()
    if not root.is_dir():
        raise ModelLoadError(
            f"--model {settings.model!r} is neither 'marlin', 'tiny' nor an existing folder: "
            "pass a local checkpoint folder, or --model tiny to run offline."
        )
    if not kind.own_checkpoint:
        return Source(variant, str(root), None, quantized, True)
    for candidate in (root / kind.name, Path(str(getattr(settings, kind.repo_field)))):
        if (candidate / "quantize_config.json").exists():
            return Source(variant, str(candidate), None, quantized, True)
    raise ModelLoadError(
        f"No {kind.short} checkpoint for the local model {root}: put one in {root / kind.name} or set "
        f"{env_name(kind.repo_field)} to its folder (python -m marlin_demo quantize builds one)."
    )


def _scrub(text: str) -> str:
    """Never let a token reach a log line or an error message."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        secret = os.environ.get(name)
        if secret:
            text = text.replace(secret, "***")
    return re.sub(r"hf_[A-Za-z0-9]{20,}", "hf_***", text)


def explain_load_error(exc: BaseException, source: Source) -> str:
    """Turn a loader exception into one sentence: what happened and the fix."""
    name = type(exc).__name__
    text = _scrub(str(exc))
    where = source.location
    if "OutOfMemory" in name or "out of memory" in text.lower():
        return (
            f"Out of memory while loading the {source.variant} variant from {where}: "
            "free GPU memory (unload other variants) or choose a smaller variant (gptq or bnb4)."
        )
    if name in ("GatedRepoError",) or "gated" in text.lower() or "401" in text or "403" in text:
        return (
            f"{where} is a gated repository: accept its conditions on the Hub and set HF_TOKEN, "
            "or use the ungated mirror with MARLIN_BF16_ID=lunahr/Marlin-2B-ungated."
        )
    if name in ("RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError"):
        return f"{where} (revision {source.revision}) was not found on the Hub: check the id and revision."
    markers = ("offline", "connection", "resolve", "couldn't connect", "cannot find the requested files")
    if not source.is_local and (
        name in ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectionError")
        or any(m in text.lower() for m in markers)
    ):
        return (
            f"Could not download {where}: the Hugging Face Hub is unreachable "
            "and the weights are not cached. "
            "Connect to the network (or pre-download with `hf download`), point --model at a local folder, "
            "or run offline with --model tiny."
        )
    if isinstance(exc, ImportError) or "kernel" in text.lower():
        kind = variants.kind_of(source.variant)
        pkg = {"gptq": "gptqmodel", "bnb4": "bitsandbytes"}.get(source.quantized, "transformers")
        pkg, fix = (kind.package, kind.fix) if kind else (pkg, variants.REINSTALL)
        return f"The {source.variant} variant needs a working {pkg} install ({text[:200]}): {fix}."
    if source.is_local and not Path(where).exists():
        return f"The folder {where} does not exist: check --model / MARLIN_EXTRA_VARIANTS."
    return f"Could not load the {source.variant} variant from {where}: {name}: {text[:300]}"


def _check_remote_code(settings: Settings, source: Source) -> bool:
    if not settings.trust_remote_code:
        return False
    if source.is_local:
        return True
    if not source.revision or not _SHA.match(source.revision):
        raise ModelLoadError(
            "MARLIN_TRUST_REMOTE_CODE=1 runs code from the Hub, so it needs a pinned commit: "
            "set MARLIN_REVISION / MARLIN_GPTQ_REVISION to a 40-character commit hash."
        )
    return True


def _gptq_kernel(model: Any) -> str:
    """The GPTQModel quantized-linear classes that run, joined by "+" (the kernel may differ per layer)."""
    names = {
        type(module).__name__
        for module in model.modules()
        if type(module).__module__.startswith("gptqmodel.nn_modules.qlinear")
    }
    return "+".join(sorted(names)) or "unknown"


#: The Gated DeltaNet ops transformers binds on first import, per family (``fla``, ``causal_conv1d``)
_LINEAR_OPS = {
    "gated-deltanet": FLA_OPS,
    "conv1d": ("causal_conv1d_fn", "causal_conv1d_update"),
}


def _attention_path(model: Any, device: str = "cpu") -> str:
    """The attention implementation and, per Gated DeltaNet op family, the kernel the modeling module bound
    (not whether a package is installed: one that fails to import leaves transformers on its fallback)."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    attn = getattr(cfg, "_attn_implementation", None) or getattr(model.config, "_attn_implementation", None)
    parts = []
    module = sys.modules.get(type(model).__module__)
    for family, ops in _LINEAR_OPS.items():
        found = sorted({k for k in (linear_kernel_for(module, op, device) for op in ops) if k is not None})
        if found:
            parts.append(f"{family}:{'+'.join(found)}")
    return f"{attn or 'eager'} / {', '.join(parts)}" if parts else (attn or "eager")


def load_variant(settings: Settings, variant: str) -> LoadedModel:
    """Load one variant; any failure becomes a ``ModelLoadError`` naming the fix."""
    source = resolve_source(settings, variant)
    device = pick_device(settings.device)
    try:
        choice = compute_choice(settings, variant, device)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    import_real_kernels()
    t0 = time.perf_counter()
    try:
        trust = _check_remote_code(settings, source)
        if source.quantized == "gptq":
            model, keep, kernel = _load_gptq(
                source, device, trust, settings.gptq_backend, settings.gptq_build_dir, choice.dtype
            )
        else:
            model, keep, kernel = _load_transformers(source, device, trust, choice.dtype)
        if source.is_local:  # a quantize-built mixed variant keeps vision linears as int8 in a sidecar
            from marlin_demo.models.rtn import apply_sidecar

            if apply_sidecar(model, Path(source.location)):
                kernel += "+rtn-int8"
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(
            source.location, trust_remote_code=trust, **_hub_kwargs(source)
        )
    except ModelLoadError:
        raise
    except Exception as exc:
        log.warning("loading %s failed: %s", variant, _scrub(repr(exc)))
        raise ModelLoadError(explain_load_error(exc, source)) from None
    model.eval()
    return LoadedModel(
        variant=variant,
        model=model,
        processor=processor,
        source=source,
        load_s=time.perf_counter() - t0,
        device=device,
        footprint_mb=model.get_memory_footprint() / 2**20,
        kernel=kernel,
        attention=_attention_path(model, device),
        compute_dtype=choice.dtype,
        compute_reason=choice.reason,
        keepalive=keep,
    )


def compute_choice(settings: Settings, variant: str, device: str) -> compute.Choice:
    """What ``variant`` computes in on ``device`` (``compute.choose``); an extra folder's weights are bf16."""
    kind = variants.kind_of(variant)
    weights = kind.dtype if kind and variant not in settings.extra_variant_dirs else "bfloat16"
    return compute.choose(device, weights, settings.compute_dtype)


def _hub_kwargs(source: Source) -> dict[str, Any]:
    if source.is_local:
        return {}
    kw: dict[str, Any] = {"revision": source.revision}
    token = os.environ.get("HF_TOKEN")
    if token:
        kw["token"] = token
    return kw


#: the modules bnb4 keeps 16-bit (substrings of module names, as transformers matches them)
BNB4_SKIP = ["lm_head", "model.visual", "in_proj_a", "in_proj_b"]


def _load_transformers(
    source: Source, device: str, trust: bool, dtype: str = "bfloat16"
) -> tuple[Any, list[Any], str]:
    import torch
    from transformers import AutoModelForImageTextToText, BitsAndBytesConfig

    torch_dtype = getattr(torch, dtype)
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust, **_hub_kwargs(source)}
    if device == "cuda":
        kwargs["device_map"] = {"": "cuda:0"}
    kernel = compute.SHORT_NAMES.get(dtype, dtype)
    if source.quantized == "bnb4":
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch_dtype,
            # full module paths ("visual" alone does not match); in_proj_a/b stay 16-bit as GPTQ keeps them
            # (quantized, Qwen3.5 collapses) and as bitsandbytes' CPU kernel needs outputs in multiples of 32
            llm_int8_skip_modules=BNB4_SKIP,
        )
        kernel = "bitsandbytes-nf4"
    model = AutoModelForImageTextToText.from_pretrained(source.location, **kwargs)
    return model, [], kernel


def _load_gptq(
    source: Source,
    device: str,
    trust: bool,
    backend: str = "auto",
    build_dir: str = "",
    dtype: str = "bfloat16",
) -> tuple[Any, list[Any], str]:
    """GPTQModel load with the kernels of ``kernels.gptq_kernel_plan`` tried in order: one that fails (no nvcc
    for Marlin, a Triton error) frees what it allocated; the kernel reported names every one that failed."""
    import gc

    import torch

    gptqmodel = import_gptqmodel(build_dir)
    BACKEND, GPTQModel = gptqmodel.BACKEND, gptqmodel.GPTQModel
    # the dequantized matmuls and the 16-bit parts (vision tower, embeddings, lm_head) compute in ``dtype``
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype), "trust_remote_code": trust}
    if not source.is_local:
        kwargs["revision"] = source.revision
    if device == "cuda":
        kwargs["device_map"] = {"": "cuda:0"}
    else:
        kwargs["device"] = "cpu"
    plan = gptq_kernel_plan(device, available_gptq_kernels(device), backend)
    failed: list[str] = []
    for i, name in enumerate(plan):
        if name != "auto":
            kwargs["backend"] = BACKEND(name)
        try:
            wrapper = GPTQModel.load(source.location, **kwargs)
        except Exception as exc:
            if i == len(plan) - 1:
                raise
            log.warning("GPTQ kernel %s failed (%s); trying %s", name, _scrub(repr(exc))[:300], plan[i + 1])
            failed.append(f"{name} failed: {type(exc).__name__}")
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()  # the failed attempt's tensors would inflate every later peak
            continue
        inner = wrapper.model
        note = f" ({'; '.join(failed)})" if failed else ""
        return inner, [wrapper], _gptq_kernel(inner) + note
    raise AssertionError("unreachable: the plan is never empty")


#: Settings that change what a request measures (not the limits, nor the cache): a rerun must match them.


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
    skip = (
        "cache_dir",
        "max_upload_mb",
        "max_duration_s",
        "request_timeout_s",
    )  # no answer changes with them
    # read at the call: a registered task's settings are the bench's flags too
    fp: dict[str, Any] = {n: settings.value(n) for n in settings_mod.flags_for("bench") if n not in skip}
    fp["data_digest"] = data_digest
    fp["stack"] = stack_fingerprint(settings)  # kernels and compile state: set-ups never mix silently
    return fp
