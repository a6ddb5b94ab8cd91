"""Credits of the example clips, kept in ``examples/examples.json`` so a clip and its credit stay together."""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marlin_demo.settings import EXAMPLES_DIR
from marlin_demo.ui.context import UIContext

CREDITS_HEADING = "## Example clips: credits"


def credit_text(example: Mapping[str, Any]) -> str:
    """``Title: author. Source. License. Changes: ...`` (plain text), or "" without a credit."""
    credit = example.get("credit")
    if not isinstance(credit, Mapping):
        return ""
    parts = [str(credit.get(k) or "").strip() for k in ("author", "source", "license")]
    text = ". ".join(p.rstrip(".") for p in parts if p)
    changes = str(credit.get("changes") or "").strip()
    if changes:
        text += f". Changes: {changes}"
    return f"{example.get('title') or example['video']}: {text}."


def credit_line(ctx: UIContext, video: str | None) -> str:
    """The credit of the example this clip is, as a small HTML line; "" for an upload."""
    example = ctx.ground_truth(video)
    text = credit_text(example) if example else ""
    return f'<div class="mf-credit">Clip credit: {html.escape(text)}</div>' if text else ""


def _bold_title(example: Mapping[str, Any]) -> str:
    text = credit_text(example)
    title = str(example.get("title") or example["video"])
    return f"**{title}**{text[len(title) :]}" if text.startswith(title + ":") else text


def credits_markdown(examples: Sequence[Mapping[str, Any]], examples_dir: Path = EXAMPLES_DIR) -> str:
    """The About tab's list: every example's credit, real footage first (the file's order)."""
    rows = [f"- {_bold_title(e)}" for e in examples if e.get("set") != "rendered" and credit_text(e)]
    rendered = [e for e in examples if e.get("set") == "rendered"]
    if rendered:
        names = ", ".join(f"`{e['video']}`" for e in rendered)
        rows.append(f"- {names}: drawn for this project by `examples/render_examples.py`.")
    if not rows:
        return ""
    listed, url = "\n".join(rows), attribution_url(examples_dir)
    return f"{CREDITS_HEADING}\n{listed}\n\nAlso in [examples/ATTRIBUTION.md]({url}).\n"


def attribution_url(examples_dir: Path) -> str:
    """ATTRIBUTION.md: the Space's file page on a Space, else the app's own served copy."""
    space = os.environ.get("SPACE_ID")
    if space:
        return f"https://huggingface.co/spaces/{space}/blob/main/examples/ATTRIBUTION.md"
    return f"/gradio_api/file={(examples_dir / 'ATTRIBUTION.md').resolve()}"
