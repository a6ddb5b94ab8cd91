"""What ZeroGPU allows, in one place: its Pythons, its torch releases, its GPU sizes, quotas and refusals.

The facts live in ``zerogpu.json`` beside this module, with their source (Hugging Face's ZeroGPU page,
hub-docs ``docs/hub/spaces-zerogpu.md`` as of 2026-08, and ``spaces`` 0.51). The Space's configuration
is checked against them (``tests/test_space_env.py``: the README front matter and ``requirements.txt``),
and the start-up refuses what ZeroGPU refuses (``startup.check_limits``). One fact is never copied here:
the per-card factor ``spaces`` multiplies a call's requested duration by, which changes with ``spaces``
releases; :func:`duration_factor` reads it from the installed ``spaces`` package at run time.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

FACTS_FILE = Path(__file__).with_name("zerogpu.json")

#: where ``spaces`` keeps its per-card table (``spaces/zero/configs.json``, read by ``spaces.zero.config``)
SPACES_CONFIGS = ("zero", "configs.json")

#: where the NVIDIA driver names the card (``spaces.zero.config`` reads the same files)
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


@functools.cache
def facts() -> dict[str, Any]:
    """The ZeroGPU facts (``zerogpu.json``): python_versions, torch_versions, sizes, daily_quota_s..."""
    return json.loads(FACTS_FILE.read_text())  # type: ignore[no-any-return]


def daily_quota_s(tier: str) -> int:
    """A visitor's daily GPU seconds: tier ``unauthenticated``, ``free`` or ``pro``."""
    return int(facts()["daily_quota_s"][tier])


def spaces_card_table() -> list[dict[str, Any]] | None:
    """``spaces``' per-card table (model, memory, duration_factor...), read without importing ``spaces``
    (its import patches gradio and torch); None when ``spaces`` is not installed or has no table."""
    spec = importlib.util.find_spec("spaces")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder).joinpath(*SPACES_CONFIGS)
        if path.is_file():
            try:
                table = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            return table if isinstance(table, list) and table else None
    return None


def _this_card() -> str | None:
    """The GPU model the driver reports ("Model: ..." in /proc/driver/nvidia/gpus/*/information)."""
    try:
        for folder in sorted(NVIDIA_GPUS.iterdir()):
            info = folder / "information"
            if info.is_file():
                for line in info.read_text().splitlines():
                    if line.startswith("Model:"):
                        return line.split("Model:", 1)[1].strip()
    except OSError:
        return None
    return None


def duration_factor(card: str | None = None) -> float:
    """The factor ``spaces`` multiplies a call's requested duration by on ``card`` (this machine's card
    when None), read from the installed ``spaces`` as it reads it: the card's row of its table, else the
    table's first row (its default). Without ``spaces`` or its table: ``zerogpu.json``'s fallback, the
    largest factor the docs name, so an estimate never asks for less than the call is charged."""
    table = spaces_card_table()
    if table is None:
        return float(facts()["duration_factor"]["fallback"])
    wanted = card if card is not None else _this_card()
    for row in table:
        if row.get("model") == wanted:
            return float(row["duration_factor"])
    return float(table[0]["duration_factor"])
