"""How robustly the tiny stand-in keeps Marlin's answer format: format rate and decision margins.

    python benchmarks/tiny_margins.py --cache-dir ~/.cache/marlin-demo --variants gptq,bnb4,bf16 \
        --out docs/tiny_margins.json

For every clip of ``examples/``, ``../shared/media`` and ``../shared/media/real`` (those present)
and every variant, the caption prompt and a find prompt are answered greedily (the engine's
chat-templated prompt and tensors, ``--max-new-tokens``, default 256). A caption follows the
format when it starts with ``Scene:``, has at least one parseable ``<a - b>`` event line and
stops; a find answer when it is ``From a to b.`` and stops. At each *structural* decision (the
first answer token, the first token of every later line, e.g. ``Events`` and the event openers,
and the stop token) the greedy token's logit is compared with the runner-up's: the smallest
such margin (nats) says how far another CPU's rounding would have to move the logits to flip the
format. Margins are deterministic for a given build; they are the figures in docs/TINY.md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.tiny_captions import clips, label  # noqa: E402

FIND_QUERY = "a person walks across the room"
_SPAN_RE = re.compile(r"^From \d+(\.\d+)? to \d+(\.\d+)?\.$")


def structural_steps(pieces: list[str]) -> list[int]:
    """Steps that decide the format: the first token, each line's first token, the last (stop) token."""
    steps = {0, len(pieces) - 1}
    for i in range(1, len(pieces)):
        if pieces[i - 1].endswith("\n") and pieces[i].strip():
            steps.add(i)
    return sorted(steps)


def answer(loaded, engine, prepared, prompt: str, max_new_tokens: int) -> dict:
    """Greedy answer with per-step logits; the format verdict and the structural margins."""
    import torch

    from marlin_demo.model_io import parse_caption

    _, inputs = engine.build_inputs(loaded, prepared, prompt)
    with torch.inference_mode():
        out = loaded.model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    tok = loaded.processor.tokenizer
    ids = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
    stops = set(loaded.model.generation_config.eos_token_id or [])
    ended = bool(ids) and ids[-1] in stops
    pieces = [tok.decode([i]) for i in ids]
    text = tok.decode(ids[:-1] if ended else ids)
    gaps = []
    for logits in out.logits:
        top = torch.topk(logits[0].float(), 2).values
        gaps.append(round(float(top[0] - top[1]), 2))
    margins = [gaps[step] for step in structural_steps(pieces)]
    if prompt.startswith("Provide"):
        parse = parse_caption(text)
        ok = ended and text.startswith("Scene:") and len(parse.events) >= 1
    else:
        ok = ended and bool(_SPAN_RE.match(text.strip()))
    return {
        "tokens": len(ids),
        "ended": ended,
        "format_ok": ok,
        "min_margin": min(margins),
        "min_gap_any_token": min(gaps),  # content tokens too: what an exact token comparison risks
        "text": text,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", type=Path, help="tiny cache folder (MARLIN_CACHE_DIR)")
    parser.add_argument("--variants", default="gptq,bnb4,bf16")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument(
        "--compute-dtype", default="auto", help="what the variants compute in (MARLIN_COMPUTE_DTYPE's values)"
    )
    args = parser.parse_args(argv)

    from marlin_demo.engine import Engine
    from marlin_demo.model_io import CAPTION_PROMPT, find_prompt
    from marlin_demo.settings import Settings

    settings = Settings(
        model="tiny",
        variants=args.variants,
        cache_dir=str(args.cache_dir) if args.cache_dir else "",
        prefix_cache_size=0,
        compute_dtype=args.compute_dtype,
    )
    engine = Engine(settings)
    names = [v for v in args.variants.split(",") if v]
    loaded = {n: engine.load(n) for n in names}
    print(f"computing in {sorted({m.compute_dtype for m in loaded.values()})}", file=sys.stderr)
    rows = []
    for clip in clips():
        prepared = engine.prepare(clip)
        for name in names:
            for task, prompt in (("caption", CAPTION_PROMPT), ("find", find_prompt(FIND_QUERY))):
                r = answer(loaded[name], engine, prepared, prompt, args.max_new_tokens)
                row = {"clip": label(clip), "variant": name, "task": task, **r}
                row["compute_dtype"] = loaded[name].compute_dtype
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print("| variant | task | format ok | min margin | median margin | median tokens |")
    print("|---|---|---:|---:|---:|---:|")
    for name in names:
        for task in ("caption", "find"):
            mine = [r for r in rows if r["variant"] == name and r["task"] == task]
            ok = sum(r["format_ok"] for r in mine)
            print(
                f"| {name} | {task} | {ok} of {len(mine)} | {min(r['min_margin'] for r in mine):.2f} | "
                f"{statistics.median(r['min_margin'] for r in mine):.2f} | "
                f"{statistics.median(r['tokens'] for r in mine):g} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
