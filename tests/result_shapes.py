"""The public JSON shapes of README's "Result shapes": one list for the engine, CLI, API and MCP tests."""

from __future__ import annotations

METRIC_KEYS = {"latency_s", "ttft_s", "output_tokens", "tokens_per_s", "video_tokens", "peak_memory_mb",
               "memory_kind", "load_s", "device", "queue_s"}  # fmt: skip
RUNTIME_KEYS = {"device", "compute_dtype", "kernel", "gpu_calls"}
#: a result's own ``to_dict()`` (engine, bench and batch rows)
#: ``partial``: null, or {reason, windows_done, windows_total} when ZeroGPU refused a later window's call;
#: ``range``: null, or [start, end] in the video's own seconds when only that part was asked about
CAPTION_KEYS = {"variant", "model", "scene", "events", "raw", "repaired", "metrics", "runtime", "windows",
                "partial", "range"}  # fmt: skip
FIND_KEYS = {"variant", "model", "query", "span", "format_ok", "raw", "metrics", "runtime", "moments",
             "partial", "range"}  # fmt: skip
PARTIAL_KEYS = {"reason", "windows_done", "windows_total"}
#: a caption as the API, MCP and the CLI's ``--json`` give it: with its chapters
API_CAPTION_KEYS = CAPTION_KEYS | {"chapters"}


def cpu_kernel(variant: str) -> str:
    """The kernel a tiny variant reports on this CPU, which follows its compute type (models.compute):
    GPTQModel's int4 ATen kernel takes only 16-bit inputs, so in float32 its AUTO picks TorchFusedLinear."""
    from marlin_demo.models import compute

    dtype = compute.choose("cpu", "bfloat16")
    if variant == "gptq":
        return "TorchFusedLinear" if dtype.dtype == "float32" else "TorchAtenLinear"
    return "bitsandbytes-nf4" if variant == "bnb4" else dtype.short
