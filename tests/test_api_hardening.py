"""Faults and security on the real server: disconnects, files it must not serve, bounded load; and the
one module that reaches into Gradio (``ui.gradio_hooks``), each reach with a test naming it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr
import httpx
import pytest
from gradio import processing_utils
from gradio_client import Client, handle_file
from result_shapes import FIND_KEYS
from ui_support import EXAMPLES, ROOT, AppServer

from marlin_demo.engine import Engine
from marlin_demo.models import ModelLoadError
from marlin_demo.settings import Settings
from marlin_demo.ui import gradio_hooks

pytestmark = pytest.mark.slow

CLIP = EXAMPLES / "ball_rolls.mp4"


@pytest.fixture(scope="module")
def client(app_server: AppServer) -> Client:
    return Client(app_server.url, verbose=False)


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", str(ROOT / "app.py"), "../app.py", str(ROOT / "pyproject.toml"), "/proc/self/environ"],
)
def test_files_outside_the_allowed_folders_are_not_served(app_server: AppServer, path: str) -> None:
    r = httpx.get(f"{app_server.url}/gradio_api/file={path}", timeout=30)
    assert r.status_code in (403, 404), (path, r.status_code)
    assert "root:" not in r.text and "import" not in r.text


def test_a_client_that_disconnects_mid_request_does_not_wedge_the_queue(
    client: Client,
    app_server: AppServer,
) -> None:
    child = textwrap.dedent(
        f"""
        from gradio_client import Client, handle_file
        from gradio_client.utils import Status
        c = Client({app_server.url!r}, verbose=False)
        job = c.submit(handle_file({str(CLIP)!r}), "bf16", api_name="/caption")
        import time
        while job.status().code not in (Status.PROCESSING, Status.FINISHED):
            time.sleep(0.05)
        print("processing", flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "processing"
    finally:
        proc.kill()  # the client vanishes mid-request
        proc.wait(timeout=30)
    # the next caller is served (a wedged queue would leave this waiting until the timeout)
    d = client.predict(handle_file(CLIP), "the ball", "gptq", api_name="/find")
    assert set(d) == FIND_KEYS


def test_bounded_load_ends_in_results_or_busy(app_server: AppServer) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from load_test import run_load

    report = run_load(app_server.url, requests=18, concurrency=6, warmup=2, max_seconds=600)
    assert report["requests"] == 18
    assert report["errors"] == 0, report["error_samples"]
    assert report["ok"] + report["queue_full"] == 18
    assert report["ok"] >= 3
    assert report["checks"]["prompt_probe"], report["probe_s"]


def test_load_script_refuses_other_hosts() -> None:
    proc = subprocess.run(
        [sys.executable, "scripts/load_test.py", "--url", "http://192.0.2.1:7860", "--requests", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "loopback" in proc.stderr  # refused before sending anything


def test_a_broken_variant_names_the_fix_and_the_others_keep_working(tmp_path: Path) -> None:
    engine = Engine(Settings(model="tiny", extra_variants=f"broken={tmp_path / 'missing'}"))
    assert "broken" in engine.variants
    with pytest.raises(ModelLoadError, match="does not exist"):
        engine.load("broken")
    assert "broken" in engine.load_errors()
    assert engine.find(CLIP, "the ball", "gptq").raw


@pytest.fixture(scope="module")
def bad_media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from media_factory import make

    folder = tmp_path_factory.mktemp("bad-media")
    return {kind: make(kind, folder) for kind in BAD_MEDIA}


BAD_MEDIA = {
    "png": "PNG image",
    "audio_only": "no video stream",
    "truncated": "truncated",
    "zero_bytes": "empty",
    "random_bytes": "not a video",
    "single_frame": "only 1 frame",
}


@pytest.mark.parametrize("kind", sorted(BAD_MEDIA))
def test_unusable_uploads_get_a_specific_gr_error(
    client: Client, bad_media: dict[str, Path], kind: str
) -> None:
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as info:
        client.predict(handle_file(bad_media[kind]), "gptq", api_name="/caption")
    message = str(info.value)
    assert BAD_MEDIA[kind] in message, message
    assert "Traceback" not in message


# ---------------------------------------------------------------------------- Gradio's internals


def _probe_app() -> tuple[gr.Blocks, Any]:
    """A ``gr.api`` endpoint taking a video as this app's do, and its Gradio function."""

    def probe(video: str) -> str:
        return str(video)

    with gr.Blocks() as demo:
        gr.api(probe, api_name="probe")
    (block_fn,) = [fn for fn in demo.fns.values() if fn.api_name == "probe"]
    return demo, block_fn


def test_hook_no_url_download_gradio_still_fetches_and_the_hook_refuses_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``gradio_hooks.refuse_url_downloads``: Gradio still downloads a file given as a URL before an
    endpoint runs (so the hook is needed), through the method the hook replaces (so it still works)."""
    fetched: list[str] = []

    async def recorded(url: str, cache_dir: str) -> str:
        fetched.append(url)
        return str(EXAMPLES / "ball_rolls.mp4")

    monkeypatch.setattr(processing_utils, "async_ssrf_protected_download", recorded)
    url = "http://127.0.0.1:9/clip.mp4"  # never reached: the download is the recorder above
    given = [{"path": url, "orig_name": "clip.mp4", "meta": {"_type": "gradio.FileData"}}]
    demo, block_fn = _probe_app()
    asyncio.run(demo.preprocess_data(block_fn, list(given), None))
    assert fetched == [url], (
        "gradio_hooks.refuse_url_downloads: Gradio no longer downloads a URL given as a file before the "
        "endpoint runs; the hook may be unneeded now (check, then drop it)"
    )
    assert hasattr(demo, "blocks"), "gradio_hooks.refuse_url_downloads: Blocks.blocks is gone"
    assert gradio_hooks.refuse_url_downloads(demo) >= 1
    with pytest.raises(gr.Error) as refused:
        asyncio.run(demo.preprocess_data(block_fn, list(given), None))
    assert refused.value.message == gradio_hooks.NO_URLS and fetched == [url], (
        "gradio_hooks.refuse_url_downloads: Gradio downloads a URL without calling "
        "Block.async_move_resource_to_block_cache, which the hook replaces"
    )
    # an uploaded file still passes as Gradio moves it
    upload = Path(gr.utils.get_upload_folder()) / "probe" / "clip.mp4"
    upload.parent.mkdir(parents=True, exist_ok=True)
    upload.write_bytes(b"x")
    moved = asyncio.run(
        demo.preprocess_data(block_fn, [{"path": str(upload), "meta": {"_type": "gradio.FileData"}}], None)
    )
    assert moved[0]["path"] == str(upload)


def test_hook_mcp_calls_are_told_apart_by_the_bridges_header() -> None:
    """``gradio_hooks.from_mcp``: the header of Gradio's MCP bridge (its answers are JSON text); the
    MCP tests' ``json_of`` fails naming this hook when the bridge stops sending it."""
    name, value = gradio_hooks.MCP_USER_HEADER
    assert gradio_hooks.from_mcp(SimpleNamespace(headers={name: value}))
    assert not gradio_hooks.from_mcp(SimpleNamespace(headers={name: "api"}))
    assert not gradio_hooks.from_mcp(None)
