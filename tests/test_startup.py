"""Engine start-up (service.startup): importable without gradio, falls back to the tiny stand-in."""

from __future__ import annotations

import subprocess
import sys

import pytest

from marlin_demo.service import startup
from marlin_demo.settings import Settings


def test_startup_imports_no_gradio() -> None:
    code = "import sys, marlin_demo.service.startup; sys.exit('gradio' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"marlin_demo.service.startup pulled in gradio\n{done.stderr}"


def test_offline_hub_without_cache_falls_back_to_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the probe answers before any network access
    missing = "marlin-demo-tests/not-in-any-cache"
    settings = Settings().with_(model="marlin", gptq_id=missing, bf16_id=missing)
    engine, status = startup.start_engine(settings)
    assert status.requested == "marlin"
    assert status.fell_back
    assert status.fallback_reason is not None and "HF_HUB_OFFLINE" in status.fallback_reason
    assert missing in status.fallback_reason
    assert engine.settings.is_tiny


def test_tiny_requested_is_not_a_fallback(tiny_settings: Settings) -> None:
    engine, status = startup.start_engine(tiny_settings)
    assert not status.fell_back and status.fallback_reason is None
    assert engine.settings.is_tiny
