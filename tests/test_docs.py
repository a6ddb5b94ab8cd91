"""The docs name only what exists: every module, script and file a doc names is in the repository.

Renames (issue 55) left docs pointing at files that had gone; this reads README.md, CONTRIBUTING.md and
docs/*.md as plain text (no model, no import of the package) and reports each name that resolves to
nothing: a path (``marlin_demo/ui/compare_tab.py``, ``scripts/gpu_check.py``, ``ui/run_tab.py``, a link's
target), a bare file name (``settings.py``, ``SPEED.md``) or a module written with dots
(``marlin_demo.ui.compare_tab``, ``service.library_find.find_in_windows``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "node_modules", ".gradio", "__pycache__", ".mypy_cache", ".ruff_cache",
             ".pytest_cache", "build", "dist"}  # fmt: skip
#: The package's parts, which the docs name with dots and without the ``marlin_demo.`` in front.
PARTS = ("marlin_demo", "service", "ui", "engine", "longvideo", "tasks", "video", "models", "library",
         "bench", "batch", "quantize")  # fmt: skip
#: Files of other projects that the docs cite by their own path (gptqmodel's, ``spaces``', the Hub's docs).
OTHER_PROJECTS = {"gptqmodel/__init__.py", "utils/machete.py", "zero/wrappers.py", "zero/client.py",
                  "zero/configs.json", "docs/hub/spaces-zerogpu.md", "spaces-zerogpu.md",
                  "spaces-config-reference.md"}  # fmt: skip
#: Files a command writes into its output folder (the docs show them; the repository holds none).
WRITTEN = {"summary.md", "report.md", "rows.json"}
#: What ends a dotted name that is a file, not a module (``video.mp4``, ``library.sqlite``).
EXTENSIONS = {"py", "md", "sh", "json", "jsonl", "mp4", "mkv", "webm", "sqlite", "css", "js", "txt", "csv",
              "png"}  # fmt: skip
#: Module names that are also fields of a result or a report, which the docs write the same way
#: (``info.decode_note``: ``RunInfo``'s; ``quality.find.r1@0.5``: a report's key).
FIELDS = {"info", "metrics", "quality", "calibration"}

URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
PATH = re.compile(r"(?<![\w./{-])((?:\.{1,2}/)?[\w.-]+(?:/[\w.-]+)+\.(?:py|md|sh|json|toml|css|js|txt))\b")
BARE = re.compile(r"(?<![\w./{-])([\w-]+\.(?:py|md|sh))\b(?![/\w-])")
LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]*))?\)")
HEADING = re.compile(r"^#+\s+(.+?)\s*$", re.M)
CODE = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(rf"^(?:{'|'.join(PARTS)})(?:\.[A-Za-z_]\w*)+")
SHORT = re.compile(r"^([a-z_]\w*)\.([A-Za-z_]\w*)")


def repo_files(root: Path = ROOT) -> set[str]:
    """Every file under ``root`` as a posix path relative to it (virtual envs and caches left out)."""
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel = Path(folder).relative_to(root)
        found.update((rel / f).as_posix() for f in files)
    return found


def _module_file(dotted: list[str], files: set[str]) -> str | None:
    """The file of the package module ``dotted`` names (``["marlin_demo", "ui"]``), or None."""
    base = "/".join(dotted)
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if candidate in files:
            return candidate
    return None


def _dotted_missing(name: str, files: set[str], root: Path) -> bool:
    """Whether a dotted name's module does not exist, or its first name after the module is not in it."""
    parts = name.split(".")
    if parts[0] != "marlin_demo":
        parts = ["marlin_demo", *parts]
    known = 1
    while known < len(parts) and _module_file(parts[: known + 1], files):
        known += 1
    if known == len(parts):
        return False
    module = _module_file(parts[:known], files)
    if module is None:
        return True
    return not re.search(rf"\b{re.escape(parts[known])}\b", (root / module).read_text(encoding="utf-8"))


def missing_names(text: str, doc: str, files: set[str], root: Path = ROOT) -> list[str]:
    """The names in ``text`` (the doc at ``doc``, relative to the root) that resolve to nothing."""
    basenames = {f.rsplit("/", 1)[-1] for f in files}
    here = Path(doc).parent
    missing = []
    for target, anchor in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        linked = os.path.normpath(here / target).replace(os.sep, "/") if target else doc
        if linked not in files:
            missing.append(target)
        elif anchor and linked.endswith(".md") and anchor not in anchors((root / linked).read_text("utf-8")):
            missing.append(f"{target}#{anchor}")
    plain = URL.sub(" ", text)
    for path in PATH.findall(plain):
        if path.startswith("../") or path in OTHER_PROJECTS or path.rsplit("/", 1)[-1] in WRITTEN:
            continue  # outside the repository (../shared/...), another project's file, a command's output
        if re.match(r"[A-Z]+/", path):
            continue  # a placeholder folder: DIR/run.json, OUT/summary.md
        local = os.path.normpath(here / path).replace(os.sep, "/")
        if path not in files and local not in files and not any(f.endswith("/" + path) for f in files):
            missing.append(path)
    missing += [name for name in BARE.findall(plain) if name not in basenames | WRITTEN | OTHER_PROJECTS]
    modules = _short_modules(files)
    for code in CODE.findall(plain):
        match = DOTTED.match(code.strip()) or SHORT.match(code.strip())
        if not match or match.group(0).rsplit(".", 1)[-1] in EXTENSIONS:
            continue
        if DOTTED.match(match.group(0)):
            if _dotted_missing(match.group(0), files, root):
                missing.append(match.group(0))
        elif (
            match.group(1) in modules
            and match.group(1) not in FIELDS
            and not any(
                re.search(rf"\b{match.group(2)}\b", (root / f).read_text(encoding="utf-8"))
                for f in modules[match.group(1)]
            )
        ):
            missing.append(match.group(0))
    return sorted(set(missing))


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces -> '-'."""
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in HEADING.findall(markdown)}


def _short_modules(files: set[str]) -> dict[str, list[str]]:
    """The package's modules by their own name (``gpu_calls`` -> its file), as docs write them."""
    found: dict[str, list[str]] = {}
    for f in sorted(files):
        if f.startswith("marlin_demo/") and f.endswith(".py") and not f.endswith("__init__.py"):
            found.setdefault(f.rsplit("/", 1)[-1][:-3], []).append(f)
    return found


def docs(root: Path = ROOT) -> list[Path]:
    """README.md, CONTRIBUTING.md and every docs/*.md."""
    return [p for p in (root / "README.md", root / "CONTRIBUTING.md") if p.exists()] + sorted(
        (root / "docs").glob("*.md")
    )


def test_every_name_a_doc_gives_exists() -> None:
    files = repo_files()
    wrong = {}
    for path in docs():
        rel = path.relative_to(ROOT).as_posix()
        found = missing_names(path.read_text(encoding="utf-8"), rel, files)
        if found:
            wrong[rel] = found
    assert wrong == {}


def test_the_checker_reports_a_planted_wrong_name() -> None:
    """Each kind of name, renamed away, is reported; its current name is not."""
    files = repo_files()
    text = (
        "The clip lives in `marlin_demo/ui/one_clip.py` (see [the map](DESIGN.md)); `ui/compare.py` draws "
        "Compare, `records.py` writes rows, `marlin_demo.service.focus`, `service.space.GpuRefused` and "
        "`runner.run_item` too; read [speed](SPEED.md#5-compute-type-on-a-cpu), "
        "[runs](SPEED.md#suite-time-run-by-run) and [old](OLD.md), then run scripts/nothing.py."
    )
    assert missing_names(text, "docs/X.md", files) == [
        "OLD.md",
        "SPEED.md#suite-time-run-by-run",
        "marlin_demo.service.focus",
        "marlin_demo/ui/one_clip.py",
        "records.py",
        "runner.run_item",
        "scripts/nothing.py",
        "service.space.GpuRefused",
        "ui/compare.py",
    ]
    fixed = (
        "`marlin_demo/ui/shared_clip.py`, `ui/compare_tab.py`, `out_folder.py`, `rows.run_item`, "
        "`marlin_demo.service.library_find`, `service.gpu_calls.GpuRefused`, [speed](SPEED.md#9-suite-time), "
        "scripts/gpu_check.py, `video.mp4`."
    )
    assert missing_names(fixed, "docs/X.md", files) == []
