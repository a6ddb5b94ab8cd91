"""``index``: caption each new or changed video of INPUT through ``service.run`` (locally or on Ray Data) and
store it; this process alone writes the database, one transaction per video (docs/LIBRARY.md)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marlin_demo.library.cluster import EngineWorker, rows_on_ray
from marlin_demo.library.database import THUMBS_DIR, Store, WindowText
from marlin_demo.library.inputs import REFUSED, Item, failure, range_suffix
from marlin_demo.models import fingerprint
from marlin_demo.settings import Settings, Variant

#: Settings that only change ``search`` (stage 2's find), not the captions an index holds.
SEARCH_ONLY = ("find_max_new_tokens", "find_window_s", "find_overlap_s", "top_k", "max_query_chars")
THUMB_WIDTH = 192

Note = Callable[[str], None]


def setup_fingerprint(settings: Settings, variant: Variant) -> dict[str, Any]:
    """batch's settings fingerprint of a caption run (model, settings that change answers, kernels)."""
    fp = fingerprint(settings, "")
    for name in ("data_digest", *SEARCH_ONLY):
        fp.pop(name, None)
    fp.update(task="caption", variant=variant)
    return fp


def shown_name(item: Item) -> str:
    """The name a video has in the library: batch's id (INPUT-relative), never an absolute server path."""
    return Path(item.id).name if Path(item.id).is_absolute() else item.id


@dataclass
class Pending:
    """An item to caption: its content digest and file stamp, read before any model runs."""

    item: Item
    digest: str
    size: int
    mtime_ns: int
    replaces: str | None  # the id of an entry that held this path with other content (a changed file)

    @property
    def span(self) -> str:
        """``''`` for the whole video, ``@4-10`` for a time range of it: a range is an entry of its own."""
        return range_suffix(self.item.start, self.item.end)

    @property
    def vid(self) -> str:
        return self.digest[:16] + self.span.replace("@", "_")

    @property
    def key(self) -> str:
        return self.digest + self.span


@dataclass
class Summary:
    """What one run did; ``to_dict`` is the ``--json`` summary."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self, store: Store) -> dict[str, Any]:
        videos, windows = store.counts()
        done = {k: len(getattr(self, k)) for k in ("added", "updated", "moved", "unchanged", "pruned")}
        out = {"library": str(store.folder), "videos": videos, "windows": windows, **done}
        return out | {"failed": len(self.failures), "failures": list(self.failures)}


def _digest(store: Store, path: str, size: int, mtime_ns: int) -> str:
    """The file's sha256, not read again when the library already knows this path with this stamp."""
    known = store.stamp(path)
    if known is not None and known["size"] == size and known["mtime_ns"] == mtime_ns:
        return str(known["digest"])
    from marlin_demo.video.digest import file_digest

    return file_digest(path)


def triage(store: Store, items: list[Item], summary: Summary) -> list[Pending]:
    """Sort INPUT into unchanged and moved (handled now, no model) and the videos (or ranges) to caption."""
    todo: list[Pending] = []
    claimed: set[str] = set()
    for item in items:
        try:
            st = os.stat(item.path)
            digest = _digest(store, item.path, st.st_size, st.st_mtime_ns)
        except OSError as exc:
            summary.failures.append({"video": shown_name(item), "reason": "unreadable", "error": str(exc)})
            continue
        name = shown_name(item)
        span = range_suffix(item.start, item.end)
        key = digest + span  # Pending.key: an entry is a file's content and a range of it
        known = store.by_digest(digest, span)
        if key in claimed or (known is not None and known["path"] == item.path):
            if known is not None and (known["size"], known["mtime_ns"]) != (st.st_size, st.st_mtime_ns):
                store.touch(known["id"], st.st_size, st.st_mtime_ns)
            summary.unchanged.append(name)
        elif known is not None and not os.path.exists(known["path"]):
            store.move(known["id"], name, item.path, st.st_size, st.st_mtime_ns)
            summary.moved.append(name)
        elif known is not None:  # a second copy of a video the library has: one entry per content
            summary.unchanged.append(name)
        else:
            held = store.by_path(item.path, span)
            todo.append(Pending(item, digest, st.st_size, st.st_mtime_ns, held["id"] if held else None))
        claimed.add(key)
    return todo


def prune(store: Store, summary: Summary) -> None:
    """``--prune``: drop the entries whose file is gone (after moves were matched to their new path)."""
    for video in store.videos():
        if not os.path.exists(video["path"]):
            store.remove(video["id"])
            summary.pruned.append(video["name"])


def assign_events(windows: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each window's events: every merged event that overlaps the window (or starts in it)."""

    def holds(k: int, w: dict[str, Any], e: dict[str, Any]) -> bool:
        overlaps = e["start"] < w["end"] and e["end"] > w["start"]
        last = k == len(windows) - 1
        return overlaps or w["start"] <= e["start"] < w["end"] or (last and e["start"] >= w["start"])

    return [[e for e in events if holds(k, w, e)] for k, w in enumerate(windows)]


def caption_windows(row: dict[str, Any]) -> tuple[float, list[dict[str, Any]], list[dict[str, Any]]]:
    """(duration, windows, events) of a caption row (``CaptionResult.to_dict`` + ``duration_s``)."""
    duration = float(row["duration_s"])
    windows = list(row.get("windows") or []) or [{"start": 0.0, "end": duration, "scene": row["scene"]}]
    return duration, windows, list(row.get("events") or [])


def write_thumbnail(path: str, at: float, out: Path) -> bool:
    """A small JPEG of the frame shown at ``at`` seconds (the first frame at or after it)."""
    import av

    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            tb = float(stream.time_base or 0) or 1 / 90000
            container.seek(max(0, int(at / tb)), stream=stream, backward=True, any_frame=False)
            frame = None
            for frame in container.decode(stream):
                if frame.pts is not None and frame.pts * tb >= at:
                    break
            if frame is None:
                return False
            height = max(2, round(frame.height * THUMB_WIDTH / max(1, frame.width)))
            out.parent.mkdir(parents=True, exist_ok=True)
            frame.to_image(width=THUMB_WIDTH, height=height).save(out, "JPEG", quality=70)
            return True
    except Exception:  # a thumbnail is a nicety: the window stays searchable without one
        return False


def store_caption(store: Store, job: Pending, row: dict[str, Any]) -> int:
    """Thumbnails first (files a rerun overwrites), then the video in one transaction; its window count."""
    duration, windows, events = caption_windows(row)
    texts = []
    for k, (w, evs) in enumerate(zip(windows, assign_events(windows, events), strict=True)):
        rel = f"{THUMBS_DIR}/{job.vid}/{k}.jpg"
        ok = write_thumbnail(job.item.path, (w["start"] + w["end"]) / 2, store.folder / rel)
        start, end = float(w["start"]), float(w["end"])
        texts.append(WindowText(start, end, str(w.get("scene") or ""), evs, rel if ok else None))
    store.put_video(
        vid=job.vid,
        digest=job.digest,
        name=shown_name(job.item),
        path=job.item.path,
        size=job.size,
        mtime_ns=job.mtime_ns,
        duration=duration,
        windows=texts,
        events=events,
        span=job.span,
    )
    return len(texts)


def caption_row(
    engine: Any, path: str, variant: Variant, start: float | None = None, end: float | None = None
) -> dict[str, Any]:
    """One video's (or range's) caption row: ``status`` ok with the caption JSON, or error + sentence."""
    from marlin_demo import service  # the one request path (late: the CLI's --help stays fast)

    try:
        result = service.run(engine, "caption", path, variant, start_s=start, end_s=end)
    except Exception as exc:
        reason, sentence = failure(exc)
        return {"status": "error", "reason": reason, "error": sentence}
    if result.partial is not None:  # ZeroGPU refused a later window: not this video's whole caption
        return {"status": "error", "reason": REFUSED, "error": result.partial.reason}
    return {"status": "ok", **result.to_dict(), "duration_s": float(result.info.duration_s)}


class IndexWorker(EngineWorker):
    """``index --ray``'s actor: a pending video's (or range's) caption row, with its key."""

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        caption = caption_row(self.engine, record["path"], self.variant, record["start"], record["end"])
        return {"key": record["key"], **caption}


def caption_local(
    engine: Any, todo: list[Pending], variant: Variant
) -> Iterator[tuple[Pending, dict[str, Any]]]:
    for job in todo:
        yield job, caption_row(engine, job.item.path, variant, job.item.start, job.item.end)


def caption_ray(
    settings: Settings,
    todo: list[Pending],
    variant: Variant,
    address: str | None,
    workers: int,
    gpus: float | None,
) -> Iterator[tuple[Pending, dict[str, Any]]]:
    """The pending videos captioned on Ray Data (``index --ray``); nothing starts when there is none."""
    if not todo:
        return
    jobs = {job.key: job for job in todo}
    records = [{"key": j.key, "path": j.item.path, "start": j.item.start, "end": j.item.end} for j in todo]
    kwargs = {"settings": settings, "variant": variant}
    for row in rows_on_ray(IndexWorker, kwargs, records, address, workers, gpus):
        yield jobs[row.pop("key")], row


def index(
    store: Store,
    items: list[Item],
    captions: Callable[[list[Pending]], Iterator[tuple[Pending, dict[str, Any]]]],
    *,
    prune_gone: bool = False,
    note: Note | None = None,
) -> Summary:
    """Triage INPUT, caption what is new or changed (``captions``: local or Ray), store each as it comes."""
    summary = Summary()
    todo = triage(store, items, summary)
    for job, row in captions(todo):
        name = shown_name(job.item)
        if row.get("status") != "ok":
            summary.failures.append({"video": name, "reason": row["reason"], "error": row["error"]})
            if note:
                note(f"failed {name}: {row['error']}")
            continue
        windows = store_caption(store, job, row)
        if job.replaces and job.replaces != job.vid:
            store.drop_thumbnails(job.replaces)
        (summary.updated if job.replaces else summary.added).append(name)
        if note:
            note(f"indexed {name} ({windows} window{'s' if windows != 1 else ''})")
    if prune_gone:
        prune(store, summary)
    return summary
