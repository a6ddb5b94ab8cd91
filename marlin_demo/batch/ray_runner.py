"""The same rows on Ray Data: an actor pool of ``BatchWorker`` (one loaded variant each) on the runtime
and pool of ``library.cluster`` (``index --ray`` uses the same), each row written by the local writer."""

from __future__ import annotations

import dataclasses
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
