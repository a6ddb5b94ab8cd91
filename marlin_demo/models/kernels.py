"""Which fast kernels run where. transformers binds ``fla``'s Triton ops for every device (a CPU model would
fail), so each is wrapped to run on CUDA tensors only; GPTQModel's AUTO picks Machete on Hopper, which
downloads CUTLASS, so CUDA tries ``gptq_kernel_plan``'s order instead (docs/GPU_CHECK.md)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from marlin_demo.settings import env_value

#: The ops transformers may bind to ``fla`` (module-level names in the Qwen3.5 modeling module).
FLA_OPS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")

#: GPTQ kernels tried on CUDA when MARLIN_GPTQ_BACKEND=auto, fastest first.
GPTQ_CUDA_ORDER = ("gptq_marlin", "gptq_triton", "gptq_torch")

#: GPTQ kernels needing no compiler but Triton's own JIT: the MARLIN_GPTQ_BACKEND values ZeroGPU can run
GPTQ_NO_COMPILER = ("auto", "gptq_triton", "gptq_torch")

#: Where GPTQModel's nvcc-built kernels (Marlin) are cached unless MARLIN_GPTQ_BUILD_DIR says otherwise.
DEFAULT_GPTQ_BUILD_DIR = Path.home() / ".cache" / "marlin-demo" / "gptq-kernels"


def _implementation(fn: Any) -> Any:
    """The callable transformers' ``use_kernel_func_from_hub_with_fallback`` bound for one op."""
    try:
        return inspect.getclosurevars(fn).nonlocals.get("implementation")
    except (TypeError, ValueError):
        return None


def _root(obj: Any) -> str:
    return (getattr(obj, "__module__", None) or "").split(".")[0]


#: transformers' Qwen3.5 module: binds the Gated DeltaNet ops when first imported
QWEN35_MODELING = "transformers.models.qwen3_5.modeling_qwen3_5"


def bind_linear_kernels(module: Any) -> dict[str, str]:
    """Make every fla-bound op in ``module`` device-aware (idempotent); returns op -> CUDA kernel package."""
    bound: dict[str, str] = {}
    for name in FLA_OPS:
        fn = getattr(module, name, None)
        if fn is None:
            continue
        if getattr(fn, "cuda_kernel", None):
            bound[name] = fn.cuda_kernel
            continue
        impl = _implementation(fn)
        if impl is None or _root(impl) in ("", "transformers"):
            continue
        reference = inspect.unwrap(fn)  # transformers' own PyTorch op (functools.wraps keeps it)
        params = frozenset(inspect.signature(reference).parameters)

        def dispatch(
            *args: Any,
            _fast: Callable = fn,
            _ref: Callable = reference,
            _params: frozenset = params,
            **kwargs: Any,
        ) -> Any:
            if args and getattr(args[0], "is_cuda", False):
                return _fast(*args, **kwargs)
            return _ref(*args, **{k: v for k, v in kwargs.items() if k in _params and v is not None})

        functools.update_wrapper(dispatch, reference)
        dispatch.cuda_kernel = _root(impl)  # type: ignore[attr-defined]
        setattr(module, name, dispatch)
        bound[name] = _root(impl)
    return bound


def linear_kernel_for(module: Any, name: str, device: str) -> str | None:
    """The package that runs op ``name`` for a model on ``device``: "torch" for transformers' fallback."""
    fn = getattr(module, name, None)
    if fn is None:
        return None
    cuda_kernel = getattr(fn, "cuda_kernel", None)
    if cuda_kernel:
        return cuda_kernel if device == "cuda" else "torch"
    impl = _implementation(fn)
    if impl is None:  # not transformers' binding wrapper: the op itself
        return "torch" if _root(inspect.unwrap(fn)) == "transformers" else "unknown"
    root = _root(impl)
    if root == "transformers":
        return "torch"
    if root == "gptqmodel":  # gptqmodel puts its own PyTorch port in sys.modules["causal_conv1d"]
        return "torch(gptqmodel port)"
    return root or "unknown"


# ---------------------------------------------------------------------------------------- GPTQ
#: whether kernels nvcc builds at first use (Marlin) may be tried: off on ZeroGPU, which has no nvcc
_COMPILER_BUILDS = [True]


def allow_compiler_builds(allowed: bool) -> None:
    """Allow or forbid kernels that need a compiler at first use (Triton's own JIT stays allowed)."""
    _COMPILER_BUILDS[0] = allowed


def available_gptq_kernels(device: str) -> set[str]:
    """GPTQ kernels worth trying on ``device``, decided without building (the load is the final test): Marlin
    needs compute capability >= 8.0 and nvcc (~2 min build) or a cached build, and compiler builds allowed."""
    if device != "cuda":
        return set()
    import torch

    out = {"gptq_torch"}
    if importlib.util.find_spec("triton") is not None:
        out.add("gptq_triton")
    if not _COMPILER_BUILDS[0]:
        return out
    major = torch.cuda.get_device_capability(0)[0] if torch.cuda.is_available() else 0
    built = any(gptq_build_dir().glob("marlin_bf16*/**/*.so")) if gptq_build_dir().is_dir() else False
    if major >= 8 and (built or _nvcc() is not None):
        out.add("gptq_marlin")
    return out


def _nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def gptq_kernel_plan(device: str, available: Iterable[str], setting: str) -> list[str]:
    """The GPTQ kernels to try, in order: an explicit setting alone (its failure is the user's answer);
    ``auto`` on CUDA ``GPTQ_CUDA_ORDER`` (never Machete's CUTLASS download), elsewhere GPTQModel's AUTO."""
    if setting != "auto":
        return [setting]
    if device != "cuda":
        return ["auto"]
    have = set(available)
    return [k for k in GPTQ_CUDA_ORDER if k in have] or ["gptq_torch"]


def gptq_build_dir(setting: str = "") -> Path:
    """The folder GPTQModel's JIT kernels are built into and loaded from (MARLIN_GPTQ_BUILD_DIR)."""
    raw = setting or env_value("gptq_build_dir")
    return Path(raw).expanduser() if raw else DEFAULT_GPTQ_BUILD_DIR


def import_gptqmodel(build_dir: str = "") -> Any:
    """Import gptqmodel the one safe way: real kernels first, offline, HF_HOME kept, banner on stderr
    (its import sets HF_HOME, moving the Hub cache, and prints a banner that must not reach ``--json``)."""
    import_real_kernels()
    # a caller's value is kept: never download, and build the JIT kernels once per machine in a known folder
    os.environ.setdefault("GPTQMODEL_OFFLINE", "1")
    os.environ.setdefault("GPTQMODEL_TORCH_EXTENSIONS_DIR", str(gptq_build_dir(build_dir)))
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
    before = os.environ.get("HF_HOME")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import gptqmodel
    finally:  # also when the import fails part-way
        if before is None:
            os.environ.pop("HF_HOME", None)
    return gptqmodel


def import_real_kernels() -> None:
    """Import flash-linear-attention (CUDA only: it could never run elsewhere) and causal-conv1d, when
    installed, and bind them before gptqmodel can put its PyTorch ``causal_conv1d`` in ``sys.modules``."""
    import torch

    cuda = torch.cuda.is_available()
    for name in ("fla", "causal_conv1d") if cuda else ("causal_conv1d",):
        if name not in sys.modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    if QWEN35_MODELING not in sys.modules:
        with contextlib.suppress(Exception), contextlib.nullcontext() if cuda else _hidden("fla"):
            importlib.import_module(QWEN35_MODELING)
    if QWEN35_MODELING in sys.modules:  # fla runs on CUDA tensors only (Triton): CPU keeps the fallback
        bind_linear_kernels(sys.modules[QWEN35_MODELING])


@contextlib.contextmanager
def _hidden(package: str) -> Iterator[None]:
    """``package`` cannot be imported inside the block (unless already imported); importable after it."""
    if package in sys.modules:
        yield
        return
    sys.modules[package] = None  # type: ignore[assignment]  # Python's own "blocked import" marker
    try:
        yield
    finally:
        if sys.modules.get(package, 0) is None:
            del sys.modules[package]
