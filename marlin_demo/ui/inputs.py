"""What a visitor sends, checked: uploads only, a known variant, errors said in one sentence."""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator
from pathlib import Path

import gradio as gr

from marlin_demo import variants
from marlin_demo.engine import USER_ERRORS
from marlin_demo.ui import gradio_hooks
from marlin_demo.ui.context import UIContext, log


def session_of(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or ""


NOT_UPLOADED = (
    "Send the video as an uploaded file: in gradio_client use handle_file('clip.mp4'). "
    "A path on the server ({name}) is not accepted."
)


def is_inside(path: Path, folder: Path) -> bool:
    """``path`` lies in ``folder`` once links are resolved (only uploads and examples are served)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def require_upload(video: str | None, ctx: UIContext, uploads_only: bool = False) -> str:
    """The path of an upload (or, unless ``uploads_only``, a bundled example); else a clear ``gr.Error``."""
    if video is None or not str(video).strip():
        raise gr.Error("No video: upload a clip (MP4, WebM, MOV or MKV) first.", print_exception=False)
    path = Path(str(video))
    allowed = [gradio_hooks.upload_folder(), *([] if uploads_only else [ctx.examples_dir, ctx.output_dir])]
    if not any(is_inside(path, folder) for folder in allowed):
        raise gr.Error(NOT_UPLOADED.format(name=html.escape(path.name or str(video))), print_exception=False)
    if not path.is_file():
        raise gr.Error(
            "The uploaded video is no longer on the server: upload it again.", print_exception=False
        )
    return str(path)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """User errors become ``gr.Error``; anything else a short apology, logged (never a stack trace)."""
    try:
        yield
    except gr.Error:
        raise
    except USER_ERRORS as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    except Exception as exc:
        log.exception("unexpected error in a request")
        raise gr.Error(
            f"Something went wrong on the server ({type(exc).__name__}); it has been logged. "
            "Try again, or try another clip."
        ) from None


def pick_variant(variant: str | None, ctx: UIContext) -> str:
    """The variant asked for, the default when none was given; unknown names are refused clearly."""
    if not variant:
        return ctx.default_variant
    if variant not in ctx.variants:
        raise gr.Error(variants.unknown(variant, ctx.variants))
    return variant
