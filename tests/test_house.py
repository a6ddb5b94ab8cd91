"""The house rules the design depends on (docs/DESIGN.md), checked on the code as it is.

``lint-imports`` (CI) checks the layers; this file checks what its contracts cannot say: no import
cycle anywhere in the package (a package's ``__init__`` and its own modules included), few modules
at the top, no function over 100 lines, and no branch on a result's type outside the answer types.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType
from typing import get_type_hints

import grimp

from marlin_demo import tasks

PACKAGE = Path(__file__).resolve().parents[1] / "marlin_demo"
MAX_TOP_MODULES = 14
MAX_FUNCTION_LINES = 100


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    """Every import counts: inside functions and under TYPE_CHECKING too (grimp sees them all)."""
    graph = grimp.build_graph("marlin_demo")
    edges = {
        m: set(graph.find_modules_directly_imported_by(m))
        for m in graph.modules
        if m.startswith("marlin_demo")
    }
    assert _cycles(edges) == []


def test_few_modules_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def _long_functions(source: str) -> list[tuple[str, int]]:
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append((node.name, length))
    return out


def test_long_function_finder_counts_lines() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert _long_functions(f"def f():\n{body}\n") == [("f", MAX_FUNCTION_LINES + 1)]
    assert _long_functions("def g():\n    return 1\n") == []


def test_no_function_over_100_lines() -> None:
    long = {
        f"{path.relative_to(PACKAGE)}:{name}": n
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, n in _long_functions(path.read_text())
    }
    assert long == {}


def test_design_doc_holds_the_current_import_graph() -> None:
    """docs/DESIGN.md's diagram is `scripts/import_graph.py`'s output: regenerate it when imports change."""
    from script_loader import load_script

    graph = load_script(PACKAGE.parent / "scripts" / "import_graph.py").mermaid()
    design = (PACKAGE.parent / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    drawn = design.split("<!-- import-graph -->\n```mermaid\n", 1)[1].split("```", 1)[0]
    assert drawn.strip() == graph.strip()


#: What only ``ui/gradio_hooks.py`` may write: Gradio's modules below its public names (its internals),
#: private attributes of its objects, and the upload folder's own lookup. ``import gradio as gr`` and the
#: ``Block`` and ``Examples`` classes for annotations are Gradio's public face and allowed everywhere.
GRADIO_INTERNALS = re.compile(
    r"from gradio\.(?!blocks import Block\b|helpers import Examples\b)\w+"
    r"|import gradio\.\w+"
    r"|\bgr\.(?:utils|processing_utils|component_meta|route_utils|queueing|data_classes|helpers|blocks)\b"
    r"|\b(?:demo|blocks|queue)\._\w+"
)
GRADIO_ROOM = PACKAGE / "ui" / "gradio_hooks.py"


def test_gradio_internals_rule_sees_each_kind_of_reach() -> None:
    reaches = [
        "from gradio.component_meta import ComponentMeta",
        "import gradio.processing_utils",
        "folder = gr.utils.get_upload_folder()",
        "examples: gr.helpers.Examples",
        "demo._queue.sleep_when_free = 1",
    ]
    assert all(GRADIO_INTERNALS.search(line) for line in reaches)
    allowed = ["from gradio.blocks import Block", "from gradio.helpers import Examples", "gr.Examples(...)"]
    assert not any(GRADIO_INTERNALS.search(line) for line in allowed)


def test_one_module_reaches_into_gradio() -> None:
    """Gradio's internals are reached from ``ui/gradio_hooks.py`` only, where each reach has its reason
    and its named test (``tests/test_hardening.py``)."""
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != GRADIO_ROOM
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if GRADIO_INTERNALS.search(line)
    ]
    assert not found, "Gradio's internals outside ui/gradio_hooks.py:\n" + "\n".join(found)


#: What only an answer type and the registry (``marlin_demo/tasks/``) may write: a branch on the kind of a
#: result (an ``isinstance`` or ``is`` test of a result class, a ``.scored`` test, a dict or ``match`` keyed
#: by one, ``type(...)`` compared). Every other layer asks the task's answer type (docs/DESIGN.md).
def result_types() -> list[str]:
    """The result class of every registered task: what its answer type's ``build`` returns."""
    return sorted({get_type_hints(type(t.answer).build)["return"].__name__ for t in tasks.TASKS.values()})


def answer_type_branch(classes: list[str]) -> re.Pattern[str]:
    kinds = "|".join(classes)
    return re.compile(
        rf"isinstance\([^)]*\b(?:{kinds})\b|\bis (?:not )?(?:{kinds})\b"
        rf"|[{{,]\s*(?:{kinds})\s*:|^\s*(?:{kinds})\s*:|\bcase (?:{kinds})\("
        r"|\.scored\b|\btype\([^)]*\)\s*(?:is|==|!=|in)\b"
    )


ANSWER_TYPE_BRANCH = answer_type_branch(result_types())
ANSWER_TYPES = PACKAGE / "tasks"


def test_answer_type_rule_sees_each_kind_of_branch(question: ModuleType) -> None:
    """It knows every registered task's result type: the suite's third task's too, once registered."""
    assert {"CaptionResult", "FindResult", "QuestionResult"} <= set(result_types())
    rule = answer_type_branch(result_types())
    branches = [
        "if isinstance(result, CaptionResult):",
        "elif isinstance(res, CaptionResult | FindResult):",
        "if task.result is FindResult:",
        "if entry.scored:",
        "RETURNS = {CaptionResult: 'x', FindResult: 'y'}",
        "    FindResult: _span_agreement,",
        "case FindResult(span=s):",
        "if type(result) is FindResult:",
        "if isinstance(answer, QuestionResult):",
    ]
    assert [b for b in branches if not rule.search(b)] == []
    allowed = [
        "def find(self, video: str) -> FindResult:",
        "result = cast(FindResult, merged)",
        "results: Mapping[str, Result],",
        "if view.result is not None:",
    ]
    assert [a for a in allowed if rule.search(a)] == []


def test_no_branch_on_an_answers_type_outside_the_answer_types() -> None:
    """The engine, runner, CLI, API, Compare, the page and the bench ask the task (``tasks.Answer``); only
    ``marlin_demo/tasks/`` knows what kind of result it made."""
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if ANSWER_TYPES not in path.parents
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ANSWER_TYPE_BRANCH.search(line)
    ]
    assert not found, "A branch on a result's type outside marlin_demo/tasks/:\n" + "\n".join(found)


#: a module named for no concern gathers unrelated names (ui/common.py held 34 before it was split)
CATCH_ALL_NAMES = {"common.py", "utils.py", "helpers.py", "misc.py", "util.py"}


def test_no_catch_all_module() -> None:
    """Every module is named for its one concern: none called common, utils, helpers or misc."""
    found = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name in CATCH_ALL_NAMES)
    assert not found, f"catch-all modules: {found}; split them by concern"


#: Where a project module or name is imported: the package, the tests (their helpers and stand-ins), the
#: scripts and the benchmarks. Each says a project name by its own name, so one grep finds every use.
ALIAS_ROOTS = [PACKAGE.parent / d for d in ("marlin_demo", "tests", "scripts", "benchmarks")]
#: Top-level names that are the project's own: the package, the stand-ins, and the sibling modules that
#: tests, scripts and benchmarks import from each other (``ui_support``, ``script_loader``...).
PROJECT_TOPS = {"marlin_demo", "stand_ins"} | {
    p.stem for d in ALIAS_ROOTS[1:] for p in d.glob("*.py") if p.stem != "__init__"
}
#: A kept alias says why on its line (``# alias: <why>``); ``settings as settings_mod`` is everywhere
#: beside ``settings`` variables.
ALIAS_REASON = re.compile(r"#\s*alias:")
ALLOWED_ALIASES = {("settings", "settings_mod")}


def _renaming_imports(source: str) -> list[tuple[int, str]]:
    """(line, text) of each ``import X as Y`` / ``from P import X as Y`` of a project name where Y is not
    X's own (last) name, unless allowed or its statement carries ``# alias:``."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        relative = isinstance(node, ast.ImportFrom) and node.level > 0
        module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
        said = "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            own = alias.name.rsplit(".", 1)[-1]
            project = relative or full.split(".")[0] in PROJECT_TOPS
            if not alias.asname or alias.asname == own or not project:
                continue
            if (own, alias.asname) in ALLOWED_ALIASES or ALIAS_REASON.search(said):
                continue
            found.append((node.lineno, f"{full} as {alias.asname}"))
    return found


def test_alias_rule_sees_a_renamed_project_import() -> None:
    caught = [
        "from marlin_demo.library import index as idx",
        "import stand_ins.spaces as stand_in",
        "from marlin_demo.variants import (\n    label,\n    unknown as unknown_variant,\n)",
        "from ui_support import serve as start",
        "from . import video as V",
    ]
    assert [c for c in caught if not _renaming_imports(c)] == []
    allowed = [
        "import gradio as gr",
        "from marlin_demo.library import index",
        "import marlin_demo.video.digest as digest",
        "from marlin_demo import settings as settings_mod",
        "from marlin_demo.app import main as app_main  # alias: this module has its own main()",
    ]
    assert [a for a in allowed if _renaming_imports(a)] == []


def test_no_alias_renames_a_project_import() -> None:
    """A project module or function is imported under its own name (``index.index``, not ``idx.index``),
    unless two names truly clash; such an alias says why with ``# alias:`` on its line."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {said}"
        for root in ALIAS_ROOTS
        for path in sorted(root.rglob("*.py"))
        for n, said in _renaming_imports(path.read_text(encoding="utf-8"))
    ]
    assert not found, "Project imports under another name:\n" + "\n".join(found)
