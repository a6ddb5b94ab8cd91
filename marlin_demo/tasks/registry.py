"""The tasks Marlin answers, as data: layers ask a task's entry and its ``Answer`` instead of comparing
names or result types, so a new task is one ``register_task`` call. Pure: nothing above ``results``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from marlin_demo import model_io
from marlin_demo import settings as settings_mod
from marlin_demo.results import Metrics, Result, RunInfo, Window
from marlin_demo.settings import Settings, TaskSetting

R = TypeVar("R", bound=Result)


@dataclass
class Made:
    """What an answer has whatever it says (who gave it, the model's words, the cost, the run's details);
    for one clip (``build``) also its duration and the model's confidence in a scored answer."""

    variant: str
    model: str
    raw: str
    metrics: Metrics
    info: RunInfo
    query: str  # the cleaned query ('' for a task that takes none)
    settings: Settings
    duration_s: float = 0.0
    score: float | None = None

    def result(self, kind: type[R], fixed: Any, **own: Any) -> R:
        """A ``kind`` result of a (repaired) parse: what every result has, from here and the parse's
        ``format_ok`` and ``repaired``, and ``own``, the kind's own fields."""
        return kind(
            variant=self.variant, model=self.model, raw=self.raw, metrics=self.metrics, info=self.info,
            format_ok=fixed.format_ok, repaired=fixed.repaired, **own,
        )  # fmt: skip


@dataclass(frozen=True)
class Figure:
    """A quality figure of the bench: its key and label; part of the overall score or not; its name on the
    per-set plot and its key on the seed card ('': not there)."""

    key: str
    label: str
    overall: bool = False
    short: str = ""
    seed: str = ""


class Answer:
    """What one kind of answer does; ``agree`` and ``score`` read results and records alike."""

    form = "answer"  # the format it was trained in (the note on an answer not in it names it)
    returns = "JSON: the answer, as the CLI's --json prints it."  # its API endpoint's ``Returns:``
    logprobs = False  # the engine keeps each token's log-probability (the model's confidence scores it)
    figures: tuple[Figure, ...] = ()  # the bench's quality figures (``quality``'s keys), in order
    measures: tuple[tuple[str, str], ...] = ()  # ``agree``'s keys and the bench report's names for them
    formats: tuple[tuple[str, str], ...] = ()  # the CLI's other outputs: a flag and its help (``formatted``)

    def build(self, fixed: Any, made: Made) -> Result:
        """One clip's result from its repaired parse."""
        raise NotImplementedError

    def merge(self, windows: Sequence[tuple[Result, Window, float]], made: Made) -> Result:
        """One result of the windows answered so far: each one's result (in window time), its window and the
        video time of its first frame, in order; ``made``: what they share."""
        raise NotImplementedError

    def text(self, result: Result) -> list[str]:
        """The CLI's readable lines of the answer (under its title, above its cost)."""
        raise NotImplementedError

    def to_json(self, result: Result) -> dict[str, Any]:
        """The JSON the API, MCP and the CLI's ``--json`` give."""
        return result.to_dict()

    def formatted(self, result: Result, flag: str) -> tuple[str, str]:
        """A ``formats`` output: (stdout, a note for stderr or '')."""
        raise NotImplementedError

    def agree(self, a: Any, b: Any, min_iou: float) -> dict[str, float]:
        """How far two variants' answers agree (1 = the same)."""
        return {}

    def truth(self, example: Mapping[str, Any], query: str | None) -> Any:
        """The example's reference answer, if it has one."""
        return None

    def score(self, result: Any, example: Mapping[str, Any], query: str | None) -> dict[str, Any]:
        """Scores against an example's ground truth ({}: nothing to score against)."""
        return {}

    def score_row(self, scores: Mapping[str, Any]) -> dict[str, Any]:
        """``score``'s figures as Compare's table shows them, by column title (the first: the main score)."""
        return {}

    def windows_note(self, settings: Settings) -> str:
        """The end of the API's sentence on long videos: what the JSON says of the windows."""
        return "; each window is answered in turn."

    def record(self, result: Result) -> dict[str, Any]:
        """What the bench keeps of the answer in its request's record."""
        return {}

    def quality(self, asked: Sequence[tuple[Any, Any, dict[str, Any] | None]]) -> tuple[dict[str, Any], list]:
        """The bench's figures over (example, query, the scored record or None), and an item per request."""
        return {}, []


def value(result: Any, name: str, default: Any = None) -> Any:
    """A field of a result object or of its ``to_dict()`` shape."""
    return result.get(name, default) if isinstance(result, Mapping) else getattr(result, name, default)


def shift(t: float, off: float, window: Window) -> float:
    """A window-time ``t`` shifted by ``off`` to global time, kept inside ``window``."""
    return min(max(round(off + t, 6), window.start), window.end)


def seconds(t: float) -> str:
    """A time as the CLI's readable answers write it (aligned in columns)."""
    return f"{t:6.1f}s"


def label(window: Window, note: str) -> str:
    """A window's note, naming the window."""
    return f"window {window.index + 1} ({model_io.clock_span(window.start, window.end)}): {note}"


@dataclass(frozen=True)
class Task:
    """One task: everything a layer reads instead of comparing the task's name."""

    name: str
    #: its place among the tabs, commands and tools (lowest first), whatever order modules are imported in
    order: int
    #: one line saying what it answers (the CLI's help)
    help: str
    #: the exact prompt, given the cleaned query ('' for a task that takes none)
    prompt: Callable[[str], str]
    #: the model's raw text -> its parse (``model_io.parse_caption`` / ``parse_span``)
    parse: Callable[[str], Any]
    #: (parse, the clip's duration) -> the parse repaired, its notes saying how
    repair: Callable[[Any, float | None], Any]
    #: what its answers do: built, merged across windows, printed, compared, scored
    answer: Answer
    #: the names of its own settings (``env``: their variables): its answer's token limit, ...
    max_new_tokens: str
    #: ... its window length ...
    window_s: str
    #: ... and its windows' overlap (None: none); each a ``Settings`` field or one it ``brings``
    overlap_s: str | None = None
    brings: tuple[TaskSetting, ...] = ()
    #: whether a request names what to look for (a query, cleaned by ``model_io.sanitize_query``) ...
    query: bool = False
    #: ... and its wording: its box's label and hint, and the API and MCP argument's description
    query_label: str = ""
    query_placeholder: str = ""
    query_help: str = ""
    #: what it asks of an examples.json entry: its queries (None: one request without one; []: nothing)
    examples: Callable[[Mapping[str, Any]], list[str | None]] = lambda example: [None]
    #: whether ``bench`` runs it when ``--tasks`` is not given
    bench: bool = True
    #: how a line names one request ("a caption of this clip takes ...")
    noun: str = ""
    #: how the limits line names its requests ("captions up to 30 min")
    plural: str = ""
    #: what its API endpoint says it does ('': its ``help``)
    summary: str = ""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # pickled by name (ZeroGPU pickles a GPU call's arguments): its functions are lambdas
        return get_task, (self.name,)

    def env(self) -> dict[str, str]:
        """Its settings' environment variables, by ``Settings`` field (their flags: the fields' names)."""
        own = {self.max_new_tokens, self.window_s, self.overlap_s}
        return {s.name: s.meta["env"] for s in settings_mod.specs() if s.name in own}

    def tokens(self, settings: Settings) -> int:
        """The token limit of one answer under ``settings``."""
        return int(settings.value(self.max_new_tokens))

    def windows(self, settings: Settings) -> tuple[float, float]:
        """(length, overlap) of its windows under ``settings``."""
        overlap = 0.0 if self.overlap_s is None else float(settings.value(self.overlap_s))
        return float(settings.value(self.window_s)), overlap

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
        clean = model_io.sanitize_query(query, settings.max_query_chars)
        return clean, self.prompt(clean)


_TASKS: dict[str, Task] = {}

#: the known tasks by name, in their ``order`` (a read-only view of the registry)
TASKS: Mapping[str, Task] = _TASKS


def register_task(task: Task) -> Task:
    """Add (or replace) a task in its ``order``, with the settings it brings, for every layer."""
    for setting in task.brings:
        settings_mod.register_setting(setting)
    entries = sorted([*(t for t in _TASKS.values() if t.name != task.name), task], key=lambda t: t.order)
    _TASKS.clear()
    _TASKS.update((t.name, t) for t in entries)
    return task


def unregister_task(name: str) -> None:
    """Remove a task and the settings it brought (tests that registered one of their own)."""
    for setting in getattr(_TASKS.pop(name, None), "brings", ()):
        settings_mod.unregister_setting(setting.name)


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
