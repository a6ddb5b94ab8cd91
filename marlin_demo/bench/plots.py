"""The bench's plots (matplotlib, Agg backend): quality, latency, memory, per set."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marlin_demo import variants
from marlin_demo.bench.aggregate import _get, _memory_label, quality_rows
from marlin_demo.tasks import TASKS


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
