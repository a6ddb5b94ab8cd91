"""Prompt building: Marlin's one user turn through the chat template, shared by inference and the
quantizer's calibration so every variant gets the same bytes."""

from __future__ import annotations

import re
from typing import Any

from marlin_demo.video import PreparedVideo


def render_prompt(processor: Any, prompt: str, video: str | None) -> str:
    """Marlin's single user turn (the video, then the prompt) through the checkpoint's chat template."""
    content: list[dict[str, Any]] = [{"type": "video", "video": video}] if video is not None else []
    content.append({"type": "text", "text": prompt})
    messages = [{"role": "user", "content": content}]
    return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode(processor: Any, text: str, prepared: PreparedVideo | None) -> Any:
    """Processor tensors for ``text``: the frames go in as sampled (``do_resize=False``: the processor would
    resize again), with the fps and frame indices that make the ``<t seconds>`` markers right."""
    if prepared is None:
        return processor(text=[text], return_tensors="pt")
    return processor(
        text=[text],
        videos=[prepared.frames],
        video_metadata=[dict(prepared.metadata)],  # the processor mutates what it is given
        do_sample_frames=False,
        do_resize=False,
        return_tensors="pt",
    )


def compact_pads(text: str) -> str:
    """The decoded prompt with runs of video pad tokens counted instead of spelled out."""
    return re.sub(
        r"(?:<\|video_pad\|>)+", lambda m: f"<|video_pad|>×{m.group(0).count('<|video_pad|>')}", text
    )
