"""Which clip each tab's results belong to, per browser session (``ResultsClip``), and the browser's
numbering of its reports of the clip (``STAMP_JS``): the one rule behind "the answer on screen is the clip on
screen's" (``one_clip`` wires it)."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path


class ResultsClip:
    """Per browser session: the clip on screen, and the clip each tab's results belong to.

    The browser numbers each report of its clip (``STAMP_JS``: a counter per page), and the newest number
    wins. Events reach the server in any order (an example's run can overtake the clip's own change
    event, a queued run can start after a later upload), so arrival order cannot say which clip is on
    screen; the browser's own order can."""

    def __init__(self, limit: int = 4096) -> None:
        # session -> (its report's number, the clip, tab -> the clip of the tab's results)
        self._screens: dict[str, tuple[float, str, dict[str, str]]] = {}
        # session -> the tabs whose results a request's report found stale: cleared by the clip's change
        self._stale: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.limit = limit

    def seen(self, session: str, clip: str | None, stamp: float | None) -> list[str]:
        """The browser had ``clip`` on screen at ``stamp`` (the clip's change event): the tabs whose results
        were another clip's (forgotten, for the caller to clear). A newer report that came first, a request
        of another tab started on the new clip, found them and left them here: they are said even then."""
        with self._lock:
            self._seen(session, clip or "", stamp)
            return sorted(self._stale.pop(session, set()))

    def start(self, tab: str, session: str, clip: str, stamp: float | None) -> bool:
        """A request of ``tab`` read ``clip`` at ``stamp``: its results are that clip's from now, if the
        clip is still the one on screen (False: a newer clip is, and the request shows nothing)."""
        with self._lock:
            self._seen(session, clip, stamp)
            if not self._is_shown(session, clip):
                return False
            self._screens[session][2][tab] = clip  # (``_seen`` put the session there)
            self._stale.get(session, set()).discard(tab)  # its results are this request's from now
            return True

    def shows(self, session: str, clip: str) -> bool:
        """``clip`` is still the one on screen (True before the page has said which one is)."""
        with self._lock:
            return self._is_shown(session, clip)

    def taken(self, tab: str, session: str, clip: str) -> bool:
        """A newer request of ``tab`` started on another clip than ``clip``: the tab is that request's."""
        with self._lock:
            screen = self._screens.get(session)
            owner = None if screen is None else screen[2].get(tab)
            return owner is not None and not same_file(owner, clip)

    def _is_shown(self, session: str, clip: str) -> bool:
        screen = self._screens.get(session)
        return screen is None or same_file(screen[1], clip)

    def _seen(self, session: str, clip: str, stamp: float | None) -> None:
        """A newer report's clip is the one on screen; the tabs it makes stale wait in ``_stale``."""
        number = -1.0 if stamp is None else float(stamp)  # unnumbered (an old page): only as a first report
        screen = self._screens.get(session)
        if screen is not None and number <= screen[0]:
            return
        owners = {} if screen is None else screen[2]
        stale = [tab for tab, owner in owners.items() if not same_file(owner, clip)]
        for tab in stale:
            del owners[tab]
        self._stale.setdefault(session, set()).update(stale)
        self._screens[session] = (number, clip, owners)
        while len(self._screens) > self.limit:
            gone = next(iter(self._screens))
            self._screens.pop(gone)
            self._stale.pop(gone, None)


STAMP_JS = """(...args) => {
  window.__marlinClipStamp = (window.__marlinClipStamp || 0) + 1;
  return [...args.slice(0, -1), window.__marlinClipStamp];
}"""
"""An event's ``js``: its last input (the clip's stamp, ``one_clip.Clip.stamp``) becomes the page's next
number, taken in the browser as the event fires, so ``ResultsClip`` can order what reaches it."""


def same_file(a: str | None, b: str | None) -> bool:
    """The same clip, whatever folder Gradio copied it to (name and size; no hashing on each change)."""
    if not a or not b:
        return False
    if a == b:
        return True
    try:
        return os.path.basename(a) == os.path.basename(b) and os.path.getsize(a) == os.path.getsize(b)
    except OSError:
        return False


def clip_stem(video: str | os.PathLike[str] | None) -> str:
    """A file-name stem from the clip's name (downloads are named after the clip)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(video or "")).stem).strip("._")
    return stem[:60] or "clip"
