"""What every tab shares: the app context, upload checks, error mapping, output folders, formatting
(no layout: the tab modules own their components and events)."""

from __future__ import annotations

import contextlib
import html
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import gradio as gr

from marlin_demo import agreement, service, variants
from marlin_demo import settings as settings_mod
from marlin_demo.contract import clock, clock_part
from marlin_demo.engine import USER_ERRORS, Engine
from marlin_demo.longvideo import policy
from marlin_demo.results import Result, RunInfo, memory_label
from marlin_demo.service import cost, space
from marlin_demo.service.startup import ModelStatus
from marlin_demo.settings import EXAMPLES_DIR, EXAMPLES_FILE, Settings
from marlin_demo.tasks import CAPTION, TASKS, get_task
from marlin_demo.ui import example_notes, gradio_hooks
from marlin_demo.video import plan_sampling

log = logging.getLogger(__name__)

EXAMPLES_JSON = EXAMPLES_DIR / EXAMPLES_FILE

#: model-running events: no Gradio limit, so every request reaches the service, whose scheduler takes
#: turns window by window and holds at most MARLIN_QUEUE_SIZE requests (service.scheduler)
GPU_EVENT: dict[str, Any] = {"concurrency_id": "gpu", "concurrency_limit": None}

CLIP_ID = "clip-video"
"""The page's one video (every run tab's clip, and the player their timelines seek)."""

PRIVATE_UI: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden", "queue": False}
"""A quick UI-only step: not in the API, no progress shown, not queued."""

CacheMode = Literal["eager", "lazy", "off"]
CACHE_ENV = "MARLIN_CACHE_EXAMPLES"


variant_label = variants.label  # the name a visitor reads for a variant


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
    #: per (variant, video path): the first token's time when the video was last read in full,
    #: so a later question that reuses that reading can say what it saved
    first_reads: dict[tuple[str, str], float] = field(default_factory=dict)
    #: the examples' finished answers (made live the first time; see ``example_notes``)
    answers: example_notes.ExampleAnswers = field(default_factory=example_notes.ExampleAnswers)
    #: per session: the clip on screen and the clip each tab's results belong to (see ``ResultsClip``)
    results_clip: ResultsClip = field(default_factory=lambda: ResultsClip())

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
        """The example this clip is (see ``compare.ground_truth_for``), or None."""
        return agreement.ground_truth_for(video, self.examples_dir / EXAMPLES_FILE)

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
        chosen = [v for v in self.variants if v != "bf16"]
        if include_bf16 and "bf16" in self.variants:
            chosen.append("bf16")
        return chosen

    def reuse_note(self, variant: str, info: RunInfo, ttft_s: float | None) -> str:
        """A sentence when this request reused an earlier reading of the video; full readings are kept."""
        key = (variant, str(getattr(info.video, "path", "") or ""))
        if not info.reused_prefix:
            if ttft_s is not None and key[1]:
                self.first_reads[key] = ttft_s
                while len(self.first_reads) > 256:
                    self.first_reads.pop(next(iter(self.first_reads)))
            if info.cached_video:
                return "Its frames were already decoded for an earlier question: none were decoded again."
            return ""
        earlier = self.first_reads.get(key)
        saved = (
            f"first token in {fmt(ttft_s, ' s')} instead of {fmt(earlier, ' s')} when it was first read"
            if earlier is not None
            else f"first token in {fmt(ttft_s, ' s')}, without reading the video again"
        )
        return (
            f"This video was already read by {variant} for an earlier question: its frames and the "
            f"model's reading of them (the video prefill) were reused, so only the question was new: {saved}."
        )


def default_output_dir(settings: Settings) -> Path:
    """MARLIN_OUTPUT_DIR, else a folder in the system temp dir (served to the browser, so not the repo)."""
    if settings.output_dir:
        return Path(settings.output_dir).expanduser().resolve()
    return Path(tempfile.gettempdir()) / "marlin-demo-outputs"


def cache_mode_from_env(on_space: bool) -> CacheMode:
    """``MARLIN_CACHE_EXAMPLES`` = eager | lazy | off; default lazy everywhere: eager answering of the 24
    examples on a busy 2-core CPU (tiny stand-in) took until 707 s, and a visitor's request waits behind."""
    raw = settings_mod.env_value("cache_examples").lower()
    if raw in ("eager", "lazy", "off"):
        return raw  # type: ignore[return-value]
    if raw:
        raise ValueError(f"{CACHE_ENV}={raw!r} is not one of eager, lazy, off.")
    del on_space  # the same default on a Space and locally (see above)
    return "lazy"


def available_examples(examples_json: Path = EXAMPLES_JSON) -> list[dict[str, Any]]:
    """Ground-truth entries whose clip is present (the examples are optional and rendered separately)."""
    folder = examples_json.parent
    return [e for e in agreement.load_examples(examples_json) if (folder / str(e["video"])).is_file()]


def short_name(example: Mapping[str, Any]) -> str:
    """An example's clip name without extension or underscores, for example labels."""
    return str(example["video"]).rsplit(".", 1)[0].replace("_", " ")


EXAMPLE_TIMING = {
    "lazy": "the first click runs the model as Run does; later clicks show that answer at once",
    "eager": "answered at start-up, then shown at once; until then a click runs the model",
    "off": "each click runs the model",
}


def examples_label(ctx: UIContext) -> str:
    """The Examples heading: one short line (how a click behaves is in the note under it)."""
    return "Examples (tiny stand-in answers)" if ctx.settings.is_tiny else "Examples"


def examples_note(ctx: UIContext) -> str:
    """One line under the examples: what a click does."""
    return f'<p class="mx-note">A click fills the inputs and runs it: {EXAMPLE_TIMING[ctx.cache_mode]}.</p>'


def example_labels(labels: Sequence[str], limit: int = 60) -> list[str]:
    """Example labels cut at a word boundary (never mid-word), with an ellipsis when cut."""
    return [
        label if len(label) <= limit else label[: limit + 1].rsplit(" ", 1)[0].rstrip(' ·,;:“"') + "…"
        for label in labels
    ]


def kept_answer(
    ctx: UIContext, task: str, path: str, variant: str, query: str | None = None
) -> tuple[example_notes.Key | None, example_notes.Kept | None]:
    """An example clip's answer key (None for an upload, or examples not kept) and its kept answer."""
    example = None if ctx.cache_mode == "off" else ctx.ground_truth(path)
    if example is None:
        return None, None
    key = ctx.answers.key(task, example, variant, query)
    return key, ctx.answers.get(key)


class ResultsClip:
    """Per browser session: the clip on screen, and the clip each tab's results belong to.

    The browser numbers each report of its clip (``STAMP_JS``: a counter per page), and the newest number
    wins. Events reach the server in any order (an example's run can overtake the clip's own change
    event, a queued run can start after a later upload), so arrival order cannot say which clip is on
    screen; the browser's own order can."""

    def __init__(self, limit: int = 4096) -> None:
        self._shown: dict[str, tuple[float, str]] = {}  # session -> (its report's number, the clip)
        self._owners: dict[str, dict[str, str]] = {}  # session -> tab -> its results' clip
        self._lock = threading.Lock()
        self.limit = limit

    def seen(self, session: str, clip: str | None, stamp: float | None) -> list[str]:
        """The browser had ``clip`` on screen at ``stamp``: the tabs whose results were another clip's
        (forgotten, for the caller to clear); none when a newer report already came."""
        with self._lock:
            return self._seen(session, clip or "", stamp)

    def start(self, tab: str, session: str, clip: str, stamp: float | None) -> bool:
        """A request of ``tab`` read ``clip`` at ``stamp``: its results are that clip's from now, if the
        clip is still the one on screen (False: a newer clip is, and the request shows nothing)."""
        with self._lock:
            self._seen(session, clip, stamp)
            if not self._is_shown(session, clip):
                return False
            self._owners.setdefault(session, {})[tab] = clip
            return True

    def shows(self, session: str, clip: str) -> bool:
        """``clip`` is still the one on screen (True before the page has said which one is)."""
        with self._lock:
            return self._is_shown(session, clip)

    def _is_shown(self, session: str, clip: str) -> bool:
        shown = self._shown.get(session)
        return shown is None or same_file(shown[1], clip)

    def _seen(self, session: str, clip: str, stamp: float | None) -> list[str]:
        number = -1.0 if stamp is None else float(stamp)  # unnumbered (an old page): only as a first report
        if session in self._shown and number <= self._shown[session][0]:
            return []
        self._shown[session] = (number, clip)
        owners = self._owners.setdefault(session, {})
        stale = [tab for tab, owner in owners.items() if not same_file(owner, clip)]
        for tab in stale:
            del owners[tab]
        while len(self._shown) > self.limit:
            self._shown.pop(next(iter(self._shown)))
        while len(self._owners) > self.limit:
            self._owners.pop(next(iter(self._owners)))
        return stale


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


def session_of(request: gr.Request | None) -> str:
    return (getattr(request, "session_hash", None) or "") if request is not None else ""


NOT_UPLOADED = (
    "Send the video as an uploaded file: in gradio_client use handle_file('clip.mp4'). "
    "A path on the server ({name}) is not accepted."
)


def is_inside(path: Path, folder: Path) -> bool:
    """``path`` lies in ``folder`` once links are resolved (only uploads and examples are served)."""
    try:
        path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True


def require_upload(video: str | None, ctx: UIContext, uploads_only: bool = False) -> str:
    """The path of an upload (or, unless ``uploads_only``, a bundled example); else a clear ``gr.Error``."""
    if video is None or (isinstance(video, str) and not video.strip()):
        raise gr.Error("No video: upload a clip (MP4, WebM, MOV or MKV) first.", print_exception=False)
    path = Path(str(video))
    allowed = [gradio_hooks.upload_folder()]
    allowed += [] if uploads_only else [ctx.examples_dir, ctx.output_dir]
    if not any(is_inside(path, folder) for folder in allowed):
        raise gr.Error(NOT_UPLOADED.format(name=html.escape(path.name or str(video))), print_exception=False)
    if not path.is_file():
        raise gr.Error(
            "The uploaded video is no longer on the server: upload it again.", print_exception=False
        )
    return str(path)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Engine/video/value errors become ``gr.Error`` with their message; anything else a short apology
    (never a stack trace: unexpected errors are logged on the server only)."""
    try:
        yield
    except gr.Error:
        raise
    except USER_ERRORS as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    except Exception as exc:
        log.exception("unexpected error in a request")
        raise gr.Error(
            f"Something went wrong on the server ({type(exc).__name__}); it has been logged. "
            "Try again, or try another clip."
        ) from None


def pick_variant(variant: str | None, ctx: UIContext) -> str:
    """The variant asked for, the default when none was given; unknown names are refused clearly."""
    if variant is None or variant == "":
        return ctx.default_variant
    if variant not in ctx.variants:
        raise gr.Error(variants.unknown(variant, ctx.variants))
    return variant


def tab_work(
    ctx: UIContext, tab: str | None, compare_task: str | None = None, with_bf16: bool = False
) -> tuple[str, list[str]] | None:
    """What the selected tab would run on the clip: its task and variants (Compare: each of its variants,
    one call per window each); None on a tab that runs nothing on it (Library, About)."""
    tab = tab or "caption"  # the page opens on Caption
    if tab == "compare":
        return get_task(compare_task or CAPTION.name).name, ctx.compare_variants(bool(with_bf16))
    return (tab, [ctx.default_variant]) if tab in TASKS else None  # a task's tab (its id) runs that task


def clip_status(
    ctx: UIContext,
    video: str | None,
    start: float | None = None,
    end: float | None = None,
    tab: str | None = "caption",
    compare_task: str | None = None,
    with_bf16: bool = False,
) -> str:
    """One line as soon as a clip (or a range of it) is chosen: it will be read, and what the selected tab
    would cost on it (``tab_work``; or why not). Only the file's facts are probed (no decoding); a
    range's limit is the request's."""
    if not video:
        return ""
    work = tab_work(ctx, tab, compare_task, with_bf16)
    share = 1.0
    try:
        path = require_upload(video, ctx)
        with user_errors():
            asked = service.asked_range(ctx.engine, path, start, end)
            info = ctx.engine.info(Path(path), whole=asked is None)
            s = ctx.engine.settings
            seconds = info.duration_s if asked is None else asked[1] - asked[0]
            split = [
                (task.name.capitalize(), len(policy.plan_for(task, seconds, s)), task.windows(s)[0])
                for task in TASKS.values()
            ]
            if work is not None and space.zero_gpu():  # the calls are sized by their frames
                share = service.call_share(ctx.engine, work[0], path, start, end)
    except gr.Error as exc:
        return status_html(exc.message, error=True)
    text = f"Ready: {clock(info.duration_s)}, {info.display_width}×{info.display_height}, {info.codec}"
    if asked is not None:
        text += f"; asking about {clock_part(*asked)}"
    for name, n, size in split:
        text += f"; {name} reads it as {n} windows of up to {clock(size)}" if n > 1 else ""
    note = ""
    if work is not None:
        plan = plan_sampling(info, ctx.engine.params)
        note = cost.estimate_line(work[0], plan, seconds, s, work[1], ctx.engine.params, share)
    return status_html(text + "." + (f" {note}" if note else ""))


def status_html(message: str, error: bool = False) -> str:
    """The line under an input: what is wrong (red) or that it is fine."""
    cls = "ms-status ms-error" if error else "ms-status ms-ok"
    role = ' role="alert"' if error else ""
    return f'<div class="{cls}"{role}>{html.escape(message)}</div>'


#: ``js_on_load`` of the status line under the page's clip
STATUS_JS = r"""
// Once per page: the browser's own "Video not playable" toast is replaced by the status line under the
// input (the server's sentence says what is wrong; a clip the server accepts but this browser cannot
// preview gets a note there instead), so a bad file is said once, next to the input.
if (!window.__marlinStatus) {
  window.__marlinStatus = true;
  const onlyUnplayable = (item) => {
    const lines = item.innerText.split('\n').map((l) => l.trim())
      .filter((l) => l && l !== '×' && !/^(error|\d+)$/i.test(l));
    return lines.length > 0 && lines.every((l) => l === 'Video not playable');
  };
  // Gradio's own refusal of a file by its type ("Only video/x-m4v,video/* allowed") becomes the app's
  // sentence in the clip's status line
  const typeRefused = (item) => /Only .*video.* allowed/i.test(item.innerText);
  const sayRefused = () => {
    const line = document.querySelector('#clip-status');
    if (!line) return;
    const div = document.createElement('div');
    div.className = 'ms-status ms-error';
    div.setAttribute('role', 'alert');
    div.textContent = 'This file is not a video: upload an MP4, WebM, MOV or MKV clip.';
    line.querySelector('.ms-status')?.remove();
    (line.querySelector('.prose') || line).appendChild(div);
  };
  new MutationObserver(() => {
    document.querySelectorAll('.toast-item').forEach((item) => {
      if (item.style.display === 'none') return;
      if (typeRefused(item)) { item.style.display = 'none'; sayRefused(); }
      else if (onlyUnplayable(item)) item.style.display = 'none';
    });
  }).observe(document.body, { childList: true, subtree: true });
  document.addEventListener('error', (ev) => {
    const v = ev.target;
    if (!v || v.tagName !== 'VIDEO') return;
    const host = v.closest('[id$="-video"]');
    if (!host) return;
    const ok = document.querySelector('#' + host.id.replace(/-video$/, '-status') + ' .ms-ok');
    if (ok && !ok.dataset.nopreview) {
      ok.dataset.nopreview = '1';
      ok.textContent += ' This browser cannot preview it; the model can still read it.';
    }
  }, true);
}
"""


def fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}{unit}"


def metrics_html(
    m: Mapping[str, Any], cold: bool, variant: str, info: RunInfo | None = None, reuse: str = ""
) -> str:
    """Cost of one request as cards; ``info`` adds what the public JSON leaves out (first visible text,
    kernels), ``reuse`` (``UIContext.reuse_note``) what an earlier reading of the same video saved."""
    cards = [
        ("Latency", fmt(m.get("latency_s"), " s"), "request end to end, model load excluded"),
        ("First token", fmt(m.get("ttft_s"), " s"), "decode + prefill until the first new token"),
        ("Tokens/s", fmt(m.get("tokens_per_s"), "", 1), "generation speed after the first token"),
        ("Output tokens", str(m.get("output_tokens", "–")), "tokens the model wrote"),
        ("Video tokens", str(m.get("video_tokens", "–")), "vision tokens of the sampled frames"),
        ("Peak memory", fmt(m.get("peak_memory_mb"), " MB", 0), memory_label(str(m.get("memory_kind", "")))),
        ("Load time", fmt(m.get("load_s"), " s"), "loading this variant (paid once)"),
        ("Device", html.escape(str(m.get("device", "–"))), f"variant {variant}"),
    ]
    if info is not None:
        dtype = html.escape(info.runtime.compute_dtype or "–")
        cards[-1] = ("Device", f"{cards[-1][1]} · {dtype}", f"variant {variant}, computed in {dtype}")
        cards[2:2] = [("First text", fmt(info.first_text_s, " s"), "until the first visible words")]
        compiled = f"; compiled decoding: {info.compile}" if info.compile and info.compile != "off" else ""
        if compiled:
            compiled += f", {info.compile_s:.1f} s compile paid once"
        cards.append(
            ("Kernel", html.escape(info.kernel or "–"), f"attention: {info.attention or '–'}{compiled}")
        )
    body = "".join(
        f'<div class="md-card{" md-wide" if len(v) > 9 else ""}"><div class="md-k">{k}</div>'
        f'<div class="md-v">{v}</div>'
        f'<div class="md-h">{html.escape(h)}</div></div>'
        for k, v, h in cards
    )
    run = (
        f'<span class="md-badge md-cold">cold run: {variant} was loaded for this request '
        f"({fmt(m.get('load_s'), ' s')})</span>"
        if cold
        else f'<span class="md-badge md-warm">warm run: {variant} was already loaded</span>'
    )
    cached = example_notes.cached_badge(m, cold, variant)
    run = cached or run
    if reuse and cached is None:
        run += (
            ' <span class="md-badge md-reuse">video already read</span>'
            f'<div class="md-reuse-note">{html.escape(reuse)}</div>'
        )
    return f'<div class="md-metrics"><div class="md-run">{run}</div><div class="md-grid">{body}</div></div>'


def notice_html(ctx: UIContext, result: Result, what: str) -> str:
    """Honest notes: a partial answer, the range asked, stand-in weights, an off-format answer, repairs."""
    notes: list[str] = []
    if result.partial is not None:
        notes.append(f"<b>{html.escape(result.partial.note())}</b>")
    if result.range_s is not None:
        start, end = result.range_s
        notes.append(f"Asked about {clock_part(start, end)} of the video; times are the video's own.")
    if not result.format_ok:
        trained = get_task(what).answer.form  # the format its answer was trained in
        notes.append(
            f"<b>Not in Marlin's format.</b> The answer did not follow the trained {html.escape(trained)} "
            "format; it is shown as far as it could be read."
        )
    if result.repaired:
        items = "".join(f"<li>{html.escape(r)}</li>" for r in result.info.repairs)
        items = items or "<li>details not recorded</li>"
        part = "the video" if result.range_s is None else "the range asked"
        notes.append(f"<b>Repaired.</b> The answer was adjusted to fit {part}:<ul>{items}</ul>")
    if tiny_in_use(ctx):
        notes.append(
            "<b>Tiny stand-in.</b> These words come from random weights that only learned the answer "
            "format: they say nothing about the video."
        )
    if not notes:
        return ""
    return '<div class="md-notice">' + "".join(f"<p>{n}</p>" for n in notes) + "</div>"


def error_html(message: str) -> str:
    return f'<div class="md-notice md-error"><p>{html.escape(message)}</p></div>'


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path


def tiny_in_use(ctx: UIContext) -> bool:
    return ctx.engine.settings.is_tiny
