"""Round-to-nearest INT8 for the vision tower (+3 MMStar points over 4-bit on a Gemma card), in a sidecar."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

SIDECAR = "rtn_int8.safetensors"
FORMAT = "marlin-rtn-int8"
FORMAT_VERSION = "1"
QMAX = 127  # symmetric: -127..127, -128 unused so that q * scale is symmetric around 0

#: Vision modules that are projectors into the language model: kept 16-bit by the mixed recipe.
PROJECTOR_MARKERS = ("merger", "deepstack")


class SidecarError(RuntimeError):
    """The int8 sidecar does not match the model it is applied to."""


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel INT8: ``weight ~= q * scale[:, None]`` with ``q`` in [-127, 127]."""
    w = weight.detach().to(torch.float32)
    absmax = w.abs().amax(dim=1)
    scale = torch.where(absmax > 0, absmax / QMAX, torch.ones_like(absmax))
    q = torch.clamp(torch.round(w / scale[:, None]), -QMAX, QMAX).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``q * scale`` per output row, in ``dtype``."""
    return (q.to(torch.float32) * scale.to(torch.float32)[:, None]).to(dtype)


class RTNInt8Linear(nn.Module):
    """A linear layer whose weight lives in memory as int8 plus one float32 scale per output row."""

    weight_int8: torch.Tensor  # buffers, registered in __init__
    weight_scale: torch.Tensor

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        if q.dtype != torch.int8 or q.ndim != 2 or scale.shape != (q.shape[0],):
            raise SidecarError(f"bad int8 weight {tuple(q.shape)}/{q.dtype} with scale {tuple(scale.shape)}")
        self.out_features, self.in_features = q.shape
        self.register_buffer("weight_int8", q)
        self.register_buffer("weight_scale", scale.to(torch.float32))
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = dequantize(self.weight_int8, self.weight_scale, x.dtype)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return nn.functional.linear(x, w, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def vision_linear_names(model: nn.Module) -> list[str]:
    """The vision encoder's ``nn.Linear`` modules, projector/merger excluded (they stay 16-bit)."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
        and "visual" in (parts := name.split("."))
        and not any(marker in part for part in parts for marker in PROJECTOR_MARKERS)
    ]


def quantize_modules(
    weights: dict[str, torch.Tensor], progress: bool = True
) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """RTN-quantize ``{module: 16-bit weight}``; returns sidecar tensors and one error row per module."""
    from tqdm.auto import tqdm

    tensors: dict[str, torch.Tensor] = {}
    rows: list[dict[str, Any]] = []
    for name in tqdm(list(weights), desc="RTN int8 (vision linears)", unit="module", disable=not progress):
        w = weights[name].detach().to("cpu", torch.float32)
        q, scale = quantize_weight(w)
        err = w - dequantize(q, scale)
        rows.append(
            {
                "module": name,
                "shape": list(w.shape),
                "rel_error": float(err.norm() / w.norm().clamp_min(1e-12)),
                "max_abs_error": float(err.abs().max()),
                "mse": float(err.pow(2).mean()),
            }
        )
        tensors[f"{name}.weight_int8"] = q.contiguous()
        tensors[f"{name}.weight_scale"] = scale.contiguous()
    return tensors, rows


def checkpoint_weights(folder: Path, names: Iterable[str]) -> dict[str, torch.Tensor]:
    """``{module: weight}`` read straight from a checkpoint's safetensors (no model needed)."""
    from safetensors import safe_open

    wanted = {f"{n}.weight": n for n in names}
    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as fh:
            for key in fh.keys():
                if key in wanted:
                    out[wanted[key]] = fh.get_tensor(key)
    missing = sorted(set(wanted.values()) - set(out))
    if missing:
        raise SidecarError(f"{folder}: no saved weight for {missing[:5]} (checkpoint key names differ?)")
    return {n: out[n] for n in wanted.values()}


def save_sidecar(folder: Path, tensors: dict[str, torch.Tensor]) -> Path:
    """Write the int8 sidecar with a format tag in the safetensors metadata."""
    from safetensors.torch import save_file

    path = Path(folder) / SIDECAR
    save_file(tensors, str(path), metadata={"format": FORMAT, "version": FORMAT_VERSION})
    path.chmod(0o644)
    return path


def read_sidecar(folder: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]] | None:
    """``{module: (q, scale)}`` from the sidecar, or None when the folder has none."""
    from safetensors import safe_open

    path = Path(folder) / SIDECAR
    if not path.exists():
        return None
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
        if meta.get("format") != FORMAT:
            raise SidecarError(f"{path} is not a {FORMAT} file (metadata {meta})")
        keys = set(fh.keys())
        for key in sorted(keys):
            if not key.endswith(".weight_int8"):
                continue
            name = key[: -len(".weight_int8")]
            if f"{name}.weight_scale" not in keys:
                raise SidecarError(f"{path}: {name} has int8 weights but no scale")
            out[name] = (fh.get_tensor(key), fh.get_tensor(f"{name}.weight_scale"))
    return out


def apply_sidecar(model: nn.Module, folder: Path) -> list[str]:
    """Swap the sidecar's modules for ``RTNInt8Linear``; a no-op (empty list) without a sidecar."""
    entries = read_sidecar(folder)
    if not entries:
        return []
    device = next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))
    done = []
    for name, (q, scale) in entries.items():
        try:
            old = model.get_submodule(name)
        except AttributeError as exc:
            raise SidecarError(f"{SIDECAR} names {name}, which this model does not have") from exc
        out_f, in_f = q.shape
        if getattr(old, "out_features", None) != out_f or getattr(old, "in_features", None) != in_f:
            raise SidecarError(f"{SIDECAR}: {name} is {out_f}x{in_f} but the model's module is {old}")
        new = RTNInt8Linear(q, scale, getattr(old, "bias", None)).to(device)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
        done.append(name)
    log.info("applied %s: %d vision linears now int8", SIDECAR, len(done))
    return done
