"""``index`` and ``search``: known captions through the indexer's writer (ranking), the tiny model end to
end, reruns (add, change, move, prune), a SIGKILL mid-index, hostile queries, an empty library, reading
while writing.

The tiny model writes stock sentences, so ranking is tested on captions written through ``store_caption``;
the model runs only for the mechanics. One library is built per module (small windows and short clips keep
it quick), and the CLI runs in this process (``cli``: the model's imports and load are paid once), except
where a test needs a process of its own (``cli_process``: the entry point's exit code, a SIGKILL).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from marlin_demo import service
from marlin_demo.library import database, index
from marlin_demo.library.cli import format_answer
from marlin_demo.library.database import DB_FILE, LibraryError, Store, match_expression
from marlin_demo.library.inputs import Item, collect
from marlin_demo.library.search import combined_score, search, search_windows
from marlin_demo.longvideo.policy import plan_for
from marlin_demo.settings import Settings
from tests.media_factory import ffmpeg

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MEDIA = ROOT.parent / "shared" / "media"
#: small windows: a 24 s clip is three caption windows, each three find windows
WINDOWS = {"caption_window_s": 8.0, "find_window_s": 4.0, "find_overlap_s": 1.0}
TOKENS = {"caption_max_new_tokens": 32, "find_max_new_tokens": 16}
#: bf16: the tiny 16-bit variant loads without GPTQModel (seconds less per process)
VARIANT = "bf16"
FAST = ["--model", "tiny"] + [f"--{k.replace('_', '-')}={v}" for k, v in {**TOKENS, **WINDOWS}.items()]
HOSTILE = ['"', "NEAR(", "*", "--", ";", "OR", 'cup" OR 1=1; NEAR(*', "x'); DROP TABLE videos; --", "^a -b"]


def cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m marlin_demo ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "marlin_demo", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The same CLI (``marlin_demo.cli.main``) in this process: its exit code, stdout and stderr. The
    SIGTERM handler ``index`` sets is put back."""
    from marlin_demo.cli import main

    out, err = io.StringIO(), io.StringIO()
    handler = signal.getsignal(signal.SIGTERM)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    except SystemExit as exc:  # argparse refused the arguments
        code = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.signal(signal.SIGTERM, handler)
    return subprocess.CompletedProcess(["marlin_demo", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def library_settings(tiny_settings: Settings) -> Settings:
    """The tiny model with the short answers and small windows of ``FAST`` (the CLI runs' flags)."""
    return tiny_settings.with_(**TOKENS, **WINDOWS)


def _encode(out: Path, seconds: int, pattern: str, fps: int, codec: list[str]) -> Path:
    ffmpeg("-f", "lavfi", "-i", f"{pattern}=size=160x120:rate={fps}", "-t", str(seconds), *codec, str(out))
    return out


def make_vp9(out: Path, seconds: int = 2, pattern: str = "testsrc2") -> Path:
    vp9 = ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "200k"]
    return _encode(out, seconds, pattern, 10, vp9)


def make_h264(out: Path, seconds: int, pattern: str = "testsrc2") -> Path:
    return _encode(
        out, seconds, pattern, 5, ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short clip (an example's first 8 s, one window), a 24 s clip (three windows), VP9, HEVC and AV1
    (when the shared media are there), and a text file named .mp4."""
    root = tmp_path_factory.mktemp("videos")
    (root / "sub").mkdir()
    ffmpeg("-i", str(EXAMPLES / "blue_square.mp4"), "-t", "8", "-c", "copy", str(root / "blue_square.mp4"))
    make_h264(root / "sub" / "long.mp4", 24)
    make_vp9(root / "vp9.webm")
    for name in ("h265_video.mp4", "av1_video.mkv"):
        if (MEDIA / name).is_file():
            shutil.copy(MEDIA / name, root / name)
    (root / "notes.mp4").write_text("not a video\n")
    return root


@pytest.fixture(scope="module")
def library(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    lib = tmp_path_factory.mktemp("lib")
    proc = cli("index", str(folder), "--library", str(lib), "--json", "--variant", VARIANT, *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return lib, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def engine(library_settings: Settings) -> Any:
    from marlin_demo.engine import Engine

    return Engine(library_settings)


# ---------------------------------------------------------------------------- ranking on known captions


def write_known(store: Store, name: str, windows: list[tuple[float, float, str, list[str]]]) -> str:
    """One video's caption written by the indexer's own writer (thumbnails, transaction and all)."""
    digest = name.encode().hex().ljust(64, "0")[:64]
    clip = store.folder.parent / "clips" / name  # its own file: one entry per path
    clip.parent.mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "blue_square.mp4", clip)
    item = Item(id=name, video=name, path=str(clip), query=None)
    row = {
        "duration_s": windows[-1][1],
        "scene": " ".join(w[2] for w in windows),
        "windows": [{"start": s, "end": e, "scene": scene} for s, e, scene, _ in windows],
        "events": [
            {"start": s + i, "end": s + i + 1, "description": d}
            for s, _e, _scene, descs in windows
            for i, d in enumerate(descs)
        ],
    }
    job = index.Pending(item, digest, 1, 1, None)
    index.store_caption(store, job, row)
    return job.vid


@pytest.fixture
def known(tmp_path: Path) -> Store:
    store = Store(tmp_path / "known")
    write_known(store, "pool.mp4", [
        (0, 60, "A sunny garden with a swimming pool.", ["A dog runs across the lawn."]),
        (60, 120, "A garden with a pool.", ["A dog jumps into the pool.", "The dog swims to the edge."]),
    ])  # fmt: skip
    write_known(store, "park.mp4", [(0, 45, "A city park in autumn.", ["A dog chases a ball."])])
    write_known(store, "sofa.mp4", [(0, 30, "A living room.", ["A cat sleeps on the sofa."])])
    return store


def test_stage1_ranks_known_captions_by_relevance(known: Store) -> None:
    hits = known.stage1("a dog jumped into the pool", 10)
    order = [(h.name, h.k) for h in hits]
    assert order[0] == ("pool.mp4", 1)  # stems: "jumped" finds "jumps"; dog + jump + pool
    assert set(order[1:3]) == {("pool.mp4", 0), ("park.mp4", 0)}  # two of the three words
    assert order[-1] == ("sofa.mp4", 0) and hits[-1].retrieval == 0.0  # small library: every window, last
    assert [h.retrieval for h in hits] == sorted((h.retrieval for h in hits), reverse=True)
    assert [h.name for h in known.stage1("cat sofa", 1)] == ["sofa.mp4"]


def test_stage1_keeps_only_the_best_n_in_a_larger_library(known: Store) -> None:
    hits = known.stage1("the edge", 2)  # 4 windows > N = 2: only what matches
    assert [(h.name, h.k) for h in hits] == [("pool.mp4", 1)]
    assert known.stage1("helicopter", 2) == []


def test_known_windows_keep_times_events_and_thumbnails(known: Store) -> None:
    pool = next(v for v in known.videos() if v["name"] == "pool.mp4")
    wins = known.windows_of(pool["id"])
    assert [(w["start"], w["end"]) for w in wins] == [(0, 60), (60, 120)]
    assert "jumps into the pool" in wins[1]["events"] and "jumps" not in wins[0]["events"]
    assert (known.folder / wins[0]["thumbnail"]).read_bytes()[:3] == b"\xff\xd8\xff"  # a JPEG


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_are_words_never_syntax(known: Store, query: str) -> None:
    expr = match_expression(query)
    assert expr is None or all(part.strip("()").startswith('"') for part in expr.split(" OR "))
    known.stage1(query, 3)  # never raises
    assert known.counts() == (3, 4)  # and never reaches SQL


def test_combined_score_orders_by_both_stages() -> None:
    assert combined_score(0.8, 5.0, 5.0) == pytest.approx(0.9)
    assert combined_score(0.8, 0.0, 5.0) == pytest.approx(0.4)
    assert combined_score(0.8, 5.0, 5.0) > combined_score(0.8, 2.5, 5.0) > combined_score(0.2, 2.5, 5.0)


def test_setup_mismatch_is_refused(known: Store) -> None:
    known.check_setup({"model": "tiny", "variant": VARIANT})
    known.check_setup({"model": "tiny", "variant": VARIANT})
    with pytest.raises(LibraryError, match=r"another model or settings .*--fresh"):
        known.check_setup({"model": "marlin", "variant": VARIANT})


# ---------------------------------------------------------------------------- the tiny model end to end


@pytest.mark.slow
def test_index_end_to_end(
    folder: Path, library: tuple[Path, dict[str, Any]], library_settings: Settings
) -> None:
    lib, summary = library
    videos = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "notes.mp4"]
    assert summary["videos"] == summary["added"] == len(videos) and summary["failed"] == 1
    (bad,) = summary["failures"]
    assert bad["video"] == "notes.mp4" and bad["reason"] == "not_a_video" and bad["error"].endswith(".")
    store = Store(lib, create=False)
    s = library_settings
    entries = store.videos()
    assert sorted(v["name"] for v in entries) == sorted(p.relative_to(folder).as_posix() for p in videos)
    total = 0
    for v in entries:
        wins = store.windows_of(v["id"])
        assert [(w["start"], w["end"]) for w in wins] == [
            (pytest.approx(w.start), pytest.approx(w.end)) for w in plan_for("caption", v["duration"], s)
        ]
        assert all((lib / w["thumbnail"]).read_bytes()[:3] == b"\xff\xd8\xff" for w in wins)
        total += len(wins)
    assert summary["windows"] == total and total >= len(entries) + 2  # the 24 s clip has three windows


@pytest.mark.slow
def test_search_cli_json_shape(library: tuple[Path, dict[str, Any]], library_settings: Settings) -> None:
    lib, summary = library
    store = Store(lib, create=False)
    scene = store.db.execute("SELECT scene FROM windows WHERE scene != '' LIMIT 1").fetchone()[0]
    proc = cli("search", str(lib), scene[:200], "--top-k", "3", "--search-candidates", "2", "--json", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(proc.stdout)
    assert set(d) == {"query", "library", "searched_windows", "moments"}
    assert d["library"] == {"videos": summary["videos"], "windows": summary["windows"]}
    # the find windows asked, as the search's cost line counts them before it runs
    asked = search_windows(store, scene[:200], library_settings.with_(search_candidates=2))
    assert d["searched_windows"] == asked
    assert 1 <= len(d["moments"]) <= 3
    durations = {v["id"]: v["duration"] for v in store.videos()}
    for m in d["moments"]:
        assert set(m) == {"video", "id", "start", "end", "score", "retrieval_score", "window", "thumbnail"}
        assert not Path(m["video"]).is_absolute() and m["id"] in durations
        assert (
            m["window"][0] - 1e-6
            <= m["start"]
            <= m["end"]
            <= m["window"][1] + 1e-6
            <= durations[m["id"]] + 1e-3
        )
        assert (lib / m["thumbnail"]).is_file() and 0 <= m["score"] <= 1
    assert [m["score"] for m in d["moments"]] == sorted((m["score"] for m in d["moments"]), reverse=True)
    text = format_answer(d)  # what the command prints without --json
    assert all(m["video"] in text for m in d["moments"]) and "score" in text


@pytest.mark.slow
def test_search_decodes_only_the_find_windows_of_the_chosen_window(
    library: tuple[Path, dict[str, Any]],
    engine: Any,
    monkeypatch: pytest.MonkeyPatch,
    library_settings: Settings,
) -> None:
    lib, _ = library
    store = Store(lib, create=False)
    long_id = next(v["id"] for v in store.videos() if v["name"] == "sub/long.mp4")
    query = store.windows_of(long_id)[1]["scene"] or "a video"
    decoded: list[tuple[float, float]] = []
    real = engine.window_frames

    def spy(path: Path, plans: list[Any]) -> Any:
        decoded.extend((wp.window.start, wp.window.end) for wp in plans)
        return real(path, plans)

    monkeypatch.setattr(engine, "window_frames", spy)
    made: list[Any] = []  # each request stage 2 makes carries the visitor who searched (issue 54)
    real_request = service.request
    monkeypatch.setattr(service, "request", lambda *a, **kw: made.append(real_request(*a, **kw)) or made[-1])
    s = library_settings.with_(search_candidates=1)
    asked: list[tuple[int, int]] = []
    answer = search(
        store, query, s, lambda: engine, VARIANT, top_k=5, progress=lambda k, n: asked.append((k, n)),
        visitor="ana",
    )  # fmt: skip
    assert made and {r.visitor for r in made} == {"ana"}
    (hit,) = store.stage1(answer.query, 1)
    assert {tuple(m["window"]) for m in answer.moments} == {(hit.start, hit.end)}
    # the find windows (4 s, 1 s overlap) inside the chosen caption window, and nothing else
    want = [(hit.start + w.start, hit.start + w.end) for w in plan_for("find", hit.end - hit.start, s)]
    assert decoded == [(pytest.approx(a), pytest.approx(b)) for a, b in want] and len(want) >= 2
    # one count of them: the cost said before the search, its progress (stage 1 at once, then stage 2)
    # and the answer's searched_windows (issue 52: "9 windows" said, "window 1 of 8" shown)
    n = len(want)
    assert search_windows(store, query, s) == n and answer.searched_windows == n and asked == [(0, n), (n, n)]


@pytest.mark.slow
@pytest.mark.parametrize("query", ['"', "NEAR(", "*", "--", ";", "OR"])
def test_hostile_queries_search_end_to_end(
    library: tuple[Path, dict[str, Any]], engine: Any, query: str, library_settings: Settings
) -> None:
    store = Store(library[0], create=False)
    answer = search(store, query, library_settings.with_(search_candidates=2), lambda: engine, VARIANT)
    d = answer.to_dict()
    assert d["library"]["videos"] == store.counts()[0] and isinstance(d["moments"], list)
    assert d["searched_windows"] <= 2


def test_empty_library_answers_an_empty_list(tmp_path: Path, library_settings: Settings) -> None:
    store = Store(tmp_path / "empty")

    def no_engine() -> Any:
        raise AssertionError("an empty library must not load a model")

    d = search(store, "a dog jumps", library_settings, no_engine, VARIANT).to_dict()
    assert d == {
        "query": "a dog jumps",
        "library": {"videos": 0, "windows": 0},
        "searched_windows": 0,
        "moments": [],
    }
    with pytest.raises(ValueError, match="empty"):
        search(store, "   ", library_settings, no_engine, VARIANT)
    with pytest.raises(ValueError, match=r"too long|at most"):
        search(store, "x" * 501, library_settings, no_engine, VARIANT)


def test_search_cli_bad_input_exits_2(tmp_path: Path) -> None:
    proc = cli_process("search", str(tmp_path / "nowhere"), "a dog")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: No library at")
    Store(tmp_path / "empty").close()
    empty = cli("search", str(tmp_path / "empty"), "a dog", "--json")
    assert empty.returncode == 0 and json.loads(empty.stdout)["moments"] == []


# ---------------------------------------------------------------------------- reruns


@pytest.mark.slow
def test_rerun_add_change_move_prune(tmp_path: Path, engine: Any) -> None:
    src = tmp_path / "src"
    src.mkdir()
    a, b = make_vp9(src / "a.webm", 2), make_vp9(src / "b.webm", 2, "mandelbrot")
    store = Store(tmp_path / "lib")
    captioned: list[str] = []

    def captions(todo: list[index.Pending]) -> Any:
        captioned.extend(shown for shown in (index.shown_name(j.item) for j in todo))
        return index.caption_local(engine, todo, VARIANT)

    def run(prune: bool = False) -> dict[str, Any]:
        captioned.clear()
        return index.index(store, collect(str(src), "caption"), captions, prune_gone=prune).to_dict(store)

    first = run()
    assert (first["added"], first["videos"]) == (2, 2) and sorted(captioned) == ["a.webm", "b.webm"]
    again = run()
    assert (again["unchanged"], again["added"], captioned) == (2, 0, [])
    make_h264(src / "c.mp4", 2)
    assert (run()["added"], captioned) == (1, ["c.mp4"])
    old_b = store.by_path(str(b.resolve()))
    make_vp9(b, 3, "testsrc")  # new content at a known path
    changed = run()
    assert (changed["updated"], changed["videos"], captioned) == (1, 3, ["b.webm"])
    assert store.video(old_b["id"]) is None and not (store.folder / "thumbs" / old_b["id"]).exists()
    (src / "sub").mkdir()
    moved_to = src / "sub" / "renamed.webm"
    a.rename(moved_to)
    moved = run()
    assert (moved["moved"], moved["videos"], captioned) == (1, 3, [])
    assert store.by_path(str(moved_to.resolve()))["name"] == "sub/renamed.webm"
    shutil.copy(moved_to, src / "copy.webm")  # the same content twice: still one entry
    assert (run()["videos"], captioned) == (3, [])
    (src / "c.mp4").unlink()
    kept = run()
    assert kept["videos"] == 3 and kept["pruned"] == 0  # gone, but only --prune drops it
    pruned = run(prune=True)
    assert (pruned["pruned"], pruned["videos"]) == (1, 2)
    digests = [r[0] for r in store.db.execute("SELECT digest FROM videos")]
    assert len(digests) == len(set(digests))
    (fts,) = store.db.execute("SELECT COUNT(*) FROM windows_fts").fetchone()
    assert fts == store.counts()[1]  # the full-text rows follow every delete


def test_two_ranges_of_one_video_are_two_entries(tmp_path: Path, engine: Any) -> None:
    """A manifest's start/end make an entry of their own (its id carries the range); its windows lie in it."""
    clip = make_h264(tmp_path / "long.mp4", 16)
    manifest = tmp_path / "ranges.csv"
    manifest.write_text("video,start,end\nlong.mp4,0,8\nlong.mp4,8,16\n")
    store = Store(tmp_path / "lib")
    items = collect(str(manifest), "caption")
    first = index.index(store, items, lambda todo: index.caption_local(engine, todo, VARIANT)).to_dict(store)
    assert (first["added"], first["videos"], first["failed"]) == (2, 2, 0), first
    entries = {v["name"]: v for v in store.videos()}
    assert sorted(entries) == ["long.mp4@0-8", "long.mp4@8-16"]
    assert {v["path"] for v in entries.values()} == {str(clip.resolve())}
    for name, (lo, hi) in (("long.mp4@0-8", (0, 8)), ("long.mp4@8-16", (8, 16))):
        windows = store.windows_of(entries[name]["id"])
        assert windows and all(lo <= w["start"] < w["end"] <= hi + 0.01 for w in windows), windows
    again = index.index(store, items, lambda todo: index.caption_local(engine, todo, VARIANT)).to_dict(store)
    assert (again["unchanged"], again["added"], again["videos"]) == (2, 0, 2)


def test_a_schema_1_library_is_upgraded_in_place(tmp_path: Path) -> None:
    """A library written before ranges (one entry per file) opens with its entries kept as whole videos."""
    folder = tmp_path / "old"
    folder.mkdir()
    db = sqlite3.connect(folder / DB_FILE)
    db.executescript(
        "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE videos(id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE, name TEXT NOT NULL, "
        "path TEXT NOT NULL UNIQUE, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, "
        "duration REAL NOT NULL, indexed TEXT NOT NULL);"
        "CREATE TABLE windows(wid INTEGER PRIMARY KEY, "
        "video TEXT NOT NULL REFERENCES videos(id) ON DELETE CASCADE, k INTEGER NOT NULL, "
        "start REAL NOT NULL, end REAL NOT NULL, scene TEXT NOT NULL, events TEXT NOT NULL, "
        "thumbnail TEXT, UNIQUE(video, k));"
        "INSERT INTO meta VALUES ('schema', '1');"
        "INSERT INTO videos VALUES ('v1', 'd1', 'a.mp4', '/x/a.mp4', 1, 1, 5.0, 'then');"
        "INSERT INTO windows(video, k, start, end, scene, events) VALUES ('v1', 0, 0, 5, 'a cat', '');"
    )
    db.commit()
    db.close()
    store = Store(folder)
    assert store.by_digest("d1") is not None and store.by_digest("d1")["span"] == ""
    assert store.meta()["schema"] == 2 and len(store.windows_of("v1")) == 1
    store.remove("v1")  # the windows still follow their video
    assert store.counts() == (0, 0)


@pytest.mark.slow
def test_other_settings_are_refused_unless_fresh(library: tuple[Path, dict[str, Any]], folder: Path) -> None:
    lib, _ = library
    other = [*FAST, "--caption-max-new-tokens", "24"]
    proc = cli("index", str(folder), "--library", str(lib), *other)
    assert proc.returncode == 2
    assert "another model or settings" in proc.stderr and "--fresh" in proc.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------------ SIGKILL, and reading while writing


@pytest.mark.slow
def test_sigkill_then_rerun_loses_and_doubles_nothing(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for k, pattern in enumerate(("testsrc", "testsrc2", "mandelbrot")):
        make_vp9(src / f"v{k}.webm", 2, pattern)
    lib = tmp_path / "lib"
    proc = subprocess.Popen(
        [sys.executable, "-m", "marlin_demo", "index", str(src), "--library", str(lib), "--variant", VARIANT,
         *FAST], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:  # the child says so after each commit: no sleeping
        if line.startswith("index: indexed"):
            break
    # a reader while the writer goes on (WAL): a consistent snapshot, and a search that answers
    reader = Store(lib, create=False)
    videos, windows = reader.counts()
    assert videos >= 1 and windows >= videos
    assert isinstance(reader.stage1("a video", 3), list)
    reader.close()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    db = sqlite3.connect(lib / DB_FILE)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    before = {r[0] for r in db.execute("SELECT id FROM videos")}
    (fts,) = db.execute("SELECT COUNT(*) FROM windows_fts").fetchone()
    (wins,) = db.execute("SELECT COUNT(*) FROM windows").fetchone()
    assert 1 <= len(before) and fts == wins  # each video whole or absent
    db.close()
    again = cli("index", str(src), "--library", str(lib), "--json", *FAST)
    assert again.returncode == 0, again.stderr[-3000:]
    s = json.loads(again.stdout)
    assert s["videos"] == 3 and s["unchanged"] == len(before) and s["added"] == 3 - len(before)
    store = Store(lib, create=False)
    assert before <= {v["id"] for v in store.videos()}
    (n, distinct) = store.db.execute("SELECT COUNT(*), COUNT(DISTINCT digest) FROM videos").fetchone()
    assert n == distinct == 3


def test_digest_is_not_read_again_for_an_unchanged_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = tmp_path / "v" / "a.mp4"
    clip.parent.mkdir()
    shutil.copy(EXAMPLES / "blue_square.mp4", clip)
    store = Store(tmp_path / "lib")
    items = collect(str(clip.parent), "caption")
    row = {"duration_s": 10.0, "scene": "s", "windows": [], "events": []}
    index.index(store, items, lambda todo: iter([(j, {"status": "ok", **row}) for j in todo]))
    import marlin_demo.video.digest as digest

    def boom(path: Any) -> str:
        raise AssertionError("hashed again")

    monkeypatch.setattr(digest, "file_digest", boom)
    again = index.index(store, items, lambda todo: iter(()))
    assert again.unchanged == ["a.mp4"]
    os.utime(clip, ns=(1, 1))  # a new stamp: hashed again (here: the patched hash says so)
    with pytest.raises(AssertionError, match="hashed again"):
        index.index(store, items, lambda todo: iter(()))


def test_frequent_words_score_but_do_not_pick_candidates(
    known: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "COMMON_MIN_WINDOWS", 1)
    monkeypatch.setattr(database, "COMMON_SHARE", 0.3)  # 4 windows: a word in 2 or more is common
    assert known.common_words("a dog jumped into the pool") == [
        "dog",
        "pool",
    ]  # stems looked up: "jump" is rare
    assert (
        match_expression("dog jumped pool", ["dog", "pool"]) == '("jumped") AND ("dog" OR "jumped" OR "pool")'
    )
    assert [(h.name, h.k) for h in known.stage1("a dog jumped into the pool", 1)] == [("pool.mp4", 1)]
    assert known.common_words("dog garden") == ["dog"]  # all frequent: the rarest still picks the candidates
    assert known.common_words("dog helicopter") == []  # no window has the rare word: "dog" picks them
    assert len(known.stage1("dog helicopter", 3)) == 3


def test_enough_windows_with_every_rare_word_are_the_only_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "COMMON_MIN_WINDOWS", 1)
    monkeypatch.setattr(database, "COMMON_SHARE", 0.5)  # 6 windows: a word in 4 or more is common
    store = Store(tmp_path / "lib")
    beach = "A long sandy beach under a grey sky near the old harbour wall."
    write_known(store, "beach.mp4", [(0, 60, beach, ["A boy on the beach flies a kite while gulls circle."])])
    write_known(store, "kite.mp4", [(0, 60, "A kite.", ["A kite. A kite. A kite."])])
    write_known(store, "sand.mp4", [(0, 60, "A beach.", ["A beach. A beach. A beach."])])
    write_known(store, "rest.mp4", [(k * 60, k * 60 + 60, "A room.", ["A person reads."]) for k in range(3)])
    assert store.common_words("kite beach") == []  # each in 2 of the 6 windows: both rare
    assert store.stage1_expression("kite beach", 1) == '("kite") AND ("beach")'  # 1 window has both: enough
    (both,) = store.stage1("kite beach", 1)
    assert both.name == "beach.mp4"  # not plain BM25's best (a short window repeating one word), but found
    assert store.stage1_expression("kite beach", 3) == '("kite" OR "beach")'  # 1 < 3: any rare word
    hits = store.stage1("kite beach", 3)  # the fallback fills, ranked by BM25 as before
    assert {hits[0].name, hits[1].name} == {"kite.mp4", "sand.mp4"} and hits[2].name == "beach.mp4"
    assert hits[2].retrieval == pytest.approx(both.retrieval)  # the same score under either rule
    assert store.stage1_expression("kite helicopter", 1) == '("kite" OR "helicopter")'  # no window has both
    assert [h.name for h in store.stage1("kite helicopter", 1)] == ["kite.mp4"]
    for query in HOSTILE:
        store.stage1(f"kite beach {query}", 1)  # the conjunction quotes every word too: never raises
    store.close()


def test_counts_follow_writes_by_this_connection_and_others(known: Store) -> None:
    assert known.counts() == (3, 4)
    other = Store(known.folder)
    write_known(other, "street.mp4", [(0, 30, "A street.", ["A car passes."])])
    assert known.counts() == other.counts() == (4, 5)  # counted again: another connection wrote
    known.remove(other.by_path(str(known.folder.parent / "clips" / "street.mp4"))["id"])
    assert known.counts() == other.counts() == (3, 4)  # and again: this one wrote
    other.close()


def test_scale_benchmark_runs_small() -> None:
    from collections import Counter

    from tests.script_loader import load_script

    bench = load_script(ROOT / "benchmarks" / "bench_library_scale.py")
    r = bench.run(windows=300, queries=4)
    assert (r["windows"], r["videos"], r["queries"]) == (300, 3, 4)
    for side in ("stage1", "scan_db", "scan_memory"):
        assert 0 < r[side]["p50_ms"] <= r[side]["p95_ms"]
    assert r["speedup_vs_scan_db"] > 0 and "x faster" in bench.render(r)
    assert r["text"]["agreement_with_plain_bm25"] == 1.0  # 300 windows: no word is common, plain BM25
    writer = bench.Writer(0)
    assert len(writer.kinds) > 2000  # a caption vocabulary of a few thousand words
    text = writer.video(1)[0]
    assert text.scene and 2 <= len(text.events) <= 4  # caption-like sentences, not random strings
    shapes = " ".join(
        p for e in writer.examples for s in e.scenes + e.events for p in s if isinstance(p, str)
    )
    words = set(bench.WORD.findall((text.scene + " " + text.events_text).lower()))
    assert words <= set(writer.kinds) | set(bench.WORD.findall(shapes.lower()))
    drawn = Counter(writer.draw("object") for _ in range(3000))  # Zipfian: the head is common, the tail rare
    head, tail = writer.words["object"][:10], writer.words["object"][-300:]
    assert sum(drawn[w] for w in head) / len(head) > 30 * sum(drawn[w] for w in tail) / len(tail)
    qs = writer.queries(6)  # a ground-truth query, then one made the same way as the text
    assert qs[0::2] == writer.truth_queries[:3] and not set(qs[1::2]) & set(writer.truth_queries)
