"""How far a click travels: the project's own functions on both thread stacks when ``generate`` is entered
(the one in ``generate`` and the one that made the request), for a Caption click from the page, and the
rule that no UI module starts a thread (issue 54)."""

from __future__ import annotations

import ast
import json
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import stand_ins.spaces
from ui_support import EXAMPLES, free_port

from marlin_demo import model_io, service, tasks
from marlin_demo.engine import Engine, core
from marlin_demo.service import gpu_calls
from marlin_demo.settings import Settings
from marlin_demo.ui.blocks import build_demo

PACKAGE = Path(core.__file__).resolve().parents[1]
CLIP = EXAMPLES / "ball_rolls.mp4"
STAND_IN = Path(stand_ins.spaces.__file__).resolve().parent


def _frames(frame: FrameType | None, root: Path = PACKAGE) -> list[tuple[str, str]]:
    """(module, function) of each frame of ``root``'s code on a stack, innermost first."""
    out = []
    while frame is not None:
        path = Path(frame.f_code.co_filename).resolve()
        if path.is_relative_to(root):
            module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
            out.append((module, frame.f_code.co_qualname))
        frame = frame.f_back
    return out


@pytest.mark.slow
@pytest.mark.parametrize("zero_gpu", [False, True], ids=["here", "zerogpu"])
def test_a_caption_click_crosses_few_functions(
    zero_gpu: bool, tiny_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, browser: Any
) -> None:
    """At ``generate``'s first entry: at most 10 functions in at most 6 modules on the two stacks, and one
    thread between them (the one that turns ``generate``'s callbacks into items). On ZeroGPU (the stand-in
    ``spaces``: the call forked, as ZeroGPU runs it) the same bound: the fork's own pipe is all it adds."""
    monkeypatch.setenv("MARLIN_CACHE_EXAMPLES", "off")
    seen = tmp_path / "stacks.json"  # written where generate runs: on ZeroGPU, the call's own process
    real = core.generate

    def spy(*args: Any, **kwargs: Any) -> Any:  # the real generate, its callers' stacks recorded first
        if not seen.exists():
            me, frames = threading.get_ident(), sys._current_frames()
            stacks = {t: (_frames(f), _frames(f, STAND_IN)) for t, f in frames.items()}
            kept = [s for t, s in stacks.items() if s[0] and (t == me or any("ui" in m for m, _ in s[0]))]
            seen.write_text(json.dumps(kept))
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "generate", spy)
    if zero_gpu:  # ZeroGPU as the stand-in runs it, in this process (each call forked from it)
        monkeypatch.setitem(sys.modules, "spaces", stand_ins.spaces)
        monkeypatch.setattr(stand_ins.spaces, "QUOTAS", {})
        monkeypatch.setattr(gpu_calls, "_DECORATED", [])
        monkeypatch.setattr(gpu_calls, "zero_gpu", lambda: True)
    settings = tiny_settings.with_(output_dir=str(tmp_path / "out"), caption_max_new_tokens=8)
    engine = Engine(settings)
    for variant in engine.variants if zero_gpu else ():  # loaded before the calls, as a Space preloads
        engine.load(variant)
    demo, launch = build_demo(engine, settings)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch)
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        pg.goto(f"http://127.0.0.1:{port}/")
        pg.set_input_files("#clip-video input[type=file]", str(CLIP))
        pg.wait_for_selector("#clip-status .ms-ok", timeout=120_000)
        pg.click("#caption-run")
        pg.wait_for_selector("#caption-metrics .md-card", timeout=240_000)
        context.close()
    finally:
        demo.close()
    assert seen.exists(), "generate never ran"
    stacks = json.loads(seen.read_text())
    assert len(stacks) == 2, stacks  # the request's thread and the one in generate
    functions = {tuple(f) for s, _ in stacks for f in s} | {("marlin_demo.engine.generation", "generate")}
    modules = {m for m, _ in functions}
    print(f"\n{len(functions)} functions in {len(modules)} modules:", *sorted(functions), sep="\n  ")
    assert len(functions) <= 10 and len(modules) <= 6, sorted(functions)
    theirs = {f for _, s in stacks for _, f in s}  # the stand-in's: its GPU call and the fork's pipe
    assert theirs == (
        {"GPU.<locals>.decorate.<locals>.call", "forked", "forked.<locals>.child"} if zero_gpu else set()
    )


def test_no_ui_module_starts_a_thread() -> None:
    """Threads are started below the UI (``service``, ``library``): a UI module only wraps a stream, so a
    visitor's context reaches every GPU call by one rule, in one place."""
    starts = []
    for path in sorted((PACKAGE / "ui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            called = node.func if isinstance(node, ast.Call) else None
            name = getattr(called, "attr", None) or getattr(called, "id", None)
            if name in ("Thread", "ThreadPoolExecutor", "start_new_thread", "copy_context"):
                starts.append(f"{path.name}:{node.lineno} {name}")
    assert not starts, starts


@pytest.mark.slow
def test_a_request_cleans_its_query_once_and_looks_its_task_up_in_the_service(
    tiny_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query is cleaned once (``service.check_query``) and the task looked up by name only there: the
    engine gets the entry and the cleaned query, and builds the very prompt of the cleaned query."""
    cleaned: list[str] = []
    real_clean = model_io.sanitize_query

    def clean(query: str, *args: Any) -> str:
        cleaned.append(query)
        return real_clean(query, *args)

    by_name: list[str] = []
    real_get = tasks.get_task
    for module in [m for name, m in sys.modules.items() if name.startswith("marlin_demo.")]:
        if getattr(module, "get_task", None) is not real_get or module.__name__.startswith(tasks.__name__):
            continue  # (the registry's own name for it stays: what every module's lookup calls)

        def lookup(task: Any, _module: str = module.__name__) -> Any:
            if isinstance(task, str):
                by_name.append(_module)
            return real_get(task)

        monkeypatch.setattr(module, "get_task", lookup)
    monkeypatch.setattr(model_io, "sanitize_query", clean)
    engine = Engine(tiny_settings.with_(find_max_new_tokens=6))
    result = service.run(engine, "find", CLIP, "gptq", '  the  "ball"\x07 rolls ')
    assert cleaned == ['  the  "ball"\x07 rolls ']  # once, the visitor's own text
    assert by_name == ["marlin_demo.service"], by_name
    assert model_io.FIND_PROMPT_TEMPLATE.format(query="the \u201cball\u201d rolls") in result.info.prompt
