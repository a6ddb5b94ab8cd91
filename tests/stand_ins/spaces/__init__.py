"""A stand-in for Hugging Face's ``spaces`` package, for an app server started as if on ZeroGPU.

Put this folder's parent first on the server's PYTHONPATH with ``SPACES_ZERO_GPU=true``: the app then
takes its ZeroGPU path (``spaces`` imported before torch, one ``spaces.GPU`` call per window, models
loaded at start-up), and each call runs as ZeroGPU runs it, in a forked process whose items are piped
back. The real package cannot run here: it asks the platform's device service for a GPU. Each call,
and whether torch was imported before this package, is appended as a JSON line to the file named by
``MARLIN_STAND_IN_GPU_LOG`` (when set), for the test to read.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["GPU", "forked"]


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


def GPU(fn: Callable[..., Any] | None = None, duration: Any = 60) -> Any:
    """``spaces.GPU`` and ``spaces.GPU(duration=...)``: each call of a generator function in a fork."""

    def decorate(func: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
            seconds = duration(*args, **kwargs) if callable(duration) else duration
            yield from forked(func, args, kwargs, seconds)

        return call

    return decorate(fn) if fn is not None else decorate
