"""Shared fixtures: where the real test media and the rendered examples live."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MEDIA_DIR = ROOT.parent / "shared" / "media"  # ../shared/media, never copied into the repo
EXAMPLES_DIR = ROOT / "examples"


@pytest.fixture(scope="session")
def media_dir() -> Path:
    """The shared real-video folder; skips the test when it is absent."""
    if not MEDIA_DIR.is_dir():
        pytest.skip(f"test media folder {MEDIA_DIR} is absent")
    return MEDIA_DIR


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """The committed example clips and examples.json."""
    return EXAMPLES_DIR
