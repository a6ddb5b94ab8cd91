"""Stage 1 of a library search at scale: FTS5 BM25 vs a plain linear scan of the same windows, one run.

    python benchmarks/bench_library_scale.py                  # 100,000 windows
    python benchmarks/bench_library_scale.py --windows 2000 --queries 10 --json out.json

Caption-like text, not random strings: each window's scene and 2-4 events are sentences of the
examples' ground truth (examples/examples.json: scenes, events, queries) with their nouns, verbs and
adjectives swapped for words of a caption vocabulary, drawn with the ground truth's word frequencies
(a word seen often there is drawn often). The library is written with the real schema
(``library.store.Store.put_video``, 100 windows per video). The queries are the ground truth's.

Both sides return the best N = 8 windows for each query:
- stage 1: ``Store.stage1`` (the quoted-words OR query, ``bm25``) as ``search`` runs it;
- the scan: every window read from the same database, each query word counted in its text
  (casefolded, the same words stage 1 asks for), the N highest totals kept; it is also timed on
  texts already in memory (the scan's best case, no reading).
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marlin_demo.library.store import Store, WindowText, query_words
from marlin_demo.settings import EXAMPLES_DIR, EXAMPLES_FILE

CANDIDATES = 8
WINDOWS_PER_VIDEO = 100
WORD = re.compile(r"\w+")

#: Words a caption of everyday footage uses, by part of speech (swapped into the ground truth's sentences).
NOUNS = (
    "man woman person child dog cat car truck bicycle ball door table chair window street road pool garden "
    "kitchen room wall floor tree sky sun lamp light bottle cup phone screen bag box building crowd bird "
    "horse boat water beach field camera desk shelf sofa bed stairs bridge train bus sign hand head face"
).split()
VERBS = (
    "walks runs jumps stands sits opens closes picks holds drops throws rolls moves turns enters leaves "
    "appears disappears falls climbs drives parks crosses waves points looks carries pushes pulls swims "
    "rides stops starts lifts places"
).split()
ADJECTIVES = "red blue green white black grey small large empty dark bright wooden tall old young".split()


def ground_truth(examples_dir: Path = EXAMPLES_DIR) -> tuple[list[str], list[str], list[str]]:
    """(scene sentences, event descriptions, queries) of the examples."""
    data = json.loads((examples_dir / EXAMPLES_FILE).read_text(encoding="utf-8"))
    scenes = [s.strip() + "." for e in data for s in e.get("scene", "").split(".") if s.strip()]
    events = [ev["description"] for e in data for ev in e.get("events", [])]
    queries = [q["query"] for e in data for q in e.get("queries", [])]
    return scenes, events, queries


def weights(words: list[str], counts: Counter[str]) -> list[float]:
    """A word's weight: 1 + its count in the ground truth (every vocabulary word can appear)."""
    return [1.0 + counts[w] for w in words]


class Writer:
    """Caption-like sentences: ground-truth sentences with words swapped at the truth's frequencies."""

    def __init__(self, seed: int, examples_dir: Path = EXAMPLES_DIR) -> None:
        self.rng = random.Random(seed)
        self.scenes, self.events, self.queries = ground_truth(examples_dir)
        counts = Counter(w for t in self.scenes + self.events + self.queries for w in WORD.findall(t.lower()))
        self.pools = {
            "n": (NOUNS, weights(NOUNS, counts)),
            "v": (VERBS, weights(VERBS, counts)),
            "a": (ADJECTIVES, weights(ADJECTIVES, counts)),
        }
        self.kind = {w: k for k, (ws, _) in self.pools.items() for w in ws}

    def vary(self, sentence: str) -> str:
        def swap(m: re.Match[str]) -> str:
            kind = self.kind.get(m.group(0).lower())
            if kind is None or self.rng.random() < 0.4:
                return m.group(0)
            words, w = self.pools[kind]
            return self.rng.choices(words, w)[0]

        return WORD.sub(swap, sentence)

    def window(self, start: float) -> WindowText:
        scene = " ".join(self.vary(self.rng.choice(self.scenes)) for _ in range(self.rng.randint(1, 2)))
        events = [
            {
                "start": start + i * 10,
                "end": start + i * 10 + 5,
                "description": self.vary(self.rng.choice(self.events)),
            }
            for i in range(self.rng.randint(2, 4))
        ]
        return WindowText(start, start + 60.0, scene, events)


def build(folder: Path, windows: int, seed: int) -> tuple[Store, list[str], float]:
    """The library of ``windows`` caption windows; its queries; the build time."""
    writer = Writer(seed)
    store = Store(folder)
    t0 = time.perf_counter()
    made = 0
    v = 0
    while made < windows:
        n = min(WINDOWS_PER_VIDEO, windows - made)
        wins = [writer.window(60.0 * k) for k in range(n)]
        digest = f"{v:064x}"
        store.put_video(
            vid=digest[-16:], digest=digest, name=f"video_{v:05d}.mp4", path=f"/videos/video_{v:05d}.mp4",
            size=0, mtime_ns=0, duration=60.0 * n, windows=wins, events=[e for w in wins for e in w.events],
        )  # fmt: skip
        made += n
        v += 1
    return store, writer.queries, time.perf_counter() - t0


def scan(rows: list[tuple[int, str]], words: list[str], n: int) -> list[int]:
    """The plain linear scan: each word's occurrences in each window's text, the n highest totals."""
    scored = ((sum(text.count(w) for w in words), wid) for wid, text in rows)
    return [wid for score, wid in heapq.nlargest(n, scored) if score > 0]


def timed(fn: Any, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "mean_ms": round(statistics.fmean(ms), 3),
        "p50_ms": round(statistics.median(ms), 3),
        "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 3),
    }


def measure(store: Store, queries: list[str]) -> dict[str, Any]:
    def from_db(q: str) -> list[int]:
        rows = [
            (wid, (s + "\n" + e).casefold())
            for wid, s, e in store.db.execute("SELECT wid, scene, events FROM windows")
        ]
        return scan(rows, query_words(q), CANDIDATES)

    memory = [
        (wid, (s + "\n" + e).casefold())
        for wid, s, e in store.db.execute("SELECT wid, scene, events FROM windows")
    ]
    store.stage1(queries[0], CANDIDATES)  # warm the page cache for both sides alike
    from_db(queries[0])
    fts = summary(timed(lambda q: store.stage1(q, CANDIDATES), queries))
    db_scan = summary(timed(from_db, queries))
    mem_scan = summary(timed(lambda q: scan(memory, query_words(q), CANDIDATES), queries))
    return {
        "stage1": fts,
        "scan_db": db_scan,
        "scan_memory": mem_scan,
        "speedup_vs_scan_db": round(db_scan["mean_ms"] / fts["mean_ms"], 1),
        "speedup_vs_scan_memory": round(mem_scan["mean_ms"] / fts["mean_ms"], 1),
    }


def run(windows: int, queries: int, seed: int = 0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="marlin-library-scale-") as tmp:
        store, truth_queries, build_s = build(Path(tmp), windows, seed)
        qs = (truth_queries * (1 + queries // max(1, len(truth_queries))))[:queries]
        counts = store.counts()
        size = sum(p.stat().st_size for p in Path(tmp).glob("library.sqlite*"))
        out = {"windows": counts[1], "videos": counts[0], "queries": len(qs), "build_s": round(build_s, 2),
               "db_mb": round(size / 1e6, 1), **measure(store, qs)}  # fmt: skip
        store.close()
    return out


def render(r: dict[str, Any]) -> str:
    lines = [
        f"{r['windows']:,} windows in {r['videos']:,} videos (built in {r['build_s']} s, {r['db_mb']} MB), "
        f"{r['queries']} queries, best {CANDIDATES} windows each",
        "",
        "| | mean ms/query | p50 | p95 | stage 1 is |",
        "|---|---|---|---|---|",
        f"| stage 1 (FTS5 BM25) | {r['stage1']['mean_ms']} | {r['stage1']['p50_ms']} | "
        f"{r['stage1']['p95_ms']} | |",
        f"| linear scan, read from the DB | {r['scan_db']['mean_ms']} | {r['scan_db']['p50_ms']} | "
        f"{r['scan_db']['p95_ms']} | {r['speedup_vs_scan_db']}x faster |",
        f"| linear scan, texts in memory | {r['scan_memory']['mean_ms']} | {r['scan_memory']['p50_ms']} | "
        f"{r['scan_memory']['p95_ms']} | {r['speedup_vs_scan_memory']}x faster |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=100_000, help="caption windows to index (default 100000)")
    p.add_argument("--queries", type=int, default=33, help="queries to time (the ground truth's, cycled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.windows < 1 or args.queries < 1:
        print("error: --windows and --queries must be at least 1.", file=sys.stderr)
        return 2
    r = run(args.windows, args.queries, args.seed)
    print(render(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
