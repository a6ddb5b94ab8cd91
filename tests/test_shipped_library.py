"""The Space's shipped library: built by ``index`` (the tiny model, two short clips), found beside the
examples, loaded when it matches (nothing captioned again, only its paths updated), refused when a setting
that changes captions differs, and loaded with a report when only the device and kernels differ."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from marlin_demo import cli
from marlin_demo.library import index, prebuilt
from marlin_demo.library.database import DB_FILE, Store
from marlin_demo.library.inputs import Item
from marlin_demo.library.search import search_windows
from marlin_demo.service import cost, gpu_calls, zerogpu_rules
from marlin_demo.settings import Settings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CLIPS = ("flower.mp4", "blue_square.mp4")  # 5 s and 10 s: one caption window each
VARIANT = "bf16"


@pytest.fixture(scope="module")
def settings(tiny_settings: Settings) -> Settings:
    """What ``built``'s index command was given (its flags, as settings)."""
    return tiny_settings.with_(device="cpu", caption_max_new_tokens=16)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A checkout's examples with the library a maintainer built there; then the checkout moves (the
    Space runs it from another path), so the library's recorded paths are gone."""
    root = tmp_path_factory.mktemp("shipped")
    made = root / "maintainer" / "examples"
    made.mkdir(parents=True)
    for name in CLIPS:
        shutil.copy(ROOT / "examples" / name, made / name)
    argv = ["index", str(made), "--library", str(prebuilt.shipped_folder(made)), "--model", "tiny",
            "--device", "cpu", "--variant", VARIANT, "--caption-max-new-tokens", "16"]  # fmt: skip
    assert cli.main(argv) == 0
    space_examples = root / "space" / "examples"
    space_examples.parent.mkdir()
    made.rename(space_examples)
    return {"examples": space_examples, "root": root}


def items(examples: Path) -> list[Item]:
    return [Item(id=n, video=n, path=str((examples / n).resolve()), query=None) for n in CLIPS]


def never(todo: list[index.Pending]) -> Iterator[tuple[index.Pending, dict[str, Any]]]:
    assert not todo, f"captioned again: {[j.item.id for j in todo]}"
    return iter(())


def test_a_matching_shipped_library_is_found_and_loaded_without_captioning(
    built: dict[str, Path], settings: Settings
) -> None:
    folder = prebuilt.shipped_folder(built["examples"])
    assert prebuilt.check(ROOT / "examples", settings, VARIANT).found is False  # none committed here
    dest = built["root"] / "app-library"
    found = prebuilt.install(folder, dest, settings, VARIANT)
    assert found.found and found.matches and found.loaded and found.reported == []
    assert found.sentence() == "The prebuilt library of the examples is used."
    store = Store(dest)
    try:
        store.check_setup(index.setup_fingerprint(settings, VARIANT))  # the app's own check passes
        summary = index.index(store, items(built["examples"]), never, prune_gone=True)
        assert sorted(summary.moved) == sorted(CLIPS) and not summary.added and not summary.failures
        assert {v["path"] for v in store.videos()} == {it.path for it in items(built["examples"])}
        assert store.counts() == (2, 2) and (dest / "thumbs").is_dir()
        # stage 1 over the shipped captions, no model: a search's own cost (two windows: each is searched)
        assert search_windows(store, "a blue square moves", settings) == 2
    finally:
        store.close()
    assert prebuilt.install(folder, dest, settings, VARIANT).loaded  # already there: not copied again


def test_a_shipped_library_that_changes_captions_is_refused(
    built: dict[str, Path], tmp_path: Path, settings: Settings
) -> None:
    folder = prebuilt.shipped_folder(built["examples"])
    longer = prebuilt.install(folder, tmp_path / "a", settings.with_(caption_max_new_tokens=32), VARIANT)
    assert longer.found and not longer.matches and not longer.loaded
    assert longer.refused == ["caption_max_new_tokens: 16 -> 32"]
    assert "settings that change captions (caption_max_new_tokens: 16 -> 32)" in longer.sentence()
    other = prebuilt.install(folder, tmp_path / "b", settings, "gptq")
    assert other.refused == ["variant: 'bf16' -> 'gptq'"] and not (tmp_path / "b" / DB_FILE).exists()


def test_a_library_built_on_a_gpu_is_loaded_with_its_differences_reported(
    built: dict[str, Path], tmp_path: Path, settings: Settings
) -> None:
    gpu_built = tmp_path / "gpu-built"
    shutil.copytree(prebuilt.shipped_folder(built["examples"]), gpu_built)
    with sqlite3.connect(gpu_built / DB_FILE) as db:  # as the maintainer's GPU run records it
        (raw,) = db.execute("SELECT value FROM meta WHERE key = 'setup'").fetchone()
        setup = json.loads(raw)
        setup["device"] = "cuda"
        setup["stack"].update(device="cuda", gated_deltanet="fla", gptq_kernels=["gptq_triton"])
        db.execute("UPDATE meta SET value = ? WHERE key = 'setup'", (json.dumps(setup),))
    found = prebuilt.install(gpu_built, tmp_path / "app", settings, VARIANT)
    assert found.loaded and not found.refused
    assert (
        "device: 'cuda' -> 'cpu'" in found.reported
        and "stack.gated_deltanet: 'fla' -> 'torch'" in found.reported
    )
    assert "built on another set-up" in found.sentence()


def test_costs_said_before_indexing_and_before_a_search(
    monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    monkeypatch.setattr(gpu_calls, "zero_gpu", lambda: True)
    monkeypatch.setattr(zerogpu_rules, "duration_factor", lambda card=None: 1.5)  # the Space's card
    durations = [5.0, 70.1, 46.9]  # windows of 60 s: 1 + 2 + 1
    line = cost.index_cost_line(durations, settings)
    four = cost.gpu_cost("caption", 4, settings)
    assert "indexes the 3 example clips first, which makes 4 GPU calls of up to" in line
    assert f"each needs {four.start_s} s of a visitor's daily GPU quota left to start" in line
    short = f"its last call starts only if the 3 calls before it are charged at most {120 - four.start_s} s"
    assert (short in line) == (four.needs_s > 120)
    find = cost.gpu_cost("find", 3, settings)
    assert cost.search_cost_line(3, settings).startswith(
        f"This search, find in 3 windows, makes 3 GPU calls of up to {find.each_s} s each: "
        f"each needs {find.start_s} s"
    )
