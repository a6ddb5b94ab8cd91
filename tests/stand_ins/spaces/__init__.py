"""A stand-in for Hugging Face's ``spaces`` package, for an app server started as if on ZeroGPU.

Put this folder's parent first on the server's PYTHONPATH with ``SPACES_ZERO_GPU=true``: the app then
takes its ZeroGPU path (``spaces`` imported before torch, one ``spaces.GPU`` call per window, models
loaded at start-up), and each call runs as ZeroGPU runs it, in a forked process whose items are piped
back. The real package cannot run here: it asks the platform's device service for a GPU. Each call,
and whether torch was imported before this package, is appended as a JSON line to the file named by
``MARLIN_STAND_IN_GPU_LOG`` (when set), for the test to read.

Each visitor's daily quota is kept as ZeroGPU keeps it, one per visitor, keyed as ``spaces`` 0.51.3 keys them
(``zero/client.py`` ``schedule``): by the request's ``X-IP-Token`` header, else by the client's address
(``visitor_of``). ``spaces`` finds the request in Gradio's context variable, read in the calling thread
(``spaces.utils.gradio_request_var``); a call with no request there (the start-up call, the examples' cache,
made before or beside any visitor) is charged to no visitor: it is logged ``"visitor": null`` and never
refused. A call's requested duration times the card's factor is only the admission check: it is held while
the call runs, and a call asking for more than its visitor has left is refused with the very ``gr.Error``
that ``spaces`` raises (same title and words; the "none" kind, a request without a visitor token, is refused
with "Space app has reached its GPU limit"). When the call ends its hold is settled to the time it actually
used, times the factor (hub-docs ``spaces-zerogpu.md``: the quota consumed is the task's effective duration;
ZeroGPU Explorers discussion #82: the requested duration only guards the start), so short calls leave the
rest of the day to later ones. ``QUOTAS`` holds them in-process (a test may put a visitor's own there). A
server reads ``MARLIN_STAND_IN_QUOTA_S`` (each visitor's quota when first seen; ``pro=2400,60``: by kind),
``MARLIN_STAND_IN_VISITOR`` (the kind of a visitor whose token does not name one, and of a request with no
token: ``none``, ``ip``: a token but not signed in, ``free`` (the default), ``pro``; a token ``pro-...``
names its kind) and ``MARLIN_STAND_IN_USED_S`` (the GPU seconds each call is charged in place of its time
here: this CPU's time is not a GPU's, and a test that needs the quota to run out at a known call fixes it).
Without a quota no call is refused. Each call is logged with the visitor it was charged to, and each settled
call with what it used and was charged.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

__all__ = ["GPU", "KINDS", "QUOTAS", "Quota", "forked", "visiting", "visitor_of"]

#: spaces 0.51.3 zero/client.py, word for word
EXAMPLES_RETRY_MESSAGE = "Try re-running outside of examples if it happened after clicking one"
TOKENS_SETTINGS_URL = "https://huggingface.co/settings/tokens"
SUBSCRIBE_TO_PRO_URL = "https://huggingface.co/subscribe/pro?from=ZeroGPU"


@dataclass
class Quota:
    """One visitor's ZeroGPU quota: ``left_s`` (None: never refused), who asks (``visitor``: none, ip,
    free, pro), the card's duration factor, the wait ``spaces`` names in its refusal, and ``used_s``: the
    GPU seconds each call is charged in place of its own time (None: the time it took)."""

    left_s: float | None = None
    visitor: str = "free"
    factor: float = 1.5
    wait: timedelta = timedelta(hours=13, minutes=12, seconds=5)
    used_s: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def schedule(self, duration: float) -> int:
        """Admit a call of ``duration`` seconds and hold its request (times the factor) while it runs,
        or raise what ``spaces`` raises when the request is more than is left; returns what is held."""
        requested = round(duration * self.factor)
        with self._lock:
            if self.left_s is None:
                return requested
            if requested > self.left_s:
                raise self.refusal(requested)
            self.left_s -= requested
        return requested

    def settle(self, held: int, took_s: float) -> float:
        """The call is over: its hold is given back and the time it used, times the factor, is charged
        (``used_s`` in place of ``took_s`` when set); returns what was charged."""
        charged = (took_s if self.used_s is None else self.used_s) * self.factor
        with self._lock:
            if self.left_s is not None:
                self.left_s += held - charged
        return charged

    def refusal(self, requested: int) -> Exception:
        """``spaces``' own ``gr.Error`` for a call over the quota (an API call: no page sends the request)."""
        import gradio as gr

        if self.visitor == "none":
            message = f"Space app has reached its GPU limit. {EXAMPLES_RETRY_MESSAGE}"
        else:
            gpu = {"free": "free ZeroGPU", "pro": "Pro ZeroGPU"}.get(self.visitor, "ZeroGPU")
            message = (
                f"You have exceeded your {gpu} quota ({requested}s requested vs. {round(self.left_s or 0)}s "
                f"left). Try again in {self.wait}. "
            )
            if self.visitor == "ip":
                message += f"Authenticate with a Hugging Face token for more quota - {TOKENS_SETTINGS_URL}"
            elif self.visitor == "free":
                pro = "Subscribe to Hugging Face PRO to get 40 min of ZeroGPU quota a day"
                message += f"{pro} - {SUBSCRIBE_TO_PRO_URL}"
        return gr.Error(message, title="ZeroGPU quota exceeded", print_exception=False)


#: the kinds of visitor ``spaces``' refusals tell apart (``Quota.visitor``)
KINDS = ("none", "ip", "free", "pro")


def _new_quota(kind: str) -> Quota:
    """A visitor's quota when first seen: the day the environment sets for its kind (``MARLIN_STAND_IN_*``;
    ``MARLIN_STAND_IN_QUOTA_S``: seconds for every kind, or ``pro=2400,free=300,60``: by kind, else 60)."""
    left: float | None = None
    for part in os.environ.get("MARLIN_STAND_IN_QUOTA_S", "").split(","):
        name, _, seconds = part.strip().rpartition("=")
        if seconds and name in ("", kind):
            left = float(seconds)
            if name:
                break
    used = os.environ.get("MARLIN_STAND_IN_USED_S")
    return Quota(left, kind, used_s=None if used is None else float(used))


#: each visitor's quota, by ``visitor_of``'s key (tests put their own visitor's here)
QUOTAS: dict[str, Quota] = {}
_QUOTAS_LOCK = threading.Lock()


def visitor_of(request: Any) -> tuple[str, str] | None:
    """The (key, kind) of the visitor a call is charged to, as ``spaces`` 0.51.3 keys quotas: the request's
    ``X-IP-Token`` header, else its client's address; a token ``<kind>-...`` names its kind (``KINDS``),
    else ``MARLIN_STAND_IN_VISITOR`` does. None: no request, so no visitor (the start-up call)."""
    if request is None:
        return None
    default = os.environ.get("MARLIN_STAND_IN_VISITOR", "free")
    token = (getattr(request, "headers", None) or {}).get("x-ip-token")
    if token:
        prefix = token.split("-", 1)[0]
        return f"token {token}", prefix if prefix in KINDS[1:] and "-" in token else default
    return f"address {getattr(getattr(request, 'client', None), 'host', None)}", default


def quota_of(visitor: tuple[str, str]) -> Quota:
    """The visitor's quota (made when first seen)."""
    key, kind = visitor
    with _QUOTAS_LOCK:
        if key not in QUOTAS:
            QUOTAS[key] = _new_quota(kind)
        return QUOTAS[key]


@contextlib.contextmanager
def visiting(token: str | None = None, host: str = "127.0.0.1") -> Iterator[tuple[str, str]]:
    """This thread's code runs as a request of the visitor sending ``token`` (None: no token) from
    ``host``, as Gradio sets its request context variable for an event; yields the visitor's key and kind."""
    import gradio as gr
    from gradio.context import LocalContext

    headers = {} if token is None else {"x-ip-token": token}
    request = gr.Request(headers=headers, client={"host": host})
    reset = LocalContext.request.set(request)
    try:
        seen = visitor_of(request)
        assert seen is not None
        yield seen
    finally:
        LocalContext.request.reset(reset)


def _record(entry: dict[str, Any]) -> None:
    path = os.environ.get("MARLIN_STAND_IN_GPU_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


_record({"imported": True, "torch_already_imported": "torch" in sys.modules})


def forked(
    func: Callable[..., Iterator[Any]], args: tuple[Any, ...], kwargs: dict[str, Any], duration: Any = None
) -> Iterator[Any]:
    """``func(*args, **kwargs)``'s items from a forked process, as ZeroGPU runs a call (arguments pickled;
    closing the iterator early ends the process, as a Stop ends the call and frees its GPU)."""
    payload = pickle.dumps((args, kwargs))  # ZeroGPU hands the call its arguments pickled
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            call_args, call_kwargs = pickle.loads(payload)
            for item in func(*call_args, **call_kwargs):
                send.send(("item", item))
            send.send(("end", None))
        except BaseException as exc:
            send.send(("error", exc))

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    send.close()
    _record({"call": True, "duration": duration, "parent": os.getpid(), "child": proc.pid})
    try:
        while True:
            kind, value = recv.recv()
            if kind == "error":
                raise value
            if kind == "end":
                return
            yield value
    finally:  # closed early (a Stop): the call's process goes, and the GPU with it
        if proc.is_alive():
            proc.terminate()
        proc.join()


def _request_in_context() -> Any:
    """The Gradio request this thread sees, which ``spaces`` charges a call to (None: none)."""
    context = sys.modules.get("gradio.context")
    return None if context is None else context.LocalContext.request.get(None)


def GPU(fn: Callable[..., Any] | None = None, duration: Any = 60) -> Any:
    """``spaces.GPU`` and ``spaces.GPU(duration=...)``: each call of a generator function in a fork."""

    def decorate(func: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
            seconds = duration(*args, **kwargs) if callable(duration) else duration
            # spaces finds the visitor (whose quota a call is charged to) in Gradio's request context
            # variable, read in the calling thread (spaces.utils.gradio_request_var)
            visitor = visitor_of(_request_in_context())
            key = None if visitor is None else visitor[0]
            _record({"visitor_request": visitor is not None, "visitor": key})
            # no visitor: charged to no one's quota, never refused
            quota = quota_of(visitor) if visitor else Quota(None, used_s=_new_quota("none").used_s)
            try:
                held = quota.schedule(seconds)  # refused here, before any process starts, as spaces does
            except Exception as exc:
                _record({"refused": True, "duration": seconds, "message": str(exc), "visitor": key})
                raise
            t0 = time.monotonic()
            try:
                yield from forked(func, args, kwargs, seconds)
            finally:  # ended, failed or stopped: charged the time it used
                took = time.monotonic() - t0
                charged = quota.settle(held, took)
                _record({"settled": True, "duration": seconds, "held": held, "took_s": round(took, 3),
                         "charged_s": round(charged, 3), "visitor": key,
                         "left_s": None if quota.left_s is None else round(quota.left_s, 3)})  # fmt: skip

        return call

    return decorate(fn) if fn is not None else decorate
