"""Benchmark data: ``examples.json`` and its videos (docs/BENCHMARK.md), and a Charades-STA converter. Loading
validates up front, one sentence naming the entry and fix, so a long run never dies on a typo."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marlin_demo.exits import fail
from marlin_demo.model_io import Event
from marlin_demo.out_folder import write_json
from marlin_demo.settings import EXAMPLES_FILE

logger = logging.getLogger(__name__)

VIDEO_EXTENSIONS = (".mp4", ".webm", ".mkv", ".mov", ".m4v", ".avi")
SPAN_TOLERANCE_S = 0.5
"""How far past the video's duration a reference span may end (annotation rounding)."""
DEFAULT_SET = "default"
"""The set of an entry without ``"set"``: a folder without sets is one set."""
SET_LABELS = {
    "real": "Real footage",
    "rendered": "Rendered",
    "long": "Long videos (rendered clips back to back)",
    DEFAULT_SET: "All examples",
}


class DatasetError(ValueError):
    """The data folder or an annotation file is unusable; the message names the entry and the fix."""


@dataclass(frozen=True)
class Query:
    """A find query: ``spans`` every occurrence (long videos), ``span`` the first (single-span scores)."""

    query: str
    span: tuple[float, float]
    spans: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if not self.spans:
            object.__setattr__(self, "spans", (self.span,))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"query": self.query, "span": [self.span[0], self.span[1]]}
        if len(self.spans) > 1:
            out["spans"] = [[s, e] for s, e in self.spans]
        return out


@dataclass
class Example:
    """One clip with its ground truth. ``name`` is the ``video`` string of examples.json (the record key)."""

    name: str
    video: Path
    title: str
    duration: float
    scene: str = ""
    events: list[Event] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    set: str = DEFAULT_SET
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys the benchmark does not read (``credit``, ``fps``...), kept for the app's example pages."""

    @property
    def has_caption_truth(self) -> bool:
        """Caption metrics need a reference scene or reference events."""
        return bool(self.scene.strip() or self.events)

    def to_dict(self) -> dict[str, Any]:
        out = {
            **self.extra,
            "video": self.name,
            "title": self.title,
            "set": self.set,
            "duration": self.duration,
            "scene": self.scene,
            "events": [e.to_dict() for e in self.events],
            "queries": [q.to_dict() for q in self.queries],
        }
        if not math.isfinite(self.duration):  # a lenient read of an entry whose clip is absent
            del out["duration"]
        return out


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DatasetError(f"{what} is {value!r}, not a number of seconds.")
    out = float(value)
    if not math.isfinite(out):
        raise DatasetError(f"{what} is {value!r}: give a finite number of seconds.")
    return out


def _span(pair: Any, duration: float | None, what: str) -> tuple[float, float]:
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        raise DatasetError(f"{what} span is {pair!r}: give [start, end] in seconds.")
    s = _number(pair[0], f"{what} start")
    e = _number(pair[1], f"{what} end")
    if s < 0:
        raise DatasetError(f"{what} starts at {s:g} s, before the video begins: times start at 0.")
    if e <= s:
        raise DatasetError(f"{what} is [{s:g}, {e:g}]: the end must come after the start (seconds).")
    if duration is not None and e > duration + SPAN_TOLERANCE_S:
        raise DatasetError(
            f"{what} ends at {e:g} s but the video lasts {duration:g} s: fix the span or the duration."
        )
    return (s, e)


def probe_duration(path: Path) -> float:
    """The duration the sampler will see (``marlin_demo.video.probe``)."""
    from marlin_demo.video import probe

    return float(probe(path).duration_s)


_KNOWN_KEYS = frozenset({"video", "title", "set", "duration", "scene", "events", "queries"})


def _parse_entry(raw: Any, index: int, root: Path, seen: set[str], missing_ok: bool = False) -> Example:
    where = f"examples.json entry {index + 1}"
    if not isinstance(raw, dict):
        raise DatasetError(f"{where} is a {type(raw).__name__}, not an object with a 'video' key.")
    name = raw.get("video")
    if not isinstance(name, str) or not name.strip():
        raise DatasetError(f"{where} has no 'video': give the clip's file name, relative to {root}.")
    where = f"examples.json entry {index + 1} ({name})"
    if name in seen:
        raise DatasetError(f"{where} repeats a video listed before: merge its queries into one entry.")
    seen.add(name)
    video = root / Path(name).expanduser()  # an absolute path replaces root
    present = video.is_file()
    if not present and not missing_ok:
        raise DatasetError(
            f"{where}: the video {video} does not exist (no video file there): put the file there "
            "or fix the path."
        )

    duration_raw = raw.get("duration")
    if duration_raw is None and not present:
        duration = math.inf  # nothing to probe: spans are only checked for order
    elif duration_raw is None:
        try:
            duration = probe_duration(video)
        except ValueError as exc:  # VideoError
            raise DatasetError(f"{where}: the video cannot be read ({exc})") from None
    else:
        duration = _number(duration_raw, f"{where} duration")
        if duration <= 0:
            raise DatasetError(f"{where} has duration {duration:g} s: give the clip's length in seconds.")

    scene = raw.get("scene") or ""
    if not isinstance(scene, str):
        raise DatasetError(f"{where}: 'scene' must be a string (the reference scene paragraph).")

    events: list[Event] = []
    for j, ev in enumerate(_list(raw, "events", where, "{start, end, description}")):
        what = f"{where} event {j + 1}"
        if not isinstance(ev, dict) or not {"start", "end", "description"} <= ev.keys():
            raise DatasetError(f"{what} must be an object with start, end and description.")
        desc = ev["description"]
        if not isinstance(desc, str) or not desc.strip():
            raise DatasetError(f"{what} has an empty description: say what happens in that span.")
        events.append(Event(*_span((ev["start"], ev["end"]), duration, what), desc.strip()))

    queries: list[Query] = []
    for j, q in enumerate(_list(raw, "queries", where, "{query, span: [start, end]}")):
        what = f"{where} query {j + 1}"
        if not isinstance(q, dict) or "query" not in q or not ("span" in q or "spans" in q):
            raise DatasetError(
                f"{what} must be an object with 'query' and 'span': [start, end] "
                "(or 'spans': [[start, end], ...] when the event happens several times)."
            )
        text = q["query"]
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{what} has an empty query: describe the event to find.")
        raw_spans = q["spans"] if "spans" in q else [q["span"]]
        if not isinstance(raw_spans, list) or not raw_spans:
            raise DatasetError(f"{what} spans is {raw_spans!r}: give a non-empty list of [start, end].")
        spans = sorted(_span(span, duration, what) for span in raw_spans)
        queries.append(Query(text.strip(), spans[0], tuple(spans)))

    set_raw = raw.get("set", DEFAULT_SET)
    if not isinstance(set_raw, str) or not set_raw.strip():
        raise DatasetError(
            f"{where}: 'set' is {set_raw!r}: give the name of the example set as a string "
            '(e.g. "real" or "rendered"), or leave it out.'
        )

    title = raw.get("title")
    return Example(
        name=name,
        video=video,
        title=title if isinstance(title, str) and title.strip() else Path(name).stem,
        duration=duration,
        scene=scene.strip(),
        events=events,
        queries=queries,
        set=set_raw.strip(),
        extra={k: v for k, v in raw.items() if k not in _KNOWN_KEYS},
    )


def _list(raw: dict[str, Any], key: str, where: str, shape: str) -> list[Any]:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise DatasetError(f"{where}: '{key}' must be a list of {shape} objects.")
    return value


def set_label(name: str) -> str:
    """The heading a set gets in summaries and plots ("real" -> "Real footage")."""
    return SET_LABELS.get(name, name)


def example_sets(examples: Sequence[Example]) -> dict[str, list[Example]]:
    """The examples grouped by set, sets in order of first appearance."""
    groups: dict[str, list[Example]] = {}
    for ex in examples:
        groups.setdefault(ex.set, []).append(ex)
    return groups


def load_dataset(directory: str | os.PathLike[str]) -> list[Example]:
    """Read and validate ``DIR/examples.json``; every video must exist. Raises :class:`DatasetError`."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise DatasetError(f"The data folder {root} does not exist: pass a folder holding {EXAMPLES_FILE}.")
    path = root / EXAMPLES_FILE
    if not path.is_file():
        raise DatasetError(
            f"{root} has no {EXAMPLES_FILE}: add one (format in docs/BENCHMARK.md) "
            "or convert annotations with `python -m marlin_demo bench convert-charades`."
        )
    data = _read_list(path)
    if not data:
        raise DatasetError(f"{path} lists no examples: add at least one.")
    seen: set[str] = set()
    examples = [_parse_entry(raw, i, root, seen) for i, raw in enumerate(data)]
    if not any(ex.queries or ex.has_caption_truth for ex in examples):
        raise DatasetError(f"{path} has no queries and no reference captions: there is nothing to score.")
    return examples


def read_examples(path: str | os.PathLike[str]) -> list[Example]:
    """The app's lenient read: examples are optional there, so a broken file gives [] and a bad
    entry is left out (logged); an entry whose clip is absent is kept (an upload may match its name)."""
    path = Path(path).expanduser()
    try:
        data = _read_list(path)
    except (OSError, DatasetError):
        return []
    seen: set[str] = set()
    out = []
    for i, raw in enumerate(data):
        try:
            out.append(_parse_entry(raw, i, path.parent, seen, missing_ok=True))
        except DatasetError as exc:
            logger.warning("Example left out: %s", exc)
    return out


def _read_list(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path} is not valid JSON ({exc}): fix the file.") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path} must hold a JSON list of examples, not a {type(data).__name__}.")
    return data


def dataset_digest(directory: str | os.PathLike[str]) -> str:
    """Short hash of examples.json (the benchmark refuses to mix results of different ground truth)."""
    data = (Path(directory).expanduser() / EXAMPLES_FILE).read_bytes()
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass(frozen=True)
class Annotation:
    video_id: str
    start: float
    end: float
    query: str
    line: int


def parse_charades_line(line: str, lineno: int = 0, source: str = "annotations") -> Annotation | None:
    """``VIDEO START END##QUERY`` (Charades-STA) or ``VIDEO START END QUERY``; blank/# lines give None."""
    text = line.strip().lstrip("\ufeff")
    if not text or text.startswith("#"):
        return None
    where = f"{source}:{lineno}"
    if "##" in text:
        head, _, query = text.partition("##")
        parts = head.split()
    else:
        *parts, query = text.split(maxsplit=3)
    if len(parts) != 3:
        raise DatasetError(
            f"{where}: expected 'VIDEO_ID START END##QUERY' (or 'VIDEO_ID START END QUERY'), "
            f"got {text[:80]!r}."
        )
    video_id, start_txt, end_txt = parts
    try:
        start, end = float(start_txt), float(end_txt)
    except ValueError:
        raise DatasetError(
            f"{where}: start/end {start_txt!r} {end_txt!r} are not numbers of seconds."
        ) from None
    if not (math.isfinite(start) and math.isfinite(end)) or start < 0 or end <= start:
        raise DatasetError(
            f"{where}: the span [{start_txt}, {end_txt}] is not a forward time range in seconds."
        )
    query = " ".join(query.split())
    if not query:
        raise DatasetError(f"{where}: the query is empty.")
    return Annotation(video_id, start, end, query, lineno)


def find_video(videos: Path, video_id: str) -> Path | None:
    """``DIR/ID`` when it names a file, else ``DIR/ID.<ext>`` for the usual video extensions."""
    direct = videos / video_id
    if direct.suffix and direct.is_file():
        return direct
    names = (f"{video_id}{e}" for ext in VIDEO_EXTENSIONS for e in (ext, ext.upper()))
    return next((videos / name for name in names if (videos / name).is_file()), None)


@dataclass
class ConvertReport:
    videos: int = 0
    queries: int = 0
    missing: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    clamped: int = 0
    dropped: int = 0
    duplicates: int = 0

    def lines(self) -> list[str]:
        notes = []
        if self.missing:
            notes.append(f"{len(self.missing)} video(s) not found, skipped (first: {self.missing[0]})")
        if self.unreadable:
            notes.append(f"{len(self.unreadable)} unreadable video(s) skipped (first: {self.unreadable[0]})")
        if self.clamped:
            notes.append(f"{self.clamped} span(s) ending past the video clamped to its duration")
        if self.dropped:
            notes.append(f"{self.dropped} span(s) starting after the video's end dropped")
        if self.duplicates:
            notes.append(f"{self.duplicates} duplicate line(s) dropped")
        return notes


def convert_charades(
    annotations: Iterable[str] | str | os.PathLike[str],
    videos: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    limit: int | None = None,
    force: bool = False,
) -> ConvertReport:
    """Charades-STA lines -> ``OUT/examples.json`` (queries grouped per video, first-seen order, video paths
    relative to ``out``); what is clamped, dropped or skipped is counted in the report."""
    if isinstance(annotations, str | os.PathLike):
        ann_path = Path(annotations).expanduser()
        if not ann_path.is_file():
            raise DatasetError(f"The annotation file {ann_path} does not exist.")
        source = ann_path.name
        lines: Iterable[str] = ann_path.read_text(encoding="utf-8").splitlines()
    else:
        source, lines = "annotations", annotations
    videos_dir = Path(videos).expanduser()
    if not videos_dir.is_dir():
        raise DatasetError(f"The videos folder {videos_dir} does not exist: pass --videos DIR.")
    out_dir = Path(out).expanduser()
    target = out_dir / EXAMPLES_FILE
    if target.exists() and not force:
        raise DatasetError(f"{target} already exists: choose another --out or pass --force to overwrite it.")
    if limit is not None and limit < 1:
        raise DatasetError("--limit must be at least 1.")

    grouped: dict[str, list[Annotation]] = {}
    for ann in filter(None, (parse_charades_line(line, n, source) for n, line in enumerate(lines, 1))):
        grouped.setdefault(ann.video_id, []).append(ann)
    if not grouped:
        raise DatasetError(f"{source} holds no annotation lines.")

    report = ConvertReport()
    entries: list[dict[str, Any]] = []
    for video_id, anns in grouped.items():
        if limit is not None and len(entries) >= limit:
            break
        path = find_video(videos_dir, video_id)
        if path is None:
            report.missing.append(video_id)
            continue
        try:
            duration = probe_duration(path)
        except ValueError:
            report.unreadable.append(video_id)
            continue
        unique = list(dict.fromkeys((ann.query, ann.start, ann.end) for ann in anns))
        inside = [(query, start, end) for query, start, end in unique if start < duration]
        report.duplicates += len(anns) - len(unique)
        report.dropped += len(unique) - len(inside)
        report.clamped += sum(end > duration for _, _, end in inside)
        queries = [
            {"query": query, "span": [start, round(duration, 3) if end > duration else end]}
            for query, start, end in inside
        ]
        if not queries:
            continue
        rel = os.path.relpath(path.resolve(), out_dir.resolve())
        entries.append(
            {
                "video": Path(rel).as_posix(),
                "title": video_id,
                "duration": round(duration, 3),
                "scene": "",
                "events": [],
                "queries": queries,
            }
        )
        report.videos += 1
        report.queries += len(queries)
    if not entries:
        raise DatasetError(
            f"No annotated video was found in {videos_dir} (looked for VIDEO_ID.mp4, .webm, .mkv, ...): "
            "check --videos."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(target, entries)
    return report


def add_convert_parser(sub: Any) -> None:
    """``convert-charades ANNOTATIONS --videos DIR --out DIR [--limit N] [--force]``."""
    p = sub.add_parser(
        "convert-charades",
        help="convert Charades-STA annotations to a bench data folder",
        description=(
            "Convert Charades-STA style lines ('AO8RW 0.0 6.9##a person is putting a book on a shelf.' or "
            "'VIDEO START END QUERY') into OUT/examples.json for `bench --data OUT`."
        ),
    )
    p.add_argument("annotations", help="annotation text file (e.g. charades_sta_test.txt)")
    p.add_argument("--videos", required=True, help="folder holding VIDEO_ID.mp4 files")
    p.add_argument("--out", required=True, help="folder to write examples.json into")
    p.add_argument("--limit", type=int, default=None, help="convert only the first N videos found")
    p.add_argument("--force", action="store_true", help="overwrite an existing OUT/examples.json")
    p.set_defaults(func=cmd_convert_charades)


def cmd_convert_charades(args: argparse.Namespace) -> int:
    try:
        report = convert_charades(args.annotations, args.videos, args.out, limit=args.limit, force=args.force)
    except DatasetError as exc:
        return fail(str(exc))
    target = Path(args.out) / EXAMPLES_FILE
    queries = "query" if report.queries == 1 else "queries"
    print(f"Wrote {target}: {report.videos} video(s), {report.queries} {queries}.")
    for note in report.lines():
        print(f"note: {note}", file=sys.stderr)
    return 0


def summarize(examples: Sequence[Example]) -> dict[str, Any]:
    return {
        "examples": len(examples),
        "queries": sum(len(ex.queries) for ex in examples),
        "caption_examples": sum(1 for ex in examples if ex.has_caption_truth),
        "events": sum(len(ex.events) for ex in examples),
        "sets": {name: len(exs) for name, exs in example_sets(examples).items()},
    }
