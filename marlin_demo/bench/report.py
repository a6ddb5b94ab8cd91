"""The aggregate files: results.json, results.csv, summary.md and the plots (matplotlib, Agg backend)."""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from marlin_demo import variants
from marlin_demo.bench.aggregate import (
    _get,
    _getter,
    _memory_label,
    _rel,
    _seed_rows,
    aggregate,
    quality_rows,
)
from marlin_demo.bench.environment import environment
from marlin_demo.bench.matrix import REQUESTS_FILE, SCHEMA, VARIANTS_FILE
from marlin_demo.datasets import Example, summarize
from marlin_demo.out_folder import now, read_jsonl
from marlin_demo.settings import Settings
from marlin_demo.tasks import TASKS

UNITS = {
    **dict.fromkeys(("latency_s", "ttft_s", "first_text_s", "decode_s", "load_s", "warmup_s"), "s"),
    **dict.fromkeys(("latency_per_window_s", "decode_per_window_s"), "s"),
    **dict.fromkeys(("peak_memory_mb", "footprint_mb", "allocated_after_load_mb"), "MB"),
    **dict.fromkeys(("output_tokens", "video_tokens"), "tokens"),
    "tokens_per_s": "tok/s",
    "windows": "windows",
}


#: the settings that say which weights ran (results.json's ``models``)
MODEL_SETTINGS = ("model", "bf16_id", "revision", "gptq_id", "gptq_revision", "extra_variants")

Row = tuple[str, Any, str]
"""One table row: (label, getter of a variant's figures, format kind for ``_fmt``)."""

_FOOTER = (
    "Latency is end to end per request (video read and sampling included, model load excluded). "
    "Definitions: docs/BENCHMARK.md."
)


def _flatten(d: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif not isinstance(d, list):
        yield prefix, d


def _unit(path: str) -> str:
    parts = path.split(".")
    if parts[0].startswith("retention"):
        return "ratio"
    if parts[-1] == "n" or parts[-1] in ("requests", "planned", "ok", "failed", "missing"):
        return "count"
    return next((UNITS[p] for p in reversed(parts) if p in UNITS), "")


def write_csv(path: Path, agg: dict[str, Any]) -> None:
    """Long format: one row per (variant, metric); metric is the dotted path in results.json."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "metric", "value", "unit"])
        for v, data in agg["variants"].items():
            for name, value in _flatten(data):
                if name.startswith("errors"):
                    continue
                w.writerow([v, name, "" if value is None else value, _unit(name)])
        for cmp_name, data in agg["comparison"].items():
            for name, value in _flatten(data):
                unit = "relative" if name != "overall_retention" else "ratio"
                w.writerow([cmp_name, name, "" if value is None else value, unit])


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if kind == "s":
        return f"{value:.3f}" if value < 1 else f"{value:.2f}"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    return format(value, {"mb": ".2f", "int": ".0f", "f1": ".1f"}.get(kind, ".4f"))


def _table(per: dict[str, Any], rows: Sequence[Row], rel: bool) -> list[str]:
    names = list(per)
    a, b = variants.HEADLINE
    head = ["Metric", *names] + ([f"{variants.short(a)} vs {variants.short(b)}"] if rel else [])
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for label, get, kind in rows:
        cells = [_fmt(get(per[n]), kind) for n in names]
        if rel:
            d = _rel(get(per[a]), get(per[b])) if kind not in ("pct", "str") else None
            cells.append("—" if d is None else f"{100 * d:+.1f}%")
        out.append("| " + " | ".join([label, *cells]) + " |")
    return out


def _has_headline(per: dict[str, Any]) -> bool:
    """Both variants of the headline comparison (``variants.HEADLINE``) were measured."""
    return all(v in per for v in variants.HEADLINE)


def _requests_ok(v: dict[str, Any]) -> str:
    """Requests that answered out of those planned (a resumed run shows what is still missing)."""
    return f"{v['requests']['ok']} / {v['requests']['planned']}"


_REQUESTS_ROW: Row = ("Requests ok / planned", _requests_ok, "str")


def render_summary(results: dict[str, Any]) -> str:
    """summary.md: the run's header, then one section per table; sections are separated by a blank line."""
    per = results["variants"]
    rel = _has_headline(per)
    sections = [
        _header(results),
        _seed_section(per, rel),
        _speed_section(per, rel),
        _quality_section(per, rel),
        _set_tables(results.get("sets") or {}, rel),
        _agreement_section(per),
        _notes_section(per),
        [_FOOTER],
    ]
    return "\n\n".join("\n".join(lines) for lines in sections if lines) + "\n"


def _header(results: dict[str, Any]) -> list[str]:
    """What was measured, how and where: the reader needs it to compare two summaries."""
    per, env, s, data = (results[k] for k in ("variants", "environment", "settings", "data"))
    imports = ", ".join(f"{k} {v:.1f} s" for k, v in results.get("library_import_s", {}).items()) or "—"
    lines = [
        "# Marlin-2B benchmark",
        "",
        f"- Model: `{results['model_label']}` · variants: {', '.join(per)} · "
        f"data: `{data['dir']}` ({data['examples']} clips, {data['queries']} queries, "
        f"{data['caption_examples']} with reference captions)",
        f"- Repeats: {results['run']['repeats']} per request after 1 warm-up per variant · "
        f"caption max_new_tokens {s['caption_max_new_tokens']}, find {s['find_max_new_tokens']} · greedy",
        f"- Machine: {env.get('gpu') or 'no GPU'} · {env.get('cpu')} · torch {env['packages'].get('torch')} "
        f"(CUDA {env.get('cuda')}) · transformers {env['packages'].get('transformers')} · "
        f"gptqmodel {env['packages'].get('gptqmodel')} · bitsandbytes {env['packages'].get('bitsandbytes')}",
        f"- Library imports, once per process and not in the load times: {imports}",
        f"- Written {results['timestamp']}",
    ]
    if s.get("model") == "tiny":
        lines += [
            "",
            "> The tiny offline stand-in has random weights: its quality figures are meaningless; the "
            "table only shows that every figure is produced.",
        ]
    return lines


def _seed_section(per: dict[str, Any], rel: bool) -> list[str]:
    """The model card's own table first, so the run reads against the published figures."""
    seed = [(label, get, kind) for _, label, get, kind in _seed_rows(per)]
    a, b = variants.HEADLINE
    return [
        "## The seed card's table",
        "",
        *_table(per, seed, rel),
        "",
        "Overall score = mean of find mIoU, find R1@0.5, caption ROUGE-L, keyword coverage and event F1 "
        f"(those measured). {variants.short(a)} vs {variants.short(b)} = ({a} − {b}) / {b}.",
    ]


def _speed_section(per: dict[str, Any], rel: bool) -> list[str]:
    """Load, per-task latency and memory: every speed figure of results.json that a reader compares."""
    rows: list[Row] = [
        ("Model load (s)", _getter("load", "load_s"), "s"),
        ("Weight footprint (MB)", _getter("load", "footprint_mb"), "mb"),
        ("Allocated after load (MB, CUDA)", _getter("load", "allocated_after_load_mb"), "mb"),
        ("Kernel", _getter("load", "kernel"), "str"),
        ("Computed in (MARLIN_COMPUTE_DTYPE)", _getter("load", "compute_dtype"), "str"),
        ("Attention / linear-attention path", _getter("load", "attention"), "str"),
        ("Compiled decoding (MARLIN_COMPILE)", _getter("load", "compile"), "str"),
        ("Decoding: graphs, static, eager or compiled (MARLIN_DECODE)", _getter("load", "decode"), "str"),
        ("Device", _getter("speed", "device"), "str"),
    ]
    for task in TASKS:
        if any(_get(v, "speed", task) for v in per.values()):
            windows = any((_get(v, "speed", task, "windows", "max") or 1) > 1 for v in per.values())
            rows += _task_speed_rows(task, windows)
    rows += [
        ("Video tokens per request, mean", _getter("speed", "all", "video_tokens", "mean"), "int"),
        ("Video read + sample, median (s)", _getter("speed", "all", "decode_s", "median"), "s"),
        ("Peak memory, median over requests (MB)", _getter("speed", "all", "peak_memory_mb", "median"), "mb"),
        ("Memory measure", _getter("speed", "memory_kind"), "str"),
        _REQUESTS_ROW,
    ]
    return ["## Speed and memory", "", *_table(per, rows, rel)]


def _task_speed_rows(task: str, windows: bool) -> list[Row]:
    """One task's latency spread, first token, first text and decode rate (a task that ran); with
    ``windows`` (some request of a long video answered in several), the cost per window too."""
    name, get = task.title(), functools.partial(_getter, "speed", task)
    spread = ("median", "p25", "p75", "min", "max", "stdev")
    rows: list[Row] = [
        *((f"{name} latency {k} (s)", get("latency_s", k), "s") for k in spread),
        (f"{name} time to first token, median (s)", get("ttft_s", "median"), "s"),
        (f"{name} time to first visible text, median (s)", get("first_text_s", "median"), "s"),
        (f"{name} decode tokens/s, median", get("tokens_per_s", "median"), "f1"),
        (f"{name} output tokens, mean", get("output_tokens", "mean"), "f1"),
    ]
    if windows:
        rows.append((f"{name} windows per request, mean", get("windows", "mean"), "f1"))
        rows.append((f"{name} latency per window, median (s)", get("latency_per_window_s", "median"), "s"))
    return rows


def _quality_section(per: dict[str, Any], rel: bool) -> list[str]:
    """Scores against the ground truth, the overall score and how stable the answers were."""
    rows = [*_quality_rows(per), ("Same answer in every repeat", _getter("stability"), "pct")]
    return ["## Quality against the ground truth", "", *_table(per, rows, rel)]


def _quality_rows(per: dict[str, Any]) -> list[Row]:
    """The quality rows of the tasks some variant was scored on, then the overall score."""
    rows: list[Row] = [
        (label, _getter("quality", task, key), "q")
        for task, key, label in quality_rows()
        if any(_get(v, "quality", task) for v in per.values())
    ]
    return [*rows, ("Overall score", _getter("quality", "overall"), "q")]


def _agreement_section(per: dict[str, Any]) -> list[str]:
    """Quantized variants against bf16 (same answers, retention); nothing when none was compared."""
    sub = {v: data for v, data in per.items() if "retention_vs_bf16" in data}
    if not sub:
        return []
    get = functools.partial(_getter, "agreement_with_bf16")
    rows: list[Row] = []
    for name, task in TASKS.items():  # each answer type's measures, then how often the answers were equal
        rows += [
            (f"{name.title()} {label} vs bf16", get(name, key), "q") for key, label in task.answer.measures
        ]
        rows.append((f"{name.title()}: same answer as bf16", get(name, "same_answer_rate"), "pct"))
    rows += [
        (f"Retention: {label}", _getter("retention_vs_bf16", task, key), "pct")
        for task, key, label in quality_rows()
        if any(_get(v, "retention_vs_bf16", task) for v in sub.values())
    ]
    rows.append(("Retention: overall score", _getter("retention_vs_bf16", "overall"), "pct"))
    return [
        "## Agreement with bf16 and retention (quantized / bf16)",
        "",
        *_table(sub, rows, _has_headline(sub)),
    ]


def _notes_section(per: dict[str, Any]) -> list[str]:
    """What makes a figure mean less than it seems: CPU memory, load failures, failed or missing requests."""
    notes = []
    if _get(next(iter(per.values()), {}), "speed", "memory_kind") == "cpu_peak_rss":
        notes.append(
            "On CPU the engine reports the process's peak resident memory (ru_maxrss) since it started: it "
            "never goes down, so later variants inherit earlier peaks and libraries dominate it. Use the "
            "weight footprint to compare variants on CPU; on CUDA the figure is torch's peak allocated "
            "memory, reset before each request."
        )
    for v, data in per.items():
        if data["load"].get("error"):
            notes.append(f"{v}: could not be loaded: {data['load']['error']}")
        if data["requests"]["failed"]:
            notes.append(
                f"{v}: {data['requests']['failed']} request(s) failed (scored as no answer): "
                + "; ".join(data["errors"])
            )
        if data["requests"]["missing"]:
            notes.append(
                f"{v}: {data['requests']['missing']} planned request(s) not run yet (rerun to resume); "
                "the quality figures count them as no answer."
            )
    return ["## Notes", "", *(f"- {n}" for n in notes)] if notes else []


def _set_tables(sets: dict[str, Any], rel: bool) -> list[str]:
    """One quality-and-cost table per example set; nothing when the data is one set."""
    if len(sets) < 2:
        return []
    lines = [
        "## By example set",
        "",
        "The same figures for each set alone. Real footage is a handful of clips: a smoke test of "
        "quality on real video, not a benchmark score (docs/BENCHMARK.md).",
    ]
    for group in sets.values():
        per, d = group["variants"], group["data"]
        lines += [
            "",
            f"### {group['label']}",
            "",
            f"{d['examples']} clips, {d['queries']} find queries, {d['caption_examples']} captions "
            f"with {d['events']} reference events.",
            "",
        ]
        rows = _quality_rows(per)
        for task in TASKS:
            if any(_get(v, "speed", task) for v in per.values()):
                get = functools.partial(_getter, "speed", task)
                rows += [
                    (f"{task.title()} latency median (s)", get("latency_s", "median"), "s"),
                    (f"{task.title()} output tokens, mean", get("output_tokens", "mean"), "f1"),
                ]
        rows += [
            ("Video tokens per request, mean", _getter("speed", "all", "video_tokens", "mean"), "int"),
            _REQUESTS_ROW,
        ]
        lines += _table(per, rows, rel)
    return lines


def _json_default(obj: Any) -> Any:
    return list(obj) if isinstance(obj, set | tuple) else str(obj)


def _finite(obj: Any) -> Any:
    """NaN/inf -> None so results.json is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def write_outputs(
    out: Path,
    examples: Sequence[Example],
    data_dir: Path,
    variants: Sequence[str],
    tasks: Sequence[str],
    repeats: int,
    settings: Settings,
    run: dict[str, Any],
    model_label: str,
) -> dict[str, Any]:
    """Recompute every aggregate file from requests.jsonl / variants.jsonl."""
    agg = aggregate(
        examples, variants, tasks, repeats, read_jsonl(out / REQUESTS_FILE), read_jsonl(out / VARIANTS_FILE)
    )
    results = {
        "schema": SCHEMA,
        "timestamp": now(),
        "first_run": run.get("created"),
        "model_label": model_label,
        "models": {
            **{k: getattr(settings, k) for k in MODEL_SETTINGS},
            "sources": {
                v: {k: _get(agg["variants"][v], "load", k) for k in ("source", "revision", "quantized")}
                for v in variants
            },
        },
        "settings": dataclasses.asdict(settings),
        "environment": environment(),
        "environment_first_run": run.get("environment"),
        "data": {"dir": str(data_dir), "digest": run["fingerprint"]["data_digest"], **summarize(examples)},
        "run": {
            "variants": list(variants),
            "tasks": list(tasks),
            "repeats": repeats,
            "warmup_requests": 1,
            "video_cache": "off: every request reads and samples its video",
        },
        **agg,
    }
    results = _finite(results)
    (out / "results.json").write_text(
        json.dumps(results, indent=2, ensure_ascii=False, default=_json_default) + "\n", encoding="utf-8"
    )
    write_csv(out / "results.csv", agg)
    (out / "summary.md").write_text(render_summary(results), encoding="utf-8")
    write_plots(out, agg)
    return results


def write_plots(out: Path, agg: dict[str, Any]) -> None:
    """quality.png, latency.png, memory.png, latency_distribution.png (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    per, sets = agg["variants"], agg.get("sets") or {}
    colors = variants.colors(list(per))  # the page's colours: every chart of every run reads the same
    color = [colors[n] for n in per]
    figures = {
        "quality.png": _quality_plot(plt, per, color),
        "latency.png": _latency_plot(plt, per, color),
        "memory.png": _memory_plot(plt, per, color),
        "latency_distribution.png": _latency_distribution_plot(plt, per, color),
    }
    (out / "sets.png").unlink(missing_ok=True)
    if len(sets) >= 2:
        figures["sets.png"] = _set_plot(plt, sets, list(per), color)
    for name, fig in figures.items():
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)


def _bars(
    ax: Any,
    names: Sequence[str],
    color: Sequence[Any],
    labels: Sequence[str],
    series: dict[str, list[float | None]],
    err: dict[str, list[tuple[float, float]]] | None = None,
) -> None:
    """Grouped bars: one group per label, one bar per variant (a missing figure draws as 0)."""
    width = 0.8 / max(1, len(names))
    xs = range(len(labels))
    for i, n in enumerate(names):
        vals = [0.0 if x is None else x for x in series[n]]
        pos = [x + (i - (len(names) - 1) / 2) * width for x in xs]
        yerr = None if err is None else [[lo for lo, _ in err[n]], [hi for _, hi in err[n]]]
        ax.bar(pos, vals, width, label=n, color=color[i], yerr=yerr, capsize=3)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=20, ha="right")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)


def _quality_plot(plt: Any, per: dict[str, Any], color: Sequence[Any]) -> Any:
    """quality.png: every score measured (the format rate left out) and the overall score, on 0-1."""
    names = list(per)
    qdefs = [
        d
        for d in quality_rows()
        if d[1] != "format_rate" and any(_get(per[n], "quality", d[0]) for n in names)
    ]
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    labels = [lbl.split(" (")[0] for _, _, lbl in qdefs] + ["Overall"]
    series: dict[str, list[float | None]] = {
        n: [_get(per[n], "quality", t, k) for t, k, _ in qdefs] + [_get(per[n], "quality", "overall")]
        for n in names
    }
    _bars(ax, names, color, labels, series)
    ax.set_ylim(0, 1.05)
    ax.set_title("Quality against the ground truth (higher is better)")
    return fig


def _latency_plot(plt: Any, per: dict[str, Any], color: Sequence[Any]) -> Any:
    """latency.png: median latency per task with the interquartile range as error bars."""
    names = list(per)
    tasks = [t for t in (*TASKS, "all") if any(_get(per[n], "speed", t) for n in names)]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    series: dict[str, list[float | None]] = {}
    err: dict[str, list[tuple[float, float]]] = {}
    for n in names:
        sts = [_get(per[n], "speed", t, "latency_s") for t in tasks]
        series[n] = [st["median"] if st else None for st in sts]
        err[n] = [(st["median"] - st["p25"], st["p75"] - st["median"]) if st else (0.0, 0.0) for st in sts]
    _bars(ax, names, color, [f"{t} requests" for t in tasks], series, err)
    ax.set_ylabel("seconds per request (median, bars: p25-p75)")
    ax.set_title("Latency per request (lower is better)")
    return fig


def _memory_plot(plt: Any, per: dict[str, Any], color: Sequence[Any]) -> Any:
    """memory.png: weights and peak side by side, each on its own scale (they differ by far)."""
    names = list(per)
    fig, axes = plt.subplots(1, 2, figsize=(10, 5), dpi=100)
    panels = [
        ("Weight footprint (MB)", [_get(per[n], "load", "footprint_mb") for n in names]),
        (_memory_label(per), [_get(per[n], "speed", "all", "peak_memory_mb", "max") for n in names]),
    ]
    for ax, (title, vals) in zip(axes, panels, strict=True):
        heights = [0.0 if x is None else x for x in vals]
        rects = ax.bar(names, heights, color=color)
        ax.bar_label(rects, labels=["n/a" if x is None else f"{x:.1f}" for x in vals], padding=2)
        ax.set_title(title)
        ax.set_ylabel("MB")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Memory (lower is better)")
    return fig


def _latency_distribution_plot(plt: Any, per: dict[str, Any], color: Sequence[Any]) -> Any:
    """latency_distribution.png: every request's latency, one box per variant, one panel per task."""
    names = list(per)
    box_tasks = [t for t in TASKS if any(_get(per[n], "speed", t) for n in names)] or ["all"]
    fig, axes = plt.subplots(1, len(box_tasks), figsize=(5 * len(box_tasks) + 1, 5), dpi=100, squeeze=False)
    for ax, t in zip(axes[0], box_tasks, strict=True):
        data = [_get(per[n], "speed", t, "latencies_s") or [math.nan] for n in names]
        box = ax.boxplot(data, patch_artist=True)
        for patch, c in zip(box["boxes"], color, strict=True):
            patch.set_facecolor(c)
            patch.set_alpha(0.6)
        ax.set_xticks(range(1, len(names) + 1))
        ax.set_xticklabels(names)
        ax.set_title(f"{t} requests")
        ax.set_ylabel("latency per request (s)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Per-request latency over all repeats")
    return fig


def _set_plot(plt: Any, sets: dict[str, Any], names: Sequence[str], color: Sequence[Any]) -> Any:
    """sets.png: quality (top) and median latency (bottom), one column per example set (two or more)."""
    groups = list(sets.values())
    fig, axes = plt.subplots(2, len(groups), figsize=(5 * len(groups) + 1, 8), dpi=100, squeeze=False)
    parts = [(name, f.key, f.short) for name, task in TASKS.items() for f in task.answer.figures if f.short]
    for col, group in enumerate(groups):
        per = group["variants"]
        rows = [
            (
                [lbl for _, _, lbl in parts] + ["Overall"],
                lambda v: [_get(v, "quality", t, k) for t, k, _ in parts] + [_get(v, "quality", "overall")],
            ),
            (list(TASKS), lambda v: [_get(v, "speed", t, "latency_s", "median") for t in TASKS]),
        ]
        for row, (labels, get) in enumerate(rows):
            _bars(axes[row][col], names, color, labels, {n: get(per[n]) for n in names})
        axes[0][col].set_ylim(0, 1.05)
        axes[0][col].set_title(f"{group['label']} ({group['data']['examples']} clips): quality")
        axes[1][col].set_title(f"{group['label']}: latency median")
        axes[1][col].set_ylabel("seconds per request")
    fig.suptitle("By example set (higher quality, lower latency is better)")
    return fig
