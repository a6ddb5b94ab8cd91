"""Shared fixtures: where the real test media and the rendered examples live, the tiny model's settings,
and the app server."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_support import CHROMIUM, AppServer, launch_chromium, start_app, stop_app

from marlin_demo import tasks
from marlin_demo.models import compute
from marlin_demo.settings import Settings
from marlin_demo.ui import gradio_hooks

gradio_hooks.skip_stub_rewrite()  # the test processes import Gradio too: skipped as in the app

ROOT = Path(__file__).resolve().parents[1]
MEDIA_DIR = ROOT.parent / "shared" / "media"  # ../shared/media, never copied into the repo
EXAMPLES_DIR = ROOT / "examples"


@pytest.fixture(scope="session")
def media_dir() -> Path:
    """The shared real-video folder; skips the test when it is absent."""
    if not MEDIA_DIR.is_dir():
        pytest.skip(f"test media folder {MEDIA_DIR} is absent")
    return MEDIA_DIR


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """The committed example clips and examples.json."""
    return EXAMPLES_DIR


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium through Playwright (``ui_support.launch_chromium``), one per test file."""
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium (/usr/bin/chromium) is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any, app_server: AppServer) -> Iterator[Any]:
    """A fresh page (a new session) of the shared app server, desktop-sized; no JavaScript error allowed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(app_server.url)
    pg.wait_for_selector("#caption-run", timeout=60_000)
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture(scope="session")
def tiny_settings() -> Settings:
    """``Settings(model="tiny")``, every other setting at its default. Settings are frozen: a test that
    needs others says which, ``tiny_settings.with_(caption_max_new_tokens=16, ...)``."""
    return Settings(model="tiny")


@pytest.fixture(scope="session")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    """The shared ``python app.py --model tiny`` server (``ui_support.start_app``): one per test process,
    started on first use, stopped at the end; a server that died meanwhile fails the session's end."""
    server = start_app(tmp_path_factory.mktemp("marlin-app"))
    yield server
    died = not server.alive()
    stop_app(server)
    if died:
        pytest.fail(f"the app server died during the tests:\n{server.log_tail()}")


# --------------------------------------------------------------------------- suite order and the tiny build
# The tiny checkpoint is built once per machine (~2 minutes, on two threads). When the whole suite runs,
# the build starts in the background at once; the workers run on the CPU time it leaves (SCHED_IDLE) and
# take the files without model or server tests first, which need no build.


def _whole_suite(config: pytest.Config) -> bool:
    """No test file, folder or node named on the command line (the README's command, CI)."""
    args = [str(a) for a in config.invocation_params.args]
    return not any(a.endswith(".py") or "::" in a or (ROOT / a).is_dir() or Path(a).is_dir() for a in args)


def pytest_configure(config: pytest.Config) -> None:
    # Off the network, whatever a test sets later: huggingface_hub reads HF_HUB_OFFLINE once, at import,
    # so a test that set it after an earlier one had imported transformers went on to resolve
    # huggingface.co (20 s of DNS timeouts). Set before any test module loads, in every process.
    os.environ["HF_HUB_OFFLINE"] = "1"
    if hasattr(config, "workerinput"):
        if os.environ.get("MARLIN_TESTS_YIELD_TO_BUILD"):
            _yield_to_the_build()
        return
    if hasattr(config.option, "loadscopereorder"):
        # xdist would put the files with the most tests first, undoing pytest_collection_modifyitems'
        # order below: the files without model tests first, beside the tiny build, then the longest
        config.option.loadscopereorder = False
    workers = getattr(config.option, "numprocesses", None) or 0
    if workers > 1:
        # The workers, their servers and their CLI runs share the cores: each gets its share of math
        # threads (one on two cores). OpenMP's threads spin while they wait, and two per process on two
        # cores spun against each other (docs/SPEED.md, "One math thread per worker": the whole suite
        # 19 min 36 s -> 13 min 59 s). Set before the workers start, so they and every process they
        # start inherit it; the tiny build pins its own (PINNED_MATH).
        if "OMP_NUM_THREADS" not in os.environ:  # a value set by hand is kept
            os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
            os.environ["MARLIN_TEST_THREADS"] = "share"  # for the test that checks it
    if not _whole_suite(config):
        return  # only the controlling process of a whole-suite run starts the build
    log = open(ROOT / ".pytest-tiny-build.log", "w")
    config._tiny_build = (  # type: ignore[attr-defined]
        subprocess.Popen([sys.executable, "-m", "marlin_demo", "tiny"], cwd=ROOT, stdout=log, stderr=log),
        log,
    )
    if workers > 1:
        os.environ["MARLIN_TESTS_YIELD_TO_BUILD"] = "1"  # read by the workers, which start after this


def _yield_to_the_build() -> None:
    """The worker, and every process it starts, runs only on CPU time the tiny build leaves over.

    The build's pinned two-thread team waits for both halves of every small operation: beside two busy
    workers each half waited for a time slice (290 s instead of 155; docs/SPEED.md, "The tiny build
    first"). Nothing switches back: afterwards every test process has the same policy.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused (a sandbox): the cores shared as before
        os.environ["MARLIN_TESTS_YIELD_TO_BUILD"] = "refused"


def pytest_unconfigure(config: pytest.Config) -> None:
    build = getattr(config, "_tiny_build", None)
    if build is not None:
        proc, log = build
        if proc.poll() is None:  # no test needed it after all
            proc.terminate()
        proc.wait(timeout=60)
        log.close()


# --------------------------------------------------------------------------- the machine, at the end
# The suite's time means little without the processor it ran on (the tiny computes in bf16 only where the
# CPU has native bf16): the last lines of pytest's output, the part a CI log keeps, say which it was.


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workeroutput") and "torch" in sys.modules:
        session.config.workeroutput["machine"] = compute.machine_line()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A worker's machine line (it has imported torch), kept by the controller for its summary."""
    line = getattr(node, "workeroutput", {}).get("machine")
    if line:
        node.config._marlin_machine = line  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    line = getattr(config, "_marlin_machine", "") or (
        compute.machine_line() if "torch" in sys.modules else f"{os.cpu_count()} cores, {compute.cpu_name()}"
    )
    terminalreporter.write_line(f"machine: {line}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files whose tests need no model or server first (stable: each file stays in one piece)."""
    heavy = {
        item.path for item in items if item.get_closest_marker("slow") or item.get_closest_marker("browser")
    }
    first_index = {}
    for index, item in enumerate(items):
        first_index.setdefault(item.path, index)
    # among the heavy files the longest go first, so no worker starts one of them near the end
    longest = {name: rank for rank, name in enumerate(LONGEST_FILES)}

    def key(item: pytest.Item) -> tuple[bool, int, int]:
        rank = longest.get(item.path.name, len(longest)) if item.path in heavy else 0
        return item.path in heavy, rank, first_index[item.path]

    items.sort(key=key)


#: The heavy files that take longest in a whole-suite run (CI's durations), longest first.
LONGEST_FILES = (
    "test_browser.py",
    "test_batch.py",
    "test_bench.py",
    "test_quantize.py",
    "test_library_app.py",
)


@pytest.fixture
def question() -> Iterator[Any]:
    """The suite's third task (tests/question_task.py), registered as a built-in is: its module's import
    registers it. Imported afresh for each test that asks, and taken away after it."""
    module = importlib.import_module("question_task")
    yield module
    tasks.unregister_task(module.QUESTION.name)
    sys.modules.pop("question_task", None)
