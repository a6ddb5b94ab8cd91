"""Machine and package versions: a run's record of where it ran."""

from __future__ import annotations

import os
import platform
from typing import Any

from marlin_demo.models import compute

ENV_PACKAGES = tuple(
    "torch transformers gptqmodel bitsandbytes accelerate torchcodec qwen-vl-utils av rouge-score".split()
)


def _mem_total_mb() -> float | None:
    try:  # the kernel's total RAM (what /proc/meminfo's MemTotal says)
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20, 1)
    except (OSError, ValueError):
        return None


def environment() -> dict[str, Any]:
    """Machine and package versions (the GPU part only when CUDA is visible)."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for pkg in ENV_PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": compute.cpu_name(),
        "cpu_count": os.cpu_count(),
        "memory_total_mb": _mem_total_mb(),
        # what the compute type follows on a CPU (models.compute); the fingerprint's stack has the choice
        "cpu_16bit": compute.probe().describe(),
        "packages": versions,
        "cuda": None,
        "cudnn": None,
        "gpu": None,
        "gpu_memory_mb": None,
        "gpu_count": 0,
    }
    try:
        import torch

        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env.update(
                gpu=torch.cuda.get_device_name(0),
                gpu_memory_mb=round(props.total_memory / 2**20, 1),
                gpu_count=torch.cuda.device_count(),
                cudnn=torch.backends.cudnn.version(),
            )
    except Exception:
        pass
    return env
