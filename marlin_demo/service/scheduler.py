"""Model work one window at a time across an engine's requests, first come first served, so a short clip
waits about one window at most; it also sizes the prefix cache and bounds the requests held."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from marlin_demo.engine import Cancelled, Engine, EngineError

QUEUE_FULL = "Queue is full, try again in a moment: {n} requests are being answered or waiting ({var})."


@dataclass
class Ticket:
    """One request held by the scheduler: its windows and the time it waited for others' windows."""

    id: int
    windows: int
    stop: threading.Event | None = None
    queue_s: float = 0.0


class Scheduler:
    """Turns on one engine's model, window by window, first come first served: the one gate ordering every
    caller's requests; a stopped request gets no next turn."""

    def __init__(self, engine: Engine, max_requests: int) -> None:
        self.engine = engine
        self.max_requests = max_requests
        self._cond = threading.Condition()
        self._waiting: deque[Ticket] = deque()
        self._running: Ticket | None = None
        self._held: dict[int, Ticket] = {}
        self._ids = itertools.count(1)

    @contextlib.contextmanager
    def request(self, windows: int = 1, stop: threading.Event | None = None) -> Iterator[Ticket]:
        """Hold a request for its whole life; a request past ``max_requests`` is refused at once."""
        with self._cond:
            if self.max_requests > 0 and len(self._held) >= self.max_requests:
                raise EngineError(QUEUE_FULL.format(n=len(self._held), var="MARLIN_QUEUE_SIZE"))
            ticket = Ticket(next(self._ids), max(1, windows), stop)
            self._held[ticket.id] = ticket
        try:  # from here on the ticket is always given back, whatever fails
            with self._cond:
                self._resize_prefixes()
            yield ticket
        finally:
            with self._cond:
                self._held.pop(ticket.id, None)
                self._cond.notify_all()
                self._resize_prefixes()

    @contextlib.contextmanager
    def turn(self, ticket: Ticket) -> Iterator[None]:
        """One window's (or clip's) turn on the model, after those asked before; the wait is ``queue_s``."""
        if ticket.stop is not None and ticket.stop.is_set():
            raise Cancelled()  # stopped between windows: no further turn (on ZeroGPU, no further call)
        t0 = time.perf_counter()
        with self._cond:
            self._waiting.append(ticket)
            self._cond.notify_all()
            try:
                while self._running is not None or self._waiting[0] is not ticket:
                    if ticket.stop is not None and ticket.stop.is_set():
                        raise Cancelled()
                    self._cond.wait(timeout=0.1 if ticket.stop is not None else None)
            except BaseException:
                self._waiting.remove(ticket)
                self._cond.notify_all()
                raise
            self._waiting.popleft()
            self._running = ticket
        ticket.queue_s += time.perf_counter() - t0
        try:
            yield
        finally:
            with self._cond:
                self._running = None
                self._cond.notify_all()

    def wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Block until ``done()`` holds (checked at each change of the queue); False after ``timeout``."""
        with self._cond:
            return self._cond.wait_for(done, timeout)

    def waiting(self, ticket: Ticket) -> bool:
        """Whether ``ticket`` is queued for a turn now."""
        return ticket in self._waiting

    def held(self) -> int:
        """Requests held now (answered or waiting)."""
        with self._cond:
            return len(self._held)

    def _resize_prefixes(self) -> None:
        """Room for every held request's windows in the prefix cache (never below the setting)."""
        self.engine.reserve_prefixes(sum(t.windows for t in self._held.values()))


_SCHEDULERS: weakref.WeakKeyDictionary[Engine, Scheduler] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def scheduler_for(engine: Engine) -> Scheduler:
    """The one scheduler of an engine (the app, the API, batch and bench share it)."""
    with _LOCK:
        found = _SCHEDULERS.get(engine)
        if found is None:
            found = _SCHEDULERS[engine] = Scheduler(engine, engine.settings.queue_size)
        return found
