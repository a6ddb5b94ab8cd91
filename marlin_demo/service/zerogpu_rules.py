"""What ZeroGPU allows, as facts with their sources (``zerogpu.json``; ``gpu_calls`` makes the
calls): the per-card duration factor changes with ``spaces`` releases, so :func:`duration_factor` reads the
installed one."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from dataclasses import dataclass
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
    for folder in (spec and spec.submodule_search_locations) or []:
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
        for info in sorted(NVIDIA_GPUS.glob("*/information")):
            for line in info.read_text().splitlines():
                if line.startswith("Model:"):
                    return line.split("Model:", 1)[1].strip()
    except OSError:
        return None
    return None


def duration_factor(card: str | None = None) -> float:
    """The factor ``spaces`` multiplies a call's duration by on ``card`` (None: this machine's); without
    ``spaces``, the largest the docs name, so an estimate never asks for less than is charged."""
    table = spaces_card_table()
    if table is None:
        return float(facts()["duration_factor"]["fallback"])
    wanted = card if card is not None else _this_card()
    return float(next((row for row in table if row.get("model") == wanted), table[0])["duration_factor"])


# ---------------------------------------------------------------------------------------------- refusals


@dataclass(frozen=True)
class Refusal:
    """A ZeroGPU call that ``spaces`` refused or stopped: which case (a key of ``zerogpu.json``'s
    ``refusals``), the tier its message names, and the seconds and wait it says when it says them."""

    kind: str
    tier: str = ""  # over_quota: "free", "pro" or "" (a visitor who is not signed in)
    requested_s: int | None = None  # the call's duration times the card's factor: what it needs left to start
    left_s: int | None = None
    wait: str = ""  # "13:12:05", as spaces writes it (``wait_words`` says it)


def read_refusal(exc: BaseException) -> Refusal | None:
    """The refusal in an exception ``spaces`` raised (None: any other), read by its text (no ``gradio``)."""
    title = str(getattr(exc, "title", "") or "")
    message = str(getattr(exc, "message", "") or exc)
    for kind, fact in facts()["refusals"].items():
        if not isinstance(fact, dict):
            continue
        found = re.search(fact["pattern"], message)
        # the words of one case under another's title are not spaces' refusal
        if found is None or (title not in ("", "Error") and title != fact["title"]):
            continue
        got = found.groupdict()
        return Refusal(
            kind=kind,
            tier=(got.get("tier") or "").strip().lower(),
            requested_s=int(got["requested"]) if got.get("requested") else None,
            left_s=int(got["left"]) if got.get("left") else None,
            wait=(got.get("wait") or "").strip(),
        )
    return None


def duration_words(seconds: float) -> str:
    """12 -> "12 s", 130 -> "2 min 10 s", 7300 -> "2 h 1 min": as a visitor reads a wait or a quota."""
    s = max(1, round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 and s < 600 else "")
    return f"{s // 3600} h {s % 3600 // 60} min"


def wait_words(wait: str) -> str:
    """``spaces``' wait (a ``timedelta`` as text: "13:12:05", "1 day, 2:03:04") as a visitor reads a
    wait: "13 h 12 min" (a clock time it is not); the text as it is when it is not one."""
    found = re.fullmatch(r"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d)(?:\.\d+)?", wait.strip())
    if found is None:
        return wait
    days, hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return duration_words(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _fits_now(refusal: Refusal, asked_s: int | None) -> int | None:
    """The longest call that could start with what ``spaces`` said is left (its factor read from the refused
    call's request and duration); None where it did not say."""
    if refusal.left_s is None or not refusal.requested_s or not asked_s:
        return None
    return int(refusal.left_s * asked_s / refusal.requested_s)


def refusal_sentence(refusal: Refusal, asked_s: int | None = None, smallest_s: int | None = None) -> str:
    """The one sentence a visitor reads: what ZeroGPU did to this call, what was left, and what fits now (a
    call of ``smallest_s`` that would start means a smaller one still runs today)."""
    day, free = duration_words(daily_quota_s("unauthenticated")), duration_words(daily_quota_s("free"))
    sign_in = f"sign in to Hugging Face ({free} of GPU a day with a free account, {day} without)"
    smallest = f"the smallest call this Space makes asks {smallest_s} s" if smallest_s else ""
    if refusal.kind == "over_quota":
        who = {"free": "your free account's", "pro": "your PRO account's"}.get(refusal.tier, "your")
        need = f"it needs {refusal.requested_s} s of {who} daily GPU quota left to start"
        if asked_s and refusal.requested_s and refusal.requested_s != asked_s:
            need += f" ({asked_s} s times this card's factor)"
        fits = _fits_now(refusal, asked_s)
        if fits is not None and smallest_s and fits >= smallest_s:  # what is left still starts a smaller call
            now = f"a call of up to {fits} s can still start now ({smallest}), charged only the time it uses"
        else:
            wait = f"ZeroGPU says try again in {wait_words(refusal.wait)}" if refusal.wait else ""
            wait = wait or "try again later"
            now = wait if refusal.tier else f"{wait}, or {sign_in}"
        return f"ZeroGPU refused the next GPU call: {need}, and {refusal.left_s} s are left; {now}."
    asked = f"its {refusal.requested_s} s are" if refusal.requested_s else "it asks for"
    size = f" of {asked_s} s" if asked_s else ""
    smaller = f"; a smaller call may still start ({smallest})" if smallest else ""
    return {
        "runs_limit": "ZeroGPU refused the next GPU call: you have used up your GPU runs for now; "
        f"try again later, or {sign_in}.",
        "space_limit": f"ZeroGPU refused the next GPU call{size}: without a signed-in visitor (no visitor "
        "token came with the request) it draws on what ZeroGPU allows this Space for such calls, which has "
        f"too little left for it{smaller}; {sign_in} and run it again.",
        "over_maximum": f"ZeroGPU refused the GPU call: {asked} more than one call may have for you; "
        f"{sign_in} for a larger limit, or try again later.",
        "pending_credits": "ZeroGPU refused the GPU call: too many of your GPU credits are held by tasks "
        "still running; try again once they have finished.",
        "queue_timeout": f"ZeroGPU had no free GPU for this call within 60 s; try again in a moment, or "
        f"{sign_in} for a higher place in its queue.",
    }.get(
        refusal.kind,
        "ZeroGPU stopped the GPU call: it ran past the seconds this Space sized it for; try again, and tell "
        "the Space's owner if it happens again.",
    )
