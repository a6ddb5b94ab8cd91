"""The offline stand-in: a tiny Qwen3.5 video checkpoint of Marlin's architecture (docs/TINY.md), random
weights taught only the *shape* of Marlin's answers, so every path runs offline on real model output."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from marlin_demo.model_io import CAPTION_PROMPT, DETAILED_PROMPT, VideoParams, find_prompt
from marlin_demo.settings import env_value

log = logging.getLogger(__name__)

#: Bump when the recipe changes: the cache folder name carries it (7: v6 on two threads everywhere).
TINY_VERSION = "7"
SEED = 1234
TRAIN_STEPS = 600
TRAIN_PAIRS = 48

SPECIAL_TOKENS = (
    "<|endoftext|> <|im_start|> <|im_end|> <|vision_start|> <|vision_end|> <|image_pad|> <|video_pad|> "
    "<think> </think>"
).split()

# Qwen3-VL-style template: a video item becomes <|vision_start|><|video_pad|><|vision_end|>,
# which the processor expands into per-frame "<t seconds>" groups.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'video' or 'video' in item -%}<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif item['type'] == 'image' or 'image' in item -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

_WORDS = (
    "a the person dog ball red blue green square circle figure figures walks walking runs moves "
    "rolls across field street sky night day light turns on off appears leaves enters exits room "
    "door opens closes stops starts meets two left right center camera scene frame background "
    "small large bright dark slowly quickly toward away from into out of stands sits holds car "
    "building buildings window tree water clock counter changes shows remains begins ends"
).split()


def _corpus() -> list[str]:
    """Text the BPE is trained on: the prompts, the answer formats, plain English."""
    rng = random.Random(SEED)
    lines = [CAPTION_PROMPT, find_prompt("a person opens the door"), DETAILED_PROMPT]
    for _ in range(400):
        n = rng.randint(4, 12)
        lines.append(" ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + ".")
    for i in range(300):
        a = rng.randint(0, 1200) / 10
        b = a + rng.randint(5, 100) / 10
        lines.append(f"<{a:.1f} - {b:.1f}> {rng.choice(_WORDS)}")
        lines.append(f"From {a:.1f} to {b:.1f}.")
        lines.append(f"<{i / 2:.1f} seconds>")
    lines += ["Scene:", "Events:", "user", "assistant", "system", "seconds", "0123456789 .,:-<>"]
    return lines


def _build_tokenizer(out: Path):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen3_5Tokenizer
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer)
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = Qwen3_5Tokenizer(
        vocab=model["vocab"],
        merges=merges,  # type: ignore[arg-type]  # typed list[str]; the BPE model takes pairs too
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={
            "image_token": "<|image_pad|>",
            "video_token": "<|video_pad|>",
            "vision_start_token": "<|vision_start|>",
            "vision_end_token": "<|vision_end|>",
        },
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out)
    return tok


def _build_processor(tok, out: Path, params: VideoParams):
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    patch, merge = params.patch_size, params.merge_size
    image_proc = Qwen2VLImageProcessor(patch_size=patch, merge_size=merge, temporal_patch_size=2)
    video_proc = Qwen3VLVideoProcessor(
        patch_size=patch, merge_size=merge, temporal_patch_size=2, fps=params.fps
    )
    proc = Qwen3VLProcessor(
        image_processor=image_proc, tokenizer=tok, video_processor=video_proc, chat_template=CHAT_TEMPLATE
    )
    proc.save_pretrained(out)
    return proc


def tiny_config(tok):
    """Marlin's architecture, shrunk: one Gated DeltaNet layer, one attention layer."""
    from transformers import Qwen3_5Config

    ids = tok.convert_tokens_to_ids
    hidden = 128
    text = {
        "vocab_size": len(tok),
        "hidden_size": hidden,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "layer_types": ["linear_attention", "full_attention"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "linear_num_key_heads": 2,
        # 32 value heads: bitsandbytes' packed CPU kernel needs out_features % 32 == 0 (in_proj_a/b)
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
        "max_position_embeddings": 32768,
        # head_dim 32 * partial_rotary_factor 0.25 / 2 = 4 = sum(mrope_section)
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
        "tie_word_embeddings": True,
        "eos_token_id": [ids("<|endoftext|>"), ids("<|im_end|>")],
        "pad_token_id": ids("<|endoftext|>"),
    }
    vision = {
        "depth": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": hidden,
        "num_position_embeddings": 2304,
    }
    return Qwen3_5Config(
        text_config=text,
        vision_config=vision,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=True,
    )


def _frames(rng, kind: int, nframes: int, h: int, w: int):
    """Pixels for one training clip: noise, flat blocks, or a smooth drift with a little grain
    (trained on noise alone, the model lost the format on real, mostly smooth clips)."""
    import numpy as np

    if kind == 0:
        return rng.integers(0, 256, (nframes, 3, h, w), dtype=np.uint8)
    if kind == 1:  # a few flat blocks per frame, changing at one random cut
        cut = int(rng.integers(1, nframes))
        coarse = rng.integers(0, 256, (2, 3, 2, 3)).astype(np.float32)
        blocks = np.repeat(coarse[:, None], nframes, axis=1)[0]
        blocks[cut:] = coarse[1]
        up = blocks.repeat(-(-h // 2), axis=2)[:, :, :h].repeat(-(-w // 3), axis=3)[:, :, :, :w]
        return up.astype(np.uint8)
    start, end = rng.uniform(0, 255, (2, 3))
    t = np.linspace(0, 1, nframes, dtype=np.float32)[:, None, None, None]
    base = start[None, :, None, None] * (1 - t) + end[None, :, None, None] * t
    ramp = np.linspace(-30, 30, w, dtype=np.float32)[None, None, None, :]
    grain = rng.normal(0, 6, (nframes, 3, h, w))
    return np.clip(base + ramp + grain, 0, 255).astype(np.uint8)


#: v5: the answers are as regular as possible, so that only the prompt decides their shape.
SCENES = (
    "A small figure moves across the frame.",
    "A bright room with a door on the left.",
    "A dark street with buildings and a car.",
    "A green field under a blue sky.",
)
ACTIONS = ("The figure moves.", "The light changes.", "A person enters.", "The scene ends.")
#: Frame sizes of the synthetic clips: small ones, and a few closer to real clips' token counts,
#: so that the prompt, not the number of video tokens before it, decides the answer's shape.
SIZES = ((64, 96), (96, 64), (64, 64), (64, 96), (192, 256), (256, 192))


def _training_pairs(rng: random.Random, n: int, params: VideoParams):
    """Synthetic (frames, prompt, answer) triples: the answer format, not its content. Each clip comes with
    either prompt, so only the prompt tells the tasks apart (with different sizes per task the model learned
    the size); regular answers give wide margins, though the training follows the CPU's rounding."""
    import numpy as np

    pairs = []
    for i in range(n):
        clip = i // 2  # every clip is asked both prompts: only the prompt tells the tasks apart
        if i % 2 == 0:
            duration = rng.choice([4.0, 6.0, 8.0, 12.0, 20.0, 30.0])
            h, w = SIZES[clip % len(SIZES)]
            if h * w > 96 * 96:  # the large clips stay short: their cost grows with every frame
                duration = min(duration, 8.0)
            nframes = int(duration * params.fps)
            frames = _frames(np.random.default_rng(SEED + clip), clip % 3, nframes, h, w)
        half = f"{duration / 2:.1f}"
        if i % 2 == 0:
            lines = [f"Scene: {rng.choice(SCENES)}", "", "Events:"]
            first, second = rng.sample(ACTIONS, 2)  # two different lines: a repeat reads as a loop
            lines.append(f"<0.0 - {half}> {first}")
            lines.append(f"<{half} - {duration:.1f}> {second}")
            prompt, answer = CAPTION_PROMPT, "\n".join(lines)
        else:
            query = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 5)))
            prompt, answer = find_prompt(query), f"From {duration / 4:.1f} to {duration * 3 / 4:.1f}."
        pairs.append((frames, duration, prompt, answer))
    return pairs


#: The end-of-turn token counts this much more than other tokens in the format loss: stopping is
#: the one decision that keeps a caption short, and the one a tiny model learns last.
EOS_WEIGHT = 4.0
#: So do the other structural tokens: the first token of every answer line (``Scene``/``From``,
#: ``Events``, each event's ``<``), which decide the format rather than the content.
STRUCT_WEIGHT = 4.0


def training_batches(processor, params: VideoParams) -> list[tuple[dict, Any]]:
    """The format lessons as (model inputs, labels): labels cover the answer and its ``<|im_end|>``."""
    import torch

    rng = random.Random(SEED)
    eos = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    batches = []
    for frames, duration, prompt, answer in _training_pairs(rng, TRAIN_PAIRS, params):
        nframes = frames.shape[0]
        messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": prompt}]}]
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        metadata = {
            "fps": params.fps,
            "frames_indices": list(range(nframes)),
            "total_num_frames": nframes,
            "duration": duration,
        }

        def encode(chat: str, frames=frames, metadata=metadata):
            return processor(
                text=[chat],
                videos=[torch.from_numpy(frames)],
                video_metadata=[metadata],
                do_sample_frames=False,
                do_resize=False,
                return_tensors="pt",
            )

        enc = encode(text + answer + "<|im_end|>")
        n_prompt = len(encode(text)["input_ids"][0])
        labels = enc["input_ids"].clone()
        labels[:, :n_prompt] = -100
        if int(labels[0, -1]) != eos:
            raise RuntimeError("tiny format training: a target does not end with <|im_end|>")
        batches.append((dict(enc), labels))
    return batches


def _teach_format(model, processor, params: VideoParams) -> None:
    """A few seconds of deterministic training so greedy decoding yields Marlin-shaped text that ends;
    the learning rate decays to zero so the result does not depend on the CPU's rounding."""
    import torch

    torch.manual_seed(SEED)
    tok = processor.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    newline = torch.tensor([tok.decode([i]).endswith("\n") for i in range(len(tok))])
    batches = training_batches(processor, params)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / TRAIN_STEPS)
    model.train()
    for step in range(TRAIN_STEPS):
        inputs, labels = batches[step % len(batches)]
        logits = model(**inputs).logits[0, :-1].float()
        target = labels[0, 1:]
        keep = target != -100
        per_token = torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="none")
        opens_line = newline[inputs["input_ids"][0, :-1][keep]]
        weight = torch.where(opens_line, STRUCT_WEIGHT, 1.0)
        weight = torch.where(target[keep] == eos, EOS_WEIGHT, weight)
        loss = (per_token * weight).sum() / weight.sum()
        if step % 50 == 0:
            log.info("tiny format training: step %d loss %.3f", step, loss.item())
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    log.info("tiny format training: final loss %.3f", loss.item())


def default_cache_dir() -> Path:
    """Per-user cache (``MARLIN_CACHE_DIR`` overrides), so the build happens once per machine."""
    env = env_value("cache_dir")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("marlin-demo"))


def build_tiny(out: Path) -> Path:
    """Build the 16-bit tiny checkpoint into ``out`` (deterministic, offline)."""
    import torch

    from marlin_demo.models.kernels import import_real_kernels

    # first: with fla installed, training on the CPU must use the PyTorch ops (and, without CUDA, the
    # model class's import then skips fla's, several seconds)
    import_real_kernels()
    from transformers import Qwen3_5ForConditionalGeneration

    params = VideoParams()
    out.mkdir(parents=True, exist_ok=True)
    tok = _build_tokenizer(out)
    processor = _build_processor(tok, out, params)
    torch.manual_seed(SEED)
    config = tiny_config(tok)
    # transformers' wrapped .to() is typed as taking the model itself, not a dtype
    model = Qwen3_5ForConditionalGeneration(config).to(torch.float32)  # type: ignore[arg-type]
    _teach_format(model, processor, params)
    model.to(torch.bfloat16)
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.generation_config.do_sample = False
    model.save_pretrained(out)
    (out / "TINY_README.md").write_text(
        "Offline stand-in for Marlin-2B built by marlin-demo: random weights taught only the answer "
        "format. Its answers are meaningless.\n"
    )
    return out


def _gptq_calibration(processor, n: int = 16) -> list[dict]:
    """Text calibration rows for the tiny GPTQ copy (the quantize command offers video calibration)."""
    rng = random.Random(SEED + 1)
    rows = []
    for _ in range(n):
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(24, 48)))
        ids = processor.tokenizer(text)["input_ids"]
        rows.append({"input_ids": ids, "attention_mask": [1] * len(ids)})
    return rows


def build_tiny_gptq(src: Path, out: Path, device: str = "cpu", samples: int = 16) -> Path:
    """GPTQ 4-bit copy with the seed card's recipe (4 bit, group 128, desc_act, sym); CPU by default."""
    from marlin_demo.models.kernels import import_gptqmodel

    import_gptqmodel()
    from gptqmodel import GPTQModel, QuantizeConfig
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(src)
    extra = {"device": "cpu", "pack_impl": "original"} if device == "cpu" else {}
    qcfg = QuantizeConfig(bits=4, group_size=128, desc_act=True, sym=True, **extra)
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):  # quantize() writes ./logs
        model = GPTQModel.load(str(src), quantize_config=qcfg, trust_remote_code=False)
        model.quantize(_gptq_calibration(processor, samples), batch_size=1)
        model.save(str(out))
    processor.save_pretrained(out)
    return out


def ensure_tiny(cache_dir: Path | None = None, with_gptq: bool = True) -> dict[str, Path]:
    """Build the tiny checkpoints (16-bit, its GPTQ copy) once; later calls return the cached folders."""
    root = (cache_dir or default_cache_dir()) / f"tiny-v{TINY_VERSION}"
    paths = {"root": root, "bf16": root / "bf16", "gptq": root / "gptq"}
    kinds = ("bf16", "gptq") if with_gptq else ("bf16",)
    if all((paths[k] / ".complete").exists() for k in kinds):
        return paths
    from filelock import FileLock  # comes with huggingface_hub

    paths["root"].mkdir(parents=True, exist_ok=True)
    # one builder at a time: parallel test workers or two app processes share this cache
    with FileLock(str(paths["root"] / ".build.lock")):
        _build_missing(paths, kinds)
    return paths


#: The training's float32 math held to AVX2 on two threads on every x86 CPU. Left free, MKL, oneDNN and
#: ATen pick the widest instructions they find and split sums over the cores; each rounds differently and
#: 600 steps amplify it: on an Intel Xeon with AMX the free build's captions never ended on some clips,
#: and one thread built weights whose captions never ended on another (docs/TINY.md). Read at load time.
PINNED_MATH = {
    "OMP_NUM_THREADS": "2",
    "MKL_CBWR": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}


def _build_pinned(out: Path) -> None:
    """``build_tiny`` in a child process that starts with ``PINNED_MATH`` (too late once torch is loaded)."""
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    code = f"import pathlib, marlin_demo.models.tiny as t; t.build_tiny(pathlib.Path({str(out)!r}))"
    env = {**os.environ, **PINNED_MATH, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", code], env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"building the tiny checkpoint failed (exit {done.returncode}); its log is above")


def _build_missing(paths: dict[str, Path], kinds: tuple[str, ...]) -> None:
    for kind in kinds:
        target = paths[kind]
        if (target / "config.json").exists() and (target / ".complete").exists():
            continue
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        if kind == "bf16":
            _build_pinned(tmp)
        else:
            build_tiny_gptq(paths["bf16"], tmp)
        (tmp / ".complete").write_text(f"built in {time.perf_counter() - t0:.1f}s\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)


def weights_digest(folder: Path) -> str:
    """Short content hash of a checkpoint's weights (shows the build is deterministic)."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
