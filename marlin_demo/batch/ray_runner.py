"""The same rows on Ray Data: a dataset of items, an actor pool of ``BatchWorker`` (one loaded variant each).

The runtime and the pool are ``library.cluster``'s (``index --ray`` uses the same); this module holds
batch's worker and writes each row through the local writer.
"""

from __future__ import annotations

import json
from typing import Any

from marlin_demo.batch.rows import record, run_item
from marlin_demo.library.cluster import rows_on_ray
from marlin_demo.library.inputs import Item


class BatchWorker:
    """A Ray Data callable class: the engine and its variant load once per actor."""

    def __init__(self, settings: Any, task: str, variant: str) -> None:
        from marlin_demo.engine import Engine

        self.engine = Engine(settings)
        self.engine.load(variant)
        self.task, self.variant = task, variant

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        rows = []
        for i in range(len(batch["id"])):
            q = batch["query"][i]
            item = Item(
                id=str(batch["id"][i]),
                video=str(batch["video"][i]),
                path=str(batch["path"][i]),
                query=None if q is None or q != q else str(q),
                start=_seconds(batch["start"][i]) if "start" in batch else None,
                end=_seconds(batch["end"][i]) if "end" in batch else None,
            )
            # JSON text, so Arrow never retypes the nested result: the driver writes it unchanged
            rows.append(json.dumps(run_item(self.engine, item, self.task, self.variant), ensure_ascii=False))
        return {"row": np.array(rows, dtype=object)}


def _seconds(value: Any) -> float | None:
    """A range end as Arrow hands it back (None or NaN: not given)."""
    return None if value is None or value != value else float(value)


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
    records = [
        {"id": i.id, "video": i.video, "path": i.path, "query": i.query, "start": i.start, "end": i.end}
        for i in items
    ]
    kwargs = {"settings": settings, "task": task, "variant": variant}
    for row in rows_on_ray(BatchWorker, kwargs, records, address, workers, gpus_per_worker):
        record(row, writer, bar)
