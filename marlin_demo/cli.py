"""Command line: ``python -m marlin_demo caption|find|tiny|bench|quantize``. Bad input ends in one line on
stderr and a non-zero exit (``exits``); library chatter goes to stderr so ``--json`` stays parseable."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marlin_demo import settings as settings_mod
from marlin_demo import variants
from marlin_demo.exits import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, TINY_NOTE, fail
from marlin_demo.results import Done, Progress
from marlin_demo.tasks import TASKS, get_task
from marlin_demo.tasks.registry import seconds

# Subcommands that live in their own modules register themselves through `register(subparsers)`.
PLUGIN_MODULES = ("marlin_demo.bench", "marlin_demo.quantize", "marlin_demo.batch", "marlin_demo.library")


def format_metrics(m: dict[str, Any]) -> str:
    parts = [f"latency {m['latency_s']:.2f} s"]
    if m.get("ttft_s") is not None:
        parts.append(f"first token {m['ttft_s']:.2f} s")
    parts.append(f"{m['output_tokens']} tokens")
    if m.get("tokens_per_s"):
        parts.append(f"{m['tokens_per_s']:.1f} tok/s")
    parts.append(f"{m['video_tokens']} video tokens")
    parts.append(f"peak {m['peak_memory_mb']:.0f} MB ({m['memory_kind']})")
    parts.append(f"load {m['load_s']:.2f} s on {m['device']}")
    return " · ".join(parts)


def format_run(info: Any) -> str:
    """What the JSON leaves out: first visible text, the kernels that ran, what was reused."""
    parts = [] if info.first_text_s is None else [f"first text {info.first_text_s:.2f} s"]
    parts += [f"kernel {info.kernel or '-'}", f"attention {info.attention or '-'}"]
    parts.append(f"computed in {info.runtime.compute_dtype or '-'}")
    if info.compile and info.compile != "off":
        parts.append(f"compile {info.compile}, {info.compile_s:.1f} s paid")
    reused = [what for what, yes in (("video", info.cached_video), ("prefix", info.reused_prefix)) if yes]
    parts.append(f"reused {' + '.join(reused)}" if reused else "nothing reused")
    return " · ".join(parts)


def format_answer(result: Any, task: str) -> str:
    """The readable answer: task, variant, model, range, partial label, the answer's text, its cost."""
    d = result.to_dict()
    lines = [f"{task.capitalize()} · {d['variant']} · {d['model']}"]
    if result.range_s is not None:
        lines.append(f"Range: {seconds(result.range_s[0])} - {seconds(result.range_s[1])} of the video")
    if result.partial is not None:
        lines.append(result.partial.note())
    lines += [*get_task(task).answer.text(result), "", format_metrics(d["metrics"]), format_run(result.info)]
    return "\n".join(lines)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    settings_mod.add_arguments(p, only=settings_mod.flags_for("run"))
    p.add_argument("--variant", default="gptq", help="gptq (default), bnb4, bf16 or an extra variant's name")
    p.add_argument(
        "--start",
        type=float,
        default=None,
        metavar="S",
        help="answer only from S seconds of the video on (times stay on the video's timeline)",
    )
    p.add_argument("--end", type=float, default=None, metavar="S",
                   help="answer only up to S seconds of the video (default: its end)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="marlin-demo", description="Marlin-2B: what happens, and when (also python -m marlin_demo)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    # listed for --help only: main() hands `app ...` to the app's own parser before this one runs
    sub.add_parser("app", help="serve the Gradio app (the flags of python app.py; app --help lists them)")
    for name, task in TASKS.items():  # one sub-command per task: `caption VIDEO`, `find VIDEO QUERY`
        p = sub.add_parser(name, help=task.help)
        p.add_argument("video")
        if task.query:
            p.add_argument("query")
        for flag, about in task.answer.formats:  # its other outputs (caption: --chapters)
            p.add_argument(f"--{flag}", action="store_true", help=about)
        _add_model_args(p)
        p.set_defaults(func=cmd_task)
    p = sub.add_parser("tiny", help="build the offline tiny checkpoint (and its GPTQ copy)")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--no-gptq", action="store_true", help="build only the 16-bit checkpoint")
    p.set_defaults(func=cmd_tiny)
    for name in PLUGIN_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def _engine(args: argparse.Namespace) -> Any:
    """The engine for a command, once its settings agree with the measured speeds and the variant asked
    for can run on this machine (else a ValueError saying why, in one sentence)."""
    from marlin_demo.engine import Engine
    from marlin_demo.service.startup import check_limits, offered

    asked = settings_mod.from_args(args)
    variant = getattr(args, "variant", None)
    if variant is not None and variant not in asked.variant_list:  # said before torch is imported
        raise ValueError(variants.unknown(variant, asked.variant_list))
    settings, withheld = offered(check_limits(asked))
    if variant in withheld:
        raise ValueError(withheld[args.variant])
    return Engine(settings)


def cmd_task(args: argparse.Namespace) -> int:
    """A task's sub-command: the request's answer, readable, as JSON or as chapters."""
    from marlin_demo.engine import USER_ERRORS
    from marlin_demo.models import ModelLoadError

    if not os.path.isfile(args.video):  # said before any model is loaded
        return fail(f"No file at {args.video}: give the path of a video file.")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            engine = _engine(args)
            result = run_with_progress(engine, args)
    except USER_ERRORS as exc:
        return fail(str(exc), EXIT_FAILED if isinstance(exc, ModelLoadError) else EXIT_BAD_INPUT)
    answer = get_task(args.command).answer
    chosen = [flag for flag, _ in answer.formats if getattr(args, flag)]
    if args.json:
        print(json.dumps(answer.to_json(result), ensure_ascii=False, indent=2))
    elif chosen:
        out, note = answer.formatted(result, chosen[0])
        if note:  # e.g. why the clip cannot have chapters, on stderr
            print(note, file=sys.stderr)
        print(out)
    else:
        if engine.settings.is_tiny:
            print(TINY_NOTE)
        print(format_answer(result, args.command))
    return EXIT_OK


def run_with_progress(engine: Any, args: argparse.Namespace) -> Any:
    """The request's result; unless ``--json``, one stderr line per window of a long video as it starts
    (``caption: window k of n``). ``--start`` / ``--end``: only that time range."""
    from marlin_demo import service  # imported late: ``--help`` stays fast

    task, query = args.command, getattr(args, "query", None)
    request = (engine, task, args.video, args.variant, query)
    if args.json:
        return service.run(*request, start_s=args.start, end_s=args.end)
    with contextlib.closing(service.stream(*request, start_s=args.start, end_s=args.end)) as stages:
        for stage in stages:
            if isinstance(stage, Progress) and stage.window and not stage.text and stage.windows != 1:
                print(f"{task}: window {stage.window} of {stage.windows}", file=sys.stderr, flush=True)
            elif isinstance(stage, Done):
                return stage.result
    raise RuntimeError("the request ended without a result")  # pragma: no cover - stream always ends in Done


def cmd_tiny(args: argparse.Namespace) -> int:
    from marlin_demo.models.tiny import ensure_tiny, weights_digest

    with contextlib.redirect_stdout(sys.stderr):
        paths = ensure_tiny(Path(args.cache_dir) if args.cache_dir else None, with_gptq=not args.no_gptq)
    for kind in ("bf16", "gptq"):
        if (paths[kind] / "config.json").exists():
            print(f"{kind}: {paths[kind]} (weights {weights_digest(paths[kind])})")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["app"]:  # every app.py flag passes through untouched
        from marlin_demo.app import main as app_main  # alias: this module has its own main()

        app_main(argv[1:], prog="marlin-demo app")
        return EXIT_OK
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
