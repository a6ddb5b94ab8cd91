"""The score's log-probs on the real tiny checkpoint: generate()'s logits agree with a forward pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from marlin_demo import model_io
from marlin_demo.engine.scoring import generated_logprobs, span_score, token_texts
from marlin_demo.settings import Settings

pytestmark = pytest.mark.slow
CLIP = Path(__file__).resolve().parents[1] / "examples" / "ball_rolls.mp4"


def test_logprobs_match_forward_and_score_in_unit_interval(tiny_settings: Settings) -> None:
    import torch

    from marlin_demo.engine.prompt import encode, render_prompt
    from marlin_demo.models import load_variant
    from marlin_demo.video import plan_sampling, probe, sample

    loaded = load_variant(tiny_settings, "bf16")
    info = probe(CLIP)
    prepared = sample(CLIP, plan_sampling(info), info=info)
    text = render_prompt(loaded.processor, model_io.find_prompt("the ball stops"), str(CLIP))
    inputs = encode(loaded.processor, text, prepared)
    n = inputs["input_ids"].shape[1]
    with torch.inference_mode():
        out = loaded.model.generate(
            **inputs, max_new_tokens=16, do_sample=False, output_logits=True, return_dict_in_generate=True
        )
        lps = generated_logprobs(out, n)
        mm = inputs["mm_token_type_ids"]  # generated tokens are text (type 0)
        full = (
            loaded.model(
                input_ids=out.sequences,
                attention_mask=torch.ones_like(out.sequences),
                pixel_values_videos=inputs["pixel_values_videos"],
                video_grid_thw=inputs["video_grid_thw"],
                mm_token_type_ids=torch.cat([mm, mm.new_zeros((1, out.sequences.shape[1] - n))], dim=1),
            )
            .logits[0]
            .float()
        )
    new = out.sequences[0, n:].tolist()
    assert len(lps) == len(new) >= 1
    ref = torch.log_softmax(full[n - 1 : n - 1 + len(new)], dim=-1)
    ref_lp = [float(ref[i, t]) for i, t in enumerate(new)]
    dtype = next(loaded.model.parameters()).dtype
    tol = 64 * torch.finfo(dtype).eps * max(1.0, float(full.abs().max()))
    assert lps == pytest.approx(ref_lp, abs=tol)
    assert all(lp <= 0 for lp in lps)
    # greedy: every generated token is the argmax of its step
    assert all(int(row[0].argmax()) == t for row, t in zip(out.logits, new, strict=False))
    texts = token_texts(loaded.processor.tokenizer, new)
    assert "".join(texts) == loaded.processor.tokenizer.decode(new, skip_special_tokens=True)
    score = span_score(texts, lps)
    if score is not None:
        assert 0.0 <= score <= 1.0
