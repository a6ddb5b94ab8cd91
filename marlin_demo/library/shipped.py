"""The Space's prebuilt library of its example clips: shipped beside them, loaded when it matches.

Indexing the twelve examples costs every one of their caption windows, more than a visitor's whole day
of ZeroGPU, so the Space ships the library a maintainer built with ``index`` on a GPU
(``<examples>/library``, docs/LIBRARY.md). It is loaded when the fields that change the captions it
holds match the running app (``MUST_MATCH``: the model and its revisions, the variant, the caption token
limit and window, the video decoder); every other difference (device, kernels, compute type, compile)
is reported, not refused, since the same model and settings answer the same on another machine up to
rounding. Loading copies it into the app's own library folder and records the running set-up there, so
the usual index run (``index.index``) finds every example already captioned and only updates its paths.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marlin_demo.library import index
from marlin_demo.library.database import DB_FILE, THUMBS_DIR, LibraryError, Store
from marlin_demo.settings import Settings, Variant

#: where a checkout ships the prebuilt library: this folder inside the examples folder
SHIPPED_DIR = "library"

#: the set-up fields (``index.setup_fingerprint``) that change the captions a library holds: all must match
MUST_MATCH = tuple(
    "model bf16_id gptq_id revision gptq_revision variant task "
    "caption_max_new_tokens caption_window_s video_backend".split()
)


@dataclass
class ShippedCheck:
    """What became of the shipped library: ``found`` at ``folder``; ``refused``: the differences that
    change captions (not loaded); ``reported``: the others (loaded all the same); ``loaded``: installed."""

    folder: Path
    found: bool = False
    refused: list[str] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)
    loaded: bool = False

    @property
    def matches(self) -> bool:
        return self.found and not self.refused

    def sentence(self) -> str:
        """One sentence for the page and the log."""
        if not self.found:
            return "No prebuilt library of the examples ships with this app."
        if self.refused:
            return (
                "The prebuilt library of the examples was built with settings that change captions "
                f"({'; '.join(self.refused)}), so it is not used."
            )
        elsewhere = f" (built on another set-up: {'; '.join(self.reported)})" if self.reported else ""
        return f"The prebuilt library of the examples is used{elsewhere}."


def shipped_folder(examples_dir: str | Path) -> Path:
    """Where the shipped library lies: ``<examples>/library``."""
    return Path(examples_dir) / SHIPPED_DIR


def _differences(built: dict[str, Any], here: dict[str, Any], prefix: str = "") -> list[str]:
    """``name: built -> here`` for every field that differs (nested blocks, such as ``stack``, by field)."""
    out = []
    for name in sorted(set(built) | set(here)):
        a, b = built.get(name), here.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{name}.")
        elif a != b:
            out.append(f"{prefix}{name}: {a!r} -> {b!r}")
    return out


def check(folder: Path, settings: Settings, variant: Variant) -> ShippedCheck:
    """Compare the library at ``folder`` with the running set-up (``index.setup_fingerprint``)."""
    out = ShippedCheck(folder)
    if not (folder / DB_FILE).is_file():
        return out
    try:
        store = Store(folder, create=False)
    except LibraryError:
        return out
    try:
        built = store.meta().get("setup") or {}
    finally:
        store.close()
    out.found = True
    here = index.setup_fingerprint(settings, variant)
    for diff in _differences(built, here):
        (out.refused if diff.split(":", 1)[0] in MUST_MATCH else out.reported).append(diff)
    return out


def install(shipped: Path, dest: Path, settings: Settings, variant: Variant) -> ShippedCheck:
    """Load the shipped library into ``dest`` (the app's own library folder) when it matches and ``dest``
    holds no library yet: the database copied (SQLite's backup), the thumbnails with it, and the running
    set-up recorded as its ``setup`` (the one it was built with kept as ``shipped``). ``dest`` holding a
    library already: nothing is copied (``loaded`` says whether it came from the shipped one)."""
    found = check(shipped, settings, variant)
    if not found.matches:
        return found
    if (dest / DB_FILE).exists():
        store = Store(dest, create=False)
        try:
            found.loaded = "shipped" in store.meta()
        finally:
            store.close()
        return found
    dest.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(shipped / DB_FILE) as src, sqlite3.connect(dest / DB_FILE) as dst:
        src.backup(dst)
    if (shipped / THUMBS_DIR).is_dir():
        shutil.copytree(shipped / THUMBS_DIR, dest / THUMBS_DIR, dirs_exist_ok=True)
    store = Store(dest, create=False)
    try:
        built = store.meta().get("setup")
        with store.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('setup', ?), ('shipped', ?)",
                (
                    json.dumps(index.setup_fingerprint(settings, variant)),
                    json.dumps({"setup": built, "reported": found.reported, "from": str(shipped)}),
                ),
            )
    finally:
        store.close()
    found.loaded = True
    return found
