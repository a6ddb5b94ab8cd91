"""What the Compare tab shows, as HTML and tables (``compare_tab`` lays it out and wires it):
cards, progress, summary, tables; pure rendering."""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from marlin_demo.metrics import temporal_iou
from marlin_demo.results import Result, memory_label
from marlin_demo.tasks import get_task
from marlin_demo.ui import about, timeline
from marlin_demo.ui.assets import asset
from marlin_demo.ui.context import CLIP_ID, UIContext, fmt, variant_label
from marlin_demo.ui.status import error_html
from marlin_demo.ui.timeline import clock
from marlin_demo.variants import short

COST_TITLES = {
    "load_s": "Load time in this request (s)",
    "latency_s": "Latency, load excluded (s)",
    "ttft_s": "Time to first token (s)",
    "tokens_per_s": "Tokens per second",
    "peak_memory_mb": "Peak memory of the run (MB)",
    "output_tokens": "Output tokens",
}
COST_KEYS = tuple(COST_TITLES)
CHART_TITLES = {
    "warm_latency_s": "Warm latency (s)",
    "latency_s": COST_TITLES["latency_s"],
    "footprint_mb": "Memory: weights' footprint (MB)",
    **{k: COST_TITLES[k] for k in ("peak_memory_mb", "load_s", "ttft_s", "tokens_per_s", "output_tokens")},
}
CHARTS = tuple(CHART_TITLES.items())
"""The charts, four to a row: latency beside memory first, then the rest of the cost."""
METRIC_COLUMNS = [
    "variant",
    "run",
    "latency_s",
    "warm_latency_s",
    "footprint_mb",
    "load_s",
    "ttft_s",
    "tokens_per_s",
    "output_tokens",
    "peak_memory_mb",
    "memory",
    "video_tokens",
    "device",
]
SESSION_COLUMNS = ["#", "time", "video", "task", "query", "variant", "run", *COST_KEYS, "agreement", "score"]
COLD_WARM_COLUMNS = [
    "Variant",
    "cold runs",
    "cold: load + first latency (s)",
    "warm runs",
    "warm: mean latency (s)",
]
#: what a run's peak memory spans (a GPU chart's title says it): not one variant's own size
PEAK_SCOPE = {
    "cpu_peak_rss": "the whole app, every variant and library",
    "cuda_peak_allocated": "every model then on the GPU",
}
COLUMN_TITLES = {
    **CHART_TITLES,
    "variant": "Variant",
    "run": "Run (cold: loaded for this request)",
    "video_tokens": "Video tokens",
    "memory": "Peak measured (not one variant's own)",
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


def _badge(cold: bool | None, will_load: bool, result: Any, stopped: bool) -> str:
    if isinstance(result, str):  # an error message for this variant: no run to call warm or cold
        return '<span class="md-badge cc-queued">no answer</span>'
    if stopped and cold is None and result is None:
        return '<span class="md-badge cc-queued">not run</span>'
    if cold is None:
        hint = "will be loaded first" if will_load else "already loaded"
        return f'<span class="md-badge cc-queued" title="{hint}">queued · {hint}</span>'
    if cold:
        return '<span class="md-badge md-cold" title="loaded for this request">cold</span>'
    return '<span class="md-badge md-warm" title="was already loaded">warm</span>'


def caption_card(result: Any, duration: float, truth: Any, variant: str) -> str:
    """A caption's scene, its events on a timeline and as a list."""
    events = (
        "".join(
            f"<li><b>{clock(e.start)}–{clock(e.end)}</b> {html.escape(e.description)}</li>"
            for e in result.events
        )
        or "<li><i>no timed events could be read</i></li>"
    )
    return (
        f'<p class="cc-scene">{html.escape(result.scene) or "<i>no scene paragraph</i>"}</p>'
        f"{timeline.timeline_html(duration, result.events, player=f'#{CLIP_ID}')}"
        f'<ul class="cc-events">{events}</ul>'
    )


def find_card(result: Any, duration: float, truth: tuple[float, float] | None, variant: str) -> str:
    """A find's span (and the example's true span, with their IoU) on a timeline."""
    if result.span is None:
        span = '<p class="cc-span cc-none">No span: the answer gave no usable time range.</p>'
    else:
        span = f'<p class="cc-span">{clock(result.span[0])} → {clock(result.span[1])}</p>'
    if truth is not None:
        iou = temporal_iou(result.span, truth)
        gt = f"ground truth {clock(truth[0])}–{clock(truth[1])} · IoU {iou:.2f}"
        span += f'<p class="cc-truth">{gt}</p>'
    return span + timeline.timeline_html(
        duration, span=result.span, reference=truth, player=f"#{CLIP_ID}", span_label=variant
    )


#: one variant's answer in its card: (result, the clip's duration, the example's truth, variant) -> HTML
Card = Callable[[Result, float, Any, str], str]


def decode_field(decode: str, note: str) -> str:
    """How the tokens were decoded, and why: "graphs (checked at start-up)", "eager (start-up check: ...)"."""
    if not note:
        return decode or "–"
    return f"{decode} ({note if len(note) <= 140 else note[:139] + '…'})"


def _card(
    variant: str,
    result: Any,
    cold: bool | None,
    duration: float,
    truth: Any,
    card: Card,
    live: str | None = None,
    will_load: bool = False,
    stopped: bool = False,
) -> str:
    """One variant's column. ``cold`` is None until the variant starts; ``live`` is its text so far."""
    label = html.escape(variant_label(variant))
    badge = _badge(cold, will_load, result, stopped)
    if isinstance(result, str):  # an error message for this variant
        body = error_html(result)
    elif result is not None:  # the answer as the task's view draws it, then what it cost
        m = result.metrics
        load = f"load {fmt(m.load_s, ' s')} (this request)" if cold else "no load (already loaded)"
        body = card(result, duration, truth, variant) + (
            f'<div class="cc-stats">latency {fmt(m.latency_s, " s")} · first token {fmt(m.ttft_s, " s")} · '
            f"{fmt(m.tokens_per_s, ' tok/s', 1)} · {m.output_tokens} tokens · {load}"
            f" · decode: {html.escape(decode_field(result.info.decode, result.info.decode_note))}</div>"
        )
        flags = [result.partial.note()] if result.partial is not None else []
        if not result.format_ok:
            flags.append("not in Marlin's format")
        if result.repaired:
            flags.append("repaired: " + "; ".join(result.info.repairs))
        if flags:
            body += f'<div class="cc-flags">{html.escape(" · ".join(flags))}</div>'
        raw = html.escape(result.raw)
        body += f'<details class="cc-raw"><summary>raw output</summary><pre>{raw}</pre></details>'
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
    return (
        f'<div class="cc-card" data-variant="{html.escape(variant)}">'
        f'<div class="cc-title">{label} {badge}</div>{body}</div>'
    )


def cards_html(
    ctx: UIContext,
    card: Card,
    variants: Sequence[str],
    results: Mapping[str, Any],
    cold: Mapping[str, bool],
    duration: float,
    truth: Any,
    live: Mapping[str, str] | None = None,
    stopped: bool = False,
) -> str:
    """A column per variant (``card``: its answer, as its task's view draws it)."""
    live = live or {}
    will_load = {v: not ctx.engine.is_loaded(v) for v in variants}
    args = (duration, truth, card)
    cols = "".join(
        _card(v, results.get(v), cold.get(v), *args, live.get(v), will_load[v], stopped) for v in variants
    )
    tiny = (
        '<p class="cc-tiny">Tiny stand-in: random weights, so agreement and scores only exercise the '
        "pipeline.</p>"
        if ctx.engine.settings.is_tiny
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


#: the agreement a verdict quotes, the first the task has: find's span IoU, caption's ROUGE-L
HEADLINE_AGREEMENT = ("span_iou", "rouge_l")
#: a speed ratio or memory share this close to even reads "about the same"
SAME_SPEED = 1.05
SAME_MEMORY = 0.02
FIGURES_HEADING = next(line[3:] for line in about.SEED_FIGURES.splitlines() if line.startswith("## "))
FIGURES_LINK = (
    '<a class="cs-figures" href="#about-facts" data-mr-tab="about" '
    f'data-mr-heading="{html.escape(FIGURES_HEADING)}">the model card\'s published figures (About)</a>'
)
FIGURES_JS = asset("figures.js")
"""The verdict's link: the About tab selected, then scrolled to the published figures."""


def _times(ratio: float) -> str:
    return f"{ratio:.2g}×" if ratio < 10 else f"{ratio:.0f}×"


def _speed_clause(a: str, b: str, payload: Mapping[str, Any]) -> str:
    warm, cold = payload.get("warm") or {}, payload.get("cold") or {}
    wa, wb = warm.get(a), warm.get(b)
    name_a, name_b = short(a), short(b)
    if not (wa and wb and wa["latency_s"] and wb["latency_s"]):
        a_s, b_s = (fmt(payload["results"][v]["metrics"]["latency_s"], " s") for v in (a, b))
        took = f"took {a_s} and {name_b} {b_s}"
        coldest = " and ".join(short(v) for v in (a, b) if cold.get(v) and not warm.get(v))
        why = (
            f"{coldest} ran cold (loaded for this request) with no warm re-run"
            if coldest
            else "no warm figure"
        )
        return f"{took}, but {why}: no warm comparison"
    ratio = wb["latency_s"] / wa["latency_s"]
    if ratio >= SAME_SPEED:
        pace = f"was {_times(ratio)} faster than {name_b} warm"
    elif ratio <= 1 / SAME_SPEED:
        pace = f"was {_times(1 / ratio)} slower than {name_b} warm"
    else:
        pace = f"was about as fast as {name_b} warm"
    notes = [f"{fmt(wa['latency_s'], ' s')} vs {fmt(wb['latency_s'], ' s')}"]
    rerun = [short(v) for v, w in ((a, wa), (b, wb)) if w.get("rerun")]
    if rerun:
        notes.append(" and ".join(rerun) + " timed again, warm")
    if wa.get("reused_prefix") != wb.get("reused_prefix"):
        reused, fresh = (name_a, name_b) if wa.get("reused_prefix") else (name_b, name_a)
        notes.append(f"{reused} reused its earlier reading of the clip, {fresh} read it afresh")
    return f"{pace} ({'; '.join(notes)})"


def _memory_clause(a: str, b: str, payload: Mapping[str, Any]) -> str:
    mem = payload.get("footprint_mb") or {}
    ma, mb = mem.get(a), mem.get(b)
    if not ma or not mb:
        return ""
    share = ma / mb - 1
    if share <= -SAME_MEMORY:
        held = f"held {-share:.0%} less memory"
    elif share >= SAME_MEMORY:
        held = f"held {share:.0%} more memory"
    else:
        held = "held about the same memory"
    return f" and {held} (weights' footprint {ma:,.1f} MB vs {mb:,.1f} MB)"


def _agreement_clause(a: str, b: str, payload: Mapping[str, Any]) -> str:
    values = payload["agreement"].get(f"{a}|{b}") or {}
    key = next((k for k in HEADLINE_AGREEMENT if k in values), next(iter(values), None))
    if key is None:
        return ""
    name = AGREEMENT_NAMES.get(key, key)
    return f"; their answers agree {values[key]:.2f} ({name}, 1 = identical)"


def verdict(payload: Mapping[str, Any] | None) -> str:
    """A sentence per variant after the first: warm speed, weights' memory, agreement ("": under two)."""
    names = list((payload or {}).get("results") or {})
    if payload is None or len(names) < 2:
        return ""
    a = names[0]
    return " ".join(
        f"On this clip {short(a)} {_speed_clause(a, b, payload)}{_memory_clause(a, b, payload)}"
        f"{_agreement_clause(a, b, payload)}."
        for b in names[1:]
    )


def summary_html(payload: Mapping[str, Any] | None) -> str:
    """The verdict, then how far the variants agree: a row per pair and a column per measure."""
    if not payload:
        return ""
    said = verdict(payload)
    found = (
        f'<p class="cs-verdict" id="compare-verdict">{html.escape(said)} '
        f'<span class="cs-name">Set it beside {FIGURES_LINK}, measured by its author on one GPU.</span></p>'
        if said
        else ""
    )
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
        f'<div class="cs-summary">{found}'
        '<div class="cs-title">Agreement between the variants (1 = identical)</div>'
        f"{table}{truth}</div>"
    )


def _agreement_cell(value: float | None) -> str:
    if value is None:
        return "<td>–</td>"
    pct = 100 * max(0.0, min(1.0, value))
    bar = f'<span class="cs-bar"><span style="width:{pct:.0f}%"></span></span>'
    return f'<td><span class="cs-val">{value:.2f}</span>{bar}</td>'


def _cost_row(variant: str, result: Result, cold: Mapping[str, bool]) -> dict[str, Any]:
    """The variant, whether its run was cold, and the cost keys: the part both tables share."""
    m = result.metrics.to_dict()
    was_cold = bool(cold.get(variant))
    # load_s is the variant's load whenever it happened: a warm run loaded nothing in this request
    m["load_s"] = m["load_s"] if was_cold else 0.0
    return {"variant": variant, "run": "cold" if was_cold else "warm", **{key: m[key] for key in COST_KEYS}}


def metrics_frame(
    results: Mapping[str, Result], cold: Mapping[str, bool], payload: Mapping[str, Any]
) -> pd.DataFrame:
    """One row per variant that answered, with the ``payload``'s footprint and warm latency."""
    footprint, warm = payload.get("footprint_mb") or {}, payload.get("warm") or {}
    rows = [
        {
            **_cost_row(v, r, cold),
            "warm_latency_s": warm[v]["latency_s"] if warm.get(v) else None,
            "footprint_mb": footprint.get(v),
            "video_tokens": r.metrics.video_tokens,
            "memory": memory_label(r.metrics.memory_kind),
            "device": r.metrics.device,
        }
        for v, r in results.items()
    ]
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def chart_frame(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    """One metric per variant for a bar chart; no warm figure or footprint: no bar (a 0 would read as one)."""
    values = pd.to_numeric(frame[key], errors="coerce")
    out = pd.DataFrame({"variant": frame["variant"].astype(str), key: values.astype(float)})
    if key in ("warm_latency_s", "footprint_mb"):
        return out.dropna().reset_index(drop=True)
    return out.fillna(0.0)


def scores_frame(task: str, payload: Mapping[str, Any]) -> pd.DataFrame:
    """Each variant's scores against the ground truth, in its answer's columns."""
    answer = get_task(task).answer
    rows = [{"variant": v, **answer.score_row(s)} for v, s in (payload.get("scores") or {}).items() if s]
    return pd.DataFrame(rows, columns=["variant", *answer.score_row({})]).round(3)


def _main_score(task: str, scores: Mapping[str, Any] | None) -> float | None:
    value = next(iter(get_task(task).answer.score_row(scores).values()), None) if scores else None
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
    results: Mapping[str, Result],
    cold: Mapping[str, bool],
    payload: Mapping[str, Any],
    reruns: Mapping[str, Result] | None = None,
) -> list[dict]:
    """The session table with a row per variant that answered, then per warm re-run, appended."""
    n = 1 + max((int(r["#"]) for r in rows), default=0)
    head = {
        "#": n,
        "time": time.strftime("%H:%M:%S"),
        "video": Path(video).name,
        "task": task,
        "query": query or "",
    }
    costs = [(v, _cost_row(v, r, cold)) for v, r in results.items()]
    costs += [(v, {**_cost_row(v, r, {}), "run": "warm re-run"}) for v, r in (reruns or {}).items()]
    agreement, scores = _agreement_text(payload), payload.get("scores") or {}
    return [
        *rows,
        *({**head, **c, "agreement": agreement, "score": _main_score(task, scores.get(v))} for v, c in costs),
    ]


def cold_warm_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per variant: what the cold (first) runs cost including the load, and the warm runs' mean latency."""
    out = []
    for v in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == v]
        cold = [(r["load_s"] or 0) + (r["latency_s"] or 0) for r in mine if r["run"] == "cold"]
        warm = [r["latency_s"] or 0 for r in mine if r["run"] != "cold"]  # its warm re-runs too
        out.append([v, len(cold), _mean(cold), len(warm), _mean(warm)])
    return pd.DataFrame(out, columns=COLD_WARM_COLUMNS)


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def write_session_csv(ctx: UIContext, rows: Sequence[Mapping[str, Any]]) -> str | None:
    if not rows:
        return None
    path = ctx.new_run_dir("session") / "marlin_compare_session.csv"
    pd.DataFrame(rows, columns=SESSION_COLUMNS).to_csv(path, index=False, lineterminator="\r\n")
    return str(path)
