"""The library's database: one SQLite file (WAL: a search reads while an index writes), an FTS5 index over
each window; one transaction per entry, so a kill leaves each video wholly there or not (docs/LIBRARY.md)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marlin_demo.out_folder import now

DB_FILE = "library.sqlite"
THUMBS_DIR = "thumbs"
SCHEMA_VERSION = 2  # 2: an entry is a video or a time range of one (``span``)
#: Reads go through a memory map of the file (up to this size) instead of a read call per page: stage 1
#: walks long posting lists, and the map shares the OS page cache across connections.
MMAP_BYTES = 1 << 30

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS videos(
  id TEXT PRIMARY KEY,
  digest TEXT NOT NULL,
  name TEXT NOT NULL,
  path TEXT NOT NULL,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  duration REAL NOT NULL,
  indexed TEXT NOT NULL,
  span TEXT NOT NULL DEFAULT '',
  UNIQUE(digest, span),
  UNIQUE(path, span)
);
CREATE TABLE IF NOT EXISTS windows(
  wid INTEGER PRIMARY KEY,
  video TEXT NOT NULL REFERENCES videos(id) ON DELETE CASCADE,
  k INTEGER NOT NULL,
  start REAL NOT NULL,
  end REAL NOT NULL,
  scene TEXT NOT NULL,
  events TEXT NOT NULL,
  thumbnail TEXT,
  UNIQUE(video, k)
);
CREATE TABLE IF NOT EXISTS events(
  video TEXT NOT NULL REFERENCES videos(id) ON DELETE CASCADE,
  start REAL NOT NULL,
  end REAL NOT NULL,
  description TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_video ON events(video);
CREATE VIRTUAL TABLE IF NOT EXISTS windows_fts USING fts5(scene, events, tokenize='porter unicode61');
CREATE TRIGGER IF NOT EXISTS windows_ai AFTER INSERT ON windows BEGIN
  INSERT INTO windows_fts(rowid, scene, events) VALUES (new.wid, new.scene, new.events);
END;
CREATE TRIGGER IF NOT EXISTS windows_ad AFTER DELETE ON windows BEGIN
  DELETE FROM windows_fts WHERE rowid = old.wid;
END;
"""

#: Words too common in captions to rank anything: left out of the match unless the query has nothing else.
STOP_WORDS = frozenset(
    "a an the and or of to in on at by for with from into onto over under is are was were be been it its "
    "this that these those there then while as up down out off again".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)


class LibraryError(ValueError):
    """An unusable library folder or set-up: one sentence for the user."""


@dataclass(frozen=True)
class WindowText:
    """A caption window as indexed: its times, scene and events (global seconds on its video)."""

    start: float
    end: float
    scene: str
    events: list[dict[str, Any]]
    thumbnail: str | None = None

    @property
    def events_text(self) -> str:
        return "\n".join(str(e.get("description", "")) for e in self.events)


@dataclass(frozen=True)
class Hit:
    """A stage-1 hit: one caption window with its full-text relevance (higher is better; 0: no match)."""

    wid: int
    video: str
    name: str
    path: str
    k: int
    start: float
    end: float
    thumbnail: str | None
    retrieval: float


#: A word in more windows than this (and this share of them) is common: it still scores the windows that
#: match a rarer word of the query, but does not make every window a candidate (see ``match_expression``).
COMMON_MIN_WINDOWS = 1000
COMMON_SHARE = 0.05


def query_words(query: str) -> list[str]:
    """The words stage 1 asks for: casefolded, each once, stop words left out unless nothing else is left."""
    words = _WORD.findall(query.casefold())
    return list(dict.fromkeys([w for w in words if w not in STOP_WORDS] or words))[:64]


def _quoted(words: Sequence[str]) -> str:
    return "(" + " OR ".join('"' + w.replace('"', '""') + '"' for w in words) + ")"


def _all_of(words: Sequence[str]) -> str:
    """The MATCH text of the windows holding every one of ``words`` (each quoted)."""
    return " AND ".join(_quoted([w]) for w in words)


def match_expression(query: str, common: Sequence[str] = (), *, every_rare: bool = False) -> str | None:
    """The FTS5 MATCH text for any text, every word quoted so nothing is read as query syntax (None: no word);
    ``common`` words only score; ``every_rare`` ANDs the rarer ones (docs/LIBRARY.md, "Large libraries")."""
    words = query_words(query)
    if not words:
        return None
    rare = [w for w in words if w not in common]
    if not rare:
        return _quoted(words)
    pick = _all_of(rare) if every_rare and len(rare) > 1 else _quoted(rare)
    return pick if len(rare) == len(words) else f"{pick} AND {_quoted(words)}"


def _upgrade(db: sqlite3.Connection) -> None:
    """A schema-1 library (one entry per file, no ``span``) becomes schema 2 in place, its entries kept as
    whole videos: SQLite changes a table's UNIQUE constraints only by copying it (its documented way)."""
    columns = [row[1] for row in db.execute("PRAGMA table_info(videos)")]
    if not columns or "span" in columns:
        return
    start = SCHEMA.index("CREATE TABLE IF NOT EXISTS videos(")
    create = SCHEMA[start : SCHEMA.index(");", start) + 2]
    db.execute("PRAGMA foreign_keys=OFF")  # the windows and events keep their rows while the table is copied
    try:
        with _transaction(db):
            db.execute(create.replace("IF NOT EXISTS videos(", "videos_v2("))
            kept = ", ".join(columns)
            db.execute(f"INSERT INTO videos_v2({kept}) SELECT {kept} FROM videos")
            db.execute("DROP TABLE videos")
            db.execute("ALTER TABLE videos_v2 RENAME TO videos")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (json.dumps(SCHEMA_VERSION),))
    finally:
        db.execute("PRAGMA foreign_keys=ON")


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an error): the writer's one lock per video."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class Store:
    """One connection to ``DIR/library.sqlite`` (created with its schema when missing)."""

    def __init__(self, folder: str | Path, *, create: bool = True) -> None:
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise LibraryError(f"--library {self.folder} is a file: give a folder.")
        if not create and not (self.folder / DB_FILE).is_file():
            raise LibraryError(
                f"No library at {self.folder}: build one with "
                "`python -m marlin_demo index INPUT --library DIR`."
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.folder / DB_FILE, timeout=30.0, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            _upgrade(self.db)
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise LibraryError(
                f"{self.folder / DB_FILE} is not a usable library ({exc}): use another --library, "
                "or --fresh to rebuild it."
            ) from None
        self._counts: tuple[tuple[int, int], tuple[int, int]] | None = None  # (version, counts)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()

    def set_meta(self, **values: Any) -> None:
        """Record set-up facts (each stored as JSON) in one transaction."""
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in values.items()]
            )

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def check_setup(self, setup: dict[str, Any]) -> None:
        """Record ``setup`` in a new library; refuse one built with another (batch's fingerprint rule)."""
        old = self.meta().get("setup")
        if old is None:
            self.set_meta(setup=setup, schema=SCHEMA_VERSION, created=now())
            return
        diffs = [f"{k}: {old.get(k)!r} -> {v!r}" for k, v in setup.items() if old.get(k) != v]
        if diffs:
            raise LibraryError(
                f"{self.folder} was indexed with another model or settings ({'; '.join(diffs)}): "
                "use another --library, or --fresh to rebuild this one."
            )

    @staticmethod
    def wipe(folder: str | Path) -> None:
        """``--fresh``: remove the database and thumbnails (nothing else in the folder)."""
        root = Path(folder)
        for name in (DB_FILE, DB_FILE + "-wal", DB_FILE + "-shm"):
            (root / name).unlink(missing_ok=True)
        shutil.rmtree(root / THUMBS_DIR, ignore_errors=True)

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return _transaction(self.db)

    def by_digest(self, digest: str, span: str = "") -> dict[str, Any] | None:
        return self._one("SELECT * FROM videos WHERE digest = ? AND span = ?", (digest, span))

    def by_path(self, path: str, span: str = "") -> dict[str, Any] | None:
        return self._one("SELECT * FROM videos WHERE path = ? AND span = ?", (path, span))

    def stamp(self, path: str) -> dict[str, Any] | None:
        """Any entry of this file (its digest, size and mtime), whatever its range."""
        return self._one("SELECT * FROM videos WHERE path = ? LIMIT 1", (path,))

    def video(self, vid: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM videos WHERE id = ?", (vid,))

    def videos(self) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM videos ORDER BY name", ())

    def _rows(self, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        cur = self.db.execute(sql, args)
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur]

    def _one(self, sql: str, args: Sequence[Any]) -> dict[str, Any] | None:
        return next(iter(self._rows(sql, args)), None)

    def put_video(
        self,
        *,
        vid: str,
        digest: str,
        name: str,
        path: str,
        size: int,
        mtime_ns: int,
        duration: float,
        windows: Sequence[WindowText],
        events: Iterable[dict[str, Any]],
        span: str = "",
    ) -> None:
        """Write one entry (a video, or a ``span`` of one) and everything about it in one transaction,
        replacing any entry that held its path (a changed file) or its digest, with the same span."""
        with self.transaction():
            self.db.execute(
                "DELETE FROM videos WHERE (path = ? OR digest = ?) AND span = ?", (path, digest, span)
            )
            self.db.execute(
                "INSERT INTO videos(id, digest, name, path, size, mtime_ns, duration, indexed, span) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (vid, digest, name, path, size, mtime_ns, duration, now(), span),
            )
            self.db.executemany(
                "INSERT INTO windows(video, k, start, end, scene, events, thumbnail) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (vid, k, w.start, w.end, w.scene, w.events_text, w.thumbnail)
                    for k, w in enumerate(windows)
                ],
            )
            self.db.executemany(
                "INSERT INTO events VALUES (?, ?, ?, ?)",
                [(vid, e["start"], e["end"], e["description"]) for e in events],
            )

    def move(self, vid: str, name: str, path: str, size: int, mtime_ns: int) -> None:
        """A moved or renamed file: its path changes, its captions stay."""
        with self.transaction():
            same = "span = (SELECT span FROM videos WHERE id = ?)"
            self.db.execute(f"DELETE FROM videos WHERE path = ? AND {same} AND id != ?", (path, vid, vid))
            self.db.execute(
                "UPDATE videos SET name = ?, path = ?, size = ?, mtime_ns = ? WHERE id = ?",
                (name, path, size, mtime_ns, vid),
            )

    def touch(self, vid: str, size: int, mtime_ns: int) -> None:
        """Remember a re-stamped (same content) file's size and mtime, so its digest is not read again."""
        with self.transaction():
            self.db.execute("UPDATE videos SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, vid))

    def remove(self, vid: str) -> None:
        with self.transaction():
            self.db.execute("DELETE FROM videos WHERE id = ?", (vid,))
        self.drop_thumbnails(vid)

    def drop_thumbnails(self, vid: str) -> None:
        """The thumbnails of an entry no longer in the database."""
        shutil.rmtree(self.folder / THUMBS_DIR / vid, ignore_errors=True)

    def counts(self) -> tuple[int, int]:
        """(videos, windows); counted again only after a write, by this connection or another."""
        (other,) = self.db.execute("PRAGMA data_version").fetchone()
        version = (int(other), self.db.total_changes)
        if self._counts is None or self._counts[0] != version:
            (videos,) = self.db.execute("SELECT COUNT(*) FROM videos").fetchone()
            (windows,) = self.db.execute("SELECT COUNT(*) FROM windows").fetchone()
            self._counts = version, (int(videos), int(windows))
        return self._counts[1]

    def windows_of(self, vid: str) -> list[dict[str, Any]]:
        sql = "SELECT k, start, end, scene, events, thumbnail FROM windows WHERE video = ? ORDER BY k"
        return self._rows(sql, (vid,))

    def common_words(self, query: str) -> list[str]:
        """The query's words in more than ``COMMON_SHARE`` of the windows (and over ``COMMON_MIN_WINDOWS``),
        each matched as stage 1 matches it; the rarest is not common when no other word is in any window."""
        total, floor = self.counts()[1], self._common_floor()
        words = query_words(query)
        if total <= floor or not words:
            return []
        counted = {w: self._matching(_quoted([w]), floor + 1) for w in words}
        common = [w for w in words if counted[w] > floor]
        if common and not any(counted[w] for w in words if w not in common):
            # no rarer word is in any window (e.g. the rest are misspelt): the rarest frequent word picks
            common.remove(min(common, key=lambda w: self._matching(_quoted([w]), None)))
        return common

    def _matching(self, expr: str, cap: int | None) -> int:
        """How many windows match ``expr``, counted up to ``cap`` (None: all), without scoring them."""
        sql = "SELECT rowid FROM windows_fts WHERE windows_fts MATCH ?"
        if cap is not None:
            sql += f" LIMIT {int(cap)}"
        (n,) = self.db.execute(f"SELECT COUNT(*) FROM ({sql})", (expr,)).fetchone()
        return int(n)

    def _common_floor(self) -> int:
        return int(max(COMMON_MIN_WINDOWS, COMMON_SHARE * self.counts()[1]))

    def stage1_expression(self, query: str, limit: int) -> str | None:
        """Stage 1's MATCH text: over the common-word floor, the few windows holding every rarer word when at
        least ``limit`` do (BM25's best are mostly there), else any rarer word (``match_expression``)."""
        common = self.common_words(query)
        expr = match_expression(query, common)
        rare = [w for w in query_words(query) if w not in common]
        if len(rare) < 2 or limit < 1 or self.counts()[1] <= self._common_floor():
            return expr  # a small library: BM25 over every matching window is cheap and exact
        n = self._matching(_all_of(rare), limit)  # counted without `bm25`, up to limit: far cheaper
        return match_expression(query, common, every_rare=True) if n >= limit else expr

    def stage1(self, query: str, limit: int) -> list[Hit]:
        """The ``limit`` windows best matching ``query`` (FTS5 BM25 over ``stage1_expression``), best first;
        in a library of at most ``limit`` windows, every window (unmatched ones last, relevance 0)."""
        hits: list[Hit] = []
        expr = self.stage1_expression(query, limit)
        select = (
            "SELECT w.wid, w.video, v.name, v.path, w.k, w.start, w.end, w.thumbnail, {score} "
            "FROM windows w JOIN videos v ON v.id = w.video "
        )
        if expr is not None and limit > 0:
            # the full-text index answers first (only matching windows are scored), then the few rows join
            top = (
                "WITH top AS (SELECT rowid AS wid, bm25(windows_fts) AS r FROM windows_fts "
                "WHERE windows_fts MATCH ? ORDER BY r LIMIT ?) "
            )  # bm25 is lower for a better match; named once, it is computed once a row
            sql = top + select.format(score="-top.r") + "JOIN top ON top.wid = w.wid ORDER BY top.r"
            hits = [Hit(*row) for row in self.db.execute(sql, (expr, limit))]
        if len(hits) < limit and self.counts()[1] <= limit:
            seen = {h.wid for h in hits}
            rest = self.db.execute(select.format(score="0.0") + "ORDER BY v.name, w.k")
            hits += [Hit(*row) for row in rest if row[0] not in seen]
        return hits
