"""The tiny stand-in's lessons: Marlin-shaped answers that end with the token generation stops on."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from marlin_demo import model_io
from marlin_demo.models import tiny


def test_training_answers_are_in_marlins_formats() -> None:
    pairs = tiny._training_pairs(random.Random(tiny.SEED), 24, model_io.VideoParams())
    captions = [a for _f, d, p, a in pairs if p == model_io.CAPTION_PROMPT]
    finds = [(a, d) for _f, d, p, a in pairs if p != model_io.CAPTION_PROMPT]
    assert captions and finds
    for answer in captions:
        parsed = model_io.parse_caption(answer)
        assert parsed.format_ok and parsed.scene and len(parsed.events) in (2, 3), answer
        assert not model_io.repair_caption(parsed, None).repaired  # ordered, no loop
    for answer, duration in finds:
        span = model_io.parse_span(answer)
        assert span.format_ok and span.span is not None and 0 <= span.span[0] < span.span[1] <= duration


@pytest.mark.slow
def test_every_target_ends_with_the_stop_token_and_the_loss_covers_it(tmp_path: Path) -> None:
    """The generation stops on <|im_end|>: each target ends with it, unmasked, right after the answer."""
    params = model_io.VideoParams()
    tok = tiny._build_tokenizer(tmp_path)
    processor = tiny._build_processor(tok, tmp_path, params)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = tiny.tiny_config(tok)
    assert eos in config.text_config.eos_token_id  # the token generation stops on
    pairs = tiny._training_pairs(random.Random(tiny.SEED), tiny.TRAIN_PAIRS, params)
    batches = tiny.training_batches(processor, params)
    assert len(batches) == len(pairs)
    for (_frames, _d, _p, answer), (inputs, labels) in zip(pairs, batches, strict=True):
        taught = labels[0][labels[0] != -100].tolist()
        assert taught[-1] == eos and eos not in taught[:-1]
        assert tok.decode(taught[:-1]) == answer  # the whole answer, and nothing of the prompt
        assert inputs["input_ids"][0, -1] == eos
