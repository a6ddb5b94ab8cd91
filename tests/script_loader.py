"""Scripts the tests import by path (benchmarks/, scripts/, examples/ are not packages)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


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
