"""The Space's prebuilt library of its example clips, shipped in the repo (``app_library`` holds
the index a page searches, which may start from it): loaded when the settings that change captions match,
since indexing them would cost more ZeroGPU than a visitor's day (docs/LIBRARY.md, "The shipped
library")."""

from __future__ import annotations

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
    try:  # no library there: nothing found
        with Store(folder, create=False) as store:
            built = store.meta().get("setup") or {}
    except LibraryError:
        return out
    out.found = True
    here = index.setup_fingerprint(settings, variant)
    for diff in _differences(built, here):
        (out.refused if diff.split(":", 1)[0] in MUST_MATCH else out.reported).append(diff)
    return out


def install(shipped: Path, dest: Path, settings: Settings, variant: Variant) -> ShippedCheck:
    """Copy the shipped library into ``dest`` (the app's library folder) when it matches and ``dest`` holds
    none yet, recording the running set-up (docs/LIBRARY.md); ``loaded``: whether ``dest``'s came from it."""
    found = check(shipped, settings, variant)
    if not found.matches:
        return found
    if (dest / DB_FILE).exists():
        with Store(dest, create=False) as store:
            found.loaded = "shipped" in store.meta()
        return found
    dest.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(shipped / DB_FILE) as src, sqlite3.connect(dest / DB_FILE) as dst:
        src.backup(dst)
    if (shipped / THUMBS_DIR).is_dir():
        shutil.copytree(shipped / THUMBS_DIR, dest / THUMBS_DIR, dirs_exist_ok=True)
    with Store(dest, create=False) as store:
        shipped_from = {"setup": store.meta().get("setup"), "reported": found.reported, "from": str(shipped)}
        store.set_meta(setup=index.setup_fingerprint(settings, variant), shipped=shipped_from)
    found.loaded = True
    return found
