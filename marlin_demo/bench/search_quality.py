"""``bench search``: a library search's quality and cost on a collection with ground truth, indexed as one
library (so stage 1 really chooses among many windows); each query searched once and found exhaustively
once, both scored against every true span (the figures: docs/LIBRARY.md)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from marlin_demo import settings as settings_mod
from marlin_demo.bench.longset import LONG_SET, resolve_data
from marlin_demo.datasets import DatasetError, load_dataset
from marlin_demo.exits import EXIT_OK, fail
from marlin_demo.library import index
from marlin_demo.library.database import LibraryError, Store
from marlin_demo.library.inputs import Item
from marlin_demo.library.search import search
from marlin_demo.metrics import best_iou
from marlin_demo.results import FindResult
from marlin_demo.service.startup import check_limits

DEFAULT_OUT = "bench_out/search"
TINY_NOTE = (
    "The tiny offline stand-in has random weights: its captions are stock sentences and its spans "
    "are arbitrary, so every quality score here is meaningless. The mechanics are real: how many "
    "windows each way decodes, and how long each takes."
)
Truth = dict[str, list[tuple[float, float]]]  # video name -> its true spans of one query


def truths(examples: list[dict[str, Any]]) -> dict[str, Truth]:
    """Every distinct query with its true spans in each video that has it."""
    out: dict[str, Truth] = {}
    for ex in examples:
        for q in ex.get("queries") or []:
            spans = q.get("spans") or [q["span"]]
            out.setdefault(q["query"], {}).setdefault(ex["video"], []).extend(
                (float(s), float(e)) for s, e in spans
            )
    return out


def score_moments(moments: list[dict[str, Any]], truth: Truth) -> dict[str, bool]:
    """The per-query hits of a ranked list of moments (``video``, ``start``, ``end``)."""
    videos = list(dict.fromkeys(m["video"] for m in moments))  # distinct, in rank order
    r5 = any(best_iou((m["start"], m["end"]), truth.get(m["video"], [])) >= 0.5 for m in moments[:5])
    return {"video@1": bool(videos) and videos[0] in truth, "video@5": any(v in truth for v in videos[:5]),
            "r5@0.5": r5}  # fmt: skip


def stage1_hit(hits: list[Any], truth: Truth) -> bool:
    """One candidate window holds the middle of a true span of its video."""
    return any(h.start <= (s + e) / 2 <= h.end for h in hits for s, e in truth.get(h.name, []))


class Decoded:
    """Counts the find windows the engine decodes (its one window reader), around one search."""

    def __init__(self, engine: Any) -> None:
        self.n = 0
        real = engine.window_frames

        def counting(path: Any, plans: list[Any]) -> Any:
            self.n += len(plans)
            return real(path, plans)

        engine.window_frames = counting


def exhaustive(
    engine: Any, paths: dict[str, str], query: str, variant: str, top_k: int
) -> list[dict[str, Any]]:
    """The baseline: find in every window of every video, all moments ranked by find's score."""
    from marlin_demo import service

    moments: list[dict[str, Any]] = []
    for name, path in paths.items():
        result = cast(FindResult, service.run(engine, "find", path, variant, query))
        moments += [{"video": name, "start": m.start, "end": m.end, "score": m.score} for m in result.moments]
    moments.sort(key=lambda m: (-m["score"], m["video"], m["start"]))
    return moments[:top_k]


def _timed(fn: Callable[[], Any], counter: Decoded) -> tuple[Any, float, int]:
    before = counter.n
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, counter.n - before


def build_library(
    data_dir: Path, examples: list[dict[str, Any]], folder: Path, engine: Any, variant: str
) -> dict[str, Any]:
    """Index the collection (incremental: a rerun captions nothing it already holds)."""
    store = Store(folder)
    store.check_setup(index.setup_fingerprint(engine.settings, variant))
    items = [Item(id=e["video"], video=e["video"], path=str((data_dir / e["video"]).resolve()), query=None)
             for e in examples]  # fmt: skip
    t0 = time.perf_counter()
    summary = index.index(
        store, items, lambda todo: index.caption_local(engine, todo, variant), prune_gone=True
    )
    out = {**summary.to_dict(store), "index_s": round(time.perf_counter() - t0, 2)}
    store.close()
    if out["failed"]:
        raise LibraryError(
            f"{out['failures'][0]['video']} could not be indexed: {out['failures'][0]['error']}"
        )
    return out


def run(
    data_dir: Path,
    library: Path,
    engine: Any,
    variant: str,
    *,
    top_k: int = 5,
    limit: int | None = None,
    with_exhaustive: bool = True,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Index, then every query both ways; the per-query rows and the summary (``results.json``)."""
    examples = [ex.to_dict() for ex in load_dataset(data_dir)]
    built = build_library(data_dir, examples, library, engine, variant)
    queries = list(truths(examples).items())[:limit]
    store = Store(library, create=False)
    paths = {v["name"]: v["path"] for v in store.videos()}
    counter = Decoded(engine)
    s = engine.settings
    rows = []
    for n, (query, truth) in enumerate(queries, 1):
        hits = store.stage1(query, s.search_candidates)
        answer, lat, dec = _timed(
            functools.partial(search, store, query, s, lambda: engine, variant, top_k=top_k), counter
        )
        row: dict[str, Any] = {
            "query": query,
            "videos": sorted(truth),
            "stage1_recall": stage1_hit(hits, truth),
            "search": {
                **score_moments(answer.moments, truth),
                "latency_s": lat,
                "decoded": dec,
                "searched_windows": answer.searched_windows,
            },
        }
        if with_exhaustive:
            moments, lat, dec = _timed(
                functools.partial(exhaustive, engine, paths, query, variant, top_k), counter
            )
            row["exhaustive"] = {**score_moments(moments, truth), "latency_s": lat, "decoded": dec}
        rows.append(row)
        if note:
            note(f"{n}/{len(queries)} {query!r}: search {row['search']['latency_s']:.1f} s")
    store.close()
    return {"data": str(data_dir), "library": built, "search_candidates": s.search_candidates,
            "top_k": top_k, "model": s.model, "variant": variant, "tiny": s.is_tiny,
            "queries": rows, "summary": summarize(rows)}  # fmt: skip


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Shares of queries hit and mean / p50 costs, for the search and the exhaustive baseline."""
    out: dict[str, Any] = {"queries": len(rows)}
    if not rows:
        return out
    out["stage1_recall"] = sum(r["stage1_recall"] for r in rows) / len(rows)
    for side in ("search", "exhaustive"):
        got = [r[side] for r in rows if side in r]
        if not got:
            continue
        out[side] = {k: sum(g[k] for g in got) / len(got) for k in ("video@1", "video@5", "r5@0.5")}
        for k in ("latency_s", "decoded"):
            vals = [float(g[k]) for g in got]
            out[side][f"{k}_mean"] = statistics.fmean(vals)
            out[side][f"{k}_p50"] = statistics.median(vals)
    return out


def render(r: dict[str, Any]) -> str:
    """``summary.md``: the table of both ways, with the tiny stand-in's caveat when it ran."""
    s, lib = r["summary"], r["library"]
    lines = [
        "# Library search on a collection",
        "",
        f"{r['data']}: {lib['videos']} videos, {lib['windows']} caption windows (indexed in "
        f"{lib['index_s']:g} s this run); N = {r['search_candidates']} candidate windows; "
        f"{s['queries']} ground-truth queries; model {r['model']} ({r['variant']}).",
        "",
    ]
    if r["tiny"]:
        lines += [f"**{TINY_NOTE}**", ""]
    if lib["windows"] <= r["search_candidates"]:
        lines += ["**N is not below the library's windows: stage 1 chooses nothing here.**", ""]
    if not s["queries"]:
        return "\n".join([*lines, "No ground-truth query in the data."])
    lines += [
        f"Stage-1 recall (a candidate window holds a true span's middle): {s['stage1_recall']:.2f}",
        "",
        "| | video@1 | video@5 | R@5 IoU 0.5 | latency / search (mean, p50) | windows decoded / search |",
        "|---|---|---|---|---|---|",
    ]
    for side, label in (("search", "two-stage search"), ("exhaustive", "exhaustive find, every window")):
        if side in s:
            m = s[side]
            lines.append(
                f"| {label} | {m['video@1']:.2f} | {m['video@5']:.2f} | {m['r5@0.5']:.2f} | "
                f"{m['latency_s_mean']:.2f} s, {m['latency_s_p50']:.2f} s | {m['decoded_mean']:.1f} |"
            )
    if "exhaustive" in s and s["search"]["latency_s_mean"] > 0:
        share = s["search"]["decoded_mean"] / max(1e-9, s["exhaustive"]["decoded_mean"])
        speedup = s["exhaustive"]["latency_s_mean"] / s["search"]["latency_s_mean"]
        lines += ["", f"The search decodes {share:.0%} of the windows the exhaustive find decodes and "
                  f"answers {speedup:.1f}x faster."]  # fmt: skip
    return "\n".join(lines)


def cmd_search_bench(args: argparse.Namespace) -> int:
    """``bench search``: exit 2 with one sentence for bad input."""
    try:
        if args.limit is not None and args.limit < 1:
            raise ValueError("--limit must be at least 1.")
        settings = check_limits(settings_mod.from_args(args).with_(variants=args.variant))  # the one it runs
        data = resolve_data(args.data) or Path(args.data).expanduser()
        if not (data / "examples.json").is_file():
            raise ValueError(f"--data {args.data}: no examples.json there (give `long` or a data folder).")
    except ValueError as exc:
        return fail(str(exc))
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(sys.stderr):
        from marlin_demo.engine import Engine

        engine = Engine(settings, video_cache_size=0)  # every search reads its windows, as a visitor's would
        try:
            r = run(
                data,
                out / "library",
                engine,
                args.variant,
                top_k=args.top_k,
                limit=args.limit,
                with_exhaustive=not args.no_exhaustive,
                note=lambda line: print(f"bench search: {line}", file=sys.stderr, flush=True),
            )
        except (DatasetError, LibraryError) as exc:
            return fail(str(exc))
    (out / "results.json").write_text(json.dumps(r, indent=1) + "\n", encoding="utf-8")
    text = render(r)
    (out / "summary.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"\nWrote {out}/results.json and summary.md (the library: {out / 'library'})")
    return EXIT_OK


def add_search_bench_parser(sub: Any) -> None:
    """``bench search [--data long] [--out DIR] [--search-candidates N] [--top-k K] [--limit Q]``."""
    p = sub.add_parser(
        "search",
        help="a library search's quality and cost vs an exhaustive find, on a collection with ground truth",
        description="Index --data as one library, then search each ground-truth query (two stages) and "
        "find it exhaustively in every window: video@1/@5, R@5 IoU 0.5, stage-1 recall, latency and "
        "windows decoded per search. See docs/LIBRARY.md.",
    )
    p.add_argument("--data", default=LONG_SET, help="`long` (the long-video set, default) or a data folder")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"results and the library (default {DEFAULT_OUT}/)")
    p.add_argument("--variant", default="gptq", help="the variant that captions and finds (default gptq)")
    p.add_argument("--top-k", type=int, default=5, help="moments per search (default 5)")
    p.add_argument("--limit", type=int, default=None, help="only the first Q queries")
    p.add_argument("--no-exhaustive", action="store_true", help="skip the exhaustive baseline")
    flags = [*settings_mod.flags_for("bench"), *settings_mod.flags_for("search")]
    settings_mod.add_arguments(p, only=tuple(f for f in dict.fromkeys(flags) if f != "top_k"))
    p.set_defaults(func=cmd_search_bench)
