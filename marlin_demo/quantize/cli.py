"""``python -m marlin_demo quantize``: arguments, one error line, exit codes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from marlin_demo.exits import EXIT_FAILED, EXIT_OK, fail
from marlin_demo.quantize.build import Options, run
from marlin_demo.quantize.recipes import RECIPES, QuantizeError
from marlin_demo.settings import EXAMPLES_DIR


def register(subparsers: Any) -> None:
    """Add ``quantize`` to ``python -m marlin_demo`` (cli.py discovers this module)."""
    p = subparsers.add_parser(
        "quantize",
        help="build a quantized variant (GPTQ 4-bit, MLP-only, or mixed with vision INT8)",
        description="Quantize a 16-bit Marlin checkpoint into a folder the app loads as an extra variant "
        "(MARLIN_EXTRA_VARIANTS=name=DIR). See docs/QUANTIZE.md.",
    )
    p.add_argument("--model", required=True, help="16-bit checkpoint: a local folder, a Hub id, or 'tiny'")
    p.add_argument("--out", required=True, help="output folder (must be new or empty, or pass --overwrite)")
    p.add_argument("--recipe", required=True, choices=sorted(RECIPES), help="what to quantize and how")
    p.add_argument(
        "--calibration",
        default=str(EXAMPLES_DIR),
        help="folder with examples.json (video, scene, events[, queries]) and its videos "
        "(default: examples/)",
    )
    p.add_argument(
        "--samples", type=int, default=None, help="use the first N calibration pairs (default: all)"
    )
    p.add_argument(
        "--max-gpu-memory", default="5GiB", help="GPU memory cap on CUDA (default 5GiB; no effect on CPU)"
    )
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="where to quantize")
    p.add_argument(
        "--calibration-mode",
        default="video",
        choices=("video", "text"),
        help="video (default): frames through the processor; "
        "text: the same prompts and answers without the video",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print report.json on stdout")
    p.set_defaults(func=cmd_quantize)


def cmd_quantize(args: argparse.Namespace) -> int:
    """CLI entry: 0 done, 2 bad input, 1 quantization failed."""
    opts = Options(
        model=args.model,
        out=Path(args.out),
        recipe=args.recipe,
        calibration=Path(args.calibration),
        samples=args.samples,
        max_gpu_memory=args.max_gpu_memory,
        device=args.device,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        calibration_mode=args.calibration_mode,
    )
    try:
        report = run(opts)
    except ValueError as exc:
        return fail(str(exc))
    except (QuantizeError, RuntimeError, OSError) as exc:
        return fail(f"quantization failed: {type(exc).__name__}: {exc}", EXIT_FAILED)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        c = report["calibration"]
        print(f"{report['recipe']}: {report['out']}")
        print(f"  quantized: {report['counts']}")
        print(f"  calibration: {c['mode']}, {c['samples']} samples, {c['total_video_tokens']} video tokens")
        print(
            f"  time {report['time_s']['total']:.1f} s, "
            f"peak {report['peak_memory_mb']:.0f} MB ({report['memory_kind']})"
        )
        print(
            f"  load it: MARLIN_EXTRA_VARIANTS=q={report['out']} "
            "python -m marlin_demo caption VIDEO --variant q"
        )
    return EXIT_OK
