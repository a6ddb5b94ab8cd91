"""The Space's configuration agrees with ZeroGPU's facts (``marlin_demo/service/zerogpu.json``, one list with
its source): README.md's front matter, ``requirements.txt`` (what the Space installs), the development set
(``requirements-dev.txt``), and the torch/torchcodec pair actually installed, proven by decoding a video.
Runs on both lanes: the main one (Python 3.11, the development set) and the Space's (Python 3.12).
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from marlin_demo import exits
from marlin_demo.service import zerogpu_rules

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "flower.mp4"


def _front_matter() -> dict[str, object]:
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])  # type: ignore[no-any-return]


def _pins(name: str) -> dict[str, str]:
    """{package: version or ''} of one requirements file (its own lines; `-r` includes not followed)."""
    out = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(==\s*([^\s,;]+))?", line)
        assert m, line
        out[m.group(1).lower().replace("_", "-")] = m.group(4) or ""
    return out


def test_front_matter_is_what_zero_gpu_runs() -> None:
    meta, facts = _front_matter(), zerogpu_rules.facts()
    assert meta["sdk"] == facts["sdk"]
    assert str(meta["python_version"]) in facts["python_versions"]  # 3.12.12 or 3.10.13, nothing else
    hardware = meta.get("suggested_hardware")
    assert hardware is None or hardware in facts["suggested_hardware_flavors"]["valid"]
    assert meta["app_file"] == "app.py" and (ROOT / "app.py").is_file()


def test_requirements_are_what_zero_gpu_accepts() -> None:
    space, facts = _pins("requirements.txt"), zerogpu_rules.facts()
    assert space["torch"] in facts["torch_versions"]  # a torch ZeroGPU does not list fails to configure
    assert "gradio" not in space and "spaces" not in space  # the front matter and the hardware bring them
    for name in ("torchvision", "torchcodec", "transformers", "gptqmodel", "bitsandbytes", "fla-core"):
        assert space.get(name), f"{name} must be pinned in requirements.txt"
    for name in ("ray", "matplotlib", "pytest", "playwright", "ruff", "mypy"):
        assert name not in space, f"{name} is not something the app serves: an extra or a dev requirement"
    # `pip install .` elsewhere gets the Space's Gradio too: the same version as the front matter's
    assert _pins("requirements-sdk.txt")["gradio"] == str(_front_matter()["sdk_version"])


def test_development_set_has_every_package_of_the_space_and_the_extras() -> None:
    space, dev = _pins("requirements.txt"), _pins("requirements-dev.txt")
    assert set(space) <= set(dev)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for reqs in extras.values():
        for req in reqs:
            name = re.split(r"[\[=<> ]", req, maxsplit=1)[0].lower()
            assert name in dev, f"extra requirement {req} missing from requirements-dev.txt"
    locked = _pins("constraints-dev.txt")
    for name, version in dev.items():
        assert name in locked, f"{name} is not in the lock (constraints-dev.txt): regenerate it"
        assert not version or locked[name] == version, (name, version, locked[name])
    assert set(extras) == set(exits.EXTRAS)  # each extra has its one-line hint


def test_installed_torch_and_torchcodec_are_one_of_the_two_sets_and_decode_a_video() -> None:
    """The pair of whichever set is installed (the Space's on 3.12, the development one on 3.11) decodes."""
    torch_v = importlib.metadata.version("torch").split("+")[0]
    codec_v = importlib.metadata.version("torchcodec")
    sets = {
        "requirements.txt": _pins("requirements.txt"),
        "requirements-dev.txt": _pins("requirements-dev.txt"),
    }
    match = [n for n, pins in sets.items() if pins["torch"] == torch_v]
    assert match, f"torch {torch_v} is neither set's"
    assert sets[match[0]]["torchcodec"] == codec_v, (match, codec_v)
    # a fresh interpreter: torchcodec loads its libraries against this torch, then decodes real frames
    code = (
        "from torchcodec.decoders import VideoDecoder\n"
        f"d = VideoDecoder({str(CLIP)!r})\n"
        "b = d.get_frames_played_at([0.0, 1.0, 2.0])\n"
        "print(*b.data.shape)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    frames, channels, height, width = map(int, done.stdout.split())
    assert (frames, channels) == (3, 3) and height > 0 and width > 0


@pytest.mark.parametrize(
    ("argv", "extra", "module"),
    [
        (["bench", "--model", "tiny"], "bench", "matplotlib"),
        (["batch", "examples/flower.mp4", "--task", "caption", "--model", "tiny", "--ray"], "batch", "ray"),
        (["index", "examples/flower.mp4", "--model", "tiny", "--ray"], "batch", "ray"),
    ],
)
def test_a_command_missing_its_extra_says_which_in_one_line(
    argv: list[str], extra: str, module: str, tmp_path: Path
) -> None:
    """As on the Space, where no extra is installed: the module made unimportable in a fresh process."""
    out = ["--out", str(tmp_path / "out")] if argv[0] != "index" else ["--library", str(tmp_path / "lib")]
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from marlin_demo.cli import main\n"
        f"sys.exit(main({[*argv, *out]!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == exits.EXIT_BAD_INPUT, done.stderr[-3000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert (
        lines[-1] == f"error: {argv[0]}{' --ray' if '--ray' in argv else ''} needs the [{extra}] extra "
        f"({module}): pip install -e '.[{extra}]'"
    ), done.stderr[-2000:]
    assert not (tmp_path / "out").exists()  # said before any work
