"""The public API of a real server (``python app.py --model tiny``), called with gradio_client.

Checks the exact JSON shapes, values that must hold whatever the tiny model
says (spans inside the clip or null, sane metrics), clear errors for bad
input, the bounded queue, and the example cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import wait
from pathlib import Path
from typing import Any

import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from media_factory import LAVFI_VIDEO, ffmpeg
from result_shapes import API_CAPTION_KEYS, CAPTION_KEYS, FIND_KEYS, METRIC_KEYS, RUNTIME_KEYS
from ui_support import EXAMPLES, MEDIA, QUEUE_SIZE, AppServer, start_app, stop_app

from marlin_demo.models import compute
from marlin_demo.tasks import TASKS

pytestmark = pytest.mark.slow

CLIP = EXAMPLES / "ball_rolls.mp4"
CLIP_S = 12.0


@pytest.fixture(scope="module")
def client(app_server: AppServer) -> Client:
    return Client(app_server.url, verbose=False)


def _check_metrics(m: dict[str, Any]) -> None:
    assert set(m) == METRIC_KEYS
    assert 0 < m["latency_s"] < 600
    assert m["ttft_s"] is None or 0 < m["ttft_s"] <= m["latency_s"]
    assert m["output_tokens"] >= 1 and m["video_tokens"] > 0
    assert m["tokens_per_s"] is None or m["tokens_per_s"] > 0
    assert m["peak_memory_mb"] > 0 and m["load_s"] > 0
    assert m["memory_kind"] == "cpu_peak_rss" and m["device"] == "cpu"


def _check_runtime(r: dict[str, Any]) -> None:
    """Where it ran and in what: this machine's CPU, in the type the compute choice gives here."""
    assert set(r) == RUNTIME_KEYS
    assert r["device"] == "cpu" and r["compute_dtype"] == compute.choose("cpu", "bfloat16").dtype
    assert r["kernel"] and r["gpu_calls"] == {"calls": 0, "asked_s": 0.0, "used_s": 0.0}  # not on ZeroGPU


def _check_caption(
    d: dict[str, Any], variant: str, duration: float, keys: set[str] = API_CAPTION_KEYS
) -> None:
    assert set(d) == keys
    assert d["variant"] == variant and "tiny" in d["model"]
    assert isinstance(d["scene"], str) and isinstance(d["raw"], str) and d["raw"]
    assert isinstance(d["repaired"], bool)
    for e in d["events"]:
        assert set(e) == {"start", "end", "description"}
        assert 0 <= e["start"] <= e["end"] <= duration + 1e-6
    _check_metrics(d["metrics"])
    _check_runtime(d["runtime"])


def _check_find(d: dict[str, Any], variant: str, query: str, duration: float) -> None:
    assert set(d) == FIND_KEYS
    assert d["variant"] == variant and d["query"] == query
    assert isinstance(d["format_ok"], bool) and isinstance(d["raw"], str)
    if d["span"] is not None:
        s, e = d["span"]
        assert 0 <= s <= e <= duration + 1e-6
    _check_metrics(d["metrics"])
    _check_runtime(d["runtime"])


# --------------------------------------------------------------------------- shape of the API


def test_only_the_five_endpoints_are_public(client: Client) -> None:
    """The five ``gr.api`` endpoints, each with the parameters, in the order, it always took; the API page
    says how to send the video (its snippet cannot show a file for a ``gr.api`` argument)."""
    api = client.view_api(return_format="dict", print_info=False)
    named = api["named_endpoints"]
    assert list(named) == [*(f"/{name}" for name in TASKS), "/compare", "/search", "/caption_stream"]
    params = {name: [p["parameter_name"] for p in ep["parameters"]] for name, ep in named.items()}
    assert params == {
        "/caption": ["video", "variant", "start", "end"],
        "/caption_stream": ["video", "variant", "start", "end"],
        "/find": ["video", "query", "variant", "start", "end"],
        "/compare": ["video", "task", "query", "start", "end"],
        "/search": ["query", "top_k"],
    }
    assert not api["unnamed_endpoints"]
    for name in ("/caption", "/caption_stream", "/find", "/compare"):
        assert "handle_file('clip.mp4')" in named[name]["description"], name


# --------------------------------------------------------------------------- results


def test_caption_returns_the_result_shape(client: Client) -> None:
    d = client.predict(handle_file(CLIP), "gptq", api_name="/caption")
    _check_caption(d, "gptq", CLIP_S)
    assert json.loads(json.dumps(d)) == d  # plain JSON, no component update


def test_a_time_range_is_answered_on_the_videos_own_timeline(client: Client) -> None:
    """start/end over the API (as MCP and the page pass them): only that part is asked, and every time in
    the answer lies inside it; a bad range is one sentence and the server keeps serving."""
    d = client.predict(handle_file(CLIP), "gptq", 3.0, 8.0, api_name="/caption")
    assert d["range"] == [3.0, 8.0]
    assert all(3.0 <= e["start"] <= e["end"] <= 8.0 for e in d["events"]), d["events"]
    assert all(3.0 <= w["start"] <= w["end"] <= 8.0 for w in d["windows"]), d["windows"]
    f = client.predict(handle_file(CLIP), "the red ball rolls", "bnb4", 2.0, None, api_name="/find")
    assert f["range"][0] == 2.0 and f["range"][1] == pytest.approx(CLIP_S, abs=0.2)  # to the end
    assert f["span"] is None or 2.0 <= f["span"][0] <= f["span"][1] <= f["range"][1]
    with pytest.raises(AppError, match="does not end after it starts"):
        client.predict(handle_file(CLIP), "gptq", 8.0, 3.0, api_name="/caption")
    # whatever a caller sends: the range's own sentence, never an apology (issue 52 item 5)
    with pytest.raises(AppError, match=r"starts at -5 s; a start must be 0 s or later"):
        client.predict(handle_file(CLIP), "gptq", -5, 10, api_name="/caption")
    with pytest.raises(AppError, match=r"The range's start must be a number of seconds, got 'abc'\."):
        client.predict(handle_file(CLIP), "the ball", "gptq", "abc", 5, api_name="/find")
    with pytest.raises(AppError, match=r"^The range ends at 1e\+300 s, after the video's end"):
        client.predict(handle_file(CLIP), "caption", "", 0, 1e300, api_name="/compare")
    whole = client.predict(handle_file(CLIP), "gptq", api_name="/caption")
    assert whole["range"] is None


def test_caption_stream_sends_the_text_as_it_is_written_then_the_result(client: Client) -> None:
    job = client.submit(handle_file(CLIP), "gptq", api_name="/caption_stream")
    final = job.result(timeout=300)
    messages = job.outputs()
    assert messages[-1] == final and final["done"] is True
    partial = messages[:-1]
    assert len(partial) >= 2, f"the text did not arrive in pieces ({len(messages)} messages)"
    assert all(set(m) == {"done", "text"} and m["done"] is False for m in partial)
    lengths = [len(m["text"]) for m in partial]
    assert lengths == sorted(lengths) and lengths[0] > 0
    assert set(final) == {"done", "text", "first_text_s", "result"}
    result = final["result"]
    _check_caption(result, "gptq", CLIP_S)
    assert final["text"] == result["raw"]
    assert all(result["raw"].startswith(m["text"].strip()) for m in partial)
    assert result["metrics"]["ttft_s"] <= final["first_text_s"] <= result["metrics"]["latency_s"]


def test_find_returns_the_result_shape_on_bnb4(client: Client) -> None:
    query = "the red ball rolls across the field"
    d = client.predict(handle_file(CLIP), query, "bnb4", api_name="/find")
    _check_find(d, "bnb4", query, CLIP_S)


def test_compare_find_has_both_variants_agreement_and_scores(client: Client) -> None:
    query = "the red ball rolls across the field"
    d = client.predict(handle_file(CLIP), "find", query, api_name="/compare")
    # the keys it always had, then only added ones: each variant's cold run, weights, warm figure
    assert set(d) == {"task", "query", "results", "agreement", "scores", "cold", "footprint_mb", "warm"}
    assert d["task"] == "find" and d["query"] == query
    assert set(d["cold"]) == set(d["footprint_mb"]) == set(d["warm"]) == {"gptq", "bnb4"}
    assert all(mb > 0 for mb in d["footprint_mb"].values())
    for variant, warm in d["warm"].items():  # the endpoint times nothing twice: a cold run has no figure
        assert (warm is None) is d["cold"][variant], d
        assert warm is None or warm["latency_s"] == d["results"][variant]["metrics"]["latency_s"]
    assert set(d["results"]) == {"gptq", "bnb4"}
    for variant, r in d["results"].items():
        _check_find(r, variant, query, CLIP_S)
    assert set(d["agreement"]) == {"gptq|bnb4"}
    assert 0.0 <= d["agreement"]["gptq|bnb4"]["span_iou"] <= 1.0
    # ball_rolls.mp4 is a bundled example and this query has a ground-truth span
    assert set(d["scores"]) == {"gptq", "bnb4"}
    assert d["scores"]["gptq"]["ref_span"] == [2.0, 8.0]
    assert 0.0 <= d["scores"]["gptq"]["miou"] <= 1.0


def test_compare_caption(client: Client) -> None:
    d = client.predict(handle_file(CLIP), "caption", "", api_name="/compare")
    assert d["task"] == "caption" and d["query"] is None
    assert set(d["results"]) == {"gptq", "bnb4"}
    for variant, r in d["results"].items():
        _check_caption(r, variant, CLIP_S, CAPTION_KEYS)  # the chapters: /caption's own
    pair = d["agreement"]["gptq|bnb4"]
    assert set(pair) == {"event_iou", "event_f1", "rouge_l"}
    assert all(0.0 <= v <= 1.0 for v in pair.values())
    assert {"rouge_l", "keyword_coverage", "f1"} <= set(d["scores"]["gptq"])


@pytest.mark.parametrize(("name", "duration"), [("nasa_13013.mp4", 13.06), ("av1_video.mkv", 5.0)])
def test_real_media(client: Client, name: str, duration: float) -> None:
    path = MEDIA / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    d = client.predict(handle_file(path), "something moves", "gptq", api_name="/find")
    _check_find(d, "gptq", "something moves", duration + 0.1)


# --------------------------------------------------------------------------- bad input


def _error(client: Client, *args: Any, api_name: str) -> str:
    with pytest.raises(AppError) as info:
        client.predict(*args, api_name=api_name)
    message = str(info.value)
    assert "Traceback" not in message and 'File "' not in message
    return message


def test_bad_inputs_get_clear_errors_and_the_server_keeps_serving(client: Client, tmp_path: Path) -> None:
    fake = tmp_path / "notes.mp4"
    fake.write_text("just some text, not a video\n" * 20)
    assert "not a video" in _error(client, handle_file(fake), "gptq", api_name="/caption")
    assert "query is empty" in _error(client, handle_file(CLIP), "   ", "gptq", api_name="/find")
    assert "handle_file" in _error(client, "/etc/passwd", "gptq", api_name="/caption")
    assert "handle_file" in _error(client, "/etc/passwd", "a dog", "gptq", api_name="/find")
    assert "handle_file" in _error(client, str(CLIP), "caption", "", api_name="/compare")
    assert "query is empty" in _error(client, handle_file(CLIP), "find", "", api_name="/compare")
    with pytest.raises(AppError, match="Unknown variant 'int3'"):  # not one this server offers
        client.predict(handle_file(CLIP), "int3", api_name="/caption")
    # still serving
    d = client.predict(handle_file(CLIP), "the ball", "gptq", api_name="/find")
    assert set(d) == FIND_KEYS


def _long_clip(tmp_path: Path, w: int, h: int) -> Path:
    """A 125 s synthetic clip (three 60 s caption windows); its size sets its content, so its prefix-cache
    entries are its own."""
    clip = tmp_path / f"long125_{w}x{h}.mp4"
    ffmpeg("-f", "lavfi", "-i", LAVFI_VIDEO.format(w=w, h=h, fps=4), "-t", "125",
           "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(clip))  # fmt: skip
    return clip


def test_a_full_queue_answers_busy_and_the_server_recovers(client: Client, tmp_path: Path) -> None:
    """The burst comes while a long video of its own (cold prefix cache: each window a whole prefill)
    holds a request for three windows, read from its stream (never a sleep): the queue is then full
    whatever the machine's pace. Short finds alone on a warm cache can each end before the next one
    arrives, and the queue never fills."""
    long_clip = _long_clip(tmp_path, 176, 144)  # not the fair-queue test's clip: its windows stay cold
    holder = client.submit(handle_file(long_clip), "bf16", api_name="/caption_stream")
    for msg in holder:
        if msg.get("window") == 1:
            break  # the long video's first window has its turn: one request held for three windows
    jobs = [client.submit(handle_file(CLIP), f"the ball {i}", "bf16", api_name="/find")
            for i in range(QUEUE_SIZE + 4)]  # fmt: skip
    done, _ = wait(jobs, timeout=300)
    assert len(done) == len(jobs)
    errors = [j.exception() for j in jobs if j.exception() is not None]
    assert errors, "no request was turned away although the queue was over its limit"
    assert all("queue is full" in str(e).lower() for e in errors), errors
    assert "try again" in str(errors[0]).lower()
    assert holder.result(timeout=600) and holder.outputs()[-1]["done"]  # the held one was answered
    d = client.predict(handle_file(CLIP), "the ball", "bf16", api_name="/find")
    assert set(d) == FIND_KEYS


# --------------------------------------------------------------------------- fair queue


def test_a_short_caption_is_answered_between_a_long_videos_windows(client: Client, tmp_path: Path) -> None:
    """Long, then short once the long one's first window has begun (read from its stream, never a sleep):
    the short one takes its turn between the long one's windows, and both answers equal their answers
    alone. The pair runs first, on a cold prefix cache, so each of the long one's windows takes a whole
    prefill (the short one's request reaches the scheduler well inside them). The order is read from the
    server's own times, not from when each answer reaches the client (the long one's last window can end
    while the short one's answer is on its way): the short one waited about one window, not the whole
    long video. The long one need not wait in turn: it decodes its next window's frames outside its
    turns, and on a slow machine the short one's turn fits in that time (seen on CI). The short one can
    also arrive in such a gap (a loaded machine) and wait for nothing, which shows nothing: the pair then
    runs again on a new long clip, cold again, three times at most."""
    short = EXAMPLES / "flower.mp4"
    for size in ((160, 120), (192, 144), (224, 168)):
        long_clip = _long_clip(tmp_path, *size)
        job = client.submit(handle_file(long_clip), "bf16", api_name="/caption_stream")
        for msg in job:
            if msg.get("window") == 1:
                break  # the long video's first window has its turn now
        short_again = client.predict(handle_file(short), "bf16", api_name="/caption")
        assert job.result(timeout=600)
        long_again = job.outputs()[-1]
        short_m, long_m = short_again["metrics"], long_again["result"]["metrics"]
        # it waited no longer than a window: three windows of about equal work, so waiting for the rest of
        # the long video (two windows or more) is over half its time, and waiting for one at most under a half
        assert short_m["queue_s"] < long_m["latency_s"] / 2, "the short one waited for the whole long video"
        if short_m["queue_s"] > 0:
            break
    assert short_m["queue_s"] > 0, "the short caption never came while one of the long video's windows ran"

    long_alone = list(client.submit(handle_file(long_clip), "bf16", api_name="/caption_stream"))[-1]
    short_alone = client.predict(handle_file(short), "bf16", api_name="/caption")
    assert long_alone["done"] and len(long_alone["result"]["windows"]) == 3
    for key in ("scene", "events", "raw", "windows"):
        assert long_again["result"][key] == long_alone["result"][key]
        assert short_again[key] == short_alone[key]


# --------------------------------------------------------------------------- example cache


# --------------------------------------------------------------------------- fallback


@pytest.fixture(scope="module")
def fallback_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    """``python app.py --model marlin`` with no Hub and no weights and an extra variant whose folder is
    missing, placed only through Gradio's own GRADIO_SERVER_NAME/GRADIO_SERVER_PORT (one start serves
    the three tests below)."""
    root = tmp_path_factory.mktemp("fallback")
    env = {"MARLIN_CACHE_EXAMPLES": "off", "MARLIN_EXTRA_VARIANTS": "broken=/nonexistent/v"}
    server = start_app(root, "--model", "marlin", extra_env=env, address_flags=False)
    yield server
    stop_app(server)


def test_default_model_without_hub_falls_back_to_tiny_and_says_why(fallback_server: AppServer) -> None:
    """`python app.py` without Hub access or weights still comes up; a banner gives the reason and fix."""
    config = httpx.get(fallback_server.url + "config", timeout=30).text
    assert "could not be loaded" in config and "HF_HUB_OFFLINE" in config
    assert "python app.py --model tiny" in config  # the fix
    client = Client(fallback_server.url, verbose=False)
    d = client.predict(handle_file(CLIP), "the ball", "bf16", api_name="/find")  # bf16: quickest to load
    assert "tiny" in d["model"]


def test_gradio_server_port_is_honoured(fallback_server: AppServer) -> None:
    """Gradio's own GRADIO_SERVER_NAME/GRADIO_SERVER_PORT place the server when no flag or MARLIN_* does."""
    # start_app waited until the app answered on that port, given only through GRADIO_SERVER_PORT
    assert fallback_server.port != 7860
    assert httpx.get(fallback_server.url + "config", timeout=30).status_code == 200
    assert f"http://127.0.0.1:{fallback_server.port}" in fallback_server.log_tail(
        200
    )  # Gradio's "Running on"


def test_compare_api_and_tab_share_the_failing_variant_behaviour(fallback_server: AppServer) -> None:
    """A variant that cannot load is reported in Compare's answer; the others still answer."""
    client = Client(fallback_server.url, verbose=False)
    d = client.predict(handle_file(CLIP), "caption", "", api_name="/compare")
    assert "broken" in d["errors"] and "broken" not in d["results"]
    assert {"gptq", "bnb4"} <= set(d["results"])
