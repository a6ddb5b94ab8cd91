"""``python -m marlin_demo bench``: speed, memory and quality of the variants on a data folder. Each request
is appended to ``OUT/requests.jsonl`` as it finishes (a run resumes) and the aggregates are recomputed from
those records every run, so they follow ``marlin_demo.metrics`` (docs/BENCHMARK.md, docs/DESIGN.md)."""

from __future__ import annotations

from marlin_demo.bench.aggregate import aggregate, quality_rows, stats
from marlin_demo.bench.cli import register
from marlin_demo.bench.matrix import DEFAULT_DATA
from marlin_demo.out_folder import append_jsonl, read_jsonl

__all__ = ["DEFAULT_DATA", "aggregate", "append_jsonl", "quality_rows", "read_jsonl", "register", "stats"]
