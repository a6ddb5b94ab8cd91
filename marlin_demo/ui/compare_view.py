"""What the Compare tab shows (cards, progress, summary, tables): pure rendering, apart from the wiring."""

from __future__ import annotations

import csv
import html
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from marlin_demo import service
from marlin_demo import variants as registry
from marlin_demo.metrics import temporal_iou
from marlin_demo.results import CaptionResult, FindResult, memory_label
from marlin_demo.tasks import get_task
from marlin_demo.ui import timeline
from marlin_demo.ui.common import CLIP_ID, UIContext, error_html, fmt, tiny_in_use, variant_label
from marlin_demo.ui.timeline import clock

CHART_TITLES = {
    "load_s": "Load time in this request (s)",
    "latency_s": "Latency (s)",
    "ttft_s": "Time to first token (s)",
    "tokens_per_s": "Tokens per second",
    "peak_memory_mb": "Peak memory (MB)",
    "output_tokens": "Output tokens",
}
COST_KEYS = tuple(CHART_TITLES)
"""The cost of a run, in the order of the charts and of the table columns."""
CHARTS = tuple(CHART_TITLES.items())
METRIC_COLUMNS = ["variant", "run", *COST_KEYS, "video_tokens", "memory", "device"]
SESSION_COLUMNS = ["#", "time", "video", "task", "query", "variant", "run", *COST_KEYS, "agreement", "score"]
COLD_WARM_COLUMNS = [
    "Variant",
    "cold runs",
    "cold: load + first latency (s)",
    "warm runs",
    "warm: mean latency (s)",
]
TASK_CHOICES = [("What happens (caption)", "caption"), ("When does it happen (find)", "find")]
COLUMN_TITLES = {
    **CHART_TITLES,
    "variant": "Variant",
    "run": "Run",
    "video_tokens": "Video tokens",
    "memory": "Memory measured",
    "device": "Device",
    "time": "Time",
    "video": "Video",
    "task": "Task",
    "query": "Query",
    "agreement": "Agreement",
    "score": "Score vs truth",
}
"""What a visitor reads above a table column (the CSV keeps the keys, which are the API's)."""


def titled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with readable column titles, as the charts have."""
    return frame.rename(columns=COLUMN_TITLES)


def _badge(cold: bool | None, will_load: bool) -> str:
    """cold / warm once the variant has started; before that only what will happen."""
    if cold is None:
        hint = "will be loaded first" if will_load else "already loaded"
        return f'<span class="md-badge cc-queued" title="{hint}">queued · {hint}</span>'
    if cold:
        return '<span class="md-badge md-cold" title="loaded for this request">cold</span>'
    return '<span class="md-badge md-warm" title="was already loaded">warm</span>'


def _card(
    variant: str,
    result: Any,
    cold: bool | None,
    duration: float,
    truth: tuple[float, float] | None,
    live: str | None = None,
    will_load: bool = False,
    stopped: bool = False,
) -> str:
    """One variant's column. ``cold`` is None until the variant starts; ``live`` is its text so far;
    ``stopped``: the comparison was stopped (a variant not started never ran)."""
    label = html.escape(variant_label(variant))
    badge = _badge(cold, will_load)
    if stopped and cold is None and result is None:
        badge = '<span class="md-badge cc-queued">not run</span>'
    if isinstance(result, str):  # an error message for this variant
        body = error_html(result)
    elif isinstance(result, CaptionResult):
        events = (
            "".join(
                f"<li><b>{clock(e.start)}–{clock(e.end)}</b> {html.escape(e.description)}</li>"
                for e in result.events
            )
            or "<li><i>no timed events could be read</i></li>"
        )
        body = (
            f'<p class="cc-scene">{html.escape(result.scene) or "<i>no scene paragraph</i>"}</p>'
            f"{timeline.timeline_html(duration, result.events, player=f'#{CLIP_ID}')}"
            f'<ul class="cc-events">{events}</ul>'
        )
    elif isinstance(result, FindResult):
        if result.span is None:
            span = '<p class="cc-span cc-none">No span: the answer gave no usable time range.</p>'
        else:
            span = f'<p class="cc-span">{clock(result.span[0])} → {clock(result.span[1])}</p>'
        if truth is not None:
            iou = temporal_iou(result.span, truth)
            gt = f"ground truth {clock(truth[0])}–{clock(truth[1])} · IoU {iou:.2f}"
            span += f'<p class="cc-truth">{gt}</p>'
        body = span + timeline.timeline_html(
            duration, span=result.span, reference=truth, player=f"#{CLIP_ID}", span_label=variant
        )
    elif live is not None:
        text = f"<pre>{html.escape(live)}</pre>" if live else ""
        state = "stopped here" if stopped else "writing…"
        body = f'<div class="cc-live"><div class="mc-label">{state}</div>{text}</div>'
    else:  # (stopped, started) with nothing written
        waits = {
            (True, True): "stopped before it wrote anything",
            (True, False): "not run: the comparison was stopped first",
            (False, True): "starting…",
            (False, False): "runs after the variants before it",
        }
        body = f'<p class="cc-wait">{waits[stopped, cold is not None]}</p>'
    stats = ""
    if isinstance(result, CaptionResult | FindResult):
        m = result.metrics
        load = f"load {fmt(m.load_s, ' s')} (this request)" if cold else "no load (already loaded)"
        stats = (
            f'<div class="cc-stats">latency {fmt(m.latency_s, " s")} · first token {fmt(m.ttft_s, " s")} · '
            f"{fmt(m.tokens_per_s, ' tok/s', 1)} · {m.output_tokens} tokens · {load}"
            f" · decode: {html.escape(result.info.decode or '–')}</div>"
        )
        flags = [result.partial.note()] if result.partial is not None else []
        if not result.format_ok:
            flags.append("not in Marlin's format")
        if result.repaired:
            flags.append("repaired: " + "; ".join(result.info.repairs))
        if flags:
            stats += f'<div class="cc-flags">{html.escape(" · ".join(flags))}</div>'
        raw = html.escape(result.raw)
        stats += f'<details class="cc-raw"><summary>raw output</summary><pre>{raw}</pre></details>'
    return (
        f'<div class="cc-card" data-variant="{html.escape(variant)}">'
        f'<div class="cc-title">{label} {badge}</div>'
        f"{body}{stats}</div>"
    )


def cards_html(
    ctx: UIContext,
    variants: Sequence[str],
    results: Mapping[str, Any],
    cold: Mapping[str, bool],
    duration: float,
    truth: tuple[float, float] | None,
    live: Mapping[str, str] | None = None,
    stopped: bool = False,
) -> str:
    """A column per variant; one not started yet says whether it will load (or, ``stopped``, never ran)."""
    live = live or {}
    cols = "".join(
        _card(
            v,
            results.get(v),
            cold.get(v),
            duration,
            truth,
            live=live.get(v),
            will_load=service.is_cold(ctx.engine, v),
            stopped=stopped,
        )
        for v in variants
    )
    tiny = (
        '<p class="cc-tiny">Tiny stand-in: random weights, so agreement and scores only exercise the '
        "pipeline.</p>"
        if tiny_in_use(ctx)
        else ""
    )
    return f'{tiny}<div class="cc-grid" style="--cc-cols:{max(1, len(variants))}">{cols}</div>'


def progress_html(variant: str | None, index: int, total: int, step: str, chars: int = 0) -> str:
    """The one progress area: which variant (k of n) and its stage."""
    steps = "".join(
        f'<span class="cs-step{" cs-on" if i == index else (" cs-done" if i < index else "")}"></span>'
        for i in range(total)
    )
    who = f"{html.escape(variant)} · variant {index + 1} of {total} · " if variant else ""
    written = f" · {chars} characters" if chars else ""
    return (
        f'<div class="cs-summary cs-running" role="status"><div class="cs-steps">{steps}</div>'
        f'<div class="cs-stage">{who}<b>{html.escape(step)}</b>{written}</div></div>'
    )


AGREEMENT_NAMES = {
    "span_iou": "span IoU",
    "event_iou": "matched-event IoU",
    "event_f1": "event F1",
    "rouge_l": "caption ROUGE-L",
}


def summary_html(payload: Mapping[str, Any] | None) -> str:
    """How far the variants agree: one compact table, a row per pair and a column per measure."""
    if not payload:
        return ""
    pairs = list(payload["agreement"].items())
    keys = list(dict.fromkeys(k for _, values in pairs for k in values))
    if pairs and keys:
        head = "".join(f"<th>{html.escape(AGREEMENT_NAMES.get(k, k))}</th>" for k in keys)
        body = "".join(
            f'<tr><th scope="row">{html.escape(pair.replace("|", " ↔ "))}</th>'
            + "".join(_agreement_cell(values.get(k)) for k in keys)
            + "</tr>"
            for pair, values in pairs
        )
        table = (
            f'<table class="cs-agree"><thead><tr><th>Pair</th>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )
    else:
        table = '<p class="cs-name">Only one variant ran: nothing to compare.</p>'
    truth = ""
    if "scores" in payload:
        truth = (
            '<div class="cs-note">This clip is a bundled example: '
            "scores against its ground truth are below.</div>"
        )
    return (
        '<div class="cs-summary"><div class="cs-title">Agreement between the variants (1 = identical)</div>'
        f"{table}{truth}</div>"
    )


def _agreement_cell(value: float | None) -> str:
    if value is None:
        return "<td>–</td>"
    pct = 100 * max(0.0, min(1.0, value))
    bar = f'<span class="cs-bar"><span style="width:{pct:.0f}%"></span></span>'
    return f'<td><span class="cs-val">{value:.2f}</span>{bar}</td>'


def _cost_row(variant: str, result: CaptionResult | FindResult, cold: Mapping[str, bool]) -> dict[str, Any]:
    """The variant, whether its run was cold, and the cost keys: the part both tables share."""
    m = result.metrics.to_dict()
    was_cold = bool(cold.get(variant))
    # load_s is the variant's load whenever it happened: a warm run loaded nothing in this request
    m["load_s"] = m["load_s"] if was_cold else 0.0
    return {"variant": variant, "run": "cold" if was_cold else "warm", **{key: m[key] for key in COST_KEYS}}


def metrics_frame(
    results: Mapping[str, CaptionResult | FindResult], cold: Mapping[str, bool]
) -> pd.DataFrame:
    """One row per variant; ``results`` holds the variants that answered (no error strings)."""
    rows = [
        {
            **_cost_row(v, r, cold),
            "video_tokens": r.metrics.video_tokens,
            "memory": memory_label(r.metrics.memory_kind),
            "device": r.metrics.device,
        }
        for v, r in results.items()
    ]
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def variant_colors(names: Sequence[str]) -> dict[str, str]:
    """One color per variant, the same in every chart (and in the bench's plots)."""
    return registry.colors(tuple(names))


def chart_frame(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    """One metric per variant for a bar chart: variant names as text, values as numbers (missing: 0)."""
    return pd.DataFrame(
        {
            "variant": frame["variant"].astype(str),
            key: pd.to_numeric(frame[key], errors="coerce").fillna(0.0).astype(float),
        }
    )


def scores_frame(task: str, payload: Mapping[str, Any]) -> pd.DataFrame:
    """Each variant's scores against the ground truth: find's span measures, or caption's."""
    if get_task(task).scored:
        cols = ["variant", "IoU vs truth", "R1@0.3", "R1@0.5", "R1@0.7", "truth span (s)"]
        keys = ["miou", "r1@0.3", "r1@0.5", "r1@0.7"]

        def last(s: Mapping[str, Any]) -> str:
            return "–" if not s.get("ref_span") else f"{s['ref_span'][0]:.1f}–{s['ref_span'][1]:.1f}"

    else:
        cols = [
            "variant",
            "ROUGE-L",
            "keyword coverage",
            "event F1",
            "matched-event IoU",
            "events (pred/ref)",
        ]
        keys = ["rouge_l", "keyword_coverage", "f1", "mean_matched_iou"]

        def last(s: Mapping[str, Any]) -> str:
            return f"{s.get('n_pred')}/{s.get('n_ref')}"

    scores = (payload.get("scores") or {}).items()
    rows = [[v, *(s.get(k) for k in keys), last(s)] for v, s in scores if s]
    return pd.DataFrame(rows, columns=cols).round(3)


def _main_score(task: str, scores: Mapping[str, Any] | None) -> float | None:
    if not scores:
        return None
    value = scores.get("miou") if get_task(task).scored else scores.get("rouge_l")
    return None if value is None else round(float(value), 3)


def _agreement_text(payload: Mapping[str, Any]) -> str:
    pairs = payload["agreement"].items()
    return "; ".join(
        pair + " " + ", ".join(f"{k}={v:.3f}" for k, v in values.items()) for pair, values in pairs
    )


def session_rows(
    rows: list[dict[str, Any]],
    video: str,
    task: str,
    query: str | None,
    results: Mapping[str, CaptionResult | FindResult],
    cold: Mapping[str, bool],
    payload: Mapping[str, Any],
) -> list[dict]:
    """The session table with this comparison's rows appended (one per variant that answered)."""
    out = list(rows)
    stamp = time.strftime("%H:%M:%S")
    n = 1 + max((int(r["#"]) for r in rows), default=0)
    for v, r in results.items():
        out.append(
            {
                "#": n,
                "time": stamp,
                "video": Path(video).name,
                "task": task,
                "query": query or "",
                **_cost_row(v, r, cold),
                "agreement": _agreement_text(payload),
                "score": _main_score(task, (payload.get("scores") or {}).get(v)),
            }
        )
    return out


def cold_warm_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per variant: what the cold (first) runs cost including the load, and the warm runs' mean latency."""
    out = []
    for v in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == v]
        cold = [r for r in mine if r["run"] == "cold"]
        warm = [r for r in mine if r["run"] == "warm"]
        cold_cost = [(r["load_s"] or 0) + (r["latency_s"] or 0) for r in cold]
        out.append(
            [
                v,
                len(cold),
                round(sum(cold_cost) / len(cold_cost), 3) if cold_cost else None,
                len(warm),
                round(sum(r["latency_s"] or 0 for r in warm) / len(warm), 3) if warm else None,
            ]
        )
    return pd.DataFrame(out, columns=COLD_WARM_COLUMNS)


def write_session_csv(ctx: UIContext, rows: Sequence[Mapping[str, Any]]) -> str | None:
    if not rows:
        return None
    path = ctx.new_run_dir("session") / "marlin_compare_session.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=SESSION_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return str(path)
