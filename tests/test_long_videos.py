"""Long videos: the synthetic long clip, the benchmark on long videos, and end to end on the tiny checkpoint.

- **The synthetic long clip** (``bench.longset``): the examples concatenated, its truth shifted.
- **The benchmark on long videos**: the long set's truth, several true spans per query, per-window cost.
  Aggregation is pure (records in, figures out), so it is checked on fixed records; the set builder runs
  ffmpeg on the project's rendered examples with short clips (a few seconds of encoding).
- **End to end** (windows, global times, moments, reuse, the CLI): one generated ~140 s clip (3 caption
  windows, 6 find windows) is built once per session, and the clip builder's own test reads it too. The
  engine samples it with a small budget (0.5 fps, small frames) so the suite stays fast; the windowing is
  the same at any budget. The caption and the two finds on it run once per module (fixtures) and every
  test reads them; the CLI runs on a 12 s clip cut into 6 s windows.

The pure window rules and the windows' decoding are ``tests/test_windows.py``'s.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from marlin_demo import bench, cli, model_io, service
from marlin_demo.bench import longset
from marlin_demo.bench.aggregate import window_cost
from marlin_demo.bench.longset import build_long_clip
from marlin_demo.datasets import Example, Query, load_dataset
from marlin_demo.engine import Engine
from marlin_demo.longvideo import policy, runner
from marlin_demo.results import CaptionResult, Done, FindResult, Prepared, Progress, Stage, Window, WindowDone
from marlin_demo.settings import Settings
from marlin_demo.tasks import FIND
from marlin_demo.tasks.find import record_moments
from marlin_demo.ui.caption import stream_message
from marlin_demo.video import probe
from marlin_demo.video.windows import plan_window

ROOT = Path(__file__).resolve().parents[1]
SHORT = ROOT / "examples" / "blue_square.mp4"
VARIANT = "bf16"
LONG_S = 140.0

slow = pytest.mark.slow  # runs the tiny model
needs_examples = pytest.mark.skipif(
    not (longset.EXAMPLES_DIR / "examples.json").is_file(), reason="examples/examples.json is not rendered"
)


@pytest.fixture(scope="session")
def long_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The ~140 s clip and the truth ``build_long_clip`` returned for it (one encode per session)."""
    path = tmp_path_factory.mktemp("long") / "long140.mp4"
    return path, build_long_clip(path, target_s=LONG_S)


@pytest.fixture(scope="session")
def long_clip(long_build: tuple[Path, dict[str, Any]]) -> Path:
    return long_build[0]


@pytest.fixture(scope="session")
def small_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A 12 s clip: two 6 s windows with --find-window-s/--caption-window-s 6 (cheap CLI runs)."""
    path = tmp_path_factory.mktemp("long") / "long12.mp4"
    return path, build_long_clip(path, target_s=12.0)["duration"]


# ------------------------------------------------------------------ the synthetic long clip
def test_truth_offsets() -> None:
    examples = longset.rendered(json.loads((longset.EXAMPLES_DIR / "examples.json").read_text()))
    assert examples
    truth = longset.long_clip_truth(examples, 100.0)
    assert truth["duration"] >= 100.0
    ends = [s["end"] for s in truth["segments"]]
    assert [s["start"] for s in truth["segments"]] == [0.0, *ends[:-1]]
    first = next(q for q in truth["queries"] if q["query"] == examples[0]["queries"][0]["query"])
    assert len(first["spans"]) >= 2  # the example recurs: one true span per occurrence
    assert all(0 <= e["start"] <= e["end"] <= truth["duration"] for e in truth["events"])


def test_build_long_clip(long_build: tuple[Path, dict[str, Any]]) -> None:
    """The session's ~140 s clip: its duration and frame count are the examples' sums."""
    path, truth = long_build
    info = probe(path)
    assert truth["duration"] >= LONG_S
    assert info.duration_s == pytest.approx(truth["duration"], abs=1e-6)
    assert info.num_frames == round(truth["duration"] * 10)
    assert json.loads(path.with_suffix(".json").read_text())["segments"] == truth["segments"]


# ------------------------------------------------------------------ the benchmark on long videos
def _example() -> Example:
    q1 = Query("the ball rolls", (2.0, 8.0), ((2.0, 8.0), (62.0, 68.0)))  # happens twice
    q2 = Query("the lamp turns on", (30.0, 34.0))
    return Example("long.mp4", Path("long.mp4"), "long", 120.0, queries=[q1, q2], set="long")


def _rec(query: str, span: Any, moments: list[tuple[float, float, float]], windows: int) -> dict[str, Any]:
    return {
        "variant": "gptq",
        "task": "find",
        "video": "long.mp4",
        "query": query,
        "repeat": 0,
        "ok": True,
        "metrics": {"latency_s": 2.0 * windows, "memory_kind": "cpu_peak_rss", "device": "cpu"},
        "decode_s": 0.5 * windows,
        "format_ok": True,
        "raw": "",
        "span": span,
        "windows": windows,
        "moments": [{"start": s, "end": e, "score": c} for s, e, c in moments],
    }


def test_aggregate_scores_the_best_moment_and_the_top_five() -> None:
    records = [
        # best moment on the second occurrence (IoU 1), the first occurrence found too (IoU 5/6)
        _rec("the ball rolls", [62.0, 68.0], [(62.0, 68.0, 0.9), (3.0, 8.0, 0.7)], 5),
        # best moment wrong (IoU 0), the third moment right (IoU 1)
        _rec("the lamp turns on", [90.0, 95.0], [(90.0, 95.0, 0.8), (10.0, 12.0, 0.5), (30.0, 34.0, 0.4)], 5),
    ]
    agg = bench.aggregate([_example()], ["gptq"], ["find"], 1, records, [])
    q = agg["variants"]["gptq"]["quality"]["find"]
    assert q["r1@0.5"] == pytest.approx(0.5) and q["r1@0.7"] == pytest.approx(0.5)
    assert q["miou"] == pytest.approx(0.5)
    assert q["r5@0.5"] == pytest.approx(1.0)
    assert q["occurrence_recall@0.5"] == pytest.approx(1.0)  # all three true spans matched
    items = {i["query"]: i for i in agg["items"]}
    assert items["the ball rolls"]["iou"] == pytest.approx(1.0)  # against the nearest true span
    assert items["the ball rolls"]["references"] == [[2.0, 8.0], [62.0, 68.0]]
    sp = agg["variants"]["gptq"]["speed"]["find"]
    assert sp["windows"]["mean"] == 5.0
    assert sp["latency_per_window_s"]["median"] == pytest.approx(2.0)
    assert sp["decode_per_window_s"]["median"] == pytest.approx(0.5)
    assert [r[0] for r in bench.quality_rows()].count("find") >= 6


def test_record_moments_and_window_cost_of_short_and_old_records() -> None:
    # a short video's record without moments (no score) still ranks its span
    assert record_moments({"span": [1.0, 2.0], "moments": []}) == [(1.0, 2.0)]
    assert record_moments({"span": None}) == []
    assert record_moments({"span": [1.0, 2.0], "moments": [{"start": 3, "end": 4, "score": 0.5}]}) == [
        (3.0, 4.0)
    ]
    cost = window_cost({"metrics": {"latency_s": 3.0}})  # a record from before windows: one window
    assert cost == {"windows": 1.0, "latency_per_window_s": 3.0, "decode_per_window_s": None}


def test_long_set_truth_is_pure_and_rotated() -> None:
    examples = longset.rendered(json.loads((longset.EXAMPLES_DIR / "examples.json").read_text()))
    a = longset.long_set_entry(examples, 150.0, 0)
    b = longset.long_set_entry(examples, 150.0, 1)
    assert a["segments"][0]["video"] != b["segments"][0]["video"]  # clip k starts the cycle at example k
    assert a["set"] == "long" and a["duration"] >= 150.0
    # a query of every example recurs: one true span per occurrence, each inside its segment
    for q in a["queries"]:
        assert len(q["spans"]) >= 2
        for s, e in q["spans"]:
            seg = next(g for g in a["segments"] if g["start"] <= s < g["end"])
            assert e <= seg["end"]
    # the reference scene names each example once
    assert len(a["scene"]) < sum(len(e["scene"]) for e in examples) + len(examples)
    one = longset.long_set_entry(examples, 150.0, 0, queries_per_example=1)
    assert len(one["queries"]) == len(examples)


@needs_examples
def test_build_long_set_loads_as_bench_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "long-set"
    assert cli.main(["bench", "build-long-set", "--out", str(out), "--durations", "12,13"]) == 0
    examples = load_dataset(out)
    assert [ex.set for ex in examples] == ["long", "long"]
    assert all(ex.video.is_file() and ex.duration >= 12.0 for ex in examples)
    assert all(e <= ex.duration for ex in examples for q in ex.queries for _, e in q.spans)
    first = examples[0].video.stat().st_mtime_ns
    longset.build_long_set(out, (12.0, 13.0))  # same truth: the clip is not encoded again
    assert examples[0].video.stat().st_mtime_ns == first
    # `bench --data long` builds the default set into the cache (here: made short)
    monkeypatch.setenv("MARLIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(longset, "LONG_SET_DURATIONS", (12.0,))
    root = longset.resolve_data("long")
    assert root == tmp_path / "cache" / f"long-set-v{longset.LONG_SET_VERSION}"
    assert len(load_dataset(root)) == 1
    assert longset.resolve_data(str(out)) is None
    assert cli.main(["bench", "build-long-set", "--out", str(out), "--durations", "0"]) == 2


# ------------------------------------------------------------------ end to end on the tiny checkpoint
def _engine(tiny_settings: Settings) -> Engine:
    eng = Engine(tiny_settings.with_(caption_max_new_tokens=24, find_max_new_tokens=12))
    eng.params = model_io.VideoParams(fps=0.5, max_pixels=128 * 32 * 32)  # the per-frame minimum
    return eng


@pytest.fixture(scope="module")
def engine(tiny_settings: Settings) -> Engine:
    return _engine(tiny_settings)


@pytest.fixture(scope="module")
def caption_stages(engine: Engine, long_clip: Path) -> list[Stage]:
    """The long clip's caption, streamed once for the module."""
    return list(service.stream(engine, "caption", str(long_clip), VARIANT))


@pytest.fixture(scope="module")
def finds(engine: Engine, long_clip: Path) -> tuple[FindResult, FindResult]:
    """Two finds on the long clip, one after the other (the second reuses every window)."""
    first = service.run(engine, "find", str(long_clip), VARIANT, "the ball rolls")
    second = service.run(engine, "find", str(long_clip), VARIANT, "the lamp turns on")
    assert isinstance(first, FindResult) and isinstance(second, FindResult)
    return first, second


def _covers(windows: list[dict[str, float]], duration: float, overlap: float) -> None:
    assert windows[0]["start"] == 0.0
    assert windows[-1]["end"] == pytest.approx(duration, abs=1e-3)
    for a, b in itertools.pairwise(windows):
        assert b["start"] == pytest.approx(a["end"] - overlap, abs=1e-3)  # no gap between windows


@slow
def test_long_caption_every_window_on_one_timeline(caption_stages: list[Stage], long_clip: Path) -> None:
    duration = probe(long_clip).duration_s
    stages = caption_stages
    assert isinstance(stages[-1], Done)
    res = stages[-1].result
    assert isinstance(res, CaptionResult)
    d = res.to_dict()
    assert len(d["windows"]) == 3
    _covers(d["windows"], duration, 0.0)
    assert len(res.info.windows) == 3 and all(r.duration_s > 0 for r in res.info.windows)
    # every window answered: its own section of the raw answer, with text
    sections = res.raw.split("[window ")[1:]
    assert len(sections) == 3 and all(s.split("\n", 1)[1].strip() for s in sections)
    # events inside the video, each inside a window, windows in order
    spans = [(w["start"], w["end"]) for w in d["windows"]]
    order = []
    for e in res.events:
        assert 0 <= e.start <= e.end <= duration + 1e-6
        order.append(next(k for k, (s, t) in enumerate(spans) if s - 1e-6 <= e.start <= t + 1e-6))
    assert order == sorted(order)
    # the stream says which window it is on, 1..n in order
    starts = [s.window for s in stages if isinstance(s, Progress) and not s.text]
    assert starts == [1, 2, 3]
    assert all(s.windows == 3 for s in stages if isinstance(s, Progress))
    # /caption_stream messages carry the window (and only on a long video)
    last = next(s for s in reversed(stages) if isinstance(s, Progress))
    msg = stream_message(last.text, window=last.window, windows=last.windows)
    assert msg == {"done": False, "text": last.text, "window": 3, "windows": 3}
    assert set(stream_message("x")) == {"done", "text"}


@slow
def test_long_find_moments_and_second_query_reuses_every_window(
    engine: Engine, long_clip: Path, finds: tuple[FindResult, FindResult]
) -> None:
    duration = probe(long_clip).duration_s
    first, second = finds
    n = len(first.info.windows)
    assert n == 6
    assert not any(w.cached_video or w.reused_prefix for w in first.info.windows)
    d = first.to_dict()
    scores = [m["score"] for m in d["moments"]]
    assert scores == sorted(scores, reverse=True)
    assert len(d["moments"]) <= engine.settings.top_k
    for m in d["moments"]:
        assert 0 <= m["start"] <= m["end"] <= duration + 1e-6
        assert 0.0 <= m["score"] <= 1.0
    if d["moments"]:
        assert d["span"] == [d["moments"][0]["start"], d["moments"][0]["end"]]
    else:
        assert d["span"] is None

    # the bench's record of it: the moments as answered
    assert FIND.answer.record(first)["moments"] == d["moments"]
    # every window's frames and video prefill were reused: only the new query's text was prefilled
    assert len(second.info.windows) == n
    assert all(w.cached_video and w.reused_prefix for w in second.info.windows)
    assert second.info.decode_s == 0.0 and second.info.prefill_s == 0.0
    assert first.info.prefill_s and first.info.prefill_s > 0


@slow
def test_one_window_video_is_answered_as_today(engine: Engine) -> None:
    for task in ("caption", "find"):  # one window: the whole clip
        (plan,) = runner.window_plans(engine, str(SHORT), task)
        assert plan.first_frame == 0 and plan.num_frames == plan.source_frames
        assert service.request(engine, task, str(SHORT), VARIANT, "x").whole
    part = plan_window(engine.info(SHORT), Window(0, 0.0, 4.0), engine.params)  # a search's one window
    assert not service.request(engine, "find", str(SHORT), VARIANT, "x", plans=[part]).whole
    # a PreparedVideo is never windowed: the path the engine took before long videos
    prepared = engine.prepare(str(SHORT))
    a = engine.caption(str(SHORT), VARIANT)
    b = engine.caption(prepared, VARIANT)
    assert a.raw == b.raw and a.events == b.events and a.scene == b.scene
    parsed = model_io.repair_caption(model_io.parse_caption(a.raw), prepared.info.duration_s)
    assert a.events == list(parsed.events)
    assert a.to_dict()["windows"] == [
        {"start": 0.0, "end": round(prepared.info.duration_s, 3), "scene": a.scene}
    ]
    assert a.info.windows == []

    f = engine.find(str(SHORT), "the blue square appears", VARIANT)
    g = engine.find(prepared, "the blue square appears", VARIANT)
    assert f.raw == g.raw and f.span == g.span
    assert len(f.moments) == (1 if f.span is not None and len(f.moments) else 0)
    if f.moments:
        assert (f.moments[0].start, f.moments[0].end) == f.span


def test_cli_refuses_too_many_windows(long_clip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # in process: the refusal comes before any model is loaded
    code = cli.main(["find", str(long_clip), "the ball rolls", "--model", "tiny", "--max-windows", "3"])
    out = capsys.readouterr()
    assert code == 2
    lines = out.err.strip().splitlines()
    assert lines[-1].startswith("error: The video is ")
    assert "at most 3 windows are allowed" in lines[-1]
    assert out.out == ""


@slow
def test_cli_json_keys_on_a_long_video(
    small_clip: tuple[Path, float], capsys: pytest.CaptureFixture[str]
) -> None:
    clip, duration = small_clip  # a short "long" video: 6 s windows keep the CLI run cheap
    # in process (the subprocess CLI is tests/test_cli.py's): the same main(), without a fresh interpreter
    code = cli.main(
        ["find", str(clip), "the ball rolls", "--model", "tiny", "--variant", VARIANT, "--json",
         "--find-max-new-tokens", "8", "--find-window-s", "6", "--find-overlap-s", "0"]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    d = json.loads(out.out)  # stdout holds the JSON and nothing else
    assert {"span", "moments", "raw"} <= set(d)
    assert d["raw"].count("[window ") == len(policy.plan_windows(duration, 6.0, 0.0)) == 2
    assert all(set(m) == {"start", "end", "score"} for m in d["moments"])
    assert "window 1 of" not in out.err  # --json: no progress lines


@slow
def test_cli_readable_caption_prints_window_progress(
    small_clip: tuple[Path, float], capsys: pytest.CaptureFixture[str]
) -> None:
    clip, _ = small_clip
    code = cli.main(
        ["caption", str(clip), "--model", "tiny", "--variant", VARIANT, "--caption-window-s", "6",
         "--caption-max-new-tokens", "8"]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    progress = [line for line in out.err.splitlines() if line.startswith("caption: window ")]
    assert progress == ["caption: window 1 of 2", "caption: window 2 of 2"]
    assert "Windows (2, each answered as its own clip):" in out.out
    assert "window 1 of" not in out.out  # progress goes to stderr only


@slow
def test_readable_output_shows_windows_and_moments(
    caption_stages: list[Stage], finds: tuple[FindResult, FindResult]
) -> None:
    done = caption_stages[-1]
    assert isinstance(done, Done)
    text = cli.format_answer(done.result, "caption")
    assert "Windows (3, each answered as its own clip):" in text
    assert "   0.0s -   60.0s" in text
    found = finds[0]
    text = cli.format_answer(found, "find")
    assert "Searched 6 windows" in text
    assert text.count("  score ") == len(found.moments)


def test_compare_prepares_a_long_video_per_window(long_clip: Path, tiny_settings: Settings) -> None:
    """/compare decodes each window once (one scan) and never the whole clip at one clip's plan."""
    eng = _engine(tiny_settings)  # fresh caches; nothing is loaded: Prepared comes before any variant runs
    plans = runner.window_plans(eng, str(long_clip), "find")
    assert plans is not None and len(plans) == 6
    for expect_cached in (False, True):
        events = service.compare(eng, "find", str(long_clip), [VARIANT], "the ball rolls")
        first = next(events)
        events.close()
        assert isinstance(first, Prepared)
        assert first.plan == plans[0].plan  # the first window's plan, not the whole clip's
        assert first.video.duration_s == probe(long_clip).duration_s
        assert first.cached_video is expect_cached  # the second compare reads every window from the cache
        assert eng.video_cache_len() == 0  # no whole-clip decode
    assert eng.loaded() == {}


@slow
@pytest.mark.parametrize(("task", "parser"), [("caption", "parse_caption"), ("find", "parse_span")])
def test_each_window_is_parsed_once_however_many_follow(
    engine: Engine, long_clip: Path, monkeypatch: pytest.MonkeyPatch, task: str, parser: str
) -> None:
    """Each finished window's answer is parsed (and for find scored) once; later windows only map and
    merge again (it was re-parsed at every later window: n^2 parses on a long video)."""
    calls: list[str] = []
    real = getattr(model_io, parser)

    def counted(text: str, *args: object, **kwargs: object) -> object:
        calls.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(model_io, parser, counted)
    query = "the lamp turns off" if task == "find" else None
    stages = list(service.stream(engine, task, str(long_clip), VARIANT, query))
    done = [s for s in stages if isinstance(s, WindowDone)]
    assert len(done) >= 3
    assert len(calls) == len(done)  # one parse per window, not 1 + 2 + ... + n
    final = stages[-1]
    assert isinstance(final, Done) and final.result.raw == done[-1].result.raw


@slow
def test_a_short_video_is_one_window_of_the_runner(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """One path: the service hands a short clip to ``runner.answer`` as one whole-clip window, and the
    answer is the engine's own on that clip, untouched (no window header, no merge)."""
    plans: list[Any] = []
    real = runner.answer

    def spy(*args: Any, **kwargs: Any) -> Any:
        plans.append(args[1].plans)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "answer", spy)
    res = service.run(engine, "find", str(SHORT), VARIANT, "the blue square appears")
    assert [len(p) for p in plans] == [1] and plans[0][0].num_frames == plans[0][0].source_frames
    own = engine.find(str(SHORT), "the blue square appears", VARIANT)
    assert isinstance(res, FindResult)
    assert (res.raw, res.span, res.info.repairs) == (own.raw, own.span, own.info.repairs)
    assert res.info.windows == []
