"""What a collection command runs on (a folder, a glob, one video, a JSONL/CSV manifest) and the one
sentence a failed video is reported with: below ``batch`` and ``index``, so both read INPUT the same way."""

from __future__ import annotations

import csv
import glob
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from marlin_demo.longvideo import policy
from marlin_demo.tasks import get_task

VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv", ".ts", ".3gp"}
)


class InputError(ValueError):
    """An unusable INPUT or manifest: one line for the user."""


@dataclass(frozen=True)
class Item:
    """One row to produce. ``video`` is shown in the row; ``path`` is what a worker opens."""

    id: str
    video: str
    path: str
    query: str | None
    #: a time range of the video (a manifest's ``start`` / ``end``, seconds; None: from 0 / to the end)
    start: float | None = None
    end: float | None = None

    @property
    def span(self) -> tuple[float | None, float | None] | None:
        """The range asked about, or None for the whole video."""
        return None if self.start is None and self.end is None else (self.start, self.end)


def range_suffix(start: float | None, end: float | None) -> str:
    """``@4-10`` (``@0-10``, ``@4-end``): what an id carries for a time range, '' for the whole video."""
    return "" if start is None and end is None else f"@{start or 0:g}-{'end' if end is None else f'{end:g}'}"


def _default_id(base: str, query: str | None, start: float | None = None, end: float | None = None) -> str:
    # the query's hash keeps ids stable when a manifest gains or loses rows; a range makes its own item
    base += range_suffix(start, end)
    if query is None:
        return base
    return f"{base}#{hashlib.sha1(query.encode('utf-8')).hexdigest()[:8]}"


def _seconds(rec: Mapping[str, object], name: str, where: str) -> float | None:
    """A manifest row's ``start`` or ``end`` in seconds (None when empty); anything else is an InputError."""
    raw = rec.get(name)
    try:
        return policy.seconds(raw, name)
    except policy.RangeError:
        raise InputError(f"{where}: {name} must be a number of seconds, got {raw!r}.") from None


def _read_manifest(path: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames or "video" not in reader.fieldnames:
            raise InputError(
                f"{path.name} has no 'video' column: a CSV manifest needs video[,query][,id][,start][,end]."
            )
        return [dict(r) for r in reader]
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise InputError(
                f"Line {n} of {path.name} is not JSON: one object per line is expected."
            ) from None
        if not isinstance(rec, dict) or not rec.get("video"):
            raise InputError(f"Line {n} of {path.name} has no 'video': each line needs a video path.")
        rows.append(rec)
    return rows


def collect(source: str, task: str, query: str | None = None) -> list[Item]:
    """The items of INPUT, in a stable order; ids must be unique."""
    asks = get_task(task).query
    if not asks and query is not None:
        raise InputError(f"--query is only for a task that takes one, not --task {task}.")
    src = Path(source)
    # (shown, path, query, id, start, end)
    entries: list[tuple[str, Path, str | None, str | None, float | None, float | None]] = []
    if src.is_file() and src.suffix.lower() in (".jsonl", ".csv"):
        for n, rec in enumerate(_read_manifest(src), start=1):
            video = str(rec["video"]).strip()
            p = Path(video) if Path(video).is_absolute() else src.parent / video
            q = rec.get("query") or query
            where = f"Row {n} of {src.name} ({video})"
            start, end = _seconds(rec, "start", where), _seconds(rec, "end", where)
            entries.append((video, p, q, (rec.get("id") or None), start, end))
    elif src.is_dir():
        found = (p for p in sorted(src.rglob("*")) if p.is_file() and p.suffix.lower() in VIDEO_EXTENSIONS)
        entries += [(str(src / p.relative_to(src)), p, query, None, None, None) for p in found]
    elif src.is_file():
        entries.append((source, src, query, None, None, None))
    elif glob.has_magic(source):
        for match in sorted(glob.glob(source, recursive=True)):
            if Path(match).is_file():
                entries.append((match, Path(match), query, None, None, None))
    else:
        raise InputError(
            f"No file, folder or manifest at {source}: "
            "give a folder of videos, a glob or a JSONL/CSV manifest."
        )
    if not entries:
        raise InputError(
            f"No videos found in {source}: allowed extensions are {', '.join(sorted(VIDEO_EXTENSIONS))}."
        )
    items: list[Item] = []
    seen: set[str] = set()
    for shown, p, q, given_id, start, end in entries:
        if asks and not (q and str(q).strip()):
            raise InputError(
                f"{shown} has no query: the {task} task needs --query or a 'query' in the manifest."
            )
        q = str(q) if asks else None
        base = Path(shown).name if src.is_file() and not given_id else shown
        if src.is_dir():
            base = p.relative_to(src).as_posix()
        item_id = str(given_id) if given_id else _default_id(base, q, start, end)
        if item_id in seen:
            raise InputError(
                f"The id {item_id!r} appears twice: ids (and video+range+query rows) must be unique."
            )
        seen.add(item_id)
        items.append(Item(id=item_id, video=shown, path=str(p.resolve()), query=q, start=start, end=end))
    return items


#: the reason of a video ZeroGPU refused a call for (its sentence says what the visitor's quota allows)
REFUSED = "gpu_refused"


def failure(exc: BaseException) -> tuple[str, str]:
    """(reason, sentence): the sentence is what the CLI prints; the reason groups the summary."""
    from marlin_demo.models import ModelLoadError
    from marlin_demo.service.gpu_calls import GpuRefused
    from marlin_demo.video import VideoError

    msg = str(exc)
    if isinstance(exc, GpuRefused):
        return REFUSED, msg
    if isinstance(exc, ModelLoadError):
        return "model_load", msg
    if "time limit" in msg:
        return "timeout", msg
    if "Out of GPU memory" in msg:
        return "out_of_memory", msg
    if isinstance(exc, VideoError):
        if "at most" in msg:
            return "over_limit", msg
        if "could not be decoded" in msg:
            return "undecodable", msg
        return "not_a_video", msg
    if isinstance(exc, ValueError):
        return "bad_input", msg
    first = msg.strip().splitlines()[0][:300] if msg.strip() else ""
    return "model_error", f"The model failed on this video ({type(exc).__name__}: {first})."
