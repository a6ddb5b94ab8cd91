"""Gradio rewrites its components' ``.pyi`` type stubs at every import; the app skips that step.

Each component class's metaclass (``gradio.component_meta.ComponentMeta``) re-reads and re-parses its
module's source to regenerate the stub beside it (``create_or_modify_pyi``): about 1.5 s of CPU of every
``import gradio`` on a 2-core machine (3.5 s -> 2.1 s), with no setting to turn it off. The wheel ships
the stubs; only Gradio's own developers need them regenerated. :func:`install`, run before Gradio is
imported, makes that step do nothing; ``tests/test_hardening.py`` fails if Gradio renames it. This module
imports nothing (nor does its package), so it can run first; ``gradio_hooks`` holds the other reaches.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

MODULE = "gradio.component_meta"
STEP = "create_or_modify_pyi"


def skipped_stub_rewrite(*args: Any, **kwargs: Any) -> None:
    """Stands in for Gradio's stub rewrite: the installed stubs are kept as shipped."""


class _SkipStubRewrite(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads Gradio's metaclass module as usual, then swaps its stub step before any component exists."""

    def __init__(self) -> None:
        self._real: importlib.abc.Loader | None = None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        self._real = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        assert self._real is not None
        return self._real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        assert self._real is not None
        self._real.exec_module(module)
        if hasattr(module, STEP):  # renamed by a later Gradio: nothing to skip (the test says so)
            setattr(module, STEP, skipped_stub_rewrite)


def install() -> bool:
    """Skip the rewrite in this process; False when Gradio was imported already (too late)."""
    if MODULE in sys.modules:
        return False
    if not any(isinstance(f, _SkipStubRewrite) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipStubRewrite())
    return True
