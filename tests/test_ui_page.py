"""The page's small pure pieces (issue 16): one clip across tabs, API snippet examples, labels.

The browser tests (tests/test_browser.py) drive the same behaviour in a real page; these pin the
rules without a server.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
from gradio_client.snippet import generate_code_snippets

from marlin_demo.ui import api_docs, example_notes, header, one_clip
from marlin_demo.ui.compare_view import COLUMN_TITLES, SESSION_COLUMNS, titled

CLIP = Path(__file__).resolve().parents[1] / "examples" / "ball_rolls.mp4"


def test_a_clip_spreads_to_the_other_tabs_once(tmp_path: Path) -> None:
    copy = tmp_path / "copy" / CLIP.name
    copy.parent.mkdir()
    copy.write_bytes(CLIP.read_bytes())
    out = one_clip.spread(0, [str(CLIP), None, "/elsewhere/other.mp4"])
    assert out[1] == str(CLIP) and out[2] == str(CLIP)
    assert isinstance(out[0], type(gr.skip()))
    # the same clip copied to another folder does not bounce back (no ping-pong between tabs)
    back = one_clip.spread(1, [str(CLIP), str(copy), str(CLIP)])
    assert all(isinstance(u, type(gr.skip())) for u in back)
    # clearing one tab's video leaves the others alone
    assert all(isinstance(u, type(gr.skip())) for u in one_clip.spread(2, [str(CLIP), str(CLIP), None]))


def test_api_snippet_uploads_a_local_file() -> None:
    video = gr.Video()
    query = gr.Textbox()
    api_docs.use_local_examples([video], [query])
    params = [
        {"parameter_name": "video", "component": "Video", "example_input": video.example_inputs(),
         "python_type": {"type": "filepath"}},
        {"parameter_name": "query", "component": "Textbox", "example_input": query.example_inputs(),
         "python_type": {"type": "str"}},
    ]  # fmt: skip
    snippets = generate_code_snippets("/find", {"parameters": params}, "http://127.0.0.1:7860/")
    assert "handle_file('clip.mp4')" in snippets["python"], snippets["python"]
    assert "http" not in snippets["python"].split("Client(")[1].split("\n", 1)[1]  # no URL passed as a video
    assert '"a person opens the door"' in snippets["python"]
    assert "/upload" in snippets["bash"]  # curl uploads first


def test_cached_badge_only_while_a_kept_answer_is_shown_again() -> None:
    """A live run (an example's first click included) has the ordinary badge; a kept answer shown
    again says that the model did not run now and when its figures were measured."""
    metrics = {"load_s": 2.5}
    answers = example_notes.ExampleAnswers(limit=2)
    key = answers.key("find", {"video": "ball.mp4"}, "gptq", " the ball ")
    assert key == ("find", "ball.mp4", "gptq", "the ball") and answers.get(key) is None
    kept = answers.keep(key, object(), cold=True)
    assert answers.get(key) is kept
    assert example_notes.cached_badge(metrics, True, "gptq") is None
    with example_notes.replaying(kept):
        badge = example_notes.cached_badge(metrics, True, "gptq")
    assert badge is not None and "did not run now" in badge and kept.stamp in badge and "2.50 s" in badge
    assert example_notes.cached_badge(metrics, True, "gptq") is None
    for i in range(3):  # bounded
        answers.keep(("caption", f"{i}.mp4", "gptq", ""), object(), cold=False)
    assert answers.get(key) is None


def test_duration_limit_reads_as_a_person_would() -> None:
    assert header.duration_text(600) == "10 min"
    assert header.duration_text(90) == "90 s"
    assert header.duration_text(125.5) == "125.5 s"


def test_compare_tables_have_readable_titles() -> None:
    import pandas as pd

    frame = titled(pd.DataFrame(columns=SESSION_COLUMNS))
    assert not {"load_s", "ttft_s", "peak_memory_mb", "latency_s"} & set(frame.columns)
    assert COLUMN_TITLES["peak_memory_mb"] in frame.columns
