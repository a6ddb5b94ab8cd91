"""What every tab is handed (``shared_clip`` is the clip component itself): the app's context,
the shared event options, and ``ResultsClip``, which clip each tab's results belong to."""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from marlin_demo import agreement, variants
from marlin_demo import settings as settings_mod
from marlin_demo.engine import Engine
from marlin_demo.results import RunInfo
from marlin_demo.service.startup import ModelStatus
from marlin_demo.settings import EXAMPLES_DIR, EXAMPLES_FILE, Settings
from marlin_demo.ui import example_runs

log = logging.getLogger(__name__)

EXAMPLES_JSON = EXAMPLES_DIR / EXAMPLES_FILE

#: model-running events: no Gradio limit, so every request reaches the service's scheduler
GPU_EVENT: dict[str, Any] = {"concurrency_id": "gpu", "concurrency_limit": None}

CLIP_ID = "clip-video"
"""The page's one video (every run tab's clip, and the player their timelines seek)."""

PRIVATE_UI: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden", "queue": False}
"""A quick UI-only step: not in the API, no progress shown, not queued."""

CacheMode = Literal["eager", "lazy", "off"]
CACHE_ENV = "MARLIN_CACHE_EXAMPLES"
variant_label = variants.label  # the name a visitor reads for a variant


class ResultsClip:
    """Per session, the clip on screen and each tab's results' clip; the newest report (``STAMP_JS``) wins."""

    def __init__(self, limit: int = 4096) -> None:
        # session -> (its report's number, the clip, tab -> the clip of the tab's results)
        self._screens: dict[str, tuple[float, str, dict[str, str]]] = {}
        # session -> the tabs whose results a request's report found stale: cleared by the clip's change
        self._stale: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.limit = limit

    def seen(self, session: str, clip: str | None, stamp: float | None) -> list[str]:
        """The browser had ``clip`` on screen at ``stamp``: the tabs whose results were another clip's."""
        with self._lock:
            self._seen(session, clip or "", stamp)
            return sorted(self._stale.pop(session, set()))

    def start(self, tab: str, session: str, clip: str, stamp: float | None) -> bool:
        """A request of ``tab`` read ``clip`` at ``stamp``: its results are that clip's if it is shown."""
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
"""An event's ``js``: its last input (``Clip.stamp``) becomes the page's next number, for ``ResultsClip``."""


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


@dataclass
class UIContext:
    """Everything a tab needs: the engine, the settings, where outputs go, the examples."""

    engine: Engine
    settings: Settings
    status: ModelStatus
    output_dir: Path
    cache_mode: CacheMode = "eager"
    examples: list[dict[str, Any]] = field(default_factory=list)
    examples_dir: Path = EXAMPLES_DIR
    #: per (variant, video path): the first token's time of its last full reading (what a reuse saved)
    first_reads: dict[tuple[str, str], float] = field(default_factory=dict)
    #: the examples' finished answers (made live the first time; see ``example_runs``)
    answers: example_runs.ExampleAnswers = field(default_factory=example_runs.ExampleAnswers)
    results_clip: ResultsClip = field(default_factory=ResultsClip)

    @property
    def variants(self) -> list[str]:
        return self.engine.variants

    @property
    def default_variant(self) -> str:
        return self.variants[0]

    def variant_choices(self) -> list[tuple[str, str]]:
        return [(variant_label(v), v) for v in self.variants]

    def clip(self, example: Mapping[str, Any]) -> Path:
        return self.examples_dir / str(example["video"])

    def ground_truth(self, video: str | os.PathLike[str] | None) -> dict[str, Any] | None:
        """The example this clip is (see ``agreement.ground_truth_for``), or None."""
        return agreement.ground_truth_for(video, self.examples_dir / EXAMPLES_FILE)

    def kept_answer(
        self, task: str, path: str, variant: str, query: str | None = None
    ) -> tuple[example_runs.Key | None, example_runs.Kept | None]:
        """An example clip's answer key (None for an upload, or examples not kept) and its kept answer."""
        example = None if self.cache_mode == "off" else self.ground_truth(path)
        if example is None:
            return None, None
        key = self.answers.key(task, example, variant, query)
        return key, self.answers.get(key)

    def new_run_dir(self, kind: str) -> Path:
        """A fresh folder for one request's downloads; old ones are pruned."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        folder = self.output_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        for old in sorted(p for p in self.output_dir.iterdir() if p.is_dir())[:-200]:  # the newest 200 stay
            shutil.rmtree(old, ignore_errors=True)
        return folder

    def compare_variants(self, include_bf16: bool = False) -> list[str]:
        """bnb4 and GPTQ (and any extra variants); bf16 only when asked."""
        bf16 = ["bf16"] if include_bf16 and "bf16" in self.variants else []
        return [v for v in self.variants if v != "bf16"] + bf16

    def reuse_note(self, variant: str, info: RunInfo, ttft_s: float | None) -> str:
        """A sentence when this request reused an earlier reading of the video; full readings are kept."""
        key = (variant, str(getattr(info.video, "path", "") or ""))
        if not info.reused_prefix:
            if ttft_s is not None and key[1]:
                self.first_reads[key] = ttft_s
                while len(self.first_reads) > 256:
                    self.first_reads.pop(next(iter(self.first_reads)))
            decoded = "Its frames were already decoded for an earlier question: none were decoded again."
            return decoded if info.cached_video else ""
        earlier = self.first_reads.get(key)
        how = ", without reading the video again"
        if earlier is not None:
            how = f" instead of {fmt(earlier, ' s')} when it was first read"
        saved = f"first token in {fmt(ttft_s, ' s')}{how}"
        return (
            f"This video was already read by {variant} for an earlier question: its frames and the "
            f"model's reading of them (the video prefill) were reused, so only the question was new: {saved}."
        )


def default_output_dir(settings: Settings) -> Path:
    """MARLIN_OUTPUT_DIR, else a folder in the system temp dir (served to the browser, so not the repo)."""
    if settings.output_dir:
        return Path(settings.output_dir).expanduser().resolve()
    return Path(tempfile.gettempdir()) / "marlin-demo-outputs"


def cache_mode_from_env() -> CacheMode:
    """``MARLIN_CACHE_EXAMPLES`` = eager | lazy | off; lazy by default (eager took 707 s on 2 CPU cores)."""
    raw = settings_mod.env_value("cache_examples").lower() or "lazy"
    if raw not in ("eager", "lazy", "off"):
        raise ValueError(f"{CACHE_ENV}={raw!r} is not one of eager, lazy, off.")
    return raw  # type: ignore[return-value]


def available_examples(examples_json: Path = EXAMPLES_JSON) -> list[dict[str, Any]]:
    """Ground-truth entries whose clip is present (the examples are optional and rendered separately)."""
    folder = examples_json.parent
    return [e for e in agreement.load_examples(examples_json) if (folder / str(e["video"])).is_file()]


def fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}{unit}"
