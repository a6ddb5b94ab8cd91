"""``python -m marlin_demo batch INPUT --task caption|find --out DIR [--ray [ADDRESS]]``."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from marlin_demo import settings as settings_mod
from marlin_demo.exits import EXIT_FAILED, EXIT_OK, fail, missing_extra
from marlin_demo.library import cluster
from marlin_demo.tasks import TASKS

#: The settings ``batch`` takes as flags (``commands`` metadata of ``Settings``).


def cmd_batch(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from marlin_demo.batch.rows import BatchError, ResultsWriter, run_local, run_ray
    from marlin_demo.engine import Engine
    from marlin_demo.library.inputs import InputError, collect
    from marlin_demo.models import ModelLoadError, fingerprint
    from marlin_demo.service.startup import check_limits

    need = missing_extra("batch", "batch --ray") if args.ray is not None else None
    if need:  # before anything is written to --out
        return fail(need)
    try:
        settings = check_limits(settings_mod.from_args(args))
        items = collect(args.input, args.task, args.query)
        fp = fingerprint(settings, "")
        fp.pop("data_digest", None)  # the inputs may grow between runs: only new items run
        fp.update(task=args.task, variant=args.variant)
        writer = ResultsWriter(Path(args.out), fp, fresh=args.fresh, sidecars=args.sidecars)
        pending = writer.pending(items)
    except (InputError, BatchError, ValueError) as exc:
        return fail(str(exc))
    if writer.repaired:
        print("note: a torn last line of results.jsonl (an interrupted write) was removed.", file=sys.stderr)
    if args.workers < 1:
        return fail("--workers must be at least 1.")
    mode = "local" if args.ray is None else "ray"
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill stops as Ctrl-C does
    done = len(items) - len(pending)
    bar = tqdm(
        total=len(items), initial=done, unit="video", desc=args.task, file=sys.stderr, dynamic_ncols=True
    )
    try:
        if pending:
            with contextlib.redirect_stdout(sys.stderr):
                if args.ray is None:
                    engine = Engine(settings)
                    try:
                        engine.load(args.variant)
                    except ModelLoadError as exc:
                        return fail(str(exc), EXIT_FAILED)
                    run_local(engine, pending, args.task, args.variant, writer, bar)
                else:
                    address = None if args.ray == "local" else args.ray
                    gpus = args.gpus_per_worker
                    run_ray(
                        settings, pending, args.task, args.variant, writer, bar, address, args.workers, gpus
                    )
    finally:
        bar.close()
        summary = writer.finish(items, mode, args.workers if args.ray is not None else 1)
    print(
        f"{summary['rows']} of {summary['items']} rows in {args.out}: {summary['ok']} ok, "
        f"{summary['error']} failed, {summary['pending']} pending (summary.json)"
    )
    return EXIT_OK


def register(subparsers: Any) -> None:
    """Add ``batch`` to the CLI."""
    p = subparsers.add_parser(
        "batch",
        help="caption or search a folder, glob or manifest of videos (locally or on Ray)",
        description="One row per video (and query) in OUT/results.jsonl, a summary.json; reruns resume. "
        "See docs/BATCH.md.",
    )
    p.add_argument(
        "input", help="a folder (recursive), a glob, a video, or a JSONL/CSV manifest (video, query, id)"
    )
    p.add_argument("--task", choices=tuple(TASKS), required=True)
    p.add_argument(
        "--query", default=None, help="the find query for every video (or a 'query' per manifest row)"
    )
    p.add_argument("--out", required=True, help="output folder; rerunning with the same one resumes")
    p.add_argument("--variant", default="gptq", help="gptq (default), bnb4, bf16 or an extra variant's name")
    p.add_argument("--sidecars", action="store_true", help="also write OUT/sidecars/<id>.json/.vtt/.srt")
    p.add_argument("--fresh", action="store_true", help="discard earlier results in --out and start over")
    cluster.add_arguments(p, "run")
    settings_mod.add_arguments(p, only=settings_mod.flags_for("batch"))  # (a registered task's too)
    p.set_defaults(func=cmd_batch)
