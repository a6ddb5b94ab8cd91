"""Which fast kernels run where: Gated DeltaNet ops per device, GPTQ kernel order, GPTQModel offline.

Two facts of this stack shape this module (docs/GPU_CHECK.md):

- transformers 5.24's Qwen3.5 module binds ``fla``'s chunked / fused-recurrent gated delta
  rule at import time, for every device: with ``fla-core`` installed, a CPU model would
  call Triton kernels and fail ("0 active drivers"). ``bind_linear_kernels`` therefore
  replaces each bound op by a dispatcher that runs fla on CUDA tensors and transformers'
  own PyTorch reference on anything else, so installing fla changes nothing on a CPU.
- GPTQModel's AUTO kernel picks Machete on Hopper, which downloads CUTLASS; offline that
  fails. ``GPTQMODEL_OFFLINE=1`` (read by gptqmodel 7.6's ``utils/machete.py``) makes the
  Machete check fail fast so AUTO moves on, and the loader does not use AUTO on CUDA
  anyway: it tries ``gptq_kernel_plan``'s order (Marlin, Triton, Torch).
"""

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
    """Make every fla-bound op in ``module`` device-aware; returns op -> CUDA kernel package.

    Idempotent. An op transformers left on its PyTorch fallback is not touched.
    """
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
#: whether kernels that a compiler builds at first use (GPTQModel's Marlin: nvcc) may be tried; the app
#: turns this off on ZeroGPU, which has no nvcc (a fact of the platform, so it is never looked for there)
_COMPILER_BUILDS = [True]


def allow_compiler_builds(allowed: bool) -> None:
    """Allow or forbid kernels that need a compiler at first use (the caller knows the platform:
    ``service`` turns them off on ZeroGPU); Triton's own JIT needs no nvcc and stays allowed."""
    _COMPILER_BUILDS[0] = allowed


def compiler_builds_allowed() -> bool:
    """See :func:`allow_compiler_builds`."""
    return _COMPILER_BUILDS[0]


def available_gptq_kernels(device: str, compiler_builds: bool | None = None) -> set[str]:
    """GPTQ kernels worth trying on ``device``: what can build or run here, decided without building.

    Marlin needs compute capability >= 8.0 and either nvcc (first use compiles it, ~2 min)
    or an earlier build in the cache folder; Triton needs ``triton`` (its kernels JIT-compile at
    first launch with Triton's own compiler, no nvcc). With ``compiler_builds`` False (None: the
    process's setting, :func:`allow_compiler_builds`; ZeroGPU turns it off) Marlin is never
    offered and nvcc is not even looked for. The load itself is the final test: a kernel that
    fails there is skipped for the next one.
    """
    if device != "cuda":
        return set()
    import torch

    out = {"gptq_torch"}
    if importlib.util.find_spec("triton") is not None:
        out.add("gptq_triton")
    if not (compiler_builds_allowed() if compiler_builds is None else compiler_builds):
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
    """The GPTQ kernels to try, in order: a pure function of (device, kernels available, setting).

    An explicit MARLIN_GPTQ_BACKEND is the only one tried (its failure is the user's answer).
    On CUDA, ``auto`` means Marlin, then Triton, then Torch, whichever are available; never
    GPTQModel's AUTO, whose Hopper pick (Machete) downloads CUTLASS. Elsewhere ``auto`` stays
    GPTQModel's AUTO (on a CPU it picks its int4 ATen/torch kernel without any download).
    """
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


def gptqmodel_environment(build_dir: str = "") -> dict[str, str]:
    """The variables set before gptqmodel is imported; a value the caller already set is kept.

    GPTQMODEL_OFFLINE: gptqmodel 7.6 never downloads (Machete's CUTLASS fetch fails fast instead).
    GPTQMODEL_TORCH_EXTENSIONS_DIR: the root of its torch.ops JIT builds (Marlin lands in
    ``<dir>/marlin_bf16``), so the ~2 min nvcc build happens once per machine, in a known place.
    """
    wanted = {
        "GPTQMODEL_OFFLINE": "1",
        "GPTQMODEL_TORCH_EXTENSIONS_DIR": str(gptq_build_dir(build_dir)),
        "GPTQMODEL_CPU_WORKERS": "2",
    }
    for key, value in wanted.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in wanted}


def import_gptqmodel(build_dir: str = "") -> Any:
    """Import gptqmodel the one safe way: real kernels first, offline, HF_HOME kept, banner on stderr.

    Importing gptqmodel sets HF_HOME when unset (moving the Hub cache) and prints a banner
    that must not reach ``--json`` stdout. ``kernels.gptqmodel_environment`` sets its offline
    switch and JIT build folder first.
    """
    import contextlib

    import_real_kernels()
    gptqmodel_environment(build_dir)
    before = os.environ.get("HF_HOME")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import gptqmodel
    finally:  # also when the import fails part-way
        if before is None:
            os.environ.pop("HF_HOME", None)
    return gptqmodel


def import_real_kernels() -> None:
    """Import flash-linear-attention and causal-conv1d, when installed, before anything else can.

    transformers binds these ops when its Qwen3.5 module is first imported, and importing
    gptqmodel puts a pure-PyTorch ``causal_conv1d`` into ``sys.modules`` unless the real one
    is already there. Importing the Qwen3.5 module here too fixes the binding before gptqmodel
    can touch it: the real kernel when installed, else transformers' own fallback, whatever
    variant loads first (so bf16 and gptq differ only by their weights). Without CUDA, fla (Triton,
    CUDA tensors only) could never run: it is left out of the binding, which spares every process on a
    CPU machine its import (~1.5 s) and Triton's "not supported" warning. (On ZeroGPU, ``spaces``, which
    app.py imports first, reports CUDA in the main process too, so fla is bound there as on any GPU.)
    """
    import importlib

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
