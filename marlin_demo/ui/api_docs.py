"""What Gradio's "Use via API" page shows for this app's endpoints: snippets that work as shown.

Gradio 6.31 writes each endpoint's snippet from its input components' ``example_inputs()``; a
``gr.Video`` offers a GitHub URL there, which this app refuses (it takes uploads only and never
fetches a URL). Here the example is a local file, so the Python snippet reads
``handle_file('clip.mp4')``: gradio_client uploads it, as the app requires. Queries get a
sentence instead of Gradio's ``"Hello!!"``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gradio as gr

EXAMPLE_CLIP = "clip.mp4"
EXAMPLE_QUERY = "a person opens the door"


def local_file_example(name: str = EXAMPLE_CLIP) -> dict[str, Any]:
    """A FileData example naming a file on the caller's machine (the snippet's ``handle_file``)."""
    return {"path": name, "url": name, "orig_name": name, "meta": {"_type": "gradio.FileData"}}


def use_local_examples(videos: Iterable[gr.Video], queries: Iterable[gr.Textbox] = ()) -> None:
    """Give the API page a local clip for each video input and a real sentence for each query."""
    for video in videos:
        video.example_inputs = local_file_example  # type: ignore[method-assign]
    for query in queries:
        query.example_inputs = lambda: EXAMPLE_QUERY  # type: ignore[method-assign]
