"""What the benchmark keeps and reports about long videos (pure: no torch), kept apart so the
hooks in ``bench.measure``, ``bench.quality`` and ``bench.aggregate`` stay a few lines. Scores with
several true spans per query are ``metrics.moment_scores``.
"""

from __future__ import annotations

from typing import Any

WINDOW_COST_KEYS = ("windows", "latency_per_window_s", "decode_per_window_s")


def window_cost(record: dict[str, Any]) -> dict[str, float | None]:
    """Windows answered, and the request's latency and video read + sample time divided by them.

    (The bench's engine keeps no prefix cache, so there is no prefill time to divide.)
    """
    n = max(1, int(record.get("windows") or 1))
    latency = (record.get("metrics") or {}).get("latency_s")
    decode = record.get("decode_s")
    return {
        "windows": float(n),
        "latency_per_window_s": None if latency is None else float(latency) / n,
        "decode_per_window_s": None if decode is None else float(decode) / n,
    }
