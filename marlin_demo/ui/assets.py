"""The page's CSS and scripts, in files beside this module: linted and checked as what they are."""

from pathlib import Path

HERE = Path(__file__).parent


def asset(name: str) -> str:
    """The text of one of the page's files (shipped as package data)."""
    return (HERE / name).read_text(encoding="utf-8")
