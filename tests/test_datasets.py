"""Tests for marlin_demo.datasets: data folder loading/validation and the Charades-STA converter."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from marlin_demo import cli
from marlin_demo.datasets import (
    DatasetError,
    convert_charades,
    dataset_digest,
    example_sets,
    find_video,
    load_dataset,
    parse_charades_line,
    set_label,
    summarize,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _clip(tmp_path: Path, name: str = "clip.mp4", duration: int = 5) -> Path:
    """A small real video made with ffmpeg's test pattern (64x64, 10 fps)."""
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is needed to make a test clip")
    out = tmp_path / name
    subprocess.run(
        [
            "ffmpeg", "-v", "error", "-y", "-f", "lavfi",
            "-i", f"testsrc=duration={duration}:size=64x64:rate=10",
            "-pix_fmt", "yuv420p", str(out),
        ],
        check=True,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def clip5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _clip(tmp_path_factory.mktemp("clips"), "five.mp4", 5)


def _write(folder: Path, data: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "examples.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


def _entry(**over: object) -> dict:
    base = {
        "video": "five.mp4",
        "title": "Test pattern",
        "duration": 5.0,
        "scene": "A test pattern.",
        "events": [{"start": 0.0, "end": 2.5, "description": "Colour bars."}],
        "queries": [{"query": "the bars", "span": [0.0, 2.5]}],
    }
    base.update(over)
    return base


@pytest.fixture()
def folder(tmp_path: Path, clip5: Path) -> Path:
    shutil.copy(clip5, tmp_path / "five.mp4")
    return tmp_path


# ---------------------------------------------------------------------------
# load_dataset
# ---------------------------------------------------------------------------


def test_load_valid_folder(folder: Path) -> None:
    _write(folder, [_entry()])
    (ex,) = load_dataset(folder)
    assert ex.name == "five.mp4"
    assert ex.video == folder / "five.mp4"
    assert ex.duration == 5.0
    assert ex.has_caption_truth
    assert ex.events[0].description == "Colour bars."
    assert ex.queries[0].span == (0.0, 2.5)
    assert ex.to_dict()["queries"] == [{"query": "the bars", "span": [0.0, 2.5]}]
    assert len(dataset_digest(folder)) == 16
    assert ex.set == "default"  # no "set": one default set


def test_sets_kept_in_order(folder: Path) -> None:
    shutil.copy(folder / "five.mp4", folder / "six.mp4")
    shutil.copy(folder / "five.mp4", folder / "seven.mp4")
    entries = [
        _entry(set="real"),
        _entry(video="six.mp4", set="rendered"),
        _entry(video="seven.mp4", set=" real "),
    ]
    _write(folder, entries)
    examples = load_dataset(folder)
    assert [ex.set for ex in examples] == ["real", "rendered", "real"]
    assert examples[0].to_dict()["set"] == "real"
    groups = example_sets(examples)
    assert list(groups) == ["real", "rendered"]
    assert [ex.name for ex in groups["real"]] == ["five.mp4", "seven.mp4"]
    assert summarize(examples)["sets"] == {"real": 2, "rendered": 1}
    assert set_label("real") == "Real footage" and set_label("rendered") == "Rendered"
    assert set_label("night") == "night"


def test_duration_probed_when_absent_and_no_caption_truth(folder: Path) -> None:
    entry = _entry(scene="", events=[])
    del entry["duration"], entry["title"]
    _write(folder, [entry])
    (ex,) = load_dataset(folder)
    assert ex.duration == pytest.approx(5.0, abs=0.2)
    assert not ex.has_caption_truth
    assert ex.title == "five"


def test_absolute_and_nested_video_paths(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = tmp_path_factory.mktemp("elsewhere")
    shutil.copy(folder / "five.mp4", other / "abs.mp4")
    (folder / "sub").mkdir()
    shutil.copy(folder / "five.mp4", folder / "sub" / "nested.mp4")
    _write(folder, [_entry(video=str(other / "abs.mp4")), _entry(video="sub/nested.mp4")])
    a, b = load_dataset(folder)
    assert a.video == other / "abs.mp4"
    assert b.video == folder / "sub" / "nested.mp4"


@pytest.mark.skipif(
    not (EXAMPLES / "examples.json").is_file(), reason="examples/examples.json not rendered yet"
)
def test_project_examples_load() -> None:
    examples = load_dataset(EXAMPLES)
    assert examples
    assert all(ex.video.is_file() for ex in examples)
    assert any(ex.queries for ex in examples)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"video": "five.mp4"}, "JSON list"),
        ([], "no examples"),
        (["five.mp4"], "not an object"),
        ([_entry(video="missing.mp4")], "missing.mp4 does not exist"),
        ([{"title": "x"}], "has no 'video'"),
        ([_entry(), _entry()], "repeats a video"),
        ([_entry(duration=-1)], "duration -1"),
        ([_entry(duration="long")], "not a number"),
        ([_entry(queries=[{"query": "q", "span": [3.0, 1.0]}])], "end must come after the start"),
        ([_entry(queries=[{"query": "q", "span": [1.0, 1.0]}])], "end must come after the start"),
        ([_entry(queries=[{"query": "q", "span": [-1.0, 1.0]}])], "before the video begins"),
        ([_entry(queries=[{"query": "q", "span": [1.0, 9.0]}])], "ends at 9 s but the video lasts 5 s"),
        ([_entry(queries=[{"query": "q", "span": [1.0]}])], "give [start, end]"),
        ([_entry(queries=[{"query": "q", "span": [1.0, float("nan")]}])], "finite"),
        ([_entry(queries=[{"query": "  ", "span": [1.0, 2.0]}])], "empty query"),
        ([_entry(queries=[{"query": "q", "spans": []}])], "non-empty list of [start, end]"),
        ([_entry(queries=[{"query": "q", "spans": [[1.0, 2.0], [3.0]]}])], "give [start, end]"),
        ([_entry(queries=[{"query": "q", "spans": [[1.0, 2.0], [4.0, 9.0]]}])], "ends at 9 s"),
        ([_entry(queries=[{"query": "q"}])], "'query' and 'span'"),
        ([_entry(events=[{"start": 0, "end": 1}])], "start, end and description"),
        ([_entry(events=[{"start": 0, "end": 1, "description": ""}])], "empty description"),
        ([_entry(events=[{"start": 4, "end": 2, "description": "d"}])], "event 1 is [4, 2]"),
        ([_entry(events="none")], "'events' must be a list"),
        ([_entry(scene="", events=[], queries=[])], "nothing to score"),
        ([_entry(set=3)], "'set' is 3"),
        ([_entry(set=None)], "'set' is None"),
        ([_entry(set="  ")], "'set' is '  '"),
    ],
)
def test_validation_errors(folder: Path, entries: object, message: str) -> None:
    _write(folder, entries)
    with pytest.raises(DatasetError) as info:
        load_dataset(folder)
    assert message in str(info.value)


def test_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(tmp_path / "nope")
    with pytest.raises(DatasetError, match=r"has no examples\.json"):
        load_dataset(tmp_path)
    (tmp_path / "examples.json").write_text("[{", encoding="utf-8")
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_dataset(tmp_path)


def test_several_true_spans_per_query(folder: Path) -> None:
    _write(
        folder,
        [
            _entry(
                queries=[
                    {"query": "q", "spans": [[3.0, 4.0], [0.5, 1.5]]},
                    {"query": "r", "span": [1.0, 2.0]},
                ]
            )
        ],
    )
    q, r = load_dataset(folder)[0].queries
    assert q.spans == ((0.5, 1.5), (3.0, 4.0)) and q.span == (0.5, 1.5)  # sorted; span is the first
    assert q.to_dict() == {"query": "q", "span": [0.5, 1.5], "spans": [[0.5, 1.5], [3.0, 4.0]]}
    assert r.spans == ((1.0, 2.0),) and r.to_dict() == {"query": "r", "span": [1.0, 2.0]}


def test_span_tolerance_allows_rounding(folder: Path) -> None:
    _write(folder, [_entry(queries=[{"query": "q", "span": [4.0, 5.3]}])])
    assert load_dataset(folder)[0].queries[0].span == (4.0, 5.3)


# ---------------------------------------------------------------------------
# Charades-STA converter
# ---------------------------------------------------------------------------


def test_parse_charades_lines() -> None:
    a = parse_charades_line("AO8RW 0.0 6.9##a person is putting a book on a shelf.", 1)
    assert (a.video_id, a.start, a.end, a.query) == (
        "AO8RW",
        0.0,
        6.9,
        "a person is putting a book on a shelf.",
    )
    b = parse_charades_line("Y6R7T 2 4.5 person  opens the door", 2)
    assert (b.video_id, b.start, b.end, b.query) == ("Y6R7T", 2.0, 4.5, "person opens the door")
    assert parse_charades_line("   ", 3) is None
    assert parse_charades_line("# comment", 4) is None
    for bad, msg in [
        ("AO8RW 0.0##q", "expected"),
        ("AO8RW x 1##q", "not numbers"),
        ("AO8RW 5 1##q", "forward time range"),
        ("AO8RW 1 2##   ", "query is empty"),
        ("AO8RW 1 2", "expected"),
    ]:
        with pytest.raises(DatasetError, match=msg) as info:
            parse_charades_line(bad, 7, "ann.txt")
        assert "ann.txt:7" in str(info.value)


def test_find_video(tmp_path: Path) -> None:
    (tmp_path / "A1.webm").write_bytes(b"x")
    (tmp_path / "B2.mp4").write_bytes(b"x")
    assert find_video(tmp_path, "A1") == tmp_path / "A1.webm"
    assert find_video(tmp_path, "B2.mp4") == tmp_path / "B2.mp4"
    assert find_video(tmp_path, "C3") is None


def _annotations(tmp_path: Path) -> Path:
    ann = tmp_path / "charades_sta_test.txt"
    ann.write_text(
        "\n".join(
            [
                "VID01 0.0 2.4##a person is putting a book on a shelf.",
                "VID02 1.0 3.0##someone opens a door",
                "VID01 1.5 9.0##person turns on the light.",  # ends past the 5 s clip: clamped
                "VID01 0.0 2.4##a person is putting a book on a shelf.",  # duplicate: dropped
                "VID01 6.0 8.0##person sits down",  # starts after the end: dropped
                "MISSING 0.0 1.0##nobody",  # no video: skipped
                "VID02 2 4 person laughs",  # whitespace form
                "",
            ]
        ),
        encoding="utf-8",
    )
    return ann


def test_convert_charades_then_load(tmp_path: Path, clip5: Path) -> None:
    videos = tmp_path / "videos"
    videos.mkdir()
    shutil.copy(clip5, videos / "VID01.mp4")
    shutil.copy(clip5, videos / "VID02.mp4")
    out = tmp_path / "data"
    report = convert_charades(_annotations(tmp_path), videos, out)
    assert (report.videos, report.queries) == (2, 4)
    assert report.missing == ["MISSING"]
    assert (report.clamped, report.dropped, report.duplicates) == (1, 1, 1)
    data = json.loads((out / "examples.json").read_text())
    assert [e["video"] for e in data] == ["../videos/VID01.mp4", "../videos/VID02.mp4"]
    assert data[0]["title"] == "VID01"
    assert data[0]["scene"] == "" and data[0]["events"] == []
    assert data[0]["duration"] == pytest.approx(5.0, abs=0.2)
    assert [q["query"] for q in data[0]["queries"]] == [
        "a person is putting a book on a shelf.",
        "person turns on the light.",
    ]
    assert data[0]["queries"][1]["span"] == [1.5, data[0]["duration"]]
    assert data[1]["queries"] == [
        {"query": "someone opens a door", "span": [1.0, 3.0]},
        {"query": "person laughs", "span": [2.0, 4.0]},
    ]
    examples = load_dataset(out)  # the converted folder is a valid bench data folder
    assert [ex.video.name for ex in examples] == ["VID01.mp4", "VID02.mp4"]
    assert not any(ex.has_caption_truth for ex in examples)
    with pytest.raises(DatasetError, match="already exists"):
        convert_charades(_annotations(tmp_path), videos, out)
    report = convert_charades(_annotations(tmp_path), videos, out, limit=1, force=True)
    assert report.videos == 1


def test_convert_charades_errors(tmp_path: Path) -> None:
    ann = _annotations(tmp_path)
    with pytest.raises(DatasetError, match="does not exist"):
        convert_charades(tmp_path / "nope.txt", tmp_path, tmp_path / "o")
    with pytest.raises(DatasetError, match="videos folder"):
        convert_charades(ann, tmp_path / "novideos", tmp_path / "o")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="No annotated video was found"):
        convert_charades(ann, tmp_path / "empty", tmp_path / "o")
    bad = tmp_path / "bad.txt"
    bad.write_text("VID01 0 1##ok\nVID01 oops\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad\.txt:2"):
        convert_charades(bad, tmp_path / "empty", tmp_path / "o")


def test_convert_charades_cli(tmp_path: Path, clip5: Path, capsys: pytest.CaptureFixture[str]) -> None:
    videos = tmp_path / "videos"
    videos.mkdir()
    shutil.copy(clip5, videos / "VID01.mp4")
    out = tmp_path / "data"
    ann = _annotations(tmp_path)
    argv = ["bench", "convert-charades", str(ann), "--videos", str(videos), "--out", str(out)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "1 video(s), 2 queries" in captured.out
    assert "not found" in captured.err
    assert (out / "examples.json").is_file()
    assert cli.main(argv) == 2  # exists: one line, non-zero
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--force" in err and "\n" not in err


def test_convert_charades_subprocess(tmp_path: Path) -> None:
    """As a user runs it: one error line on stderr, non-zero exit."""
    proc = subprocess.run(
        [sys.executable, "-m", "marlin_demo", "bench", "convert-charades", str(tmp_path / "none.txt"),
         "--videos", str(tmp_path), "--out", str(tmp_path / "o")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ")


def test_app_read_is_lenient_and_keeps_display_keys(tmp_path: Path, clip5: Path) -> None:
    """The app's read (compare.load_examples) goes through the same parser, but a bad entry is left out
    instead of failing the page, a clip not there yet is kept, and credit-like keys survive."""
    from marlin_demo.datasets import read_examples

    folder = tmp_path / "d"
    folder.mkdir()
    shutil.copy(clip5, folder / "five.mp4")
    good = _entry(credit={"author": "A. Person", "license": "CC BY 4.0"})
    absent = _entry(video="later.mp4", queries=[{"query": "it ends", "span": [1.0, 2.0]}])
    absent.pop("duration", None)
    bad = _entry(video="bad.mp4", events=[{"start": 3.0, "end": 1.0, "description": "backwards"}])
    _write(folder, [good, absent, bad])
    with pytest.raises(DatasetError, match=r"later\.mp4 does not exist"):
        load_dataset(folder)  # the benchmark's read stays strict
    got = read_examples(folder / "examples.json")
    assert [e.name for e in got] == ["five.mp4", "later.mp4"]
    first = got[0].to_dict()
    assert first["credit"] == {"author": "A. Person", "license": "CC BY 4.0"}
    assert first["events"] == good["events"] and first["video"] == "five.mp4"
    assert "duration" not in got[1].to_dict()  # unknown until the clip is there: not made up
    assert read_examples(tmp_path / "none.json") == []
    (folder / "examples.json").write_text("{not json", encoding="utf-8")
    assert read_examples(folder / "examples.json") == []
