"""examples/: the real and rendered clips, their ground truth and credits, and truth vs pixels."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import av
import numpy as np
import pytest
from script_loader import load_script

from marlin_demo.video import probe

MAX_TOTAL_BYTES = 8 * 1024 * 1024
SETS = ("real", "rendered")
CREDIT_KEYS = ("source", "author", "license", "changes")


@pytest.fixture(scope="module")
def examples(examples_dir: Path) -> list[dict]:
    path = examples_dir / "examples.json"
    if not path.is_file():
        pytest.skip("examples/examples.json has not been rendered (python examples/render_examples.py)")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, list) and len(data) >= 5
    return data


@pytest.fixture(scope="module")
def rendered(examples: list[dict]) -> list[dict]:
    return [ex for ex in examples if ex["set"] == "rendered"]


@pytest.fixture(scope="module")
def renderer(examples_dir: Path) -> ModuleType:
    """examples/render_examples.py imported as a module (it renders nothing on import)."""
    return load_script(examples_dir / "render_examples.py")


def test_every_example_validates(examples: list[dict], examples_dir: Path) -> None:
    """Both sets: times inside the probed clip, spans ordered, a set and a full credit per clip."""
    names = [ex["video"] for ex in examples]
    assert len(set(names)) == len(names)
    sets = [ex.get("set") for ex in examples]
    assert set(sets) == set(SETS), sets
    assert sets == sorted(sets, key=SETS.index), "the real clips come first"
    for ex in examples:
        where = ex["video"]
        assert ex["title"].strip() and len(ex["title"]) <= 40, where
        assert len(ex["scene"].split()) >= 15, where
        info = probe(examples_dir / ex["video"])
        assert ex["duration"] == pytest.approx(info.duration_s, abs=0.1), where
        limit = info.duration_s + 0.05
        previous_end = 0.0
        for e in ex["events"]:
            assert 0.0 <= e["start"] < e["end"] <= limit and e["description"].strip(), (where, e)
            assert e["start"] >= previous_end - 1e-9, (where, "events overlap or are out of order", e)
            previous_end = e["end"]
        assert ex["events"] and ex["queries"], where
        for q in ex["queries"]:
            s, e = q["span"]
            assert q["query"].strip() and 0.0 <= s < e <= limit, (where, q)
        credit = ex["credit"]
        assert all(isinstance(credit.get(k), str) and credit[k].strip() for k in CREDIT_KEYS), where


def test_the_datasets_loader_accepts_the_file(examples: list[dict], examples_dir: Path) -> None:
    """bench reads the same file: it must load with every clip and query (the extra keys are ignored)."""
    from marlin_demo.datasets import load_dataset

    loaded = load_dataset(examples_dir)
    assert [ex.name for ex in loaded] == [ex["video"] for ex in examples]
    assert [len(ex.queries) for ex in loaded] == [len(ex["queries"]) for ex in examples]


def test_attribution_lists_every_real_clip(examples: list[dict], examples_dir: Path) -> None:
    text = (examples_dir / "ATTRIBUTION.md").read_text(encoding="utf-8")
    for ex in examples:
        if ex["set"] == "real":
            assert ex["video"] in text and ex["credit"]["license"] in text, ex["video"]
            assert ex["credit"]["changes"] in text, ex["video"]


def test_schema(rendered: list[dict], examples_dir: Path) -> None:
    for ex in rendered:
        assert {"video", "title", "duration", "scene", "events", "queries"} <= set(ex)
        assert (examples_dir / ex["video"]).is_file(), ex["video"]
        assert ex["title"].strip() and len(ex["scene"].split()) >= 15
        duration = ex["duration"]
        info = probe(examples_dir / ex["video"])
        assert info.duration_s == pytest.approx(duration, abs=0.1)
        assert info.num_frames == round(duration * ex["fps"])
        assert (info.width, info.height) == (ex["width"], ex["height"])
        assert info.codec == "h264" and info.pix_fmt == "yuv420p"

        events = ex["events"]
        assert events, ex["video"]
        starts = [e["start"] for e in events]
        assert starts == sorted(starts)
        for e in events:
            assert set(e) == {"start", "end", "description"}
            assert 0.0 <= e["start"] < e["end"] <= duration and e["description"].strip()
        assert events[0]["start"] == 0.0 and events[-1]["end"] == duration

        assert len(ex["queries"]) >= 1
        for q in ex["queries"]:
            assert set(q) == {"query", "span"} and q["query"].strip()
            s, e = q["span"]
            assert 0.0 <= s < e <= duration


def test_json_matches_the_script(rendered: list[dict], renderer: ModuleType) -> None:
    """The rendered entries are exactly what the timeline in render_examples.py defines (no hand edits)."""
    assert [clip.ground_truth() for clip in renderer.CLIPS] == rendered


def test_total_size(examples: list[dict], examples_dir: Path) -> None:
    files = [p for p in examples_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    total = sum(p.stat().st_size for p in files)
    assert total < MAX_TOTAL_BYTES, f"examples/ holds {total / 1e6:.1f} MB"
    for ex in examples:
        cap = 500 * 1024 if ex["set"] == "rendered" else 2 * 1024 * 1024
        assert (examples_dir / ex["video"]).stat().st_size < cap, ex["video"]


# ---------------------------------------------------------------------------
# The ground truth matches what is drawn, frame by frame
# ---------------------------------------------------------------------------


def decode(path: Path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)]).astype(np.int16)


def mask_count(
    frames: np.ndarray, test: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    r, g, b = frames[..., 0], frames[..., 1], frames[..., 2]
    return test(r, g, b).reshape(len(frames), -1).sum(axis=1)


def centroid_x(
    frames: np.ndarray, test: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    r, g, b = frames[..., 0], frames[..., 1], frames[..., 2]
    m = test(r, g, b)
    xs = np.arange(frames.shape[2])[None, None, :]
    return (m * xs).reshape(len(frames), -1).sum(axis=1) / np.maximum(
        m.reshape(len(frames), -1).sum(axis=1), 1
    )


def phase_keys(renderer: ModuleType, clip_name: str, n: int) -> tuple[object, list[str]]:
    clip = next(c for c in renderer.CLIPS if c.video == clip_name)
    keys = [clip.at(i / renderer.FPS)[0].key for i in range(n)]
    return clip, keys


def red(r: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (r > 150) & (g < 90) & (b < 90)


def test_ball_moves_only_while_rolling(examples_dir: Path, renderer: ModuleType) -> None:
    frames = decode(examples_dir / "ball_rolls.mp4")
    _, keys = phase_keys(renderer, "ball_rolls.mp4", len(frames))
    x = centroid_x(frames, red)
    for i in range(1, len(frames)):
        moving = x[i] - x[i - 1] > 1.0  # between frame i-1 and i: inside [2, 8] exactly when i-1 rolls
        assert moving == (keys[i - 1] == "roll"), (i / renderer.FPS, x[i - 1], x[i])
    assert x[0] < 120 and x[-1] > 360


def test_square_visible_only_between_enter_and_leave(examples_dir: Path, renderer: ModuleType) -> None:
    frames = decode(examples_dir / "blue_square.mp4")
    _, keys = phase_keys(renderer, "blue_square.mp4", len(frames))
    blue = mask_count(frames, lambda r, g, b: (b > 150) & (r < 80) & (g < 120))
    for i, key in enumerate(keys):
        if key.startswith("empty"):
            assert blue[i] == 0, i
        elif key == "stay":
            assert blue[i] > 5000, i
        elif 0 < i and keys[i - 1] == key:  # enter/leave after their first frame: partly on screen
            assert blue[i] > 0, i


def test_people_meet_then_leave(examples_dir: Path, renderer: ModuleType) -> None:
    frames = decode(examples_dir / "people_meet.mp4")
    _, keys = phase_keys(renderer, "people_meet.mp4", len(frames))
    orange = mask_count(frames, lambda r, g, b: (r > 200) & (g > 100) & (g < 180) & (b < 80))
    purple = mask_count(frames, lambda r, g, b: (r > 90) & (r < 160) & (g < 90) & (b > 140))
    ox = centroid_x(frames, lambda r, g, b: (r > 200) & (g > 100) & (g < 180) & (b < 80))
    px = centroid_x(frames, lambda r, g, b: (r > 90) & (r < 160) & (g < 90) & (b > 140))
    for i, key in enumerate(keys):
        if key == "empty":
            assert orange[i] == 0 and purple[i] == 0, i
        elif key in ("approach", "meet"):
            assert orange[i] > 0 and purple[i] > 0 and ox[i] < px[i], i
        if key == "meet":
            assert abs(px[i] - ox[i]) < 70, i  # side by side in the middle
    approach = [i for i, k in enumerate(keys) if k == "approach"]
    assert ox[approach[-1]] > ox[approach[0]] + 100 and px[approach[-1]] < px[approach[0]] - 100


def test_street_day_night_and_cars(examples_dir: Path, renderer: ModuleType) -> None:
    frames = decode(examples_dir / "day_to_night.mp4")
    _, keys = phase_keys(renderer, "day_to_night.mp4", len(frames))
    brightness = frames.mean(axis=(1, 2, 3))
    car_red = mask_count(frames, lambda r, g, b: (r > 170) & (g < 70) & (b < 70))
    for i, key in enumerate(keys):
        assert (brightness[i] < 100) == key.startswith("night"), (i, brightness[i])
        if key != "day_car":
            assert car_red[i] == 0, i
        elif keys[i - 1] == "day_car" and keys[min(i + 1, len(keys) - 1)] == "day_car":
            assert car_red[i] > 0, i


def test_lamp_is_lit_exactly_in_on_phases(examples_dir: Path, renderer: ModuleType) -> None:
    frames = decode(examples_dir / "lamp_on_off.mp4")
    _, keys = phase_keys(renderer, "lamp_on_off.mp4", len(frames))
    brightness = frames.mean(axis=(1, 2, 3))
    for i, key in enumerate(keys):
        assert (brightness[i] > 60) == key.startswith("on"), (i, brightness[i])
