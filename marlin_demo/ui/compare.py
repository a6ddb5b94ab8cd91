"""Compare tab: one video, one task, run on GPTQ and bnb4 (and bf16 on request) side by side.

Shows each variant's answer, the cost of each (charts), how much the variants
agree, and on the bundled examples how each scores against the ground truth.
Runs accumulate in a per-session table that downloads as CSV; a variant's
first run (cold: it includes loading the model) is reported apart from warm runs.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import html
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from marlin_demo import compare as cmp
from marlin_demo import service, space
from marlin_demo.metrics import temporal_iou
from marlin_demo.results import CaptionResult, FindResult, Loaded, Prepared, Progress
from marlin_demo.ui import timeline
from marlin_demo.ui.common import (
    GPU_EVENT,
    PRIVATE_UI,
    UIContext,
    error_html,
    fmt,
    memory_label,
    require_upload,
    short_name,
    tiny_in_use,
    upload_video,
    user_errors,
    variant_label,
)
from marlin_demo.ui.credits import credit_box, credit_line

VIDEO_ID = "compare-video"
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


@dataclass
class CompareTab:
    video: gr.Video
    task: gr.Radio
    query: gr.Textbox
    include_bf16: gr.Checkbox
    run: gr.Button
    stop: gr.Button
    summary: gr.HTML
    cards: gr.HTML
    metrics_table: gr.Dataframe
    plots: list[gr.BarPlot]
    scores: gr.Dataframe
    cold_warm: gr.Dataframe
    session: gr.State
    session_table: gr.Dataframe
    session_csv: gr.File
    api_button: gr.Button
    api_out: gr.JSON
    session_box: gr.Accordion

    @property
    def outputs(self) -> list[Any]:
        return [
            self.summary,
            self.cards,
            self.metrics_table,
            *self.plots,
            self.scores,
            self.cold_warm,
            self.session,
            self.session_table,
            self.session_csv,
            self.session_box,
        ]


# ---------------------------------------------------------------------------
# HTML pieces
# ---------------------------------------------------------------------------


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
) -> str:
    """One variant's column. ``cold`` is None until the variant starts; ``live`` is its text so far."""
    label = html.escape(variant_label(variant))
    badge = _badge(cold, will_load)
    if isinstance(result, str):  # an error message for this variant
        body = error_html(result)
    elif isinstance(result, CaptionResult):
        events = (
            "".join(
                f"<li><b>{e.start:.1f}–{e.end:.1f} s</b> {html.escape(e.description)}</li>"
                for e in result.events
            )
            or "<li><i>no timed events could be read</i></li>"
        )
        body = (
            f'<p class="cc-scene">{html.escape(result.scene) or "<i>no scene paragraph</i>"}</p>'
            f"{timeline.timeline_html(duration, result.events, player=f'#{VIDEO_ID}')}"
            f'<ul class="cc-events">{events}</ul>'
        )
    elif isinstance(result, FindResult):
        if result.span is None:
            span = '<p class="cc-span cc-none">No span: the answer gave no usable time range.</p>'
        else:
            span = f'<p class="cc-span">{result.span[0]:.1f} s → {result.span[1]:.1f} s</p>'
        if truth is not None:
            iou = temporal_iou(result.span, truth)
            span += f'<p class="cc-truth">ground truth {truth[0]:.1f}–{truth[1]:.1f} s · IoU {iou:.2f}</p>'
        body = span + timeline.timeline_html(
            duration,
            span=result.span,
            reference=truth,
            player=f"#{VIDEO_ID}",
            span_label=variant,
            no_span_text=None,
        )
    elif live is not None:
        text = f"<pre>{html.escape(live)}</pre>" if live else ""
        body = f'<div class="cc-live"><div class="mc-label">writing…</div>{text}</div>'
    elif cold is not None:
        body = '<p class="cc-wait">starting…</p>'
    else:
        body = '<p class="cc-wait">runs after the variants before it</p>'
    stats = ""
    if isinstance(result, CaptionResult | FindResult):
        m = result.metrics
        load = f"load {fmt(m.load_s, ' s')} (this request)" if cold else "no load (already loaded)"
        stats = (
            f'<div class="cc-stats">latency {fmt(m.latency_s, " s")} · first token {fmt(m.ttft_s, " s")} · '
            f"{fmt(m.tokens_per_s, ' tok/s', 1)} · {m.output_tokens} tokens · {load}</div>"
        )
        flags = []
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
) -> str:
    """A column per variant; one not started yet (absent from ``cold``) says whether it will load."""
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


def summary_html(payload: Mapping[str, Any] | None, running: str | None = None) -> str:
    if running:
        return f'<div class="cs-summary cs-running" role="status">{html.escape(running)}</div>'
    if not payload:
        return ""
    chips = []
    for pair, values in payload["agreement"].items():
        a, b = pair.split("|", 1)
        for key, value in values.items():
            name = {
                "span_iou": "span IoU",
                "event_iou": "matched-event IoU",
                "event_f1": "event F1",
                "rouge_l": "caption ROUGE-L",
            }.get(key, key)
            chips.append(
                f'<div class="cs-chip"><div class="cs-pair">{html.escape(a)} ↔ {html.escape(b)}</div>'
                f'<div class="cs-val">{value:.2f}</div><div class="cs-name">{html.escape(name)}</div>'
                f'<div class="cs-bar"><span style="width:{100 * max(0.0, min(1.0, value)):.0f}%">'
                "</span></div>"
                "</div>"
            )
    if not chips:
        chips.append(
            '<div class="cs-chip"><div class="cs-name">only one variant ran: nothing to compare</div></div>'
        )
    truth = ""
    if "scores" in payload:
        truth = (
            '<div class="cs-note">This clip is a bundled example: '
            "scores against its ground truth are below.</div>"
        )
    return (
        '<div class="cs-summary"><div class="cs-title">Agreement between the variants (1 = identical)</div>'
        f'<div class="cs-chips">{"".join(chips)}</div>{truth}</div>'
    )


# ---------------------------------------------------------------------------
# Tables and charts
# ---------------------------------------------------------------------------


def _cost_row(variant: str, result: CaptionResult | FindResult, cold: Mapping[str, bool]) -> dict[str, Any]:
    """The variant, whether its run was cold, and the cost keys: the part both tables share."""
    m = result.metrics.to_dict()
    was_cold = bool(cold.get(variant))
    # load_s is the variant's load whenever it happened: a warm run loaded nothing in this request
    m["load_s"] = m["load_s"] if was_cold else 0.0
    return {
        "variant": variant,
        "run": "cold" if was_cold else "warm",
        **{key: m[key] for key in COST_KEYS},
    }


def metrics_frame(
    results: Mapping[str, CaptionResult | FindResult], cold: Mapping[str, bool]
) -> pd.DataFrame:
    """One row per variant; ``results`` holds the variants that answered (no error strings)."""
    rows = []
    for v, r in results.items():
        m = r.metrics.to_dict()
        rows.append(
            {
                **_cost_row(v, r, cold),
                "video_tokens": m["video_tokens"],
                "memory": memory_label(m["memory_kind"]),
                "device": m["device"],
            }
        )
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


VARIANT_COLORS = {"gptq": "#0d9488", "bnb4": "#f59e0b", "bf16": "#8b5cf6"}
EXTRA_COLORS = ("#0ea5e9", "#ef4444", "#ec4899", "#6366f1", "#10b981")


def variant_colors(variants: Sequence[str]) -> dict[str, str]:
    """One color per variant, the same in every chart."""
    extras = iter(EXTRA_COLORS * 4)
    return {v: VARIANT_COLORS.get(v) or next(extras) for v in variants}


def chart_frame(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    """One metric per variant for a bar chart: variant names as text, values as numbers (missing: 0)."""
    return pd.DataFrame(
        {
            "variant": frame["variant"].astype(str),
            key: pd.to_numeric(frame[key], errors="coerce").fillna(0.0).astype(float),
        }
    )


def scores_frame(task: str, payload: Mapping[str, Any]) -> pd.DataFrame:
    scores = payload.get("scores") or {}
    if task == "find":
        cols = ["variant", "IoU vs truth", "R1@0.3", "R1@0.5", "R1@0.7", "truth span (s)"]
        rows = [
            [
                v,
                s.get("miou"),
                s.get("r1@0.3"),
                s.get("r1@0.5"),
                s.get("r1@0.7"),
                "–" if not s.get("ref_span") else f"{s['ref_span'][0]:.1f}–{s['ref_span'][1]:.1f}",
            ]
            for v, s in scores.items()
            if s
        ]
    else:
        cols = [
            "variant",
            "ROUGE-L",
            "keyword coverage",
            "event F1",
            "matched-event IoU",
            "events (pred/ref)",
        ]
        rows = [
            [
                v,
                s.get("rouge_l"),
                s.get("keyword_coverage"),
                s.get("f1"),
                s.get("mean_matched_iou"),
                f"{s.get('n_pred')}/{s.get('n_ref')}",
            ]
            for v, s in scores.items()
            if s
        ]
    frame = pd.DataFrame(rows, columns=cols)
    return frame.round(3)


def _main_score(task: str, scores: Mapping[str, Any] | None) -> float | None:
    if not scores:
        return None
    value = scores.get("miou") if task == "find" else scores.get("rouge_l")
    return None if value is None else round(float(value), 3)


def _agreement_text(payload: Mapping[str, Any]) -> str:
    parts = []
    for pair, values in payload["agreement"].items():
        parts.append(pair + " " + ", ".join(f"{k}={v:.3f}" for k, v in values.items()))
    return "; ".join(parts)


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


# ---------------------------------------------------------------------------
# Layout and events
# ---------------------------------------------------------------------------


def render(ctx: UIContext) -> CompareTab:
    """Lay out the tab."""
    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=300):
            video = upload_video(label="Video", sources=["upload"], elem_id=VIDEO_ID, height=260)
            credit = credit_box("compare-credit")
            video.change(functools.partial(credit_line, ctx), video, credit, **PRIVATE_UI)
            task = gr.Radio(TASK_CHOICES, value="caption", label="Task", elem_id="compare-task")
            query = gr.Textbox(
                "",
                label="Event to find",
                placeholder="e.g. the blue square leaves the frame",
                visible=False,
                max_length=ctx.settings.max_query_chars,
                elem_id="compare-query",
            )
            include_bf16 = gr.Checkbox(
                False,
                label="Also run bf16 (16-bit reference: more memory, slower to load)",
                visible="bf16" in ctx.variants,
                elem_id="compare-bf16",
            )
            with gr.Row():
                run = gr.Button(run_label(ctx, False), variant="primary", elem_id="compare-run", scale=4)
                stop = gr.Button("Stop", variant="stop", elem_id="compare-stop", scale=1, min_width=70)
            gr.Markdown(
                "Each variant runs in turn on the same frames and prompt. A variant's first run is *cold*: "
                "it includes loading the model, shown apart from *warm* runs.",
                elem_classes=["cs-help"],
            )
            api_button = gr.Button("api", visible=False)
            api_out = gr.JSON(label="comparison", visible=False)
            if ctx.examples:
                rows = [(e, (e.get("queries") or [{}])[0].get("query", "")) for e in ctx.examples]
                gr.Examples(
                    examples=[
                        [str(ctx.clip(e)), "find" if i % 2 else "caption", q if i % 2 else ""]
                        for i, (e, q) in enumerate(rows)
                    ],
                    inputs=[video, task, query],
                    example_labels=[
                        f"▶ {e.get('title') or short_name(e)} · " + (f"find “{q}”" if i % 2 else "caption")
                        for i, (e, q) in enumerate(rows)
                    ],
                    label="Examples (fill the inputs; press Compare)",
                    elem_id="compare-examples",
                )
        with gr.Column(scale=8, min_width=420):
            summary = gr.HTML("", elem_id="compare-summary")
            cards = gr.HTML(
                '<div class="cc-empty">Run a comparison: each variant gets a column here.</div>',
                js_on_load=timeline.TIMELINE_JS,
                elem_id="compare-cards",
            )
    metrics_table = gr.Dataframe(
        titled(pd.DataFrame(columns=METRIC_COLUMNS)),
        label="Cost of each variant on this request",
        interactive=False,
        visible=False,  # empty outputs stay hidden until a comparison has run
        elem_id="compare-metrics",
    )
    plots = []
    for row in (CHARTS[:3], CHARTS[3:]):
        with gr.Row():
            for key, title in row:
                plots.append(
                    gr.BarPlot(
                        None,
                        x="variant",
                        y=key,
                        color="variant",
                        color_map=variant_colors(ctx.variants),
                        colors_in_legend=[],
                        sort=list(ctx.variants),
                        x_title=" ",
                        y_title=" ",
                        title=title,
                        y_lim=[0, None],
                        height=220,
                        elem_classes=["cs-plot"],
                        elem_id=f"compare-plot-{key}",
                        show_label=False,
                        visible=False,
                    )
                )
    with gr.Row(equal_height=False):
        scores = gr.Dataframe(
            label="Scores against the example's ground truth",
            interactive=False,
            visible=False,
            elem_id="compare-scores",
        )
        cold_warm = gr.Dataframe(
            pd.DataFrame(columns=COLD_WARM_COLUMNS),
            wrap=True,
            label="Cold vs warm runs (this session)",
            interactive=False,
            visible=False,
            elem_id="compare-coldwarm",
        )
    with gr.Accordion("This session's runs", open=True, elem_id="compare-session-acc", visible=False) as acc:
        session = gr.State([])
        session_table = gr.Dataframe(
            titled(pd.DataFrame(columns=SESSION_COLUMNS)),
            interactive=False,
            elem_id="compare-session",
            wrap=False,
        )
        session_csv = gr.File(
            label="Session as CSV", interactive=False, elem_id="compare-csv", height=90, visible=False
        )
    return CompareTab(
        video,
        task,
        query,
        include_bf16,
        run,
        stop,
        summary,
        cards,
        metrics_table,
        plots,
        scores,
        cold_warm,
        session,
        session_table,
        session_csv,
        api_button,
        api_out,
        acc,
    )


def run_label(ctx: UIContext, include_bf16: bool) -> str:
    """The Compare button names the variants it will run."""
    return "Compare: " + " vs ".join(variant_label(v) for v in ctx.compare_variants(include_bf16))


def _runs_for(*args: Any, **kwargs: Any) -> int:
    include_bf16 = bool(args[3]) if len(args) > 3 else bool(kwargs.get("include_bf16"))
    return 3 if include_bf16 else 2


def listen(ctx: UIContext, tab: CompareTab) -> None:
    """Wire the streaming UI comparison and the public ``/compare`` endpoint."""
    running_in: set[str] = set()  # the sessions whose comparison is running (for Stop's message)
    stop_state = gr.State(False)

    @space.gpu(space.duration_for("caption", _runs_for))
    def compare_ui(
        video: str | None,
        task: str,
        query: str,
        include_bf16: bool,
        rows: list[dict[str, Any]],
        request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008
    ) -> Iterator[Any]:
        skip = gr.skip()
        n_rest = len(tab.outputs) - 2
        session = request.session_hash or ""
        running_in.add(session)
        try:
            path = require_upload(video, ctx)
            with user_errors():
                variants = ctx.compare_variants(include_bf16)
                n = len(variants)
                yield (progress_html(None, 0, n, "Reading the video…"), skip, *([skip] * n_rest))
                results: dict[str, Any] = {}  # a variant's result, or its error message
                cold: dict[str, bool] = {}
                live: dict[str, str] = {}
                duration, truth, example = 0.0, None, None
                i, v, last = 0, "", 0.0
                events = service.compare(ctx.engine, task, path, variants, query, live=True)
                with contextlib.closing(events):  # closing it (Stop) stops the model at its next token
                    for event in events:
                        if isinstance(event, Prepared):
                            duration = event.video.duration_s
                            example = ctx.ground_truth(path)
                            clean = service.check_query(ctx.engine, task, query)
                            truth = cmp.truth_span(example, clean) if (example and task == "find") else None
                        elif isinstance(event, service.VariantStarted):
                            i, v = event.index, event.variant
                            cold[v] = event.cold
                            step = f"Loading {v} (its first use)…" if event.cold else "Starting…"
                            progress((i + 0.1) / n, desc=f"{v}: {step} ({i + 1}/{n})")
                            yield (
                                progress_html(v, i, n, step),
                                cards_html(ctx, variants, results, cold, duration, truth, live),
                                *([skip] * n_rest),
                            )
                        elif isinstance(event, Loaded):
                            live[v] = ""
                            yield (
                                progress_html(v, i, n, "Reading the frames (prefill)…"),
                                cards_html(ctx, variants, results, cold, duration, truth, live),
                                *([skip] * n_rest),
                            )
                        elif isinstance(event, Progress):
                            now = time.monotonic()
                            if event.text and now - last >= ctx.settings.stream_every_s:
                                last = now
                                live[v] = event.text
                                step = "Writing…"
                                if event.window is not None and event.windows:
                                    step = f"Writing window {event.window} of {event.windows}…"
                                yield (
                                    progress_html(v, i, n, step, len(event.text)),
                                    cards_html(ctx, variants, results, cold, duration, truth, live),
                                    *([skip] * n_rest),
                                )
                        elif isinstance(event, service.VariantFinished):
                            live.pop(event.variant, None)
                            results[event.variant] = event.result if event.result is not None else event.error
                        elif isinstance(event, service.Comparison):
                            run = event
                run.require_answer()
                ok = run.results
                payload = run.payload(example)
                frame = metrics_frame(ok, cold)
                new_rows = session_rows(rows, path, task, run.query, ok, cold, payload)
                has_scores = "scores" in payload
                yield (
                    summary_html(payload),
                    cards_html(ctx, variants, results, cold, duration, truth),
                    gr.update(value=titled(frame), visible=True),
                    *[gr.update(value=chart_frame(frame, key), visible=True) for key, _ in CHARTS],
                    gr.update(value=scores_frame(task, payload) if has_scores else None, visible=has_scores),
                    gr.update(value=cold_warm_frame(new_rows), visible=True),
                    new_rows,
                    titled(pd.DataFrame(new_rows, columns=SESSION_COLUMNS)),
                    gr.update(value=write_session_csv(ctx, new_rows), visible=True),
                    gr.update(visible=True),
                )
        except gr.Error as exc:
            yield (error_html(exc.message), skip, *([skip] * n_rest))
            raise
        finally:
            running_in.discard(session)

    @space.gpu(space.duration_for("caption", 2))
    def compare(video: str | None, task: str = "caption", query: str = "") -> dict[str, Any]:
        """Run caption or find on every 4-bit variant (GPTQ and bnb4; not bf16) and say how far they agree.

        Args:
            video: The clip (MP4, WebM, MOV or MKV) as an uploaded file; a path on the server is refused.
            task: "caption" (what happens) or "find" (when the query happens).
            query: For task "find": the event in plain words (not empty); ignored for "caption".

        Returns:
            JSON {"task": str, "query": str or null, "results": {variant: the caption or find JSON},
            "agreement": {"gptq|bnb4": {"event_iou": float, "event_f1": float, "rouge_l": float}} for
            caption or {"gptq|bnb4": {"span_iou": float}} for find, one key per pair of variants},
            plus "scores": {variant: {...}} against the ground truth when the clip is one of the
            app's bundled examples, and "errors": {variant: one sentence} when a variant could not
            load or run (the others still answer; when none answers the call fails).
        """
        path = require_upload(video, ctx)
        with user_errors():
            *_, run = service.compare(ctx.engine, task, path, ctx.compare_variants(), query)
            assert isinstance(run, service.Comparison)
            run.require_answer()
            return run.payload(ctx.ground_truth(path))

    tab.task.change(
        lambda t: gr.update(visible=t == "find"),
        tab.task,
        tab.query,
        **PRIVATE_UI,
    )
    tab.include_bf16.change(
        lambda on: gr.update(value=run_label(ctx, bool(on))),
        tab.include_bf16,
        tab.run,
        **PRIVATE_UI,
    )
    running = tab.run.click(
        compare_ui,
        [tab.video, tab.task, tab.query, tab.include_bf16, tab.session],
        tab.outputs,
        api_visibility="private",
        show_progress="hidden",  # the progress area (summary) and the cards say what runs
        **GPU_EVENT,
    )

    # Stop: Gradio closes the running generator, which closes the request: the model stops at its
    # next token. The variants that finished are not shown (their tables need the whole comparison).
    # Whether a comparison was running is read when Stop is pressed; the message then goes through
    # the queue, after the stopped run's last messages, so none of them can overwrite it.
    def was_running(request: gr.Request) -> bool:
        return (request.session_hash or "") in running_in

    def stopped(was: bool) -> Any:
        if not was:
            return gr.skip()
        return (
            '<div class="cs-summary cs-stopped" role="status">Stopped: the comparison was cancelled. '
            "Press Compare to run it again.</div>"
        )

    tab.stop.click(was_running, None, stop_state, cancels=[running], **PRIVATE_UI).then(
        stopped, stop_state, tab.summary, api_visibility="private", show_progress="hidden"
    )
    tab.api_button.click(
        compare,
        [tab.video, tab.task, tab.query],
        tab.api_out,
        api_name="compare",
        api_description="Run caption or find on every compared variant: {task, query, results: {variant: "
        "result}, agreement: {'a|b': {...}}} plus scores when the clip is a bundled example, and errors: "
        "{variant: sentence} when a variant failed (the others' results are still returned)",
        **GPU_EVENT,
    )
