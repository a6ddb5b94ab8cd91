"""``python -m marlin_demo batch`` as a user runs it: a subprocess, real clips, bad files, a kill, Ray."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from marlin_demo import cli
from marlin_demo.library.inputs import collect
from tests.media_factory import make

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FAST = ["--model", "tiny", "--caption-max-new-tokens", "8", "--find-max-new-tokens", "8"]


#: Ray's dashboard asks for a cloud's metadata service when it starts (169.254.169.254, a name lookup),
#: usage stats off or not. Through a proxy on a closed loopback port those requests fail at once, on
#: loopback; Ray's own connections (127.0.0.1) bypass it.
LOOPBACK_PROXY = {
    "http_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost",
    "NO_PROXY": "127.0.0.1,localhost",
}


def batch(*args: str, timeout: float = 600, ray: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "marlin_demo", "batch", *args, *FAST, *(["--ray"] if ray else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **LOOPBACK_PROXY} if ray else None,
    )


def rows(out: Path) -> dict[str, dict]:
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in recs}
    assert len(by_id) == len(recs), "an id was written twice"
    return by_id


def untimed(by_id: dict[str, dict]) -> dict[str, dict]:
    return {k: {f: v for f, v in r.items() if f != "metrics"} for k, r in by_id.items()}


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two example clips (10 s and 12 s) plus a text file named .mp4 and a truncated mp4."""
    tmp_path = tmp_path_factory.mktemp("collection")
    folder = tmp_path / "videos"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(EXAMPLES / "blue_square.mp4", folder / "blue_square.mp4")
    shutil.copy(EXAMPLES / "ball_rolls.mp4", folder / "sub" / "ball_rolls.mp4")
    (folder / "notes.mp4").write_text("not a video\n")
    shutil.copy(make("truncated", tmp_path / "made"), folder / "truncated.mp4")
    return folder


CAPTIONS = ("--task", "caption", "--max-duration-s", "11")


@pytest.fixture(scope="module")
def local_captions(collection: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collection captioned once without Ray (ball_rolls is 12 s: over the 11 s limit), with
    sidecars; the folder test reads it and the Ray test compares its rows with it."""
    out = tmp_path_factory.mktemp("local") / "out"
    proc = batch(str(collection), *CAPTIONS, "--out", str(out), "--sidecars")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_folder_rows_failures_summary_and_rerun(
    collection: Path, local_captions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = local_captions
    got = rows(out)
    assert set(got) == {"blue_square.mp4", "sub/ball_rolls.mp4", "notes.mp4", "truncated.mp4"}
    ok = got["blue_square.mp4"]
    assert ok["status"] == "ok" and ok["task"] == "caption"
    assert {"variant", "model", "scene", "events", "raw", "repaired", "metrics", "windows"} <= set(ok)
    assert ok["duration_s"] == pytest.approx(10.0, abs=0.2)
    assert got["sub/ball_rolls.mp4"]["reason"] == "over_limit"
    assert "at most 11 s" in got["sub/ball_rolls.mp4"]["error"]
    assert got["notes.mp4"]["reason"] == "not_a_video"
    assert got["notes.mp4"]["error"].startswith("This file is not a video")
    assert got["truncated.mp4"]["status"] == "error" and got["truncated.mp4"]["error"].endswith(".")
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["items"], summary["rows"], summary["ok"], summary["error"], summary["pending"]) == (
        4,
        4,
        1,
        3,
        0,
    )
    assert sum(summary["failures"].values()) == 3 and summary["failures"]["over_limit"] == 1
    assert summary["total_video_duration_s"] == pytest.approx(10.0, abs=0.2)
    assert summary["latency_s"]["p50"] == ok["metrics"]["latency_s"]
    side = out / "sidecars"
    assert (side / "blue_square.mp4.vtt").read_text().startswith("WEBVTT")
    assert (side / "blue_square.mp4.srt").exists() and (side / "blue_square.mp4.json").exists()
    before = (out / "results.jsonl").read_bytes()
    # the reruns through the same ``main`` in this process (a subprocess each would pay the imports again)
    assert cli.main(["batch", str(collection), *CAPTIONS, "--out", str(out), *FAST]) == 0
    assert (out / "results.jsonl").read_bytes() == before  # a rerun does nothing
    capsys.readouterr()
    # another token limit is another set-up: refused, naming the way out
    other = ["batch", str(collection), "--task", "caption", "--out", str(out), "--model", "tiny"]
    assert cli.main([*other, "--caption-max-new-tokens", "9"]) == 2
    assert "--fresh" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.slow
def test_resume_after_sigkill_adds_only_missing_rows(tmp_path: Path) -> None:
    folder = tmp_path / "videos"
    folder.mkdir()
    for name in ("blue_square", "ball_rolls", "lamp_on_off"):
        shutil.copy(EXAMPLES / f"{name}.mp4", folder / f"{name}.mp4")
    out = tmp_path / "out"
    results = out / "results.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "marlin_demo",
            "batch",
            str(folder),
            "--task",
            "caption",
            "--out",
            str(out),
            *FAST,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # wait for the first row on disk without sleeping: each chunk the child writes to stderr (its
    # progress bar redraws after every row) wakes us to look at the file
    while os.read(proc.stderr.fileno(), 65536):
        if results.exists() and results.read_text().count("\n") >= 1:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    first = rows(out)
    assert 1 <= len(first) < 3
    with results.open("a") as fh:
        fh.write('{"id": "torn')  # an interrupted write: repaired on resume
    # the resume through the same ``main`` in this process (a kill needs a process; a resume does not)
    assert cli.main(["batch", str(folder), "--task", "caption", "--out", str(out), *FAST]) == 0
    final = rows(out)
    assert set(final) == {"blue_square.mp4", "ball_rolls.mp4", "lamp_on_off.mp4"}
    for key, row in first.items():
        assert final[key] == row  # earlier rows kept as they were, not rerun
    assert json.loads((out / "summary.json").read_text())["rows"] == 3


MANIFEST = [
    ("blue_square.mp4", "the blue square appears", "a"),
    ("blue_square.mp4", "the room is empty again", None),
    ("ball_rolls.mp4", "the ball rolls", "c"),
]


def _manifest(folder: Path, kind: str) -> Path:
    """``MANIFEST`` as a .jsonl or .csv file beside its clips."""
    manifest = folder / f"m.{kind}"
    for name in {e[0] for e in MANIFEST}:
        shutil.copy(EXAMPLES / name, folder / name)
    if kind == "jsonl":
        lines = [json.dumps({"video": v, "query": q, **({"id": i} if i else {})}) for v, q, i in MANIFEST]
        manifest.write_text("\n".join(lines) + "\n")
    else:
        manifest.write_text("video,query,id\n" + "".join(f'{v},"{q}",{i or ""}\n' for v, q, i in MANIFEST))
    return manifest


def test_csv_and_jsonl_manifests_give_the_same_requests(tmp_path: Path) -> None:
    """What a manifest becomes (the requests the batch runs) does not depend on its format; the run
    itself is checked once, on the .jsonl (``test_manifest_with_queries``)."""
    jsonl, csv = (collect(str(_manifest(tmp_path, kind)), "find") for kind in ("jsonl", "csv"))
    assert [(it.id, it.video, it.path, it.query) for it in csv] == [
        (it.id, it.video, it.path, it.query) for it in jsonl
    ]
    assert len(jsonl) == 3 and {"a", "c"} <= {it.id for it in jsonl}


@pytest.mark.slow
def test_manifest_with_queries(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "jsonl")
    out = tmp_path / "out"
    # through ``main`` in this process: the folder test's run is the one a user starts as a subprocess
    assert cli.main(["batch", str(manifest), "--task", "find", "--out", str(out), *FAST]) == 0
    got = rows(out)
    assert len(got) == 3 and {"a", "c"} <= set(got)
    (generated,) = set(got) - {"a", "c"}
    assert generated.startswith("blue_square.mp4#")
    assert got["a"]["query"] == "the blue square appears" and got["c"]["query"] == "the ball rolls"
    assert got[generated]["query"] == "the room is empty again"
    for r in got.values():
        assert r["status"] == "ok" and set(r) >= {"span", "format_ok", "raw", "metrics", "video"}


@pytest.mark.slow
def test_ray_local_runtime_gives_the_local_rows(
    collection: Path, local_captions: Path, tmp_path: Path
) -> None:
    ray_out = tmp_path / "ray"
    args = (str(collection), *CAPTIONS)
    proc = batch(*args, "--out", str(ray_out), "--workers", "1", ray=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert untimed(rows(ray_out)) == untimed(rows(local_captions))
    before = (ray_out / "results.jsonl").read_bytes()
    # nothing pending: the rerun starts no runtime, so it runs through ``main`` in this process
    assert cli.main(["batch", *args, "--out", str(ray_out), *FAST, "--ray"]) == 0
    assert (ray_out / "results.jsonl").read_bytes() == before
    left = subprocess.run(["pgrep", "-f", "ray/core/src/ray/(gcs|raylet)"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the Ray runtime was not torn down"
