"""``python -m marlin_demo bench``: arguments, the run from plan to summary (each variant: one load, one
uncounted warm-up, the pending requests, unload), exit codes."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marlin_demo import settings as settings_mod
from marlin_demo.bench.longset import add_long_set_parser, resolve_data
from marlin_demo.bench.matrix import (
    DEFAULT_DATA,
    DEFAULT_OUT,
    DEFAULT_REPEATS,
    DEFAULT_VARIANTS,
    REQUESTS_FILE,
    RESULT_FILES,
    VARIANTS_FILE,
    BenchError,
    Request,
    plan_requests,
    prepare_out,
    record_key,
)
from marlin_demo.bench.report import render_summary, write_outputs
from marlin_demo.bench.search_quality import add_search_bench_parser
from marlin_demo.datasets import DatasetError, add_convert_parser, dataset_digest, example_sets, load_dataset
from marlin_demo.exits import EXIT_FAILED, EXIT_OK, fail, missing_extra
from marlin_demo.models import fingerprint
from marlin_demo.out_folder import append_jsonl, now, read_jsonl
from marlin_demo.service.startup import check_limits
from marlin_demo.settings import Settings
from marlin_demo.tasks import TASKS, get_task
from marlin_demo.variants import kind_of, kinds

#: the run details each request record keeps (``RunInfo`` fields)
INFO_KEYS = ("decode_s", "first_text_s", "kernel", "attention", "compile", "compile_s", "decode", "capture_s")


def run_request(engine: Any, req: Request) -> dict[str, Any]:
    """Run one request; a failure becomes a record with ``ok: false`` (retried by the next run)."""
    rec: dict[str, Any] = {
        "variant": req.variant,
        "task": req.task,
        "video": req.example.name,
        "query": req.query.query if req.query else None,
        "repeat": req.repeat,
    }
    try:
        from marlin_demo import service

        res = service.run(engine, req.task, req.example.video, req.variant, rec["query"])
    except Exception as exc:
        rec.update(ok=False, error=f"{type(exc).__name__}: {exc}", time=now())
        return rec
    rec.update(
        ok=True,
        metrics=dataclasses.asdict(res.metrics),
        # decode: graphs, static, eager or compiled, what these figures were decoded with
        **{key: getattr(res.info, key) for key in INFO_KEYS},
        runtime=res.info.runtime.to_dict(),
        format_ok=bool(res.format_ok),
        repaired=bool(res.repaired),
        repairs=list(res.info.repairs),
        raw=res.raw,
        time=now(),
        windows=max(1, len(res.info.windows)),  # a long video's windows answered
        **get_task(req.task).answer.record(res),  # what the answer said (caption: events; find: the span)
    )
    return rec


def bench_variant(engine: Any, variant: str, pending: Sequence[Request], out: Path, bar: Any) -> bool:
    """Load, warm up, run the pending requests, unload. Returns whether the variant loaded."""
    from marlin_demo.models import ModelLoadError

    bar.set_postfix_str(f"{variant}: loading")
    try:
        loaded = engine.load(variant)
    except ModelLoadError as exc:
        append_jsonl(
            out / VARIANTS_FILE, {"kind": "load", "variant": variant, "error": str(exc), "time": now()}
        )
        bar.write(f"error: {variant}: {exc}", file=sys.stderr)
        bar.update(len(pending))
        return False
    load_rec: dict[str, Any] = {
        "kind": "load",
        "variant": variant,
        **loaded.describe(),
        "compile": "on" if engine.settings.compile else "off",
        "quantized": loaded.source.quantized,
        "allocated_after_load_mb": None,
        "time": now(),
    }
    load_rec["load_s"] = loaded.load_s
    load_rec["footprint_mb"] = loaded.footprint_mb
    if loaded.device == "cuda":
        import torch

        torch.cuda.synchronize()
        load_rec["allocated_after_load_mb"] = torch.cuda.memory_allocated() / 2**20
    bar.set_postfix_str(f"{variant}: warm-up")
    first = pending[0]
    t0 = time.perf_counter()
    warm = run_request(engine, first)
    load_rec["warmup_s"] = time.perf_counter() - t0
    load_rec["decode"] = warm.get("decode") or None  # what the warm-up decoded with (graphs, eager...)
    if not warm["ok"]:
        load_rec["warmup_error"] = warm["error"]
        bar.write(f"warning: {variant}: the warm-up request failed: {warm['error']}", file=sys.stderr)
    append_jsonl(out / VARIANTS_FILE, load_rec)
    failed = 0
    bar.set_postfix_str(variant)
    for req in pending:
        rec = run_request(engine, req)
        append_jsonl(out / REQUESTS_FILE, rec)
        if not rec["ok"]:
            failed += 1
            if failed == 1:
                bar.write(
                    f"warning: {variant}: a request failed ({rec['error']}); continuing", file=sys.stderr
                )
        bar.update(1)
    engine.unload(variant)
    return True


def preimport_backends(variants: Sequence[str], settings: Settings) -> dict[str, float]:
    """Import the model libraries before any load is timed, so the first variant's ``load_s`` is not charged
    with a one-off import (gptqmodel alone takes 10+ s); the seconds each took, for results.json."""
    extra = settings.extra_variant_dirs
    packages = set()
    for v in variants:
        kind = kind_of(v)
        if v in extra:
            if (extra[v] / "quantize_config.json").exists():
                packages.add("gptqmodel")
        elif kind is not None and kind.package in ("gptqmodel", "bitsandbytes"):
            packages.add(kind.package)
    from marlin_demo.models.kernels import import_gptqmodel

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers

    # transformers resolves these lazily: touching them imports the modeling code now
    _ = (transformers.AutoModelForImageTextToText, transformers.AutoProcessor)
    _ = getattr(transformers, "Qwen3_5ForConditionalGeneration", None)
    timings["torch+transformers"] = time.perf_counter() - t0
    for name in sorted(packages):
        t0 = time.perf_counter()
        try:
            if name == "gptqmodel":  # the loader's own import: HF_HOME kept, banner on stderr
                import_gptqmodel()
            else:
                __import__(name)
        except Exception:  # the load itself reports a missing or broken backend clearly
            continue
        timings[name] = time.perf_counter() - t0
    return timings


def parse_list(text: str, what: str, allowed: Sequence[str] | None = None, hint: str = "") -> list[str]:
    """Comma-separated names, deduplicated in order; ``hint`` is appended to the unknown-name error."""
    names = list(dict.fromkeys(name for raw in text.split(",") if (name := raw.strip())))
    if not names:
        raise BenchError(f"--{what} is empty: give a comma-separated list.")
    if allowed is not None:
        bad = [n for n in names if n not in allowed]
        if bad:
            raise BenchError(f"unknown {what[:-1]} {bad[0]!r}: choose from {', '.join(allowed)}.{hint}")
    return names


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        return _bench(args)
    except (BenchError, DatasetError) as exc:
        return fail(str(exc))


def data_folder(data: str | None) -> Path:
    """``--data``: a named set (``long``), a folder, or the app's examples when not given."""
    return resolve_data(data) or (Path(data).expanduser() if data else DEFAULT_DATA)


def _bench(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        raise BenchError("--repeats must be at least 1.")
    if args.limit is not None and args.limit < 1:
        raise BenchError("--limit must be at least 1.")
    try:
        settings = check_limits(settings_mod.from_args(args))
        extra = settings.extra_variant_dirs
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    if need := missing_extra("bench", "bench"):  # its plots: said before any model work, not after it
        raise BenchError(need)
    allowed = [*(k.name for k in kinds()), *extra]
    variants = parse_list(args.variants, "variants", allowed, " (add others with --extra-variants name=DIR)")
    tasks = (
        parse_list(args.tasks, "tasks", list(TASKS)) if args.tasks else [t for t in TASKS if TASKS[t].bench]
    )
    settings = settings.with_(variants=",".join(variants))
    data_dir = data_folder(args.data)
    if not data_dir.is_dir():
        raise BenchError(
            f"the data folder {data_dir} does not exist: pass --data DIR (a folder with examples.json)."
        )
    examples = load_dataset(data_dir)
    if args.limit:  # the first N clips of each set, so a quick run still covers every set
        examples = [ex for exs in example_sets(examples).values() for ex in exs[: args.limit]]
    plans = {v: plan_requests(examples, v, tasks, args.repeats) for v in variants}
    if not any(plans.values()):
        raise BenchError(
            f"nothing to run: the data has no {' or '.join(tasks)} ground truth for --tasks {args.tasks}."
        )

    out = Path(args.out).expanduser()
    run = prepare_out(out, fingerprint(settings, dataset_digest(data_dir)), args.fresh)
    done = {record_key(r) for r in read_jsonl(out / REQUESTS_FILE) if r.get("ok")}
    pending = {v: [r for r in plan if r.key not in done] for v, plan in plans.items()}
    total = sum(len(p) for p in pending.values())
    skipped = sum(len(p) for p in plans.values()) - total
    if skipped:
        print(f"Resuming in {out}: {skipped} request(s) already recorded, {total} to run.", file=sys.stderr)

    from tqdm import tqdm

    load_failed = False
    with contextlib.redirect_stdout(sys.stderr):
        from marlin_demo.engine import Engine

        import_s = preimport_backends([v for v in variants if pending[v]], settings) if total else {}

        # video_cache_size=0: every request reads and samples its video, the same for all variants
        engine = Engine(settings, video_cache_size=0)
        with tqdm(
            total=total, desc="bench", unit="req", file=sys.stderr, dynamic_ncols=True, disable=not total
        ) as bar:
            for v in [v for v in variants if pending[v]]:
                load_failed |= not bench_variant(engine, v, pending[v], out, bar)
        if import_s:
            append_jsonl(out / VARIANTS_FILE, {"kind": "imports", "import_s": import_s, "time": now()})
        results = write_outputs(
            out, examples, data_dir, variants, tasks, args.repeats, settings, run, engine.model_label
        )
    print(render_summary(results).split("## Speed and memory")[0].rstrip())
    print()
    written = ", ".join(name for name in RESULT_FILES if (out / name).exists())  # sets.png: 2+ sets
    print(f"Wrote {out}/: {written} (per-request records: {REQUESTS_FILE})")
    return EXIT_FAILED if load_failed else EXIT_OK


def register(subparsers: Any) -> None:
    """Add ``bench`` (and its ``convert-charades`` helper) to the CLI."""
    p = subparsers.add_parser(
        "bench",
        help="benchmark the variants (speed, memory, quality) on a data folder",
        description=(
            "Run every request of --data on each variant (one warm-up each, then --repeats passes), "
            "write results.json/.csv, summary.md and plots to --out. Rerunning with the same --out resumes. "
            "See docs/BENCHMARK.md."
        ),
    )
    p.add_argument(
        "--variants",
        default=DEFAULT_VARIANTS,
        help=f"comma-separated variants to compare (default {DEFAULT_VARIANTS}; add bf16 for "
        "agreement and retention vs 16-bit)",
    )
    p.add_argument(
        "--data",
        default=None,
        help="folder with examples.json and the videos (default: examples/); `long`: the long-video set",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"passes over the data per variant (default {DEFAULT_REPEATS})",
    )
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT}/)")
    p.add_argument("--tasks", help="the tasks to run, comma-separated (default: each task the bench runs)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N clips of each example set")
    p.add_argument("--fresh", action="store_true", help="discard earlier results in --out and start over")
    settings_mod.add_arguments(p, only=settings_mod.flags_for("bench"))  # (a registered task's too)
    p.set_defaults(func=cmd_bench)
    helpers = "{convert-charades,build-long-set,search}"
    sub = p.add_subparsers(dest="bench_command", title="helpers", metavar=helpers)
    add_convert_parser(sub)
    add_long_set_parser(sub)
    add_search_bench_parser(sub)
