"""The CLI as a user runs it: real files, stdout and exit codes; one answer and one refusal in a real
process (``python -m marlin_demo``), the rest through the same ``main`` in this process (a process each
would only pay the imports again)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from result_shapes import API_CAPTION_KEYS, FIND_KEYS, cpu_kernel

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "blue_square.mp4"


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "marlin_demo", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["gptq", "bnb4", "bf16"])
def test_caption_json(variant: str, capsys: pytest.CaptureFixture[str]) -> None:
    """gptq (the default) in a subprocess as a user runs it; the other two through the same ``main``
    in this process (a subprocess each would pay the imports again for no other difference)."""
    argv = ["caption", str(CLIP), "--model", "tiny", "--variant", variant, "--json"]
    if variant == "gptq":
        proc = run_cli(*argv)
        assert proc.returncode == 0, proc.stderr[-2000:]
        stdout = proc.stdout
    else:
        from marlin_demo import cli

        assert cli.main(argv) == 0
        stdout = capsys.readouterr().out
    d = json.loads(stdout)  # stdout holds the JSON and nothing else
    assert set(d) == API_CAPTION_KEYS
    assert set(d["chapters"]) == {"lines", "reason"}  # the API's caption JSON, chapters included
    assert d["variant"] == variant
    assert d["metrics"]["device"] == "cpu" and d["runtime"]["device"] == "cpu"


@pytest.mark.slow
def test_find_json_and_readable(capsys: pytest.CaptureFixture[str]) -> None:
    """Through the same ``main`` in this process (``test_caption_json`` runs a real process)."""
    from marlin_demo import cli

    argv = ["find", str(CLIP), "the blue square appears", "--model", "tiny"]
    assert cli.main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)  # stdout holds the JSON and nothing else
    assert set(d) == FIND_KEYS
    assert d["query"] == "the blue square appears"

    assert cli.main([*argv, "--variant", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "random weights" in out
    assert "Query: the blue square appears" in out
    assert ("Span:" in out) or ("No span" in out)
    assert "latency" in out
    # what the JSON leaves out: the kernels that ran (bf16: no GPTQ kernel) and the reuse
    assert f"kernel {cpu_kernel('bf16')} · attention sdpa / gated-deltanet:torch, conv1d:torch" in out
    assert "nothing reused" in out  # a fresh run of the command: nothing cached yet


@pytest.mark.slow
def test_caption_readable_timeline(capsys: pytest.CaptureFixture[str]) -> None:
    from marlin_demo import cli

    assert cli.main(["caption", str(CLIP), "--model", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "random weights" in out and "Scene:" in out and "Events:" in out
    assert "peak" in out and "cpu_peak_rss" in out
    assert re.search(rf"first text \d+\.\d\d s · kernel {cpu_kernel('gptq')} · attention sdpa", out), out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["caption", "/nonexistent/clip.mp4"], "No file at"),
        (["caption", "pyproject.toml"], "not a video"),
        (["find", str(CLIP), "   "], "The query is empty"),
        (["find", str(CLIP), "x" * 5000], "at most 500"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the same ``main`` in this process (an exception would fail the test here, as a traceback
    would in a process); ``test_unknown_variant_rejected`` checks a real process's exit and stderr."""
    from marlin_demo import cli

    assert cli.main([*args, "--model", "tiny"]) == 2
    out = capsys.readouterr()
    assert out.err.strip().startswith("error: ") and message in out.err and "\n" not in out.err.strip()
    assert out.out == ""


def test_unknown_variant_rejected() -> None:
    proc = run_cli("caption", str(CLIP), "--model", "tiny", "--variant", "fp8")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: Unknown variant 'fp8'")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.slow
def test_caption_chapters_lines_or_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    """--chapters prints what a video description takes; a clip too short for chapters says why."""
    from marlin_demo import cli

    argv = ["caption", "--model", "tiny", "--caption-max-new-tokens", "48", "--chapters"]
    assert cli.main([*argv[:1], str(ROOT / "examples" / "flower.mp4"), *argv[1:]]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == "" and out.err.strip().splitlines()[-1].startswith(
        "No chapters: this clip is 5 s"
    )
    assert cli.main([*argv[:1], str(ROOT / "examples" / "people_table.mp4"), *argv[1:]]) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    if lines:  # YouTube's rules: first at 0:00, at least three
        assert lines[0].startswith("0:00 ") and len(lines) >= 3
    else:
        assert "No chapters" in out.err
