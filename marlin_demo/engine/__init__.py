"""The engine: caption/find on one clip of a loaded variant (``core.Engine``) and its helpers."""

from marlin_demo.engine.core import USER_ERRORS, Cancelled, Engine, EngineError

__all__ = ["USER_ERRORS", "Cancelled", "Engine", "EngineError"]
