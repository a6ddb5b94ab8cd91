"""A time range: only that part of a video is decoded and asked, as if cut to it (the same fps and pixel
rules), and the answer's times stay on the video's own timeline (service, CLI ``--start/--end``, batch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marlin_demo import cli, service
from marlin_demo.batch.rows import run_item
from marlin_demo.engine import USER_ERRORS, Engine
from marlin_demo.library.inputs import InputError, collect
from marlin_demo.longvideo import runner
from marlin_demo.longvideo.policy import RangeError, check_range
from marlin_demo.results import CaptionResult, FindResult
from marlin_demo.settings import Settings
from marlin_demo.video import VideoError

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "ball_rolls.mp4"  # 12 s, 4 s caption windows below
LONG = ROOT / "examples" / "people_table.mp4"  # 70 s: over this engine's 20 s duration limit


@pytest.fixture(scope="module")
def engine(tiny_settings: Settings) -> Engine:
    settings = tiny_settings.with_(device="cpu", caption_window_s=4.0, caption_max_new_tokens=16,
                                   find_max_new_tokens=12, max_duration_s=20.0)  # fmt: skip
    return Engine(settings)


@pytest.mark.parametrize(
    ("start", "end", "said"),
    [
        (-1.0, 5.0, "starts at -1 s; a start must be 0 s or later (the video is 12 s long)"),
        (5.0, 5.0, "The range 5–5 s does not end after it starts"),
        (8.0, 3.0, "The range 8–3 s does not end after it starts"),
        (12.0, None, "starts at 12 s, at or after the video's end: the video is 12 s long"),
        (0.0, 13.0, "ends at 13 s, after the video's end: the video is 12 s long; end at 12 s at most"),
        (2.0, 2.5, "is 0.50 s long; a range must be at least 1 s"),
        (0.0, float("nan"), "end must be a number of seconds"),
        # what else a visitor can type, or an API or MCP caller send (issue 52 item 5)
        (None, -5.0, "ends at -5 s; an end must be after 0 s (the video is 12 s long)"),
        (1e300, None, "starts at 1e+300 s, at or after the video's end"),
        (0.0, 1e20, "ends at 1e+20 s, after the video's end: the video is 12 s long"),
        ("abc", 5.0, "The range's start must be a number of seconds, got 'abc'."),
        (True, 5.0, "start must be a number of seconds, got True"),
        (0.0, [8], "end must be a number of seconds, got [8]"),
        ("1e999", None, "start must be a number of seconds, got '1e999'"),
    ],
)
def test_a_bad_range_says_what_is_wrong_and_what_is_allowed(start: object, end: object, said: str) -> None:
    with pytest.raises(RangeError) as bad:
        check_range(start, end, 12.0, 600.0)
    assert said in str(bad.value) and isinstance(bad.value, USER_ERRORS)
    assert len(str(bad.value)) < 160, bad.value  # one sentence, not a 300-digit clock


def test_a_range_sent_as_text_is_read_as_its_numbers() -> None:
    assert check_range("3", " 8.5 ", 12.0, 600.0) == (3.0, 8.5)
    assert check_range("", None, 12.0, 600.0) == (0.0, 12.0)


def test_a_range_is_planned_alone_and_the_duration_limit_applies_to_it(engine: Engine) -> None:
    plans = runner.window_plans(engine, CLIP, "caption", (2.0, 11.0))
    assert plans is not None
    assert [(p.window.start, p.window.end) for p in plans] == [(2.0, 6.0), (6.0, 11.0)]  # 1 s rest joined
    fps = plans[0].info.fps
    for p in plans:  # only frames inside the range, sampled at Marlin's 2 fps as a cut clip would be
        assert all(2.0 <= i / fps < 11.0 for i in p.source_indices)
        assert p.plan.sample_fps == pytest.approx(2.0, rel=0.05) and p.plan.nframes <= 240
    assert plans[0].plan.nframes == 8 and plans[0].offset_s == pytest.approx(2.0, abs=1 / fps)
    with pytest.raises(VideoError, match="at most 20 s is allowed"):  # the whole 70 s file: over the limit
        runner.window_plans(engine, LONG, "caption")
    inside = runner.window_plans(engine, LONG, "find", (40.0, 55.0))  # a 15 s range of it: accepted
    assert inside is not None and inside[0].window.start == 40.0 and inside[-1].window.end == 55.0
    with pytest.raises(RangeError, match=r"0–30 s \(30 s long\) is too long: at most 20 s is allowed"):
        runner.window_plans(engine, LONG, "caption", (0.0, 30.0))
    # what the page checks (and sizes the cost by) before Run: the same rules
    assert service.asked_range(engine, CLIP, None, None) is None
    assert service.asked_range(engine, LONG, 55.0, None) == (55.0, pytest.approx(70.1, abs=0.05))
    with pytest.raises(RangeError, match="at most 20 s is allowed"):
        service.asked_range(engine, LONG, None, 30.0)


def test_caption_find_and_compare_of_a_range_answer_inside_it(engine: Engine) -> None:
    cap = service.run(engine, "caption", str(CLIP), "bf16", start_s=6.0, end_s=12.0)
    assert isinstance(cap, CaptionResult) and cap.range_s == (6.0, 12.0)
    assert [(w["start"], w["end"]) for w in cap.windows] == [(6.0, 10.0), (10.0, 12.0)]
    assert all(6.0 <= e.start <= e.end <= 12.0 for e in cap.events)
    assert cap.to_dict()["range"] == [6.0, 12.0] and cap.raw.startswith("[window 1/2: 6–10 s]")
    events = list(service.compare(engine, "find", str(CLIP), ["bf16"], "the ball", start_s=7.0, end_s=11.0))
    found = events[-1].results["bf16"]  # type: ignore[union-attr]
    assert isinstance(found, FindResult) and found.range_s == (7.0, 11.0) and found.span is not None
    assert all(7.0 <= m.start <= m.end <= 11.0 for m in found.moments)  # offset back onto the timeline
    assert 7.0 <= found.span[0] <= found.span[1] <= 11.0


def test_a_range_of_a_real_clip_decodes_frames_inside_it(engine: Engine, media_dir: Path) -> None:
    clip = media_dir / "nasa_13013.mp4"  # real footage, 25 fps, 13 s
    plans = runner.window_plans(engine, clip, "find", (3.0, 9.0))
    assert plans is not None and len(plans) == 1
    (plan, frames, _), *_ = engine.window_frames(clip, plans)
    assert frames.frames.shape[0] == plan.plan.nframes == 12  # 6 s at 2 fps
    pts = frames.frame_pts or [i / plan.info.fps for i in plan.source_indices]
    assert all(3.0 <= t < 9.0 for t in pts) and max(pts) - min(pts) > 5.0


def test_cli_start_end_and_a_bad_range_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", "tiny", "--device", "cpu", "--variant", "bf16", "--find-max-new-tokens", "12"]
    assert cli.main(["find", str(CLIP), "the ball", *base, "--start", "4", "--end", "10", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["range"] == [4.0, 10.0] and 4.0 <= d["span"][0] <= d["span"][1] <= 10.0
    assert cli.main(["caption", str(CLIP), *base, "--start", "8", "--end", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: The range 8–3 s does not end after it starts")


def test_batch_manifest_ranges_are_items_of_their_own(engine: Engine, tmp_path: Path) -> None:
    manifest = tmp_path / "rows.jsonl"
    rows = [{"video": str(CLIP)}, {"video": str(CLIP), "end": 4}, {"video": str(CLIP), "start": 4.5}]
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    items = collect(str(manifest), "find", "the ball")
    name = CLIP.name
    assert [i.id.split("#")[0] for i in items] == [name, f"{name}@0-4", f"{name}@4.5-end"]
    assert len({i.id for i in items}) == 3 and items[1].span == (None, 4.0)
    csv = tmp_path / "rows.csv"
    csv.write_text(f"video,start,end\n{CLIP},2,6\n{CLIP},x,\n")
    with pytest.raises(InputError, match=r"Row 2 of rows\.csv .*start must be a number of seconds, got 'x'"):
        collect(str(csv), "caption")
    row = run_item(engine, items[2], "find", "bf16")
    assert row["status"] == "ok" and row["range"] == [4.5, 12.0] and 4.5 <= row["span"][0]
    # the library makes a range an entry of its own too: test_library.py's two-ranges test
