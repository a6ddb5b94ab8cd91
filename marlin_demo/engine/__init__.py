"""The engine: caption/find on one clip of a loaded variant (``core.Engine``) and its helpers."""

from marlin_demo.engine.core import (
    TINY_LABEL,
    USER_ERRORS,
    VIDEO_BACKENDS,
    Cancelled,
    Engine,
    EngineError,
    FaultInjected,
)

__all__ = [
    "TINY_LABEL",
    "USER_ERRORS",
    "VIDEO_BACKENDS",
    "Cancelled",
    "Engine",
    "EngineError",
    "FaultInjected",
]
