"""About tab, its facts embedded as text: the app must not read files outside the repository at runtime."""

from __future__ import annotations

import os
from collections.abc import Mapping

import gradio as gr

from marlin_demo.engine.graphs import Verdict
from marlin_demo.service import gpu_calls
from marlin_demo.ui.context import UIContext
from marlin_demo.ui.credits import credits_markdown

SEED_SOURCE = "https://huggingface.co/NemoStation/Marlin-2B-GPTQ"
"""The GPTQ checkpoint's public model card, where the published figures come from."""

MODEL_FACTS = """
## Marlin-2B
- A 2.21B-parameter video language model (NemoStation) fine-tuned from **Qwen3.5-2B**: a hybrid of Gated
  DeltaNet linear-attention layers and a few full-attention layers, with a 0.33B vision tower.
- Two trained tasks, each with its exact prompt: **caption** (`Scene:` paragraph, then `Events:` lines
  `<start - end> description`) and **find** (`From <start> to <end>.` for a described event).
- Video is sampled at **2 frames/s, 4 to 240 frames** (about 2 minutes), at most 200,704 pixels per frame;
  every frame group carries its timestamp, so answers are in seconds of the clip.
- Checkpoints: [`NemoStation/Marlin-2B`](https://huggingface.co/NemoStation/Marlin-2B) (16-bit; its model
  card, behind an access form, gives the licence as **Apache-2.0**) and
  [`NemoStation/Marlin-2B-GPTQ`](https://huggingface.co/NemoStation/Marlin-2B-GPTQ) (4-bit). BF16 weights are
  about 4.4 GB; GPTQ int4 (embeddings, lm_head and the vision tower kept 16-bit) about 2.4 GB.
- Generation is greedy; captions stop at 768 new tokens by default (the model card uses 2048;
  `MARLIN_CAPTION_MAX_NEW_TOKENS`), find answers at 64.
- Known failure modes, handled and reported (never hidden): events past the end of the clip, duplicated
  events and repetition loops are clamped or dropped and the answer is marked *repaired*; an answer outside
  the trained format is marked *not in Marlin's format*; a find answer without a time range gives no span.
"""

SEED_FIGURES = f"""
## GPTQ vs bnb4: the published figures
From the [GPTQ checkpoint's model card]({SEED_SOURCE}), measured by its author on one GPU. The Compare tab
measures the same quantities on this machine; expect other absolute numbers.

| Published figure | GPTQ 4-bit | bnb4 (nf4) |
|---|---|---|
| Seconds per request | **11.78** | 12.44 |
| Peak allocated VRAM (MB) | 4668.44 | **4201.46** |
| Dense-caption score (lexical) | **0.4726** | 0.4654 |
| Keyword coverage | **0.7318** | 0.7091 |

- On these figures GPTQ was **~5.3 % faster** per request and **scored slightly higher** on both caption
  measures; it needed ~467 MB more peak memory. Both fit a 6 GB GPU.
- The card also says GPTQ "retains approximately 93%" of bnb4's *overall accuracy*, a summary score it does
  not break down; it is not one of the figures above, which is why the two statements can both hold.
- GPTQ recipe: 4-bit, group size 128, `desc_act=True`, symmetric, lm_head kept 16-bit, quantized with
  `gptqmodel`, calibration under a 5 GiB GPU memory cap. bnb4 is the 16-bit checkpoint loaded with
  `BitsAndBytesConfig(load_in_4bit=True)` (nf4, bf16 compute on a GPU), keeping lm_head, the vision tower
  and the Gated DeltaNet's small `in_proj_a`/`in_proj_b` 16-bit, as the GPTQ checkpoint does.
"""

RUN_LOCALLY = """
## Run it yourself
```bash
pip install -r requirements.txt   # and the system package ffmpeg
python app.py                     # real Marlin-2B (Hub or local weights)
python app.py --model tiny        # offline stand-in: no GPU, no network
python app.py --help              # every setting (also MARLIN_* env vars)
```
Without Hub access or local weights, `python app.py` still starts: it falls back to the tiny stand-in and
says why at the top of the page. {where} An example's answer is kept after its first run
(`MARLIN_CACHE_EXAMPLES=eager|lazy|off` picks when); the Library tab's index of the examples lives under
`.gradio/cached_examples` (`GRADIO_EXAMPLES_CACHE` moves it).
"""

ON_SPACE = (
    "On this Space, **Duplicate this Space** (the ⋮ menu at the top right of the Space's page) copies it to "
    "your own account to run on a GPU of your own, without its queue and limits."
)

HERE = (
    "This copy runs where `python app.py` was started: its queue and limits are the settings it was "
    "started with (`--queue-size`, `--max-duration-s`, `--max-upload-mb`, `--request-timeout-s`), yours "
    "to change."
)


def run_yourself(on_space: bool) -> str:
    """How to run the app, with the sentence that applies where this page is served from."""
    return RUN_LOCALLY.format(where=ON_SPACE if on_space else HERE)


def api_snippets(ctx: UIContext) -> str:
    """A gradio_client call per public endpoint, pointing at this Space or a local server."""
    target = os.environ.get("SPACE_ID") or f"http://127.0.0.1:{ctx.settings.port}/"
    v = ctx.default_variant
    return f"""
## Use it from Python (`pip install gradio_client`)
Every endpoint returns plain JSON; videos must be uploaded with `handle_file` (a path string naming a file on
the server is refused). Errors arrive as `gradio_client.exceptions.AppError` with a readable message.
```python
from gradio_client import Client, handle_file

client = Client("{target}")
clip = handle_file("clip.mp4")

# What happens: {{variant, model, scene, raw, repaired, metrics,
#   events: [{{start, end, description}}], windows: [{{start, end, scene}}],
#   chapters: {{lines: ["0:00 Title", ...], reason}}}}
caption = client.predict(clip, "{v}", api_name="/caption")

# When: {{variant, model, query, span: [start, end] or None,
#   format_ok, raw, metrics, moments: [{{start, end, score}}] best first}}
found = client.predict(clip, "a person opens the door", "{v}",
                       api_name="/find")

# GPTQ vs bnb4: {{task, query, results: {{variant: ...}},
#   agreement: {{"gptq|bnb4": ...}}, scores (bundled examples)}}
both = client.predict(clip, "find", "a person opens the door",
                      api_name="/compare")

# Across the library (the examples, or --library DIR): {{query, library: {{videos, windows}},
#   searched_windows, moments: [{{video, id, start, end, score, retrieval_score, window, thumbnail}}]}}
hits = client.predict("a person opens the door", 10, api_name="/search")

# The caption as it is written: {{done: False, text}} messages,
# then {{done: True, text, first_text_s, result: <as /caption>}}
for message in client.submit(clip, "{v}", api_name="/caption_stream"):
    print(message["text"])
```
Variants: {", ".join(f"`{x}`" for x in ctx.variants)}. `metrics` holds latency_s, ttft_s, output_tokens,
tokens_per_s, video_tokens, peak_memory_mb, memory_kind, load_s, device and queue_s (the wait for other
requests' turns). Requests take turns on the model window by window, so a short clip never waits for a
whole long video; when {ctx.settings.queue_size} are already held the server answers "Queue is full": try
again later.
"""


#: how a variant decodes after its start-up check, in words (``Verdict.decode``)
HOW = {
    "graphs": "in CUDA graphs",
    "static": "in its static step, uncaptured as there is no GPU here",
    "eager": "eagerly",
}


def decoding_line(checks: Mapping[str, Verdict] | None) -> str:
    """On ZeroGPU, how each variant decodes after its start-up check (a fact, not an error); "" elsewhere."""
    if checks is None:
        return ""
    said = "; ".join(f"**{v.variant}** {HOW.get(v.decode, v.decode)} ({v.why})" for v in checks.values())
    said = said or "none was checked"
    return f"\n**How each variant decodes here**, checked when the Space started: {said}.\n"


def render(ctx: UIContext) -> gr.Markdown:
    """The whole tab as Markdown."""
    with gr.Row():
        with gr.Column(scale=1):
            gr.Markdown(
                MODEL_FACTS + decoding_line(ctx.engine.graph_checks) + SEED_FIGURES, elem_id="about-facts"
            )
            gr.Markdown(credits_markdown(ctx.examples, ctx.examples_dir), elem_id="about-credits")
        with gr.Column(scale=1):
            return gr.Markdown(run_yourself(gpu_calls.on_space()) + api_snippets(ctx), elem_id="about-run")
