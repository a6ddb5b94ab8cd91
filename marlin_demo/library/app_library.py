"""The library a running page searches (``prebuilt`` is the shipped copy it may start from): its
index built once per process while every searcher follows its progress."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marlin_demo.library import index
from marlin_demo.library.database import THUMBS_DIR, LibraryError, Store
from marlin_demo.library.inputs import REFUSED, Item, range_suffix
from marlin_demo.library.search import SearchAnswer, search
from marlin_demo.longvideo import runner


@dataclass
class LibrarySource:
    """The tab's library. ``items``: the example clips to index here (None: a library built by ``index``)."""

    folder: Path
    variant: str
    items: list[Item] | None
    engine: Any
    label: str
    cost: str = ""  # what building it costs before the first search ("" when it is ready or shipped)
    shipped: str = ""  # what became of the shipped library of the examples
    done: int = 0  # videos captioned by this build
    failed: int = 0  # videos that could not be (each one's sentence in ``failures``)
    total: int = 0
    ready: bool = False
    error: str | None = None
    failures: list[str] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def run_search(
        self,
        query: str,
        top_k: int,
        progress: Callable[[int, int], None] | None = None,
        stop: Any = None,
        visitor: str | None = None,
    ) -> SearchAnswer:
        """Both stages on the library (its own connection: SQLite's belong to one thread)."""
        with contextlib.closing(Store(self.folder, create=False)) as store:
            engine = self.engine
            return search(
                store,
                query,
                engine.settings,
                lambda: engine,
                self.variant,
                top_k=top_k,
                progress=progress,
                stop=stop,
                visitor=visitor,
            )

    def searching(
        self, query: str, top_k: int, stop: threading.Event, visitor: str | None = None
    ) -> Generator[runner.Item, None, None]:
        """``run_search`` as ``runner.threaded``'s items, ("text", (k, n)) as window k of n is asked."""
        return runner.threaded(
            lambda on_text: self.run_search(query, top_k, lambda k, n: on_text((k, n)), stop, visitor),
            contextlib.nullcontext,
        )

    def indexed(self) -> bool:
        """Whether the index is built, or a library on disk already holds every item as it is now."""
        if self.ready or self.items is None:
            return self.ready
        try:
            with Store(self.folder, create=False) as store:
                return all(_held(store, item) for item in self.items)
        except LibraryError:
            return False

    def allowed_paths(self) -> list[str]:
        """What the app may serve from this library: its thumbnails and its videos, nothing else."""
        paths = [str(self.folder / THUMBS_DIR)]
        if self.items is not None:
            return paths + [it.path for it in self.items]
        try:
            with Store(self.folder, create=False) as store:
                return paths + [v["path"] for v in store.videos()]
        except LibraryError:
            return paths

    def start(self) -> None:
        """Build the index in the background (once; again after a failure)."""
        with self._cond:
            if self.ready or (self._thread is not None and self._thread.is_alive()):
                return
            self.error, self.done, self.failed, self.failures = None, 0, 0, []
            # in the starter's context: the first visitor's search pays for the build (docs/SPACE.md)
            run = contextvars.copy_context().run
            self._thread = threading.Thread(
                target=run, args=(self._build,), name="library-index", daemon=True
            )
            self._thread.start()

    def _build(self) -> None:
        try:
            if self.items is None:
                Store(self.folder, create=False).close()  # one sentence when the folder holds no library
            else:
                self._index(self.items)
            outcome: tuple[bool, str | None] = (True, None)
        except Exception as exc:  # said to the visitor as one sentence
            outcome = (False, str(exc) if isinstance(exc, ValueError) else f"Indexing failed ({exc}).")
        with self._cond:
            self.ready, self.error = outcome
            self._cond.notify_all()

    def _index(self, items: list[Item]) -> None:
        refused: list[str] = []
        with Store(self.folder) as store:
            store.check_setup(index.setup_fingerprint(self.engine.settings, self.variant))

            def captions(todo: list[index.Pending]) -> Iterator[tuple[index.Pending, dict[str, Any]]]:
                with self._cond:
                    self.total = len(todo)
                    self._cond.notify_all()
                for job, row in index.caption_local(self.engine, todo, self.variant):
                    yield job, row  # stored (or noted as failed) before the next is asked for
                    with self._cond:
                        if row.get("status") == "ok":
                            self.done += 1
                        else:
                            self.failed += 1
                            self.failures.append(str(row["error"]))
                        self._cond.notify_all()
                    if row.get("reason") == REFUSED:  # each later call would be refused too
                        refused.append(str(row["error"]))
                        return

            index.index(store, items, captions, prune_gone=True)
        if refused:  # not ready: the next search builds on, from the videos still missing
            raise ValueError(
                f"Indexing {self.label} stopped after {self.done} of {self.total} videos: {refused[0]}"
            )

    def progress(self) -> Iterator[tuple[int, int, int]]:
        """(captioned, failed, to caption) each time it changes, until ready; a failed build: LibraryError."""
        self.start()
        last: tuple[int, int, int] | None = None

        def changed(seen: tuple[int, int, int] | None) -> bool:
            return self.ready or self.error is not None or (self.done, self.failed, self.total) != seen

        while True:
            with self._cond:
                self._cond.wait_for(functools.partial(changed, last))
                ready, error, now = self.ready, self.error, (self.done, self.failed, self.total)
            if error is not None:
                raise LibraryError(error)
            if ready:
                return
            last = now
            yield now


def _held(store: Store, item: Item) -> bool:
    """The library holds this file, unchanged since, for this range (``index.triage`` would skip it)."""
    row = store.by_path(item.path, range_suffix(item.start, item.end))
    try:
        st = os.stat(item.path)
    except OSError:
        return False
    return row is not None and (row["size"], row["mtime_ns"]) == (st.st_size, st.st_mtime_ns)
