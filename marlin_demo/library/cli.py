"""``python -m marlin_demo index INPUT --library DIR`` and ``search DIR "QUERY"`` (docs/LIBRARY.md)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import signal
import sys
from collections.abc import Iterator
from typing import Any

from marlin_demo import settings as settings_mod
from marlin_demo.exits import EXIT_FAILED, EXIT_OK, TINY_NOTE, fail, missing_extra
from marlin_demo.library import cluster

#: index takes batch's settings; search those (but ``--top-k``: moments to return) and its own ones.
INDEX_FLAGS = settings_mod.flags_for("batch")
SEARCH_FLAGS = tuple(f for f in INDEX_FLAGS if f != "top_k") + settings_mod.flags_for("search")
#: What names the model a library was built with: ``search`` uses them unless a flag says otherwise.
MODEL_FIELDS = tuple("model bf16_id gptq_id revision gptq_revision extra_variants trust_remote_code".split())


def _caption_here(settings: Any, variant: str, todo: list[Any]) -> Iterator[Any]:
    """Caption the pending videos in this process; the model loads only when there is one."""
    if not todo:
        return
    from marlin_demo.engine import Engine
    from marlin_demo.library.index import caption_local

    engine = Engine(settings)
    engine.load(variant)  # a ModelLoadError stops the index (cmd_index says it)
    yield from caption_local(engine, todo, variant)


def cmd_index(args: argparse.Namespace) -> int:
    from marlin_demo.library import index
    from marlin_demo.library.database import LibraryError, Store
    from marlin_demo.library.inputs import InputError, collect
    from marlin_demo.models import ModelLoadError
    from marlin_demo.service.startup import check_limits

    if args.workers < 1:
        return fail("--workers must be at least 1.")
    need = missing_extra("batch", "index --ray") if args.ray is not None else None
    if need:
        return fail(need)
    try:
        settings = check_limits(settings_mod.from_args(args))
        items = collect(args.input, "caption")
        if args.fresh:
            Store.wipe(args.library)
        store = Store(args.library)
        variant = args.variant or store.meta().get("setup", {}).get("variant") or "gptq"
        store.check_setup(index.setup_fingerprint(settings, variant))
    except (InputError, LibraryError, ValueError) as exc:
        return fail(str(exc))

    def captions(todo: list[Any]) -> Iterator[Any]:
        if args.ray is None:
            return _caption_here(settings, variant, todo)
        address = None if args.ray == "local" else args.ray
        return index.caption_ray(settings, todo, variant, address, args.workers, args.gpus_per_worker)

    signal.signal(signal.SIGTERM, signal.default_int_handler)

    def note(line: str) -> None:
        print(f"index: {line}", file=sys.stderr, flush=True)

    try:
        with contextlib.redirect_stdout(sys.stderr):
            summary = index.index(store, items, captions, prune_gone=args.prune, note=note)
    except ModelLoadError as exc:  # the one model load (every video's own failure is a row)
        return fail(str(exc), EXIT_FAILED)
    out = summary.to_dict(store)
    store.close()
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
    else:
        print(
            f"{out['videos']} videos, {out['windows']} windows in {args.library}: {out['added']} added, "
            f"{out['updated']} updated, {out['moved']} moved, {out['unchanged']} unchanged, "
            f"{out['pruned']} pruned, {out['failed']} failed"
        )
        for f in out["failures"]:
            print(f"  failed {f['video']}: {f['error']}")
    return EXIT_OK


def format_answer(d: dict[str, Any]) -> str:
    lib = d["library"]
    lines = [
        f"Search · {d['query']!r} · {lib['videos']} videos, {lib['windows']} windows · "
        f"find asked in {d['searched_windows']} window(s)",
    ]
    if not d["moments"]:
        lines.append(
            "No moment found." if lib["windows"] else "The library is empty: index some videos first."
        )
    for n, m in enumerate(d["moments"], 1):
        lines.append(
            f"{n:3d}. {m['video']}  {m['start']:.1f} s - {m['end']:.1f} s  score {m['score']:.3f} "
            f"(text {m['retrieval_score']:.2f}; window {m['window'][0]:g}-{m['window'][1]:g} s)"
        )
    return "\n".join(lines)


def cmd_search(args: argparse.Namespace) -> int:
    from marlin_demo.library.database import LibraryError, Store
    from marlin_demo.library.search import search
    from marlin_demo.service.startup import check_limits

    try:
        store = Store(args.library, create=False)
        setup = store.meta().get("setup", {})
        # the library's model (and its identity) unless a flag names another; every other flag as given
        base = settings_mod.from_env().with_(**{k: setup[k] for k in MODEL_FIELDS if k in setup})
        settings = check_limits(settings_mod.from_args(args, base))
        variant = args.variant or setup.get("variant") or "gptq"
    except (LibraryError, ValueError) as exc:
        return fail(str(exc))

    def progress(done: int, total: int) -> None:
        if not args.json:
            print(f"search: {done} of {total} windows asked", file=sys.stderr, flush=True)

    from marlin_demo.engine import USER_ERRORS, Engine
    from marlin_demo.models import ModelLoadError

    engine = functools.partial(Engine, settings)  # called inside the redirect below: its prints go to stderr
    try:
        with contextlib.redirect_stdout(sys.stderr):
            answer = search(
                store, args.query, settings, engine, variant, top_k=args.moments, progress=progress
            )
    except ModelLoadError as exc:
        return fail(str(exc), EXIT_FAILED)
    except USER_ERRORS as exc:
        return fail(str(exc))
    for line in answer.skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    out = answer.to_dict()
    if settings.is_tiny and not args.json:
        print(TINY_NOTE)
    print(json.dumps(out, ensure_ascii=False, indent=2) if args.json else format_answer(out))
    return EXIT_OK


def register(subparsers: Any) -> None:
    """Add ``index`` and ``search`` to the CLI."""
    p = subparsers.add_parser(
        "index",
        help="caption a folder, glob or manifest into a searchable library (SQLite + full text)",
        description="Caption each new or changed video window by window into DIR/library.sqlite; reruns "
        "add only what is new. See docs/LIBRARY.md.",
    )
    p.add_argument("input", help="a folder (recursive), a glob, a video, or a JSONL/CSV manifest (video, id)")
    p.add_argument("--library", required=True, help="the library folder (created when missing)")
    p.add_argument("--variant", default=None, help="gptq (default; a library keeps its own), bnb4, bf16...")
    p.add_argument("--prune", action="store_true", help="drop the videos whose file is gone")
    p.add_argument("--fresh", action="store_true", help="discard the library's index and start over")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    cluster.add_arguments(p, "caption")
    settings_mod.add_arguments(p, only=INDEX_FLAGS)
    p.set_defaults(func=cmd_index)

    p = subparsers.add_parser(
        "search",
        help="find a moment across every video of a library (full text, then find in the best windows)",
        description="Rank the library's caption windows by full-text relevance, then ask find in the best "
        "--search-candidates of them. See docs/LIBRARY.md.",
    )
    p.add_argument("library", help="a library folder built by `index`")
    p.add_argument("query", help="what happens (any text)")
    p.add_argument(
        "--top-k", dest="moments", type=int, default=10, help="most moments to return (default 10)"
    )
    p.add_argument("--variant", default=None, help="the library's variant unless given")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    settings_mod.add_arguments(p, only=SEARCH_FLAGS)
    p.set_defaults(func=cmd_search)
