"""One item -> one row, in a local loop or on Ray Data: an actor pool of ``BatchWorker`` (a loaded variant
each) on ``library.cluster``'s runtime (as ``index --ray``), each row written by the local writer."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from marlin_demo.library.cluster import rows_on_ray
from marlin_demo.library.inputs import Item, failure
from marlin_demo.tasks import get_task


def run_item(engine: Any, item: Item, task: str, variant: str) -> dict[str, Any]:
    """The API's caption/find JSON plus id, video, task, status (and error, reason) and duration_s."""
    from marlin_demo import service  # the one request path (imported late: the CLI's --help stays fast)

    row: dict[str, Any] = {"id": item.id, "video": item.video, "task": task}
    asks = get_task(task).query
    try:
        query = item.query if asks else None
        result = service.run(engine, task, item.path, variant, query, start_s=item.start, end_s=item.end)
    except Exception as exc:
        reason, sentence = failure(exc)
        row.update(status="error", reason=reason, error=sentence, variant=variant)
        if asks:
            row["query"] = item.query
        return row
    row["status"] = "ok"
    row.update(result.to_dict())
    row["duration_s"] = round(float(result.info.duration_s), 3)
    return row


def record(row: dict[str, Any], writer: Any, bar: Any) -> None:
    """Write one row (on disk before the next starts) and move the progress bar; a failure's line too."""
    writer.write(row)
    if row["status"] == "error":
        bar.write(f"{row['id']}: {row['error']}", file=sys.stderr)
    bar.update(1)


def run_local(engine: Any, items: list[Item], task: str, variant: str, writer: Any, bar: Any) -> None:
    """One process, items in order."""
    for item in items:
        record(run_item(engine, item, task, variant), writer, bar)


class BatchWorker:
    """A Ray Data callable class: the engine and its variant load once per actor."""

    def __init__(self, settings: Any, task: str, variant: str) -> None:
        from marlin_demo.engine import Engine

        self.engine = Engine(settings)
        self.engine.load(variant)
        self.task, self.variant = task, variant

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        # each item crosses as JSON text, as its row comes back: Arrow never retypes a missing query or end
        rows = [
            json.dumps(
                run_item(self.engine, Item(**json.loads(str(text))), self.task, self.variant),
                ensure_ascii=False,
            )
            for text in batch["item"]
        ]
        return {"row": np.array(rows, dtype=object)}


def run_ray(
    settings: Any,
    items: list[Item],
    task: str,
    variant: str,
    writer: Any,
    bar: Any,
    address: str | None,
    workers: int,
    gpus_per_worker: float | None,
) -> None:
    records = [{"item": json.dumps(dataclasses.asdict(i))} for i in items]
    kwargs = {"settings": settings, "task": task, "variant": variant}
    for row in rows_on_ray(BatchWorker, kwargs, records, address, workers, gpus_per_worker):
        record(row, writer, bar)
