"""The type a model computes in: 16-bit where the processor runs it natively, else float32 (bf16 on a CPU
without AVX512-BF16 or AMX is ~30x slower: docs/SPEED.md). ``MARLIN_COMPUTE_DTYPE`` overrides."""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path

#: the types a model may compute in, and the setting's values
COMPUTE_DTYPES = ("bfloat16", "float16", "float32")
SETTING_VALUES = ("auto", *COMPUTE_DTYPES)
#: short names people write, accepted by the setting
ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
SHORT_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class CpuCaps:
    """What torch reports about this CPU's 16-bit arithmetic (``probe``): the checks the choice rests on
    (``aten`` honours ``ATEN_CPU_CAPABILITY``, so an AVX2-only machine can be imitated)."""

    x86: bool
    aten: str
    avx512_bf16: bool = False
    amx_tile: bool = False
    mkldnn_bf16: bool = False
    mkldnn_fp16: bool = False

    def native(self, dtype: str) -> bool:
        """Whether this CPU computes ``dtype`` with its own instructions (float32 always)."""
        if dtype == "float32":
            return True
        if dtype == "bfloat16":
            if self.x86:  # ATen below AVX512 runs bf16 through its slow reference kernels
                return self.aten.upper().startswith("AVX512") and (self.avx512_bf16 or self.amx_tile)
            return self.mkldnn_bf16
        if dtype == "float16":
            return self.mkldnn_fp16 and (not self.x86 or self.aten.upper().startswith("AVX512"))
        return False

    def describe(self) -> str:
        """The facts in one line (bench environment, docs)."""
        flags = (
            {"AVX512-BF16": self.avx512_bf16, "AMX": self.amx_tile}
            if self.x86
            else {"bf16": self.mkldnn_bf16}
        )
        flags["fp16"] = self.mkldnn_fp16
        return ", ".join([f"ATen {self.aten}", *(f"{k} {'yes' if on else 'no'}" for k, on in flags.items())])


@functools.lru_cache(maxsize=1)
def probe() -> CpuCaps:
    """This machine's ``CpuCaps``, asked of torch once (they cannot change while the process runs)."""
    import torch

    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")

    def ask(fn: str, where: object) -> bool:
        try:
            return bool(getattr(where, fn)())
        except (AttributeError, RuntimeError):
            return False

    return CpuCaps(
        x86=x86,
        aten=str(torch.backends.cpu.get_cpu_capability()),
        avx512_bf16=x86 and ask("_is_avx512_bf16_supported", torch.cpu),
        amx_tile=x86 and ask("_is_amx_tile_supported", torch.cpu),
        mkldnn_bf16=ask("_is_mkldnn_bf16_supported", torch.ops.mkldnn),
        mkldnn_fp16=ask("_is_mkldnn_fp16_supported", torch.ops.mkldnn),
    )


@dataclass(frozen=True)
class Choice:
    """The compute type chosen and why (the header and the bench say the reason)."""

    dtype: str
    reason: str

    @property
    def short(self) -> str:
        return SHORT_NAMES.get(self.dtype, self.dtype)


def parse_setting(setting: str) -> str:
    """``MARLIN_COMPUTE_DTYPE`` checked: auto or one of ``COMPUTE_DTYPES`` (short names accepted)."""
    value = (setting or "auto").strip().lower()
    value = ALIASES.get(value, value)
    if value not in SETTING_VALUES:
        raise ValueError(
            f"MARLIN_COMPUTE_DTYPE={setting!r} is not a compute type: "
            "choose auto, bfloat16, float16 or float32."
        )
    return value


def choose(device: str, wanted: str, setting: str = "auto", caps: CpuCaps | None = None) -> Choice:
    """The type a variant whose weights are ``wanted`` computes in on ``device``: a set ``setting``, else
    ``wanted`` on CUDA or where the CPU runs it natively (``CpuCaps.native``), else float32."""
    value = parse_setting(setting)
    if value != "auto":
        return Choice(value, "set by MARLIN_COMPUTE_DTYPE")
    if device == "cuda" or wanted == "float32":
        return Choice(wanted, "the weights' own type")
    caps = caps or probe()
    if caps.native(wanted):
        return Choice(wanted, f"this CPU computes {wanted} natively")
    return Choice("float32", f"this CPU has no native {wanted} ({caps.describe()})")


def cpu_name() -> str:
    """The processor's name as /proc/cpuinfo gives it (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """Cores, processor and bf16's compute type, for logs: a time means little without them."""
    bf16 = choose("cpu", "bfloat16").dtype
    return f"{os.cpu_count()} cores, {cpu_name()}, bf16 weights compute in {bf16}; {probe().describe()}"
