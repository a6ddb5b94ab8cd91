"""The rule that sizes a ZeroGPU call (``capacity.gpu_call_s``): one caption window's call fits a whole day
of a visitor who is not signed in, with the card's factor, and still covers the longest window measured."""

from __future__ import annotations

import pytest

from marlin_demo import settings as settings_mod
from marlin_demo.service import capacity, gpu_calls, zerogpu_rules
from marlin_demo.tasks import TASKS, get_task

ON_SPACE = settings_mod.from_env({"SPACE_ID": "owner/space"})
H200 = capacity.speeds()["h200"]


def largest_factor() -> float:
    """The largest factor ``spaces`` may multiply a call by: its table's rows, or the documented fallback."""
    rows = zerogpu_rules.spaces_card_table() or []
    return max(
        [zerogpu_rules.facts()["duration_factor"]["fallback"], *(float(r["duration_factor"]) for r in rows)]
    )


@pytest.mark.parametrize("task", list(TASKS))
def test_one_window_call_fits_an_unsigned_day_and_is_never_cut_short(task: str) -> None:
    asked = capacity.gpu_call_s(task, ON_SPACE, H200)  # type: ignore[arg-type]
    assert asked == gpu_calls.call_seconds(task, ON_SPACE)  # type: ignore[arg-type]  # what the Space asks
    day = zerogpu_rules.daily_quota_s("unauthenticated")
    assert capacity.charged_s(asked, largest_factor()) <= day  # the whole day holds one window's call
    assert capacity.call_fits_day(task, ON_SPACE, H200, largest_factor())  # type: ignore[arg-type]
    # the longest window at the slowest measured decode: overhead, prefill, every token the task allows
    worst = H200.overhead_s + H200.prefill_s + get_task(task).tokens(ON_SPACE) / H200.decode_tokens_per_s  # type: ignore[arg-type]
    assert asked >= capacity.GPU_MARGIN * worst and capacity.GPU_MARGIN > 1


def test_settings_that_break_the_rule_are_refused_on_zero_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zerogpu_rules, "duration_factor", lambda card=None: 1.5)  # the Space's card
    greedy = ON_SPACE.with_(caption_max_new_tokens=1200)
    (found,) = capacity.conflicts(greedy, "cuda", zero_gpu=True)
    assert "MARLIN_CAPTION_MAX_NEW_TOKENS=1200" in found and "(120 s)" in found
    most = int(found.rsplit("at most ", 1)[1].rstrip("."))
    assert 768 <= most < 1200
    assert capacity.conflicts(ON_SPACE.with_(caption_max_new_tokens=most), "cuda", zero_gpu=True) == []
    assert capacity.conflicts(ON_SPACE.with_(caption_max_new_tokens=most + 1), "cuda", zero_gpu=True)
    assert capacity.conflicts(greedy, "cuda", zero_gpu=False) == []  # no ZeroGPU call off a Space
