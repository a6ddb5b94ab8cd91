"""``python -m marlin_demo bench``: speed, memory and quality of the variants on a data folder.

Every finished request is appended to ``OUT/requests.jsonl`` at once (an interrupted run resumes),
and the aggregate files are recomputed from those records, scores included, at the end of every
run, so they always follow ``marlin_demo.metrics``. How to run it and what each figure means:
``docs/BENCHMARK.md``; its modules in the order a run uses them: docs/DESIGN.md.
"""

from __future__ import annotations

from marlin_demo.bench.aggregate import aggregate, stats
from marlin_demo.bench.cli import register
from marlin_demo.bench.matrix import DEFAULT_DATA
from marlin_demo.bench.quality import quality_rows
from marlin_demo.out_folder import append_jsonl, read_jsonl

__all__ = ["DEFAULT_DATA", "aggregate", "append_jsonl", "quality_rows", "read_jsonl", "register", "stats"]
