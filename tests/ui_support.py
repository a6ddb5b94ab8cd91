"""One real app server for the API and browser tests: ``python app.py --model tiny`` in a subprocess.

``start_app`` starts one (``conftest.py``'s ``app_server`` fixture is the shared one, a server per test
process). Its example cache, outputs and Gradio uploads live in a temporary folder, so a test run never
touches ``.gradio/`` in the repository.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MEDIA = ROOT.parent / "shared" / "media"
ARTIFACTS = ROOT / "test-artifacts"
STARTUP_TIMEOUT_S = 300.0
QUEUE_SIZE = 3  # small, so the "queue is full" answer can be provoked cheaply
# the caller's Space marker and server address would change where and how the app listens
_NOT_INHERITED = {"SPACE_ID", "MARLIN_HOST", "MARLIN_PORT", "GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT"}


@dataclass
class AppServer:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    root: Path
    log_path: Path

    @property
    def examples_cache(self) -> Path:
        return self.root / "examples-cache"

    @property
    def output_dir(self) -> Path:
        return self.root / "outputs"

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc.poll() is None


CHROMIUM = Path("/usr/bin/chromium")  # Debian's
#: Chromium on loopback only: it resolves no name (every host but 127.0.0.1 is "not found", so no DNS query
#: leaves the machine) and runs none of its background fetches (component updates, sync, pings)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-pings",
    "--no-first-run",
    "--autoplay-policy=no-user-gesture-required",
]


def launch_chromium(playwright: Any) -> Any:
    """Debian's chromium, headless, through Playwright, never reaching past loopback."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the test process dies, so a killed run leaves no server behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _wait_ready(server: AppServer, timeout_s: float) -> None:
    """Poll the HTTP port until the app answers (readiness polling, no fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"app.py exited with {server.proc.returncode}:\n{server.log_tail()}")
        try:
            if httpx.get(server.url + "config", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"app.py did not answer within {timeout_s:.0f} s:\n{server.log_tail()}")


def zero_gpu_env(log: Path) -> dict[str, str]:
    """What a ZeroGPU Space sets (SPACE_ID, SPACES_ZERO_GPU), the stand-in ``spaces`` first on the path."""
    return {
        "SPACE_ID": "owner/marlin-demo",
        "SPACES_ZERO_GPU": "true",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "stand_ins"), str(ROOT)]),
        "MARLIN_STAND_IN_GPU_LOG": str(log),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }


def start_app(
    root: Path, *extra_args: str, extra_env: dict[str, str] | None = None, address_flags: bool = True
) -> AppServer:
    """Start ``python app.py --model tiny`` (later flags win) on a free port with its state under ``root``.

    ``address_flags=False`` gives the address through Gradio's ``GRADIO_SERVER_NAME``/``_PORT``
    instead of ``--host``/``--port`` (and no ``MARLIN_HOST``/``MARLIN_PORT``).
    """
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    address = ["--host", "127.0.0.1", "--port", str(port)]
    if not address_flags:
        extra_env = {**(extra_env or {}), "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
        address = []
    inherited = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env = {
        **inherited,
        "GRADIO_ANALYTICS_ENABLED": "False",
        "GRADIO_EXAMPLES_CACHE": str(root / "examples-cache"),
        "GRADIO_TEMP_DIR": str(root / "gradio-uploads"),
        "MARLIN_OUTPUT_DIR": str(root / "outputs"),
        "MARLIN_CACHE_EXAMPLES": "lazy",  # what a Space does; eager caching would run every example first
        "HF_HUB_OFFLINE": "1",
        "MARLIN_STREAM_EVERY_S": "0",  # stream every token: the tests count the messages
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }
    log_path = root / "server.log"
    argv = [sys.executable, "app.py", "--model", "tiny", *address,
            "--queue-size", str(QUEUE_SIZE), *extra_args]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip
    server = AppServer(f"http://127.0.0.1:{port}/", port, proc, root, log_path)
    try:
        _wait_ready(server, STARTUP_TIMEOUT_S)
    except BaseException:
        stop_app(server)
        raise
    return server


def stop_app(server: AppServer) -> None:
    """Stop the server process group this helper started (and only it)."""
    if not server.alive():
        return
    try:
        os.killpg(server.proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=10)


# --------------------------------------------------------------------------- selectors into Gradio's markup
UI = ROOT / "marlin_demo" / "ui"
STYLES = sorted(UI.glob("*.css"))  # style.css and the stylesheets of the timeline and the Library
LIBRARY_SELECTOR = "#library-"  # the Library's: checked where a library is searched (test_library_app)
#: Our own names: the ids and classes we give components, and the classes of the HTML we write (a
#: two-letter prefix); only the latter hold our own markup, where any element is ours.
OWN_TOKEN = re.compile(r"^(?:#[\w-]+|\.(?:m[a-z]|c[a-z])-[\w-]+|\.dark|body|html|:root)$")
ELEM_CLASSES = {
    name
    for source in UI.glob("*.py")
    for given in re.findall(r"elem_classes=(\[[^\]]*\]|\"[^\"]*\")", source.read_text())
    for name in re.findall(r"[\w-]+", given)
}
#: selectors in the page's scripts that reach Gradio's markup (ui/*.js, ui/*.py), checked like the CSS's
SCRIPT_SELECTORS = [
    '[role="tablist"] > [role="tab"]',  # header.py: the tab strip's keys; compare_html.py: the About link
    '[role="tab"][data-tab-id]',
    "fieldset input[type=radio]",  # header.py: one Tab stop per radio group
    "#clip-video video",  # find.py, timeline.py: the player a moment seeks
    "#clip-status .prose",  # status.py: where a refused file's sentence goes
]


def gradio_selectors(css: str | None = None) -> list[str]:
    """The selectors of ``css`` that reach into Gradio's markup: any part not of our own names, unless it
    sits inside our own HTML (after one of our classes). Pseudo-classes, ``:has()`` conditions and
    pseudo-elements are dropped: what is checked is that the element they style exists."""
    css = re.sub(r"/\*.*?\*/", "", "".join(f.read_text() for f in STYLES) if css is None else css, flags=re.S)
    css = re.sub(r":is\(([^,()]+)(?:,[^()]*)?\)", r"\1", css)  # :is(a, b) X: a X stands for them
    found: list[str] = []
    for rule in re.finditer(r"([^{}]+)\{[^{}]*\}", css):
        for selector in rule.group(1).split(","):
            selector = re.sub(r"^\s*@media[^{]*", "", selector).strip()
            if not selector or selector.startswith("@") or re.fullmatch(r"[\d%, ]+|from|to", selector):
                continue
            plain = re.sub(r":has\((?:[^()]|\([^()]*\))*\)|::?[\w-]+(?:\([^)]*\))?", "", selector).strip()
            plain = re.sub(r"^(?:body|html)\s+", "", plain)
            plain = re.sub(r"^\.dark\s+", "", plain)
            inside_ours = False
            for compound in plain.split():
                tokens = re.findall(r"#[\w-]+|\.[\w-]+|\[[^\]]+\]|^[a-z]+\*?|\*", compound)
                foreign = [t for t in tokens if not OWN_TOKEN.match(t) and t not in (">", "*")]
                ours = any(
                    re.match(r"^\.(?:m[a-z]|c[a-z])-", t) and t[1:] not in ELEM_CLASSES for t in tokens
                )
                if foreign and not (inside_ours or ours):
                    found.append(plain)
                    break
                inside_ours = inside_ours or ours
    return list(dict.fromkeys(found))


# --------------------------------------------------------------------------- the page's one clip
#: the page's player shows the file named ``name`` (Gradio serves it from its own folder)
SHOWS = """(name) => [...document.querySelectorAll("#clip-video video")]
  .some(v => decodeURIComponent(v.currentSrc || v.src).endsWith("/" + name))"""


def replace_clip(pg: Any, path: Path) -> None:
    """Clear the page's clip (the × on its player), then upload ``path``, as a visitor would."""
    pg.click("#clip-video button[aria-label='Clear']")
    pg.set_input_files("#clip-video input[type=file]", str(path))
    pg.wait_for_function(SHOWS, arg=path.name, timeout=60_000)
