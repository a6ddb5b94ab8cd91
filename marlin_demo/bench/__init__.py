"""``python -m marlin_demo bench``: speed, memory and quality of the variants on a data folder.

Reproduces the seed GPTQ card's comparison (latency per request, peak
allocated VRAM, accuracy retention, caption score, keyword coverage) and adds
the figures the card leaves out. How to run it and what each figure means:
``docs/BENCHMARK.md``.

Flow: variants run one after another (load, one uncounted warm-up request,
``repeats`` passes over the data, unload). Every finished request is appended
to ``OUT/requests.jsonl`` at once, so an interrupted run resumes where it
stopped; the aggregate files (results.json/.csv, summary.md, plots) are
recomputed from those records at the end of every run. Scores are computed
from the stored answers, never stored themselves, so they always follow
``marlin_demo.metrics``.

The modules, in the order a run uses them:

- ``plan``: the requests of a run (``Request``, ``plan_requests``) and its defaults;
- ``environment``: machine, packages and the run's fingerprint (a resume must match it);
- ``records``: ``requests.jsonl`` / ``variants.jsonl`` / ``run.json`` in ``--out``;
- ``runner``: one variant at a time (load, warm-up, requests through ``service``, unload);
- ``quality``: scores against the ground truth, agreement, retention;
- ``aggregate``: records -> every figure of ``results.json`` (speed, quality, per set);
- ``report``: ``results.json``, ``results.csv``, ``summary.md``; ``plots``: the PNGs;
- ``cli``: the ``bench`` command.
"""

from __future__ import annotations

from marlin_demo.bench.aggregate import aggregate, by_set, speed, stats
from marlin_demo.bench.cli import cmd_bench, parse_list, register
from marlin_demo.bench.environment import (
    FINGERPRINT_FIELDS,
    SETTINGS_FLAGS,
    environment,
    fingerprint,
    stack_fingerprint,
)
from marlin_demo.bench.matrix import (
    DEFAULT_DATA,
    DEFAULT_OUT,
    DEFAULT_REPEATS,
    DEFAULT_VARIANTS,
    SCHEMA,
    BenchError,
    Request,
    plan_requests,
    record_key,
)
from marlin_demo.bench.measure import bench_variant, preimport_backends, run_request
from marlin_demo.bench.plots import write_plots
from marlin_demo.bench.quality import QUALITY_ROWS, agreement, quality, retention
from marlin_demo.bench.records import (
    REQUESTS_FILE,
    RESULT_FILES,
    RUN_FILE,
    VARIANTS_FILE,
    append_jsonl,
    prepare_out,
    read_jsonl,
)
from marlin_demo.bench.report import render_summary, write_csv, write_outputs
from marlin_demo.tasks import TASKS

__all__ = [
    "DEFAULT_DATA",
    "DEFAULT_OUT",
    "DEFAULT_REPEATS",
    "DEFAULT_VARIANTS",
    "FINGERPRINT_FIELDS",
    "QUALITY_ROWS",
    "REQUESTS_FILE",
    "RESULT_FILES",
    "RUN_FILE",
    "SCHEMA",
    "SETTINGS_FLAGS",
    "TASKS",
    "VARIANTS_FILE",
    "BenchError",
    "Request",
    "aggregate",
    "agreement",
    "append_jsonl",
    "bench_variant",
    "by_set",
    "cmd_bench",
    "environment",
    "fingerprint",
    "parse_list",
    "plan_requests",
    "preimport_backends",
    "prepare_out",
    "quality",
    "read_jsonl",
    "record_key",
    "register",
    "render_summary",
    "retention",
    "run_request",
    "speed",
    "stack_fingerprint",
    "stats",
    "write_csv",
    "write_outputs",
    "write_plots",
]
