"""Tests for ``python -m marlin_demo bench``.

Fast tests drive the whole command with a fake engine (hand-computed scores,
resume, errors); the ``slow`` ones run the real tiny checkpoint on the
project's example clips, in-process through ``cli.main``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from media_factory import examples_subset

from marlin_demo import bench, cli, tasks
from marlin_demo.bench.cli import data_folder
from marlin_demo.bench.longset import resolve_data
from marlin_demo.engine import EngineError
from marlin_demo.model_io import Event, VideoParams
from marlin_demo.models import LoadedModel, ModelLoadError, Source
from marlin_demo.results import CaptionResult, FindResult, Metrics, RunInfo, VideoInfo
from marlin_demo.tasks import Task
from marlin_demo.video import PreparedVideo, plan_sampling

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
needs_examples = pytest.mark.skipif(
    not (EXAMPLES / "examples.json").is_file(), reason="examples/examples.json is not rendered"
)
PNGS = ("quality.png", "latency.png", "memory.png", "latency_distribution.png")
SEED_ROWS = (
    "Latency per request, mean (s)",
    "Latency per request, median (s)",
    "Accuracy retention vs bnb4 (overall score)",
    "Caption score (ROUGE-L)",
    "Keyword coverage",
)

# ---------------------------------------------------------------------------
# A fake engine with known answers
# ---------------------------------------------------------------------------

SCENE = "A red ball rolls on green grass."
EVENTS = [Event(0.0, 4.0, "The ball rests on the grass."), Event(4.0, 10.0, "The ball rolls away.")]
DATA = [
    {
        "video": "a.mp4",
        "duration": 10.0,
        "scene": SCENE,
        "events": [e.to_dict() for e in EVENTS],
        "queries": [
            {"query": "the ball rolls", "span": [4.0, 10.0]},
            {"query": "the ball rests", "span": [0.0, 4.0]},
        ],
    },
    {"video": "b.mp4", "duration": 10.0, "queries": [{"query": "a door opens", "span": [2.0, 6.0]}]},
]
# bf16 answers the truth; gptq shifts two spans; bnb4 gives no span once and misses an event.
SPANS = {
    "bf16": {"the ball rolls": (4.0, 10.0), "the ball rests": (0.0, 4.0), "a door opens": (2.0, 6.0)},
    "gptq": {"the ball rolls": (5.0, 10.0), "the ball rests": (0.0, 4.0), "a door opens": (4.0, 8.0)},
    "bnb4": {"the ball rolls": (4.0, 10.0), "the ball rests": (0.0, 4.0), "a door opens": None},
}
GPTQ_MIOU = (5 / 6 + 1.0 + 2 / 6) / 3


class FakeEngine:
    fail_once: ClassVar[set[tuple[str, str, str | None]]] = set()
    fail_load: ClassVar[set[str]] = set()
    calls: ClassVar[list[tuple[str, str, str, str | None]]] = []

    def __init__(self, settings: Any, video_cache_size: int = 4) -> None:
        self.settings = settings
        self.video_cache_size = video_cache_size
        self.model_label = "fake"
        self.params = VideoParams()
        self.store = self  # the service asks the store for a clip's frames once, then runs on them

    def load(self, variant: str) -> LoadedModel:
        if variant in self.fail_load:
            raise ModelLoadError(f"cannot load {variant} (test)")
        source = Source(variant, f"/fake/{variant}", None, {"bf16": "none"}.get(variant, variant), True)
        return LoadedModel(
            variant, None, None, source, 0.5, "cpu", {"gptq": 2.0, "bnb4": 2.5}.get(variant, 4.0), "k"
        )

    def unload(self, variant: str) -> bool:
        return True

    def reserve_prefixes(self, clips: int) -> None:
        """The scheduler sizes the prefix cache; this engine keeps none."""

    def info(self, path: Path, whole: bool = True) -> VideoInfo:
        """A clip shorter than one window: the service asks the engine for it whole."""
        return VideoInfo(str(path), 1000, "mp4", 4.0, 2.0, 8, 64, 64, 64, 64, 0, "h264")

    def prepare(self, video: Any) -> tuple[PreparedVideo, bool]:
        """No frames: the fake answers by the clip's name."""
        info = self.info(Path(video))
        return PreparedVideo(None, {}, plan_sampling(info, self.params), info), False  # type: ignore[arg-type]

    def is_loaded(self, variant: str) -> bool:
        return True

    def note_decode(self, variant: str, mode: str) -> None:
        """The fake decodes nothing: what the runner tells an engine of each answer is kept by no one."""

    def run(self, entry: Task, video: Any, variant: str, query: str | None = None, **_: Any) -> Any:
        """The task's entry (the service looked it up once), the clip's frames, the cleaned query."""
        task, name = entry.name, Path(video.info.path).name
        FakeEngine.calls.append((variant, task, name, query))
        if (variant, name, query) in FakeEngine.fail_once:
            FakeEngine.fail_once.discard((variant, name, query))
            raise EngineError("simulated failure")
        lat = {"gptq": 1.0, "bnb4": 1.2, "bf16": 1.5}[variant] + 0.01 * len(FakeEngine.calls) % 0.05
        m = Metrics(lat, 0.2, 20, 40.0, 100, 900.0, "cpu_peak_rss", 0.5, "cpu")
        info = RunInfo(decode_s=0.05, first_text_s=0.25, kernel="k")
        if task == "find":
            span = SPANS[variant][query]
            raw = "no idea" if span is None else f"From {span[0]} to {span[1]}."
            return FindResult(
                variant=variant, model="fake", query=query, span=span, format_ok=span is not None, raw=raw,
                metrics=m, info=info,
            )  # fmt: skip
        events = EVENTS[:1] if variant == "bnb4" else EVENTS
        return CaptionResult(
            variant=variant,
            model="fake",
            scene=SCENE,
            events=list(events),
            raw=f"Scene: {SCENE}",
            metrics=m,
            info=info,
        )


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeEngine]:
    import marlin_demo.engine

    monkeypatch.setattr(marlin_demo.engine, "Engine", FakeEngine)
    monkeypatch.setattr(bench.cli, "preimport_backends", lambda variants, settings: {"fake": 0.0})
    FakeEngine.fail_once = set()
    FakeEngine.fail_load = set()
    FakeEngine.calls = []
    return FakeEngine


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    for entry in DATA:
        (folder / entry["video"]).write_bytes(b"not decoded by the fake engine")
    (folder / "examples.json").write_text(json.dumps(DATA), encoding="utf-8")
    return folder


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _check_outputs(out: Path, variants: list[str]) -> dict[str, Any]:
    """Every output exists and is sane; returns results.json."""
    from PIL import Image

    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    for key in ("environment", "settings", "models", "data", "run", "timestamp", "variants", "comparison"):
        assert key in results, key
    env = results["environment"]
    for key in ("cpu", "gpu", "python", "platform", "cuda", "packages"):
        assert key in env, key
    for pkg in ("torch", "transformers", "gptqmodel", "bitsandbytes"):
        assert pkg in env["packages"]
    assert results["models"]["bf16_id"] and results["models"]["gptq_id"]
    assert list(results["variants"]) == variants
    for v in variants:
        r = results["variants"][v]
        assert r["load"]["load_s"] > 0 and r["load"]["footprint_mb"] > 0 and r["load"]["kernel"]
        sp = r["speed"]["all"]
        assert sp["latency_s"]["median"] > 0 and sp["latency_s"]["min"] <= sp["latency_s"]["max"]
        assert sp["output_tokens"]["mean"] > 0
        # per request ttft <= first visible text <= latency, so their medians keep that order
        assert sp["ttft_s"]["median"] <= sp["first_text_s"]["median"] <= sp["latency_s"]["median"]
        assert sp["peak_memory_mb"]["max"] > 0
        assert r["speed"]["memory_kind"] in ("cpu_peak_rss", "cuda_peak_allocated")
        f = r["quality"]["find"]
        assert 0 <= f["miou"] <= 1 and 0 <= f["parse_rate"] <= 1
        assert f["r1@0.3"] >= f["r1@0.5"] >= f["r1@0.7"]
        c = r["quality"]["caption"]
        for key in (
            "rouge_l",
            "keyword_coverage",
            "event_precision",
            "event_recall",
            "parse_rate",
            "format_rate",
        ):
            assert 0 <= c[key] <= 1, key
    if "bf16" in variants:
        for v in variants:
            if v != "bf16":
                assert "find" in results["variants"][v]["retention_vs_bf16"]
                assert "find" in results["variants"][v]["agreement_with_bf16"]
    with (out / "results.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["variant"] for r in rows} >= set(variants)
    metrics = {(r["variant"], r["metric"]) for r in rows}
    assert ("gptq", "quality.find.miou") in metrics
    assert ("gptq", "speed.all.latency_s.median") in metrics
    summary = (out / "summary.md").read_text(encoding="utf-8")
    for row in SEED_ROWS:
        assert row in summary, row
    if "gptq" in variants and "bnb4" in variants:
        assert "GPTQ vs bnb4" in summary
    for png in PNGS:
        path = out / png
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        with Image.open(path) as im:
            assert im.width > 100 and im.height > 100, png
    return results


# ---------------------------------------------------------------------------
# Fast: the whole command with the fake engine
# ---------------------------------------------------------------------------


def test_bench_scores_resume_and_retry(
    fake: type[FakeEngine], data: Path, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "out"
    fake.fail_once = {("gptq", "b.mp4", "a door opens")}
    argv = ["bench", "--variants", "gptq,bnb4,bf16", "--data", str(data), "--repeats", "2", "--out", str(out)]
    assert cli.main(argv) == 0
    # per variant: 1 warm-up + 2 repeats x (1 caption + 3 finds)
    assert len(fake.calls) == 3 * (1 + 2 * 4)
    res = _check_outputs(out, ["gptq", "bnb4", "bf16"])
    stdout = capsys.readouterr().out
    assert "Accuracy retention vs bnb4" in stdout and "results.json" in stdout

    g, b, f = (res["variants"][v] for v in ("gptq", "bnb4", "bf16"))
    assert g["requests"] == {"planned": 8, "ok": 7, "failed": 1, "missing": 0}
    # quality is scored on the first successful repeat: the failed repeat 0 falls back to repeat 1
    assert g["quality"]["find"]["miou"] == pytest.approx(GPTQ_MIOU)
    assert g["quality"]["find"]["r1@0.3"] == pytest.approx(1.0)
    assert g["quality"]["find"]["r1@0.5"] == pytest.approx(2 / 3)
    assert g["quality"]["find"]["r1@0.7"] == pytest.approx(2 / 3)
    assert b["quality"]["find"]["parse_rate"] == pytest.approx(2 / 3)
    assert b["quality"]["find"]["miou"] == pytest.approx(2 / 3)
    assert b["quality"]["caption"]["event_precision"] == 1.0
    assert b["quality"]["caption"]["event_recall"] == 0.5
    assert f["quality"]["caption"]["rouge_l"] == pytest.approx(1.0)
    assert f["quality"]["caption"]["keyword_coverage"] == 1.0
    assert f["quality"]["find"]["miou"] == pytest.approx(1.0)
    assert g["retention_vs_bf16"]["find"]["miou"] == pytest.approx(GPTQ_MIOU)
    assert g["agreement_with_bf16"]["find"]["span_iou"] == pytest.approx(GPTQ_MIOU)
    assert g["agreement_with_bf16"]["caption"]["event_f1"] == pytest.approx(1.0)
    assert b["agreement_with_bf16"]["caption"]["event_f1"] == pytest.approx(2 / 3)
    assert "bf16" not in f.get("retention_vs_bf16", {})
    assert g["stability"] == 1.0
    assert len(g["speed"]["find"]["latencies_s"]) == 5 and len(g["speed"]["caption"]["latencies_s"]) == 2
    cmp = res["comparison"]["gptq_vs_bnb4"]
    assert cmp["latency_median_s"] < 0  # gptq is faster in the fake
    assert cmp["overall_retention"] == pytest.approx(g["quality"]["overall"] / b["quality"]["overall"])
    assert any(i["task"] == "find" and i["iou"] == pytest.approx(5 / 6) for i in res["items"])
    assert "1 request(s) failed" in (out / "summary.md").read_text(encoding="utf-8")

    # resume: only the failed request runs again (after one warm-up of its variant)
    lines = _lines(out / "requests.jsonl")
    fake.calls.clear()
    assert cli.main(argv) == 0
    assert fake.calls == [("gptq", "find", "b.mp4", "a door opens")] * 2
    assert _lines(out / "requests.jsonl") == lines + 1
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["variants"]["gptq"]["requests"]["failed"] == 0

    # nothing left: no warm-up, no request, aggregates rewritten
    fake.calls.clear()
    (out / "summary.md").unlink()
    assert cli.main(argv) == 0
    assert fake.calls == []
    assert (out / "summary.md").is_file()

    # more repeats extend the run; a different set-up is refused; --fresh starts over
    assert cli.main([*argv[:-4], "--repeats", "3", "--out", str(out), "--variants", "gptq"]) == 0
    assert len(fake.calls) == 1 + 4
    capsys.readouterr()
    assert cli.main([*argv, "--caption-max-new-tokens", "99"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("error: ") and "--fresh" in err and "caption_max_new_tokens" in err and "\n" not in err
    )
    fake.calls.clear()
    assert cli.main([*argv, "--caption-max-new-tokens", "99", "--fresh"]) == 0
    assert len(fake.calls) == 3 * 9


def test_bench_load_failure_continues(
    fake: type[FakeEngine], data: Path, tmp_path: Path, capsys: Any
) -> None:
    fake.fail_load = {"bnb4"}
    out = tmp_path / "out"
    rc = cli.main(
        ["bench", "--variants", "gptq,bnb4", "--data", str(data), "--repeats", "1", "--out", str(out)]
    )
    assert rc == cli.EXIT_FAILED
    assert "cannot load bnb4" in capsys.readouterr().err
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["variants"]["bnb4"]["load"]["error"]
    assert res["variants"]["bnb4"]["requests"]["missing"] == 4
    assert res["variants"]["bnb4"]["quality"] == {"overall": None}
    assert not res["variants"]["bnb4"]["complete"] and res["variants"]["gptq"]["complete"]
    assert res["variants"]["gptq"]["requests"]["ok"] == 4
    assert "could not be loaded" in (out / "summary.md").read_text(encoding="utf-8")
    for png in PNGS:
        assert (out / png).stat().st_size > 0


def test_bench_tasks_and_limit(fake: type[FakeEngine], data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["bench", "--variants", "gptq", "--data", str(data), "--repeats", "1", "--out", str(out)]
    assert cli.main([*argv, "--tasks", "find", "--limit", "1"]) == 0
    assert {c[1] for c in fake.calls} == {"find"} and {c[2] for c in fake.calls} == {"a.mp4"}
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert "caption" not in res["variants"]["gptq"]["quality"]
    assert res["data"]["examples"] == 1


def test_without_tasks_the_bench_runs_those_whose_entry_says_so(
    fake: type[FakeEngine], data: Path, tmp_path: Path
) -> None:
    """No ``--tasks``: every task whose entry says the bench runs it (``Task.bench``), not a fixed list."""
    extra = dataclasses.replace(tasks.CAPTION, name="recap", order=99, bench=False)
    tasks.register_task(extra)
    try:
        argv = ["bench", "--variants", "gptq", "--data", str(data), "--repeats", "1"]
        assert cli.main([*argv, "--out", str(tmp_path / "a")]) == 0
        assert {c[1] for c in fake.calls} == {"caption", "find"}
        tasks.register_task(dataclasses.replace(extra, bench=True))
        assert cli.main([*argv, "--out", str(tmp_path / "b")]) == 0
        assert "recap" in {c[1] for c in fake.calls}
    finally:
        tasks.unregister_task("recap")


class AnyQueryEngine(FakeEngine):
    """The fake engine answering any clip and query (the project's examples): a fixed span."""

    def run(self, entry: Task, video: Any, variant: str, query: str | None = None, **_: Any) -> Any:
        find = entry.name == "find"
        res = super().run(entry, video, variant, "the ball rests" if find else query)
        return dataclasses.replace(res, query=query) if find else res


@needs_examples
def test_bench_reports_each_example_set(fake: type[FakeEngine], tmp_path: Path, monkeypatch: Any) -> None:
    """examples/ holds real footage and rendered clips: --limit 1 takes one of each, each gets its tables."""
    import marlin_demo.engine

    monkeypatch.setattr(marlin_demo.engine, "Engine", AnyQueryEngine)
    entries = json.loads((EXAMPLES / "examples.json").read_text(encoding="utf-8"))
    first = {}
    for e in entries:
        first.setdefault(e.get("set", "default"), e)
    assert set(first) == {"real", "rendered"}
    out = tmp_path / "out"
    argv = ["bench", "--variants", "gptq,bnb4", "--repeats", "1", "--limit", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    assert {c[2] for c in fake.calls} == {first["real"]["video"], first["rendered"]["video"]}
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["data"]["sets"] == {"real": 1, "rendered": 1}
    sets = results["sets"]
    assert list(sets) == ["real", "rendered"]
    for name, group in sets.items():
        e = first[name]
        assert group["data"]["examples"] == 1 and group["data"]["queries"] == len(e["queries"])
        for v in ("gptq", "bnb4"):
            per = group["variants"][v]
            assert per["requests"]["planned"] == per["requests"]["ok"] == 1 + len(e["queries"])
            assert 0 <= per["quality"]["find"]["miou"] <= 1 and "caption" in per["quality"]
            assert per["speed"]["find"]["requests"] == len(e["queries"])
    # the per-set request counts add up to the whole run's
    for v in ("gptq", "bnb4"):
        total = results["variants"][v]["requests"]["planned"]
        assert sum(g["variants"][v]["requests"]["planned"] for g in sets.values()) == total
    summary = (out / "summary.md").read_text(encoding="utf-8")
    by_set = summary.split("## By example set", 1)[1]
    real, rendered = by_set.split("### Real footage", 1)[1].split("### Rendered", 1)
    for table in (real, rendered):
        assert "| Find mIoU |" in table and "| Caption latency median (s) |" in table
    assert f"{len(first['real']['queries'])} find queries" in real
    from PIL import Image

    with Image.open(out / "sets.png") as im:
        assert im.width > 600 and im.height > 400


def test_one_set_has_no_set_tables(fake: type[FakeEngine], data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert (
        cli.main(["bench", "--variants", "gptq", "--data", str(data), "--repeats", "1", "--out", str(out)])
        == 0
    )
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert list(results["sets"]) == ["default"]
    assert "## By example set" not in (out / "summary.md").read_text(encoding="utf-8")
    assert not (out / "sets.png").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--variants", "gptq,fp8"], "unknown variant 'fp8'"),
        (["--variants", ","], "--variants is empty"),
        (["--tasks", "summarize"], "unknown task 'summarize'"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--data", "/nonexistent/data"], "does not exist"),
        (["--extra-variants", "broken"], "is not name=DIR"),
    ],
)
def test_bench_bad_arguments(
    extra: list[str], message: str, data: Path, tmp_path: Path, capsys: Any, fake: type[FakeEngine]
) -> None:
    argv = ["bench", "--data", str(data), "--out", str(tmp_path / "out"), *extra]
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert fake.calls == []


def test_bench_bad_data_and_out(data: Path, tmp_path: Path, capsys: Any, fake: type[FakeEngine]) -> None:
    (data / "b.mp4").unlink()
    argv = ["bench", "--data", str(data), "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    assert "b.mp4 does not exist" in capsys.readouterr().err
    (data / "b.mp4").write_bytes(b"x")
    (tmp_path / "file").write_text("x")
    assert cli.main(["bench", "--data", str(data), "--out", str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "requests.jsonl").write_text("{}\n")
    assert cli.main(["bench", "--data", str(data), "--out", str(stray)]) == 2
    assert "no run.json" in capsys.readouterr().err


def test_torn_jsonl_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n{"a": ', encoding="utf-8")
    assert bench.read_jsonl(path) == [{"a": 1}]
    bench.append_jsonl(path, {"a": 2})
    assert bench.read_jsonl(path) == [{"a": 1}, {"a": 2}]


def test_stats() -> None:
    s = bench.stats([3.0, 1.0, 2.0, None, 4.0])
    assert s["n"] == 4 and s["median"] == 2.5 and s["min"] == 1.0 and s["max"] == 4.0
    assert s["p25"] == pytest.approx(1.75) and s["p75"] == pytest.approx(3.25)
    assert bench.stats([]) is None
    assert bench.stats([2.0])["stdev"] == 0.0


# ---------------------------------------------------------------------------
# Slow: the real engine on the tiny checkpoint
# ---------------------------------------------------------------------------

# The tiny model sometimes loops to the token limit: a low caption limit keeps the tests' time bounded.
TINY_FLAGS = ("--device", "cpu", "--caption-max-new-tokens", "64", "--find-max-new-tokens", "24")


@pytest.mark.slow
@needs_examples
def test_bench_tiny_both_sets_three_variants_and_resume(tmp_path: Path) -> None:
    """gptq, bnb4 and bf16, once (repeats are counted with the fake engine above), on the shortest
    clip of each example set (a real and a rendered one) with ``--limit 1``: the counts, a table per
    set, the seed card's comparison; then the rerun resumes without new requests.

    One run for all of it: each run pays its loads and warm-ups, and the first real clip (70 s: two
    caption windows, three find windows a query) cost minutes of the suite for no further assertion.
    Every example clip itself is checked (decoded, its truth inside it) in test_examples.py.
    """
    data = examples_subset(tmp_path / "data", ("flower.mp4", "ball_rolls.mp4"))
    out = tmp_path / "out"
    variants = ["gptq", "bnb4", "bf16"]
    argv = ["bench", "--model", "tiny", "--variants", ",".join(variants), "--data", str(data)]
    argv += ["--repeats", "1", "--limit", "1", "--out", str(out), *TINY_FLAGS]
    assert cli.main(argv) == 0
    results = _check_outputs(out, variants)
    n = sum(1 + len(e["queries"]) for e in json.loads((data / "examples.json").read_text()))
    for v in variants:
        r = results["variants"][v]
        assert r["requests"] == {"planned": n, "ok": n, "failed": 0, "missing": 0}
        assert r["speed"]["memory_kind"] == "cpu_peak_rss" and r["speed"]["device"] == "cpu"
        assert r["speed"]["all"]["tokens_per_s"]["median"] > 0
    assert results["variants"]["bnb4"]["load"]["kernel"] == "bitsandbytes-nf4"
    assert {results["variants"][v]["load"]["decode"] for v in variants} == {"eager"}  # a CPU's default
    assert "(MARLIN_DECODE) | eager | eager | eager |" in (out / "summary.md").read_text()
    assert results["models"]["sources"]["gptq"]["quantized"] == "gptq"
    assert results["comparison"]["gptq_vs_bnb4"]["overall_retention"] is not None
    assert results["data"]["dir"] == str(data)
    assert results["data"]["sets"] == {"real": 1, "rendered": 1}
    for group in results["sets"].values():
        for v in variants:
            per = group["variants"][v]
            assert per["requests"]["ok"] == per["requests"]["planned"] > 0
            assert per["speed"]["find"]["latency_s"]["median"] > 0
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "cpu_peak_rss" in summary and "### Real footage" in summary and "### Rendered" in summary
    assert (out / "sets.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    lines = _lines(out / "requests.jsonl")
    assert lines == len(variants) * n
    loads = _lines(out / "variants.jsonl")
    t0 = time.perf_counter()
    assert cli.main(argv) == 0
    assert _lines(out / "requests.jsonl") == lines
    assert _lines(out / "variants.jsonl") == loads  # nothing loaded, no warm-up
    assert time.perf_counter() - t0 < 30
    _check_outputs(out, variants)


def test_bench_reads_the_examples_unless_told_otherwise(tmp_path: Path) -> None:
    """Without ``--data`` bench reads the app's examples, as the README runs it; ``long`` names the
    long-video set; anything else is a folder."""
    assert data_folder(None) == bench.DEFAULT_DATA == EXAMPLES
    assert data_folder("long") == resolve_data("long") is not None
    assert data_folder(str(tmp_path)) == tmp_path
