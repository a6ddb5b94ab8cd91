"""Scripts the tests import by path (benchmarks/, scripts/, examples/ are not packages), and code they
run in a fresh interpreter (where import order is what is under test)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def load_script(path: Path) -> ModuleType:
    """``path`` imported as a module named after its file.

    It stays in ``sys.modules`` under that name: dataclasses resolve their module by name while
    it runs, and a benchmark may import a sibling script by name.
    """
    name = path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_fresh(code: str, tag: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """Run ``code`` in a fresh interpreter; it must succeed and print one ``TAG <json>`` line: that JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith(tag + " "))
    return json.loads(line[len(tag) + 1 :])
