"""The one request path: every caller (UI tabs, API endpoints, CLI, bench) runs the model through here,
so timings, the time limit and the caches are the same whichever caller asks (docs/DESIGN.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from marlin_demo import agreement
from marlin_demo.engine import USER_ERRORS, Cancelled, Engine, EngineError, graphs
from marlin_demo.longvideo import policy, runner
from marlin_demo.longvideo.runner import Request
from marlin_demo.models import pick_device
from marlin_demo.results import Done, Loaded, Partial, Prepared, Progress, Result, Stage, WindowDone
from marlin_demo.service import capacity, gpu_calls
from marlin_demo.service.scheduler import Ticket, scheduler_for
from marlin_demo.settings import Variant
from marlin_demo.tasks import Task, get_task
from marlin_demo.video import PreparedVideo, VideoError
from marlin_demo.video.windows import WindowPlan

if TYPE_CHECKING:  # pragma: no cover - typing only
    from marlin_demo.video import VideoInfo

__all__ = [
    "Comparison",
    "QueryError",
    "Request",
    "VariantFinished",
    "VariantStarted",
    "WarmRerun",
    "asked_range",
    "call_share",
    "check_query",
    "compare",
    "request",
    "run",
    "stream",
]

log = logging.getLogger(__name__)
Video = str | Path | PreparedVideo
T = TypeVar("T")


class QueryError(ValueError):
    """A bad query (its sentence): a page says it under the query, not under the clip."""


def check_query(engine: Engine, task: str | Task, query: str | None) -> tuple[Task, str | None]:
    """The one place a request's task is looked up and its query cleaned (``Task.ask``): (its entry, the
    cleaned query, None for a task without one); an unknown task: ValueError, a bad query: ``QueryError``."""
    entry = get_task(task)
    try:
        return entry, entry.ask(query or "", engine.settings)[0]
    except ValueError as exc:
        raise QueryError(str(exc)) from None


def request(
    engine: Engine,
    task: str | Task,
    video: Video,
    variant: Variant,
    query: str | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    *,
    visitor: str | None = None,
    plans: Sequence[WindowPlan] | None = None,
) -> Request:
    """The one ``Request`` every layer below reads: task looked up, query cleaned, range checked and windows
    planned here only, so a bad one is said before anything is decoded (``plans``: a library search's own)."""
    entry, clean = check_query(engine, task, query)
    span = None if start_s is None and end_s is None else (start_s, end_s)  # None: the whole video
    plans = list(plans or runner.window_plans(engine, video, entry, span))
    asked = None if span is None else (plans[0].window.start, plans[-1].window.end)
    return Request(entry, video, variant, clean, tuple(plans), asked, visitor)


def run(
    engine: Engine,
    task: str | Task | Request,
    video: Video | None = None,
    variant: Variant | None = None,
    query: str | None = None,
    *,
    start_s: float | None = None,
    end_s: float | None = None,
    stop: threading.Event | None = None,
    visitor: str | None = None,
) -> Result:
    """``stream`` drained (after a late ZeroGPU refusal: ``partial``); ``stop`` set: ``Cancelled``."""
    asked = stream(
        engine, task, video, variant, query, start_s=start_s, end_s=end_s, stop=stop, visitor=visitor
    )
    for stage in asked:
        if isinstance(stage, Done):
            return stage.result
    raise Cancelled()


def call_share(
    engine: Engine, task: str | Task, video: Video, start_s: float | None = None, end_s: float | None = None
) -> float:
    """What a request's ZeroGPU calls are sized by (``gpu_calls.call_seconds``): the largest share of a full
    window's prefill among its windows (a short clip: its own frames), so a page can say it before Run."""
    try:
        span = None if start_s is None and end_s is None else (start_s, end_s)
        plans = runner.window_plans(engine, video, get_task(task), span)
    except (VideoError, OSError):  # sized as a full window; the run says what is wrong
        return 1.0
    return _share(engine, plans)


def _share(engine: Engine, plans: Sequence[WindowPlan]) -> float:
    return capacity.prefill_share(max(p.plan.video_tokens for p in plans), engine.params)


@dataclass
class _Turns:
    """How a request's windows run, each in the scheduler's turn: threaded, or one sized ZeroGPU call each;
    ``calls``, ``asked_s`` and ``used_s`` count the calls."""

    engine: Engine
    ticket: Ticket
    req: Request
    device: str
    calls: int = 0
    asked_s: int = 0
    used_s: float = 0.0

    def execute(self, work: runner.ClipWork) -> contextlib.AbstractContextManager[Iterator[runner.Item]]:
        """The runner's ``execute``: the clip's work within the turn, in ``runner.threaded`` or on ZeroGPU in
        one call (``gpu``); neither leaves a frame of its own on the stack."""
        if gpu_calls.zero_gpu():
            return self.gpu(work)
        turn = functools.partial(scheduler_for(self.engine).turn, self.ticket)
        return contextlib.closing(runner.threaded(work, within=turn))

    @contextlib.contextmanager
    def gpu(self, work: runner.ClipWork) -> Iterator[Iterator[runner.Item]]:
        """One ZeroGPU call of ``work`` in the turn, sized for the decoding expected. ``GraphsUnavailable``:
        noted eager, and ``runner.answer`` asks again; a refused call asked nothing of the quota."""
        variant, refused = self.req.variant, False
        with scheduler_for(self.engine).turn(self.ticket):
            decode = self.engine.decode_expected(variant, self.device)
            share = _share(self.engine, self.req.plans)
            seconds = gpu_calls.call_seconds(self.req.task.name, self.engine.settings, share, decode)
            asked, t0 = gpu_calls.asked_seconds(seconds, self.device), time.perf_counter()
            try:
                with gpu_calls.gpu_call(work, asked, decode) as items:
                    yield items
            except gpu_calls.GpuRefused:
                refused = True  # refused before it started: nothing asked of the quota
                log.info("the %s s call refused was visitor %s's", asked, self.req.visitor or "(none)")
                raise
            except graphs.GraphsUnavailable:
                self.engine.note_decode(variant, "eager")
                raise
            finally:
                if not refused:
                    self.calls, self.asked_s = self.calls + 1, self.asked_s + asked
                    self.used_s += time.perf_counter() - t0

    def report(self, res: Result) -> Result:
        """``res`` with the GPU calls its turns made in its ``runtime`` block (its own copy of it)."""
        res.info.runtime = dataclasses.replace(
            res.info.runtime,
            gpu_calls=self.calls,
            gpu_asked_s=float(self.asked_s),
            gpu_used_s=self.used_s,
        )
        return res


def asked_range(
    engine: Engine, video: str | Path, start_s: float | None, end_s: float | None
) -> tuple[float, float] | None:
    """The time range a request would ask about (None: the whole video), checked as ``run`` checks it,
    so a caller can say what is wrong, or what it costs, before Run (a bad range: ``RangeError``)."""
    if start_s is None and end_s is None:
        return None
    info = engine.info(Path(video), whole=False)
    return policy.check_range(start_s, end_s, info.duration_s, engine.settings.max_duration_s)


def stream(
    engine: Engine,
    task: str | Task | Request,
    video: Video | None = None,
    variant: Variant | None = None,
    query: str | None = None,
    *,
    start_s: float | None = None,
    end_s: float | None = None,
    stop: threading.Event | None = None,
    visitor: str | None = None,
) -> Generator[Stage, None, None]:
    """The request's stages as they happen, then ``Done`` (``task``: a ``request``, or its arguments); closing
    it early stops the model at its next token. A late ZeroGPU refusal: the windows before it, ``partial``."""
    t0 = time.perf_counter()
    if not isinstance(task, Request):  # no video or variant: the engine's own sentence says so
        task = request(engine, task, video or "", variant or "", query, start_s, end_s, visitor=visitor)
    req = task
    own = None if stop is not None else threading.Event()  # the caller's own stop is theirs to set
    stop = stop or own
    last: WindowDone | None = None
    try:
        with scheduler_for(engine).request(len(req.plans), stop) as ticket:
            turns = _Turns(engine, ticket, req, pick_device(engine.settings.device))
            with contextlib.closing(runner.answer(engine, req, turns.execute)) as stages:
                try:
                    while True:
                        stage = next(stages)
                        last = stage if isinstance(stage, WindowDone) else last
                        yield stage
                except StopIteration as end:
                    res = end.value
                except gpu_calls.GpuRefused as exc:
                    if last is None:
                        raise
                    res = last.result
                    res.partial = Partial(str(exc), last.window, last.windows)
            if req.whole:  # the engine timed the whole clip from its turn on; windows time the wait
                res.metrics.latency_s += ticket.queue_s
            res.metrics.queue_s = ticket.queue_s
            if req.whole and not gpu_calls.zero_gpu():  # one whole clip answered here: it prices the next Run
                capacity.observe(
                    engine.settings, turns.device, req.variant, res.metrics, res.info, engine.params
                )
        res.info.total_s = time.perf_counter() - t0  # what the page's figures add up to (the Total card)
        yield Done(turns.report(res))
    except Cancelled:  # stopped while it waited, or between windows: nothing more to say
        return
    finally:
        if own is not None:  # gone: a wait for its turn ends
            own.set()


# ------------------------------------------------- several variants on one video (the Compare tab, /compare)


@dataclass(frozen=True)
class VariantStarted:
    """Variant ``index`` (0-based) of ``total`` starts; ``cold``: it is loaded first."""

    variant: Variant
    index: int
    total: int
    cold: bool


@dataclass(frozen=True)
class VariantFinished:
    """A variant's answer, or the one sentence saying why it gave none."""

    variant: Variant
    cold: bool
    result: Result | None = None
    error: str | None = None


@dataclass(frozen=True)
class WarmRerun:
    """``variant``'s answer is asked again, warm: its run was cold (its first-use costs are in that run's
    latency), or it read the clip afresh where the others' warm figures reused their reading."""

    variant: Variant


@dataclass
class Comparison:
    """Every variant's outcome, in the order they ran. ``footprint_mb``: each one's weights alone
    (``LoadedModel.footprint_mb``), where a run's ``peak_memory_mb`` counts the process or the whole GPU."""

    task: str
    query: str | None
    video: VideoInfo
    variants: list[str]
    results: dict[str, Result] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    cold: dict[str, bool] = field(default_factory=dict)
    footprint_mb: dict[str, float] = field(default_factory=dict)
    reruns: dict[str, Result] = field(default_factory=dict)
    rerun_errors: dict[str, str] = field(default_factory=dict)

    def require_answer(self) -> None:
        """Raise an ``EngineError`` naming each failure when no variant answered (one sentence said once when
        every variant got the same one, a ZeroGPU refusal say)."""
        if not self.results:
            said = set(self.errors.values())
            each = " | ".join(f"{v}: {e}" for v, e in self.errors.items())
            once = len(self.errors) > 1 and len(said) == 1
            raise EngineError("No variant could answer: " + (said.pop() if once else each))

    def warm(self, variant: str) -> Result | None:
        """The variant's warm run: its re-run, else its own run when that was warm (None: only a cold one)."""
        if variant in self.reruns or self.cold.get(variant):
            return self.reruns.get(variant)
        return self.results.get(variant)

    def payload(self, example: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``/compare`` JSON: ``agreement.compare_payload``, ``errors`` when a variant failed, and per
        variant ``cold``, ``footprint_mb`` and ``warm`` (null when its only run was cold)."""
        out = agreement.compare_payload(self.task, self.query, self.results, example)
        if self.errors:
            out["errors"] = dict(self.errors)
        out["cold"] = {v: self.cold[v] for v in self.results}
        out["footprint_mb"] = {v: round(mb, 2) for v, mb in self.footprint_mb.items()}
        out["warm"] = {
            v: None
            if (w := self.warm(v)) is None
            else {
                "latency_s": round(w.metrics.latency_s, 3),
                "rerun": v in self.reruns,
                "reused_prefix": w.info.reused_prefix,
            }
            for v in self.results
        }
        return out


CompareEvent = Prepared | VariantStarted | VariantFinished | WarmRerun | Comparison


def compare(
    engine: Engine,
    task: str | Task | Request,
    video: Video | None,
    variants: Sequence[Variant],
    query: str | None = None,
    *,
    live: bool = False,
    start_s: float | None = None,
    end_s: float | None = None,
    warm_reruns: bool = False,
) -> Generator[CompareEvent | Loaded | Progress, None, None]:
    """Run ``task`` on each variant in turn (events: docs/DESIGN.md); ``live`` also passes on each variant's
    ``Loaded`` and ``Progress``; ``warm_reruns``: one-window answers timed again (``warm_reruns_for``)."""
    # made once: bad input fails now, and every variant reads the same cached frames
    if not isinstance(task, Request):  # too many windows: refused now
        task = request(engine, task, video or "", "", query, start_s, end_s)
    req = task
    stage, frames = runner.prepare(engine, req)  # a long video's windows: all decoded now, in one scan
    yield dataclasses.replace(stage, cached_video=all([stage.cached_video, *(hit for *_, hit in frames)]))
    out = Comparison(req.task.name, req.query, stage.video, list(variants))

    def one(v: Variant) -> Generator[Loaded | Progress, None, Result]:
        """One variant's answer (``live``: its stages passed on); closing this generator stops the model."""
        with contextlib.closing(stream(engine, dataclasses.replace(req, variant=v))) as stages:
            for stage in stages:
                if isinstance(stage, Done):
                    return stage.result
                if live and isinstance(stage, Loaded | Progress):
                    yield stage
        raise Cancelled()

    for i, v in enumerate(variants):
        cold = not engine.is_loaded(v)
        out.cold[v] = cold
        yield VariantStarted(v, i, len(variants), cold)
        try:
            res = yield from one(v)
        except USER_ERRORS as exc:  # one variant failing must not hide the others
            out.errors[v] = str(exc)
            yield VariantFinished(v, cold, error=str(exc))
            continue
        out.results[v] = res
        loaded = engine.loaded().get(v)
        if loaded is not None:
            out.footprint_mb[v] = loaded.footprint_mb
        yield VariantFinished(v, cold, result=res)
    # a long video is not answered twice: its figures stay as measured, marked cold
    if warm_reruns and len(req.plans) == 1:
        for _ in range(2):  # the cold ones; then, once, those whose reading of the clip differed
            for v in warm_reruns_for(engine, out):
                yield WarmRerun(v)
                try:
                    out.reruns[v] = yield from one(v)
                except USER_ERRORS as exc:  # no warm figure for it: null in the payload, as for a cold run
                    out.rerun_errors[v] = str(exc)
    yield out


def warm_reruns_for(engine: Engine, run: Comparison) -> list[str]:
    """The answers to time again so warm figures compare like with like: each cold run still loaded; else,
    when some warm figures reused an earlier reading of the clip, those that read it afresh."""
    tried = run.reruns.keys() | run.rerun_errors.keys()
    todo = [v for v in run.results if run.cold.get(v) and v not in tried and engine.is_loaded(v)]
    if todo:
        return todo
    figures = {v: w for v in run.results if (w := run.warm(v)) is not None}
    if len({w.info.reused_prefix for w in figures.values()}) < 2:
        return []
    return [v for v, w in figures.items() if not w.info.reused_prefix and v not in tried]
