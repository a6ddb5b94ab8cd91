"""The same rows on Ray Data: a dataset of items, an actor pool of ``BatchWorker`` (one loaded variant each).

A local runtime binds only to loopback: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray take
127.0.0.1 as the node address instead of probing for a routable one, usage stats are off, no dashboard.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from marlin_demo.batch.inputs import Item
from marlin_demo.batch.runner import run_item

ROOT = Path(__file__).resolve().parents[2]


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
            )
            # JSON text, so Arrow never retypes the nested result: the driver writes it unchanged
            rows.append(json.dumps(run_item(self.engine, item, self.task, self.variant), ensure_ascii=False))
        return {"row": np.array(rows, dtype=object)}


def start(address: str | None, workers: int) -> None:
    """Join ``address``, or start a loopback-only runtime on this machine."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        path = os.environ.get("PYTHONPATH", "")
        if str(ROOT) not in path.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    import ray
    from ray._private import ray_constants

    if address is None:
        ray_constants.ENABLE_RAY_CLUSTER = False  # read at call time: effective even if ray was imported
        ray.init(
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            object_store_memory=128 * 2**20,
            num_cpus=max(workers, os.cpu_count() or 1),
            log_to_driver=False,
            configure_logging=False,
        )
    else:
        import marlin_demo

        ray.init(address=address, runtime_env={"py_modules": [marlin_demo]}, log_to_driver=False)


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
    import ray

    start(address, workers)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        if gpus_per_worker is None:
            gpus_per_worker = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)) // workers) if not gpus_per_worker else 1
        records = [{"id": i.id, "video": i.video, "path": i.path, "query": i.query} for i in items]
        ds = ray.data.from_items(records, override_num_blocks=len(records)).map_batches(
            BatchWorker,
            fn_constructor_kwargs={"settings": settings, "task": task, "variant": variant},
            batch_size=1,
            concurrency=workers,
            num_cpus=cpus,
            num_gpus=gpus_per_worker or None,
            batch_format="numpy",
        )
        for rec in ds.iter_rows():
            row = json.loads(rec["row"])
            writer.write(row)
            if row["status"] == "error":
                bar.write(f"{row['id']}: {row['error']}", file=sys.stderr)
            bar.update(1)
    finally:
        ray.shutdown()
