"""Ray Data for ``batch --ray``/``index --ray``: one actor pool, the driver alone writing (docs/BATCH.md)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def add_arguments(p: argparse.ArgumentParser, verb: str) -> None:
    """``--ray``, ``--workers`` and ``--gpus-per-worker``: one meaning for every collection command."""
    ray_help = f"{verb} on Ray Data: a loopback-only local runtime, or join the cluster at ADDRESS"
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS", help=ray_help)
    workers_help = "Ray actors, each holding one loaded variant (default 1)"
    p.add_argument("--workers", type=int, default=1, help=workers_help)
    gpus_help = "GPUs per Ray actor (default 1 when the cluster has GPUs, else 0; 0.5 = two per GPU)"
    p.add_argument("--gpus-per-worker", type=float, default=None, help=gpus_help)


def start(address: str | None, workers: int) -> None:
    """Join ``address``, or start a loopback-only runtime on this machine."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # node address 127.0.0.1, not a probed one
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


class EngineWorker:
    """A Ray Data callable class: one engine and variant per actor; each record crosses as JSON text and its
    row comes back as JSON text (Arrow would retype a missing query, start or end)."""

    def __init__(self, settings: Any, variant: str) -> None:
        from marlin_demo.engine import Engine

        self.engine = Engine(settings)
        self.engine.load(variant)
        self.variant = variant

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        """One record's row (the command's own)."""
        raise NotImplementedError

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        rows = [json.dumps(self.row(json.loads(str(text))), ensure_ascii=False) for text in batch["record"]]
        return {"row": np.array(rows, dtype=object)}


def rows_on_ray(
    worker: type[EngineWorker],
    worker_kwargs: dict[str, Any],
    records: list[dict[str, Any]],
    address: str | None,
    workers: int,
    gpus_per_worker: float | None,
) -> Iterator[dict[str, Any]]:
    """Each record through an actor pool of ``worker`` (a Ray Data callable returning ``{"row": json}``: Arrow
    never retypes JSON), one block per record so rows stream back as they finish; shut down at the end."""
    import ray

    start(address, workers)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        if gpus_per_worker is None:
            gpus_per_worker = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)) // workers) if not gpus_per_worker else 1
        items = [{"record": json.dumps(r)} for r in records]
        ds = ray.data.from_items(items, override_num_blocks=len(records)).map_batches(
            worker,
            fn_constructor_kwargs=worker_kwargs,
            batch_size=1,
            concurrency=workers,
            num_cpus=cpus,
            num_gpus=gpus_per_worker or None,
            batch_format="numpy",
        )
        for rec in ds.iter_rows():
            yield json.loads(rec["row"])
    finally:
        ray.shutdown()
