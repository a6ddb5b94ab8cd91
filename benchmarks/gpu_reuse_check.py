"""Prefix reuse and kernel detection on a CUDA machine (runs on the CPU too, as a dry run).

    python benchmarks/gpu_reuse_check.py --model DIR --out result.json

``DIR`` is a local Qwen3.5 checkpoint with the tiny checkpoint's tokenizer and processor
(any weights: the check is about identical answers and which kernels ran, not quality).
With flash-linear-attention installed, transformers binds its Gated DeltaNet kernels; the
check reports what was bound, the attention path the loader reported, and whether warm
requests (cached prefix) give token for token the answers of cold ones, on a synthetic
2-minute clip planned as a decoded file would be (240 frames at 576x320).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bound_kernels(model: Any) -> dict[str, str]:
    """Which implementation transformers bound for each Gated DeltaNet op (module of the callable)."""
    mod = importlib.import_module(type(model).__module__)
    out = {}
    for name in (
        "torch_chunk_gated_delta_rule",
        "torch_recurrent_gated_delta_rule",
        "causal_conv1d_fn",
        "causal_conv1d_update",
    ):
        fn = getattr(mod, name, None)
        try:
            impl = inspect.getclosurevars(fn).nonlocals.get("implementation") if fn is not None else None
        except (TypeError, ValueError):
            impl = None
        out[name] = "unknown" if impl is None else str(getattr(impl, "__module__", "?"))
    return out


def synthetic(seconds: float, width: int, height: int, fps: float = 30.0) -> Any:
    import torch

    from marlin_demo.model_io import VideoParams
    from marlin_demo.video import PreparedVideo, VideoInfo, plan_sampling
    from marlin_demo.video.decode import _resize

    total = int(seconds * fps)
    info = VideoInfo(
        "synthetic.mp4", 0, "synthetic", seconds, fps, total, width, height, width, height, 0, "raw"
    )
    plan = plan_sampling(info, VideoParams())
    idx = plan.indices
    frames = torch.zeros(plan.nframes, 3, height, width, dtype=torch.uint8)
    for k, i in enumerate(idx):
        x = int((width - 64) * i / max(total - 1, 1))
        frames[k, 0] = 40
        frames[k, :, height // 2 - 32 : height // 2 + 32, x : x + 64] = 220
    meta = {"fps": fps, "frames_indices": idx, "total_num_frames": total, "video_backend": "synthetic"}
    return PreparedVideo(frames=_resize(frames, plan.height, plan.width), metadata=meta, plan=plan, info=info)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default="gpu_reuse.json")
    ap.add_argument("--seconds", type=float, default=120.0)
    args = ap.parse_args()

    import torch
    import transformers

    from marlin_demo import model_io
    from marlin_demo.engine import Engine
    from marlin_demo.settings import Settings

    report: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
        "transformers": transformers.__version__,
    }
    try:
        import fla

        report["fla"] = getattr(fla, "__version__", "?")
    except Exception as exc:  # not installed, or broken
        report["fla"] = f"unavailable: {type(exc).__name__}"
    out = Path(args.out)

    def save() -> None:
        out.write_text(json.dumps(report, indent=2, default=str))

    settings = Settings(model=args.model, variants="bf16")
    warm = Engine(settings)
    loaded = warm.load("bf16")
    report["device"] = loaded.device
    report["loader_attention"] = loaded.attention
    report["loader_kernel"] = loaded.kernel
    report["bound"] = bound_kernels(loaded.model)
    save()
    print(json.dumps(report, indent=2), flush=True)

    short = synthetic(4.0, 640, 360)
    t = time.perf_counter()
    warm.find(short, "warm-up", "bf16")  # compiles the kernels
    report["warmup_s"] = time.perf_counter() - t
    clip = synthetic(args.seconds, 640, 360)
    report["video_tokens"] = clip.plan.video_tokens
    queries = ["the square crosses the frame", "a red light blinks", "(2) the square stops"]
    runs = []
    for q in queries:
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        sync()
        t = time.perf_counter()
        gen, m, info, _ = warm._run(clip, "bf16", model_io.find_prompt(q), 32, None)
        sync()
        runs.append(
            {
                "query": q,
                "s": time.perf_counter() - t,
                "reused_prefix": info.reused_prefix,
                "prefill_s": info.prefill_s,
                "ttft_s": m.ttft_s,
                "first_text_s": getattr(info, "first_text_s", None),
                "peak_mb": m.peak_memory_mb,
                "tokens": gen.token_ids,
            }
        )
        print(runs[-1]["query"], round(runs[-1]["s"], 3), runs[-1]["reused_prefix"], flush=True)
    report["runs"] = runs
    report["prefix_cache_mb"] = warm.prefixes.nbytes() / 2**20
    save()
    checks = []
    for q, r in zip(queries[1:], runs[1:], strict=True):
        fresh = Engine(settings)
        fresh._models["bf16"] = loaded  # the same weights, nothing cached
        cold = fresh._run(clip, "bf16", model_io.find_prompt(q), 32, None)[0].token_ids
        off = Engine(settings, prefix_cache_size=0)
        off._models["bf16"] = loaded
        plain = off._run(clip, "bf16", model_io.find_prompt(q), 32, None)[0].token_ids
        checks.append(
            {
                "query": q,
                "warm_equals_cold": r["tokens"] == cold,
                "warm_equals_one_pass": r["tokens"] == plain,
            }
        )
        print(checks[-1], flush=True)
    report["checks"] = checks
    report["second_over_first"] = runs[1]["s"] / runs[0]["s"]
    save()
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
