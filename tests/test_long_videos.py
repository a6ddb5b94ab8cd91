"""Long videos end to end on the tiny checkpoint: windows, global times, moments, reuse, the CLI.

One generated ~140 s clip (3 caption windows, 6 find windows) is built once per session. The
engine samples it with a small budget (0.5 fps, small frames) so the suite stays fast; the
windowing is the same at any budget. The caption and the two finds on it run once per module
(fixtures) and every test reads them; the CLI runs on a 12 s clip cut into 6 s windows.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from marlin_demo import cli, contract, service
from marlin_demo.bench import longrecords as longbench
from marlin_demo.bench.longset import build_long_clip
from marlin_demo.engine import Engine
from marlin_demo.longvideo import policy, runner
from marlin_demo.results import CaptionResult, Done, FindResult, Prepared, Progress, Stage, WindowDone
from marlin_demo.settings import Settings
from marlin_demo.ui.caption import stream_message
from marlin_demo.video import probe

ROOT = Path(__file__).resolve().parents[1]
SHORT = ROOT / "examples" / "blue_square.mp4"
VARIANT = "bf16"

pytestmark = pytest.mark.slow  # runs the tiny model


@pytest.fixture(scope="session")
def long_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("long") / "long140.mp4"
    build_long_clip(path, target_s=140.0)
    return path


@pytest.fixture(scope="session")
def small_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A 12 s clip: two 6 s windows with --find-window-s/--caption-window-s 6 (cheap CLI runs)."""
    path = tmp_path_factory.mktemp("long") / "long12.mp4"
    return path, build_long_clip(path, target_s=12.0)["duration"]


def _engine() -> Engine:
    eng = Engine(Settings(model="tiny", caption_max_new_tokens=24, find_max_new_tokens=12))
    eng.params = contract.VideoParams(fps=0.5, max_pixels=128 * 32 * 32)  # the per-frame minimum
    return eng


@pytest.fixture(scope="module")
def engine() -> Engine:
    return _engine()


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

    # the bench's record of it: windows answered, the moments as answered
    rec = longbench.record_fields(first)
    assert rec == {"windows": n, "moments": d["moments"]}
    # every window's frames and video prefill were reused: only the new query's text was prefilled
    assert len(second.info.windows) == n
    assert all(w.cached_video and w.reused_prefix for w in second.info.windows)
    assert second.info.decode_s == 0.0 and second.info.prefill_s == 0.0
    assert first.info.prefill_s and first.info.prefill_s > 0


def test_one_window_video_is_answered_as_today(engine: Engine) -> None:
    assert runner.window_plans(engine, str(SHORT), "caption") is None
    assert runner.window_plans(engine, str(SHORT), "find") is None
    # a PreparedVideo is never windowed: the path the engine took before long videos
    prepared = engine.prepare(str(SHORT))
    a = engine.caption(str(SHORT), VARIANT)
    b = engine.caption(prepared, VARIANT)
    assert a.raw == b.raw and a.events == b.events and a.scene == b.scene
    parsed = contract.repair_caption(contract.parse_caption(a.raw), prepared.info.duration_s)
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
    assert d["raw"].count("[window ") == len(policy.find_windows(duration, 6.0, 0.0, None)) == 2
    assert all(set(m) == {"start", "end", "score"} for m in d["moments"])
    assert "window 1 of" not in out.err  # --json: no progress lines


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


def test_readable_output_shows_windows_and_moments(
    caption_stages: list[Stage], finds: tuple[FindResult, FindResult]
) -> None:
    done = caption_stages[-1]
    assert isinstance(done, Done)
    text = cli.format_caption(done.result)
    assert "Windows (3, each answered as its own clip):" in text
    assert "   0.0s -   60.0s" in text
    found = finds[0]
    text = cli.format_find(found)
    assert "Searched 6 windows" in text
    assert text.count("  score ") == len(found.moments)


def test_compare_prepares_a_long_video_per_window(long_clip: Path) -> None:
    """/compare decodes each window once (one scan) and never the whole clip at one clip's plan."""
    eng = _engine()  # fresh caches; nothing is loaded: Prepared comes before any variant runs
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


@pytest.mark.parametrize(("task", "parser"), [("caption", "parse_caption"), ("find", "parse_span")])
def test_each_window_is_parsed_once_however_many_follow(
    engine: Engine, long_clip: Path, monkeypatch: pytest.MonkeyPatch, task: str, parser: str
) -> None:
    """Each finished window's answer is parsed, mapped (and for find scored) once; later windows only
    merge again (it was re-parsed at every later window: n^2 parses on a long video)."""
    calls: list[str] = []
    real = getattr(contract, parser)

    def counted(text: str, *args: object, **kwargs: object) -> object:
        calls.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(contract, parser, counted)
    query = "the lamp turns off" if task == "find" else None
    stages = list(service.stream(engine, task, str(long_clip), VARIANT, query))
    done = [s for s in stages if isinstance(s, WindowDone)]
    assert len(done) >= 3
    assert len(calls) == len(done)  # one parse per window, not 1 + 2 + ... + n
    final = stages[-1]
    assert isinstance(final, Done) and final.result.raw == done[-1].result.raw
