"""Calibration data: video-caption pairs through the exact inference processor path."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marlin_demo import model_io
from marlin_demo.datasets import DatasetError, load_dataset
from marlin_demo.model_io import Event
from marlin_demo.settings import EXAMPLES_FILE


@dataclass
class CalibrationPair:
    """One (video, prompt, answer) row: the answer is what Marlin should say for the prompt."""

    video: Path
    prompt: str
    answer: str
    kind: str  # "caption" | "find"


def caption_answer(scene: str, events: Sequence[Event]) -> str:
    """The trained caption format: ``Scene: ...`` then ``Events:`` and ``<s - e> text`` lines."""
    lines = [f"<{e.start:.1f} - {e.end:.1f}> {e.description.strip()}" for e in events]
    return "\n".join([f"Scene: {scene.strip()}", "", "Events:", *lines])


def load_pairs(folder: Path, samples: int | None = None) -> list[CalibrationPair]:
    """Pairs from ``folder/examples.json`` (the benchmark's loader), deterministic: every caption pair,
    then every find pair (a query's first span); ``samples`` keeps the first N."""
    if samples is not None and samples < 1:
        raise ValueError("--samples must be at least 1.")
    folder = Path(folder)
    if folder.is_file() and folder.name == EXAMPLES_FILE:
        folder = folder.parent
    try:
        examples = load_dataset(folder)
    except DatasetError as exc:
        raise DatasetError(f"Calibration data: {exc}") from None
    captions: list[CalibrationPair] = []
    finds: list[CalibrationPair] = []
    for ex in examples:
        video = ex.video.resolve()
        if ex.has_caption_truth:
            answer = caption_answer(ex.scene, ex.events)
            captions.append(CalibrationPair(video, model_io.CAPTION_PROMPT, answer, "caption"))
        for q in ex.queries:
            s, e = q.span
            finds.append(
                CalibrationPair(video, model_io.find_prompt(q.query), f"From {s:.1f} to {e:.1f}.", "find")
            )
    pairs = captions + finds
    return pairs if samples is None else pairs[:samples]


def _turn_end(tokenizer: Any) -> str:
    vocab = tokenizer.get_vocab()
    return "<|im_end|>" if "<|im_end|>" in vocab else str(tokenizer.eos_token or "")


def encode_pair(processor: Any, pair: CalibrationPair, prepared: Any | None) -> dict[str, Any]:
    """Processor tensors for prompt + answer by the engine's path; ``prepared`` None: text only."""
    from marlin_demo.engine.prompt import encode, render_prompt

    text = render_prompt(processor, pair.prompt, str(pair.video) if prepared is not None else None)
    enc = encode(processor, text + pair.answer + _turn_end(processor.tokenizer), prepared)
    return {k: v for k, v in dict(enc).items() if v is not None}


def build_calibration(
    processor: Any, pairs: list[CalibrationPair], mode: str = "video"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Encoded rows (batch 1, in order) plus one description row per sample for the report."""
    from marlin_demo.video import prepare

    rows, info = [], []
    cache: dict[Path, Any] = {}
    for pair in pairs:
        prepared = None
        if mode == "video":
            if pair.video not in cache:
                cache[pair.video] = prepare(pair.video, model_io.VideoParams())
            prepared = cache[pair.video]
        enc = encode_pair(processor, pair, prepared)
        ids = enc["input_ids"]
        video_token_id = getattr(processor, "video_token_id", None)
        n_video = int((ids == video_token_id).sum()) if video_token_id is not None else 0
        rows.append(enc)
        info.append(
            {
                "video": pair.video.name,
                "kind": pair.kind,
                "tokens": int(ids.shape[-1]),
                "video_tokens": n_video,
                "timestamps": len(re.findall(r"<\d+(?:\.\d+)? seconds>", processor.tokenizer.decode(ids[0]))),
                "keys": sorted(enc),
            }
        )
    return rows, info


class _VisionProbe:
    """Forward hooks proving that vision features, at M-RoPE positions, reach the decoder layers: the
    first layer's video-token rows differ from the pad embedding, and the position ids' axes differ."""

    def __init__(self, hf_model: Any, video_token_id: int | None) -> None:
        self.model = hf_model
        self.video_token_id = video_token_id
        self.handles: list[Any] = []
        self.vision_calls = 0
        self.vision_rows = 0
        self.samples: list[dict[str, Any]] = []
        self._ids: Any = None

    def __enter__(self) -> _VisionProbe:
        core = getattr(self.model, "model", self.model)
        self.handles.append(self.model.register_forward_pre_hook(self._top, with_kwargs=True))
        if hasattr(core, "visual"):
            self.handles.append(core.visual.register_forward_hook(self._visual))
        if hasattr(core, "language_model"):
            self.handles.append(core.language_model.register_forward_pre_hook(self._lm, with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()

    def _top(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._ids = None if ids is None else ids.detach()

    def _visual(self, module: Any, args: tuple, output: Any) -> None:
        self.vision_calls += 1
        pooled = getattr(output, "pooler_output", None)
        if pooled is None and isinstance(output, tuple):
            pooled = output[0]
        if pooled is not None and hasattr(pooled, "shape"):
            self.vision_rows += int(pooled.shape[0])

    def _lm(self, module: Any, args: tuple, kwargs: dict) -> None:
        import torch

        emb = kwargs.get("inputs_embeds")
        pos = kwargs.get("position_ids")
        seq_len = None if emb is None else int(emb.shape[1])
        row: dict[str, Any] = {"seq_len": seq_len, "video_positions": 0, "vision_rows_in_layer_input": 0}
        if emb is not None and self._ids is not None and self.video_token_id is not None:
            mask = self._ids.to(emb.device) == self.video_token_id
            row["video_positions"] = int(mask.sum())
            if row["video_positions"]:
                with torch.no_grad():
                    pad = module.embed_tokens(torch.tensor([self.video_token_id], device=emb.device))[0]
                    replaced = (emb[mask] != pad.to(emb.dtype)).any(-1)
                row["vision_rows_in_layer_input"] = int(replaced.sum())
        if pos is not None and pos.ndim == 3:
            row["position_axes"] = int(pos.shape[0])
            row["mrope_axes_differ"] = bool((pos[-2] != pos[-1]).any() or (pos[-3] != pos[-2]).any())
        self.samples.append(row)

    def summary(self) -> dict[str, Any]:
        return {
            "vision_tower_calls": self.vision_calls,
            "vision_feature_rows": self.vision_rows,
            "first_layer_inputs": self.samples,
            "video_rows_reaching_layers": sum(s["vision_rows_in_layer_input"] for s in self.samples),
        }
