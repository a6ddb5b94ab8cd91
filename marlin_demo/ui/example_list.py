"""The examples as the tabs list them: their labels, what a click does, an example's kept answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from marlin_demo.ui import example_notes
from marlin_demo.ui.context import UIContext


def short_name(example: Mapping[str, Any]) -> str:
    """An example's clip name without extension or underscores, for example labels."""
    return str(example["video"]).rsplit(".", 1)[0].replace("_", " ")


#: what a click on an example does (the note under them), per ``MARLIN_CACHE_EXAMPLES``
EXAMPLE_TIMING = {
    "lazy": "the first click runs the model as Run does; later clicks show that answer at once",
    "eager": "answered at start-up, then shown at once; until then a click runs the model",
    "off": "each click runs the model",
}


def example_labels(labels: Sequence[str], limit: int = 60) -> list[str]:
    """Example labels cut at a word boundary (never mid-word), with an ellipsis when cut."""
    return [
        label if len(label) <= limit else label[: limit + 1].rsplit(" ", 1)[0].rstrip(' ·,;:“"') + "…"
        for label in labels
    ]


def kept_answer(
    ctx: UIContext, task: str, path: str, variant: str, query: str | None = None
) -> tuple[example_notes.Key | None, example_notes.Kept | None]:
    """An example clip's answer key (None for an upload, or examples not kept) and its kept answer."""
    example = None if ctx.cache_mode == "off" else ctx.ground_truth(path)
    if example is None:
        return None, None
    key = ctx.answers.key(task, example, variant, query)
    return key, ctx.answers.get(key)
