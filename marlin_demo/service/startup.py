"""Engine start-up without gradio (for a CLI, batch or test): the model, or the tiny stand-in and why."""

from __future__ import annotations

import logging
import math
import os
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlparse

from marlin_demo import variants
from marlin_demo.engine import USER_ERRORS, Engine
from marlin_demo.models import ModelLoadError
from marlin_demo.models.kernels import GPTQ_NO_COMPILER, allow_compiler_builds
from marlin_demo.service import capacity, zerogpu_rules
from marlin_demo.settings import Settings, env_name, env_value
from marlin_demo.tasks import TASKS

log = logging.getLogger(__name__)

FALLBACK_FIX = (
    "To use the real model: connect to the Hugging Face Hub (accept the model's conditions and set HF_TOKEN "
    "for the gated repo), or download the weights and point MARLIN_MODEL / --model at the folder. "
    "To start the stand-in on purpose (and skip this check): python app.py --model tiny."
)


@dataclass
class ModelStatus:
    """What the visitor must be told about the model: which one was asked for and why another runs."""

    requested: str
    fallback_reason: str | None = None
    #: {variant: why it is not offered on this machine} (``capacity.withheld``)
    withheld: dict[str, str] = field(default_factory=dict)
    #: on ZeroGPU, why the start-up call did not warm every variant, for the page ("" when it did)
    warm_up_note: str = ""

    @property
    def fell_back(self) -> bool:
        return self.fallback_reason is not None

    @property
    def withheld_note(self) -> str:
        """One sentence per variant not offered here ("" when every variant is)."""
        return " ".join(self.withheld.values())


def _hub_unavailable(settings: Settings, variant: str) -> str | None:
    """A quick reason the first variant cannot come from the Hub, or None when it might (without it a
    machine with no network spends over a minute in the Hub client's retries)."""
    kind = variants.kind_of(variant)
    if settings.model != "marlin" or kind is None:
        return None
    repo = str(getattr(settings, kind.repo_field))
    revision = str(getattr(settings, kind.revision_field))
    if Path(repo).expanduser().is_dir():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo, "config.json", revision=revision)
    except Exception:
        cached = None
    if isinstance(cached, str):
        return None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}:
        return f"HF_HUB_OFFLINE is set and {repo} is not in the local Hugging Face cache."
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or 443
    try:
        with socket.create_connection((host, port), timeout=3):
            return None
    except OSError as exc:
        why = exc.__class__.__name__
        return f"The Hugging Face Hub ({host}) is unreachable ({why}) and {repo} is not in the local cache."


def start_engine(settings: Settings, total_mb: float | None = None) -> tuple[Engine, ModelStatus]:
    """An engine that can answer: the requested model (its first variant loaded now), or the tiny
    stand-in with the reason why; on a CPU without the variants this machine cannot run (``offered``)."""
    status = ModelStatus(requested=settings.model)
    stand_in = settings.with_(model="tiny")  # every variant: the stand-in runs them all
    settings, status.withheld = offered(settings, total_mb)
    if status.withheld and not settings.variant_list:  # nothing this machine can run
        status.fallback_reason = status.withheld_note
        return Engine(stand_in), status
    engine = Engine(settings)
    if settings.is_tiny or not engine.variants:
        return engine, status
    first = engine.variants[0]
    reason = _hub_unavailable(settings, first)
    if reason is None:
        try:
            engine.load(first)
            return engine, status
        except ModelLoadError as exc:
            reason = str(exc)
    log.warning("falling back to the tiny stand-in: %s", reason)
    status.fallback_reason = reason
    status.withheld = {}  # the stand-in runs every variant
    return Engine(stand_in), status


def offered(settings: Settings, total_mb: float | None = None) -> tuple[Settings, dict[str, str]]:
    """The settings without the variants this CPU cannot run (``capacity.withheld``: failed here, or
    more memory than ``total_mb``), and why each is left out; elsewhere every variant is offered."""
    if settings.is_tiny or capacity.device_of(settings) != "cpu":  # (no device: the load says why)
        return settings, {}
    speed = capacity.speed_for(settings, "cpu")
    reasons = capacity.withheld(speed, capacity.total_memory_mb() if total_mb is None else total_mb)
    reasons = {v: why for v, why in reasons.items() if v in settings.variant_list}
    if not reasons:
        return settings, {}
    kept = [v.strip() for v in settings.variants.split(",") if v.strip() and v.strip() not in reasons]
    return settings.with_(variants=",".join(kept)), reasons


def preload(engine: Engine) -> dict[str, str]:
    """Load every variant now, so a Space's first visitor does not pay for it; {variant: error}."""
    errors: dict[str, str] = {}
    for variant in engine.variants:
        try:
            engine.load(variant)
        except USER_ERRORS as exc:
            log.warning("preloading %s failed: %s", variant, exc)
            errors[variant] = str(exc)
    return errors


def check_limits(settings: Settings, zero_gpu: bool = False) -> Settings:
    """The settings to run with once they agree with the measured speeds, else a ValueError with a sentence
    per conflict; the real model on a CPU gets an unset time limit of one window's measured time."""
    device = capacity.device_of(settings)
    if device is None:
        return settings  # the load says what is wrong with the device
    settings = _derived_time_limit(settings, device)
    found = capacity.conflicts(settings, device, zero_gpu)
    if zero_gpu:
        found += zero_gpu_refusals(settings)
    if found:
        raise ValueError(" ".join(found))
    return settings


def _derived_time_limit(settings: Settings, device: str) -> Settings:
    """``settings`` with the time limit raised to one window's measured time on this CPU, when the real
    model runs on a CPU and nobody set the limit (neither ``MARLIN_REQUEST_TIMEOUT_S`` nor its flag)."""
    default = next(f.default for f in fields(Settings) if f.name == "request_timeout_s")
    if device != "cpu" or settings.is_tiny or env_value("request_timeout_s"):
        return settings
    speed = None if settings.request_timeout_s != default else capacity.speed_for(settings, device)
    need = 0 if speed is None else max(math.ceil(capacity.window_s(task, settings, speed)) for task in TASKS)
    if speed is None or need <= settings.request_timeout_s:
        return settings
    log.warning(
        "%s raised from %g to %d s: one window of the real model can take that long on this CPU (%s, "
        "service/speeds.json); set it to choose another limit.",
        env_name("request_timeout_s"),
        settings.request_timeout_s,
        need,
        speed.name,
    )
    return settings.with_(request_timeout_s=float(need))


def zero_gpu_refusals(settings: Settings) -> list[str]:
    """What ZeroGPU cannot run, one sentence each (``zerogpu.json``: no torch.compile, no nvcc)."""
    found = []
    if settings.compile and not zerogpu_rules.facts()["torch_compile"]:
        found.append(
            "MARLIN_COMPILE (torch.compile) is not supported on ZeroGPU: unset it there (ZeroGPU compiles "
            f"only ahead of time, {zerogpu_rules.facts()['aot_compile']}, which this app does not use)."
        )
    if settings.gptq_backend not in GPTQ_NO_COMPILER and not zerogpu_rules.facts()["nvcc"]:
        found.append(
            f"MARLIN_GPTQ_BACKEND={settings.gptq_backend} may need nvcc to build at first use, and ZeroGPU "
            f"has none: use one of {', '.join(GPTQ_NO_COMPILER)} there."
        )
    return found


def prepare_zero_gpu() -> None:
    """Tell the layers below ZeroGPU has no compiler: no kernel built with one, and dynamo's ``force_eager``
    stance process-wide (``torch._dynamo.config.disable`` is per-thread). Called before any load."""
    import torch

    allow_compiler_builds(bool(zerogpu_rules.facts()["nvcc"]))
    torch.compiler.set_stance("force_eager")
