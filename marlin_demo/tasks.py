"""The tasks Marlin answers, as data: one ``Task`` entry per task, in one registry.

Layers read a task's entry instead of comparing its name; the result type is the key they keep their
own per-task part under, so a new task that answers like caption (events) or find (a span) is one
``register_task`` call. Pure data: nothing here imports torch or any layer above ``results``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from marlin_demo import contract
from marlin_demo.results import CaptionResult, FindResult
from marlin_demo.settings import Settings

#: a parsed answer: a caption's scene and events, or a find's span
Parse = contract.CaptionParse | contract.SpanParse


@dataclass(frozen=True)
class Task:
    """One task: everything a layer reads instead of comparing the task's name."""

    name: str
    #: one line saying what it answers (the CLI's help)
    help: str
    #: the exact prompt, given the cleaned query ('' for a task that takes none)
    prompt: Callable[[str], str]
    #: the model's raw text -> its parse (``contract.parse_caption`` / ``parse_span``)
    parse: Callable[[str], Any]
    #: (parse, the clip's duration) -> the parse repaired, its notes saying how
    repair: Callable[[Any, float | None], Any]
    #: what one answer is: a timeline of events (merged across windows) or a span (moments across windows)
    result: type[CaptionResult] | type[FindResult]
    #: the ``Settings`` field of its answer's token limit (what sizes a window's time and GPU call)
    max_new_tokens: str
    #: the ``Settings`` field of its window length: a longer video is answered window by window
    window_s: str
    #: the ``Settings`` field of the overlap of consecutive windows (None: windows do not overlap)
    overlap_s: str | None = None
    #: whether a request names what to look for (a query, cleaned by ``contract.sanitize_query``)
    query: bool = False
    #: how a line names one request ("a caption of this clip takes ...")
    noun: str = ""
    #: how the limits line names its requests ("captions up to 30 min")
    plural: str = ""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # pickled by name (ZeroGPU pickles a GPU call's arguments): its functions are lambdas
        return get_task, (self.name,)

    @property
    def scored(self) -> bool:
        """An answer that is a span is scored by the model's own token probabilities (its moments)."""
        return self.result is FindResult

    def tokens(self, settings: Settings) -> int:
        """The token limit of one answer under ``settings``."""
        return int(getattr(settings, self.max_new_tokens))

    def windows(self, settings: Settings) -> tuple[float, float]:
        """(length, overlap) of its windows under ``settings``."""
        overlap = 0.0 if self.overlap_s is None else float(getattr(settings, self.overlap_s))
        return float(getattr(settings, self.window_s)), overlap

    def covered_s(self, windows: int, settings: Settings) -> float:
        """The longest video ``windows`` windows cover (a longer one needs more)."""
        length, overlap = self.windows(settings)
        return (windows - 1) * (length - overlap) + length

    def ask(self, query: str | None, settings: Settings) -> tuple[str | None, str]:
        """The cleaned query (None for a task without one) and the exact prompt; a bad query: ValueError."""
        if not self.query:
            return None, self.prompt("")
        if query is None:
            raise ValueError(f"The {self.name} task needs a query: describe what to look for.")
        clean = contract.sanitize_query(query, settings.max_query_chars)
        return clean, self.prompt(clean)


_TASKS: dict[str, Task] = {}

#: the known tasks by name, in the order they were registered (a read-only view of the registry)
TASKS: Mapping[str, Task] = _TASKS


def register_task(task: Task) -> Task:
    """Add (or replace) a task; every layer reads it from here on."""
    _TASKS[task.name] = task
    return task


def unregister_task(name: str) -> None:
    """Remove a task (tests that registered one of their own)."""
    _TASKS.pop(name, None)


def known() -> str:
    """The known tasks' names as a sentence's end: "caption or find"."""
    names = list(_TASKS)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def get_task(task: str | Task) -> Task:
    """The entry of a task name (an entry as it is); an unknown name is a ValueError naming the known."""
    if isinstance(task, Task):
        return task
    entry = _TASKS.get(task) if isinstance(task, str) else None
    if entry is None:
        raise ValueError(f"Unknown task {task!r}: choose {known()}.")
    return entry


CAPTION = register_task(
    Task(
        name="caption",
        help="scene paragraph and timed events for a video",
        prompt=lambda _query: contract.CAPTION_PROMPT,
        parse=lambda text: contract.parse_caption(text),  # looked up per call: a test may count them
        repair=contract.repair_caption,
        result=CaptionResult,
        max_new_tokens="caption_max_new_tokens",
        window_s="caption_window_s",
        noun="a caption",
        plural="captions",
    )
)
FIND = register_task(
    Task(
        name="find",
        help="start-end span of a described event",
        prompt=lambda query: contract.FIND_PROMPT_TEMPLATE.format(query=query),
        parse=lambda text: contract.parse_span(text),
        repair=contract.repair_span,
        result=FindResult,
        max_new_tokens="find_max_new_tokens",
        window_s="find_window_s",
        overlap_s="find_overlap_s",
        query=True,
        noun="a find",
        plural="find",
    )
)
