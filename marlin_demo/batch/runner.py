"""One item -> one row, and the local loop. The Ray workers call the same ``run_item``."""

from __future__ import annotations

import sys
from typing import Any

from marlin_demo.batch.inputs import Item


def failure(exc: BaseException) -> tuple[str, str]:
    """(reason, sentence): the sentence is what the CLI prints; the reason groups the summary."""
    from marlin_demo.models import ModelLoadError
    from marlin_demo.video import VideoError

    msg = str(exc)
    if isinstance(exc, ModelLoadError):
        return "model_load", msg
    if "time limit" in msg:
        return "timeout", msg
    if "Out of GPU memory" in msg:
        return "out_of_memory", msg
    if isinstance(exc, VideoError):
        if "at most" in msg:
            return "over_limit", msg
        if "could not be decoded" in msg:
            return "undecodable", msg
        return "not_a_video", msg
    if isinstance(exc, ValueError):
        return "bad_input", msg
    first = msg.strip().splitlines()[0][:300] if msg.strip() else ""
    return "model_error", f"The model failed on this video ({type(exc).__name__}: {first})."


def run_item(engine: Any, item: Item, task: str, variant: str) -> dict[str, Any]:
    """The API's caption/find JSON plus id, video, task, status (and error, reason) and duration_s."""
    from marlin_demo import service  # the one request path (imported late: the CLI's --help stays fast)

    row: dict[str, Any] = {"id": item.id, "video": item.video, "task": task}
    try:
        result = service.run(engine, task, item.path, variant, item.query if task == "find" else None)
    except Exception as exc:
        reason, sentence = failure(exc)
        row.update(status="error", reason=reason, error=sentence, variant=variant)
        if task == "find":
            row["query"] = item.query
        return row
    row["status"] = "ok"
    row.update(result.to_dict())
    row["duration_s"] = round(float(result.info.duration_s), 3)
    return row


def run_local(engine: Any, items: list[Item], task: str, variant: str, writer: Any, bar: Any) -> None:
    """One process, items in order; each row is on disk before the next starts."""
    for item in items:
        row = run_item(engine, item, task, variant)
        writer.write(row)
        if row["status"] == "error":
            bar.write(f"{item.id}: {row['error']}", file=sys.stderr)
        bar.update(1)
