"""``pip install .`` gives a working CLI and app: a wheel built from the sources, installed into a fresh venv.

The wheel is built from a copy of the files a source distribution holds (no in-tree ``build/``),
installed with ``--no-deps`` into a new virtual environment whose dependencies come from the
test's own environment through a ``.pth`` file (no downloads), then run from another working
directory, so nothing can come from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from ui_support import free_port

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "ball_rolls.mp4"

pytestmark = pytest.mark.slow


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """(venv bin folder, environment, a working directory outside the checkout)."""
    root = tmp_path_factory.mktemp("packaging")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "requirements.txt", "requirements-sdk.txt"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "marlin_demo", src / "marlin_demo", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = root / "wheels"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    # --no-build-isolation: setuptools from this environment, nothing downloaded
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    built = _run([*pip_wheel, "-w", str(wheels), str(src)], cwd=root, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("marlin_demo-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "marlin_demo/ui/style.css" in names  # read at run time
    assert "marlin_demo/models/tiny.py" in names  # subpackages are found
    assert not any(n.startswith(("tests/", "examples/")) for n in names)

    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bindir = venv / "bin"
    purelib = _run(
        [str(bindir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root, env
    ).stdout.strip()
    # the dependencies: this environment's site-packages, after the venv's own
    (Path(purelib) / "shared-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = _run(
        [sys.executable, "-m", "pip", "--python", str(bindir / "python"), "install", "--no-deps", str(wheel)],
        root,
        env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    env = {**env, "PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}", "HF_HUB_OFFLINE": "1"}
    env["GRADIO_ANALYTICS_ENABLED"] = "False"
    return bindir, env, elsewhere


def test_installed_package_is_the_one_imported(installed: tuple[Path, dict[str, str], Path]) -> None:
    bindir, env, cwd = installed
    where = _run([str(bindir / "python"), "-c", "import marlin_demo; print(marlin_demo.__file__)"], cwd, env)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(bindir.parent), where.stdout


def test_installed_cli_captions_a_clip(installed: tuple[Path, dict[str, str], Path]) -> None:
    bindir, env, cwd = installed
    helped = _run([str(bindir / "marlin-demo"), "--help"], cwd, env)
    assert helped.returncode == 0 and "caption" in helped.stdout and "app" in helped.stdout
    app_help = _run([str(bindir / "marlin-demo"), "app", "--help"], cwd, env)
    assert app_help.returncode == 0 and "--examples-dir" in app_help.stdout, app_help.stderr[-2000:]
    out = _run([str(bindir / "marlin-demo"), "caption", str(CLIP), "--model", "tiny", "--json"], cwd, env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["variant"] == "gptq" and "tiny" in result["model"] and result["raw"]
    bad = _run([str(bindir / "marlin-demo"), "caption", str(cwd / "none.mp4"), "--model", "tiny"], cwd, env)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")


def test_installed_app_serves_without_examples(installed: tuple[Path, dict[str, str], Path]) -> None:
    """``marlin-demo app`` from an install: the page comes up with its stylesheet and no examples folder."""
    bindir, env, cwd = installed
    port = free_port()
    env = {**env, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
    env.update(GRADIO_EXAMPLES_CACHE=str(cwd / "cache"), MARLIN_OUTPUT_DIR=str(cwd / "out"))
    log = (cwd / "app.log").open("wb")
    proc = subprocess.Popen(
        [str(bindir / "marlin-demo"), "app", "--model", "tiny", "--variants", "bf16"],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        config = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/config", timeout=2.0)
                if reply.status_code == 200:
                    config = reply.json()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)  # readiness polling of a server starting up
        assert config is not None, (cwd / "app.log").read_text(errors="replace")[-3000:]
        assert ".mh-header {" in json.dumps(config)  # ui/style.css, shipped as package data, reached the page
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()
