"""Every accepted request finishes, in turns: the scheduler, per-window ZeroGPU calls, Stop between them.

ZeroGPU itself cannot run here (``spaces`` would call the platform's device service), so a recording
stand-in for ``spaces.GPU`` runs each call in a forked process, as ZeroGPU does: nothing done inside a
call survives it but what the call streams back.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stand_ins.spaces import forked

from marlin_demo import service
from marlin_demo.engine import Cancelled, Engine, EngineError
from marlin_demo.results import CaptionResult, Done, Progress, WindowDone
from marlin_demo.service import capacity, gpu_calls, zerogpu_rules
from marlin_demo.service.scheduler import Scheduler, scheduler_for
from marlin_demo.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
LONG = ROOT / "examples" / "ball_rolls.mp4"  # 12 s: three 4 s caption windows below
SHORT = ROOT / "examples" / "flower.mp4"  # 5 s: one window
VARIANT = "bf16"


class ForkingGPU:
    """``spaces.GPU`` as ZeroGPU runs it: each call in a forked process, its items piped back; recorded."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def GPU(self, duration: Any) -> Callable[[Callable[..., Iterator[Any]]], Callable[..., Iterator[Any]]]:
        def decorate(fn: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
            def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
                self.calls.append(duration(*args, **kwargs) if callable(duration) else duration)
                yield from forked(fn, args, kwargs)  # the stand-in package's own forked call

            return call

        return decorate


@pytest.fixture(scope="module")
def new_engine(tiny_settings: Settings) -> Callable[[], Engine]:
    """Makes a fresh engine, its variant loaded (on a Space the variants are loaded at start-up, before any
    call): 4 s caption windows, so the 12 s clip is three."""
    settings = tiny_settings.with_(device="cpu", caption_window_s=4.0, caption_max_new_tokens=24)

    def make() -> Engine:
        engine = Engine(settings)
        engine.load(VARIANT)
        return engine

    return make


@pytest.fixture(scope="module")
def solo(new_engine: Callable[[], Engine]) -> dict[str, CaptionResult]:
    """Each clip's caption alone, off ZeroGPU: what every other run must equal."""
    engine = new_engine()
    out = {}
    for clip in (LONG, SHORT):
        res = service.run(engine, "caption", clip, VARIANT)
        assert isinstance(res, CaptionResult)
        out[clip.name] = res
    assert len(out[LONG.name].windows) == 3 and len(out[SHORT.name].windows) == 1
    return out


@pytest.fixture
def zero_gpu(monkeypatch: pytest.MonkeyPatch) -> ForkingGPU:
    stand_in = ForkingGPU()
    module = types.ModuleType("spaces")
    module.GPU = stand_in.GPU  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spaces", module)
    monkeypatch.setattr(gpu_calls, "zero_gpu", lambda: True)
    monkeypatch.setattr(gpu_calls, "_DECORATED", [])  # decorated by this stand-in, once, as at start-up
    return stand_in


pytestmark = pytest.mark.slow


def _same(a: CaptionResult, b: CaptionResult) -> None:
    assert a.raw == b.raw and a.events == b.events and a.scene == b.scene and a.windows == b.windows


def test_zero_gpu_one_call_per_window_streaming_between(
    zero_gpu: ForkingGPU, solo: dict[str, Any], new_engine: Callable[[], Engine]
) -> None:
    engine = new_engine()
    t0 = time.perf_counter()
    stages = list(service.stream(engine, "caption", str(LONG), VARIANT))
    wall = time.perf_counter() - t0
    assert len(zero_gpu.calls) == 3  # one spaces.GPU call per window, none for the whole request
    per_call = gpu_calls.call_seconds("caption", engine.settings)
    assert zero_gpu.calls == [per_call] * 3 and per_call <= capacity.MAX_GPU_S
    assert sum(zero_gpu.calls) == gpu_calls.estimate_gpu_seconds(12.0, engine.settings, task="caption")
    texts = [s for s in stages if isinstance(s, Progress) and s.text]
    assert {s.window for s in texts} == {1, 2, 3}  # the text streamed out of each forked call
    assert [s.window for s in stages if isinstance(s, WindowDone)] == [1, 2, 3]
    done = stages[-1]
    assert isinstance(done, Done) and isinstance(done.result, CaptionResult)
    _same(done.result, solo[LONG.name])  # nothing assumed to survive between calls: same answer
    runtime = done.result.to_dict()["runtime"]  # the public answer says what the request asked of ZeroGPU
    assert runtime["gpu_calls"]["calls"] == 3 and runtime["gpu_calls"]["asked_s"] == sum(zero_gpu.calls)
    assert 0 < runtime["gpu_calls"]["used_s"] <= round(wall, 1) + 0.05  # the calls' time, within the request
    assert solo[LONG.name].to_dict()["runtime"]["gpu_calls"]["calls"] == 0  # off ZeroGPU: none


def test_zero_gpu_short_clip_is_one_call(
    zero_gpu: ForkingGPU, solo: dict[str, Any], new_engine: Callable[[], Engine]
) -> None:
    engine = new_engine()
    res = service.run(engine, "caption", str(SHORT), VARIANT)
    assert zero_gpu.calls == [gpu_calls.call_seconds("caption", engine.settings)]
    assert isinstance(res, CaptionResult)
    _same(res, solo[SHORT.name])
    assert res.info.cached_video is False  # decoded for this request, before the call


def test_the_first_cuda_call_asks_for_the_first_launch_compile_too(
    zero_gpu: ForkingGPU, new_engine: Callable[[], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton compiles its kernels at their first launch (about 49 s on an H200): until one call has run,
    a call on CUDA asks for that too, as far as an unsigned visitor's day allows; the answer says what it
    asked."""
    monkeypatch.setattr(gpu_calls, "_warm", threading.Event())  # a process that has made no call yet
    monkeypatch.setattr(service, "pick_device", lambda setting: "cuda")  # as ZeroGPU's main process sees it
    monkeypatch.setattr(zerogpu_rules, "duration_factor", lambda card=None: 1.5)  # the Space's card
    engine = new_engine()
    res = service.run(engine, "caption", str(LONG), VARIANT)
    each = gpu_calls.call_seconds("caption", engine.settings)
    day = zerogpu_rules.daily_quota_s("unauthenticated")
    first = zero_gpu.calls[0]
    assert each < first <= each + gpu_calls.FIRST_CALL_COMPILE_S and capacity.charged_s(first, 1.5) <= day
    assert zero_gpu.calls == [first, each, each]  # the later calls find the kernels on disk
    assert res.to_dict()["runtime"]["gpu_calls"]["asked_s"] == first + 2 * each
    find = gpu_calls.call_seconds("find", engine.settings)  # a find's call is short: the whole allowance fits
    monkeypatch.setattr(gpu_calls, "_warm", threading.Event())
    assert gpu_calls.asked_seconds(find, "cuda") == find + gpu_calls.FIRST_CALL_COMPILE_S
    assert gpu_calls.asked_seconds(find, "cpu") == find  # no Triton kernel on a CPU: nothing to compile


def test_stop_between_windows_starts_no_further_call(
    zero_gpu: ForkingGPU, new_engine: Callable[[], Engine]
) -> None:
    engine = new_engine()
    stream = service.stream(engine, "caption", str(LONG), VARIANT)
    for stage in stream:
        if isinstance(stage, WindowDone):  # window 1 answered, its call over: Stop now
            break
    stream.close()
    scheduler = scheduler_for(engine)
    assert scheduler.wait_until(lambda: scheduler.held() == 0, timeout=120)  # the worker saw the Stop
    assert len(zero_gpu.calls) <= 2  # at most the call already asked for when Stop came


def test_short_request_runs_between_a_long_ones_windows(
    solo: dict[str, Any], new_engine: Callable[[], Engine]
) -> None:
    """The short clip, sent once the long one's first window is being written, finishes first."""
    engine = new_engine()
    finished: list[str] = []
    results: dict[str, Any] = {}
    first_window = threading.Event()

    def long_run() -> None:
        for stage in service.stream(engine, "caption", str(LONG), VARIANT):
            if isinstance(stage, Progress) and stage.text and stage.window == 1:
                first_window.set()
            if isinstance(stage, Done):
                results["long"] = stage.result
        finished.append("long")

    worker = threading.Thread(target=long_run)
    worker.start()
    assert first_window.wait(timeout=300)
    results["short"] = service.run(engine, "caption", str(SHORT), VARIANT)
    finished.append("short")
    worker.join(timeout=300)
    assert finished == ["short", "long"]
    _same(results["long"], solo[LONG.name])
    _same(results["short"], solo[SHORT.name])
    assert results["short"].metrics.queue_s > 0  # it waited for the long one's window in progress
    assert results["short"].metrics.latency_s >= results["short"].metrics.queue_s


def test_scheduler_turns_are_first_come_first_served(tiny_settings: Settings) -> None:
    """Pure scheduler: a request asking again after its turn queues behind one that asked meanwhile."""
    engine = Engine(tiny_settings.with_(queue_size=2))
    sched = Scheduler(engine, max_requests=2)
    order: list[str] = []
    with sched.request(3) as long, sched.request(1) as short:
        assert engine.prefixes.size >= 4  # room for both requests' windows
        with sched.turn(long):
            waiter = threading.Thread(target=lambda: _turn(sched, short, order, "short"))
            waiter.start()
            assert sched.wait_until(lambda: sched.waiting(short), timeout=30)  # queued behind window 1
            order.append("long-1")
        waiter.join()
        with sched.turn(long):
            order.append("long-2")
        with pytest.raises(EngineError, match="Queue is full"), sched.request(1):
            pass
    assert order == ["long-1", "short", "long-2"]
    assert short.queue_s > 0 and sched.held() == 0


def _turn(sched: Scheduler, ticket: Any, order: list[str], name: str) -> None:
    with sched.turn(ticket):
        order.append(name)


def test_a_request_that_fails_at_once_is_given_back(tiny_settings: Settings) -> None:
    """A request failing as it is admitted (here the engine's prefix sizing) never stays held."""
    engine = Engine(tiny_settings)
    sched = Scheduler(engine, max_requests=1)

    def broken(clips: int) -> None:
        raise RuntimeError("broken engine")

    engine.reserve_prefixes = broken  # type: ignore[method-assign]
    for _ in range(3):  # more than max_requests: a leaked ticket would make the next one "full"
        with pytest.raises(RuntimeError, match="broken engine"), sched.request(1):
            pass
    assert sched.held() == 0


def test_a_stopped_request_leaves_the_queue(tiny_settings: Settings) -> None:
    engine = Engine(tiny_settings)
    sched = Scheduler(engine, max_requests=4)
    stop = threading.Event()
    with sched.request(1) as first, sched.request(1, stop) as second, sched.turn(first):
        stop.set()
        with pytest.raises(Cancelled), sched.turn(second):
            pass
    assert sched.held() == 0
