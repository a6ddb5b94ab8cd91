"""Static-cache decoding gives eager's tokens (tiny checkpoint, CPU): MARLIN_COMPILE's torch.compile, and
MARLIN_DECODE=graphs' decode step, here uncaptured (the graph needs CUDA; the step is the same)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from marlin_demo import service
from marlin_demo.bench.longset import build_long_clip
from marlin_demo.engine import Engine, graphs
from marlin_demo.engine.core import ClipRun
from marlin_demo.results import Done, Progress, Result
from marlin_demo.settings import Settings
from marlin_demo.tasks import get_task
from marlin_demo.ui import compare_html

pytestmark = pytest.mark.slow

CLIP = Path(__file__).resolve().parents[1] / "examples" / "ball_rolls.mp4"
SETTINGS = Settings(model="tiny", device="cpu", caption_max_new_tokens=12)


@pytest.fixture(scope="module")
def eager_engine() -> Engine:
    """The one eager engine every reference below comes from: each variant loaded once, ``CLIP`` decoded
    and its prefix computed once per variant, however many comparisons ask."""
    return Engine(SETTINGS.with_(decode="eager"))


@pytest.fixture(scope="module")
def eager(eager_engine: Engine) -> Callable[[str, str], Result]:
    """Eager decoding's answer per (task, variant), each computed once for the comparisons below."""
    done: dict[tuple[str, str], Result] = {}

    def answer(task: str, variant: str) -> Result:
        if (task, variant) not in done:
            done[task, variant] = eager_engine.ask(
                task, CLIP, variant, "the ball rolls" if task == "find" else None
            )
        return done[task, variant]

    return answer


# bf16 last: the CLI test right after this one reuses its compiled graph (after gptq's compile it did not)
@pytest.mark.parametrize("variant", ["gptq", "bnb4", "bf16"])
def test_compiled_tokens_equal_eager(variant: str, eager: Callable[[str, str], Result]) -> None:
    reference = eager("caption", variant)
    engine = Engine(SETTINGS.with_(compile=True))
    first = engine.caption(CLIP, variant)
    state = first.info.compile
    if state.startswith("eager ("):  # a variant that cannot compile says why and still answers
        assert len(state) > len("eager ()")
        assert first.metrics.output_tokens == reference.metrics.output_tokens
        assert first.info.decode == "eager" and first.info.decode_note
        return
    assert state.startswith("static cache + torch.compile"), state
    assert "prefix reuse off" in state and engine.prefix_cache_len() == 0
    assert first.raw == reference.raw and first.info.decode == "compiled"
    assert first.info.compile_s > 0  # paid once, before the request
    second = engine.caption(CLIP, variant)  # same cache size: nothing compiled again
    assert second.raw == reference.raw
    assert second.info.compile_s == first.info.compile_s


def test_cli_compile_flag_reports_the_compile_state(capsys: pytest.CaptureFixture[str]) -> None:
    """``--compile`` through the CLI's ``main`` in this process (the settings and the bf16 graph of the
    test above: what it adds is the flag and the readable line, not another compile). It sits right after
    bf16's compile: after the decode-step tests (``host_waits`` resets dynamo) or gptq's compile it traced
    and compiled the graph again (4-6 s instead of 1-1.5)."""
    from marlin_demo import cli

    argv = ["caption", str(CLIP), "--model", "tiny", "--variant", "bf16", "--compile"]
    assert cli.main([*argv, "--caption-max-new-tokens", "12"]) == 0
    out = capsys.readouterr().out
    assert "compile static cache + torch.compile" in out
    assert "nothing reused" in out


# ------------------------------------------------------------------ decoding in CUDA graphs (the step)
#: ops that make the host wait for the device: inside a CUDA graph's capture they fail it
SYNC_OPS = ("_local_scalar_dense", "nonzero", "is_nonzero", "equal", "item")


@pytest.fixture
def host_waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every op of a decode step that would make the host wait for the device (none may, for the step to
    be captured), recorded while the step runs (on a CPU the same ops run, uncaptured)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    waits: list[str] = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func.overloadpacket.__name__ in SYNC_OPS:
                waits.append(str(func))
            return func(*args, **(kwargs or {}))

    step = graphs.DecodeStep.__call__

    def watched(self: graphs.DecodeStep, **kwargs: Any) -> Any:
        with Watch():
            return step(self, **kwargs)

    monkeypatch.setattr(graphs.DecodeStep, "__call__", watched)
    yield waits
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def eager_runs(eager_engine: Engine) -> Callable[[str, str], ClipRun]:
    """Eager decoding's generation per (task, variant): its tokens and log-probs, step by step."""
    done: dict[tuple[str, str], ClipRun] = {}

    def run(task: str, variant: str) -> ClipRun:
        if (task, variant) not in done:
            done[task, variant] = _clip_run(eager_engine, task, variant)
        return done[task, variant]

    return run


def _clip_run(engine: Engine, task: str, variant: str) -> ClipRun:
    """One task's prompt on ``CLIP`` as ``Engine.run`` asks it (find: its scored steps' log-probs)."""
    entry = get_task(task)
    prompt = entry.ask("the ball rolls" if task == "find" else None, SETTINGS)[1]
    return engine.run_clip(CLIP, variant, prompt, entry.tokens(SETTINGS), logprobs=entry.answer.logprobs)


@pytest.mark.parametrize("variant", ["bf16", "gptq", "bnb4"])
def test_every_decode_step_runs_the_step_and_gives_eager_tokens(
    variant: str, eager_runs: Callable[[str, str], ClipRun], host_waits: list[str]
) -> None:
    """A request from a video's prefix (computed, then reused), one without a prefix (reuse off) and a find
    (its scored steps): every decode step ran the captured step (none eager), each step's token is eager's."""
    engine = Engine(SETTINGS.with_(decode="graphs"))  # a CPU: the step on the static cache, uncaptured
    first, second = (_clip_run(engine, "caption", variant) for _ in range(2))
    no_prefix = _clip_run(Engine(SETTINGS.with_(decode="graphs"), video_cache_size=0), "caption", variant)
    found = _clip_run(engine, "find", variant)
    assert not first.info.reused_prefix and second.info.reused_prefix and found.info.reused_prefix
    assert not no_prefix.info.reused_prefix
    assert first.info.capture_s > 0 and second.info.capture_s == 0  # one cache size, made once
    for task, run in (("caption", first), ("caption", second), ("caption", no_prefix), ("find", found)):
        reference = eager_runs(task, variant)
        assert run.info.decode == "static" and run.info.decode_note == "", run.info.decode_note
        assert run.gen.token_ids == reference.gen.token_ids  # every step's token
        assert run.info.replayed_steps == len(run.gen.token_ids or []) - 1 > 0  # the first is the prefill's
    assert found.gen.logprobs is not None and len(found.gen.logprobs) == len(found.gen.token_ids or [])
    assert host_waits == []  # nothing in a decode step waits for the device: CUDA can capture it
    state = graphs.state_of(engine.load(variant))
    assert not state.fallback and len(state.steps) == 1
    assert engine.decode_expected(variant, "cpu") == "static"


@pytest.mark.parametrize("variant", ["bf16", "gptq", "bnb4"])
def test_every_window_of_a_long_video_runs_the_step(variant: str, long12: Path) -> None:
    """A 12 s video in two 6 s windows, asked twice (the second from each window's prefix): every window's
    decode steps ran the step, and the answer is eager's."""
    settings = SETTINGS.with_(caption_window_s=6.0)
    reference = service.run(Engine(settings.with_(decode="eager")), "caption", long12, variant)
    engine = Engine(settings.with_(decode="graphs"))
    for _ in range(2):
        res = service.run(engine, "caption", long12, variant)
        assert res.raw == reference.raw and len(res.info.windows) == 2
        for window in res.info.windows:
            assert window.decode == "static" and window.decode_note == "", window.decode_note
            assert window.replayed_steps > 0
    assert all(w.reused_prefix for w in res.info.windows)


@pytest.fixture(scope="module")
def long12(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12 s clip of the examples (two 6 s caption windows)."""
    path = tmp_path_factory.mktemp("long") / "long12.mp4"
    build_long_clip(path, target_s=12.0)
    return path


def test_static_step_scores_finds_streams_and_stops_as_eager(eager: Callable[[str, str], Result]) -> None:
    """A find's answer and its score (the raw logits of each step), a streamed caption, and a Stop between
    tokens: the next request on the same engine is eager's again (its static cache reset)."""
    engine = Engine(SETTINGS.with_(decode="graphs"))
    found = engine.find(CLIP, "the ball rolls", "gptq")
    reference = eager("find", "gptq")
    assert found.info.decode == "static" and found.raw == reference.raw
    assert found.moments == reference.moments  # the same scores: the logits are eager's
    assert "decode: static" in compare_html._card(
        "gptq", found, False, 12.0, None, compare_html.find_card
    )  # Compare says it
    with contextlib.closing(service.stream(engine, "caption", CLIP, "gptq")) as stages:  # a Stop
        for stage in stages:
            if isinstance(stage, Progress) and stage.text:
                break
    streamed = list(service.stream(engine, "caption", CLIP, "gptq"))
    texts = [s.text for s in streamed if isinstance(s, Progress) and s.text]
    done = streamed[-1]
    assert isinstance(done, Done) and done.result.raw == eager("caption", "gptq").raw
    assert len(texts) >= 2 and texts[-1].strip() == done.result.raw  # it streamed token by token
    assert engine.cancelled == 1


def test_a_variant_that_cannot_capture_decodes_eagerly_and_says_why() -> None:
    """Capturing on a machine without CUDA fails for real: the variant answers eagerly and says why; inside
    ``graphs.required()`` (a ZeroGPU call sized for graphs) it raises before its prefill instead."""
    engine = Engine(SETTINGS.with_(decode="graphs"))
    loaded = engine.load("bf16")
    step, _ = graphs.prepare(loaded, 100, 12, {}, capture=True)
    assert step is None and graphs.state_of(loaded).fallback.startswith("capture failed: ")
    res = engine.caption(CLIP, "bf16")
    assert res.info.decode == "eager" and res.info.decode_note.startswith("capture failed: ")
    assert res.raw and engine.decode_expected("bf16", "cuda") == "eager"  # its calls: sized for eager
    with graphs.required(), pytest.raises(graphs.GraphsUnavailable, match="bf16 cannot decode in CUDA"):
        engine.caption(CLIP, "bf16")


def test_a_step_whose_inputs_change_shape_runs_eagerly_and_says_so() -> None:
    """A prompt without video passes no ``mm_token_type_ids`` to its decode steps, unlike the shapes the step
    was made for: those steps run the forward eagerly on the same cache (eager's tokens), the request says
    it decoded eagerly and counts them, and its variant's next call is sized for eager."""
    import time

    from marlin_demo.engine.generation import generate

    engine = Engine(SETTINGS.with_(decode="graphs"))
    loaded = engine.load("bf16")
    inputs = loaded.processor.tokenizer("The ball rolls", return_tensors="pt")
    runs = [
        generate(loaded, inputs, 6, None, time.perf_counter() + 120, decode=d) for d in ("eager", "static")
    ]
    assert runs[1].decode == "eager" and runs[1].token_ids == runs[0].token_ids and runs[1].replayed == 0
    steps = len(runs[1].token_ids or []) - 1  # the first token comes from the prefill
    assert runs[1].decode_note == (
        f"{steps} of {steps} decode steps ran eagerly: their inputs did not fit the captured ones"
    )
    engine.note_decode("bf16", runs[1].decode)  # what run_clip does with a request's answer
    assert engine.decode_expected("bf16", "cuda") == "eager"


def test_decode_setting_is_checked_and_graphs_are_the_default_on_cuda_only() -> None:
    assert Settings().decode == "auto" and Settings().compile is False
    assert graphs.wanted("auto", "cuda") == "graphs" and graphs.wanted("auto", "cpu") == "eager"
    assert graphs.wanted("graphs", "cpu") == "static" and graphs.wanted("eager", "cuda") == "eager"
    assert graphs.wanted("auto", "cuda", compile_on=True) == "compiled"
    with pytest.raises(ValueError, match="MARLIN_DECODE='fast' is not one of auto, graphs, eager"):
        Engine(SETTINGS.with_(decode="fast"))


def test_compiled_decoding_keeps_its_switches_after_the_gptq_cpu_kernel_flips_them() -> None:
    """gptqmodel's CPU kernel sets inductor's ``freezing`` and ``max_autotune`` for the whole process at its
    first forward (a gptq request computing in float32); a linear compiled the way transformers compiles the
    decode step, with our options, is then still compiled without autotuning."""
    import torch
    from torch._dynamo.utils import counters

    from marlin_demo.engine.compiled import compile_config

    linear = torch.nn.Linear(64, 96).eval()
    kwargs = compile_config("cpu").to_dict()  # what transformers passes to torch.compile
    with torch._inductor.config.patch(freezing=True, max_autotune=True), torch.inference_mode():
        torch._dynamo.reset()
        counters.clear()
        out = torch.compile(linear, **kwargs)(torch.randn(1, 64))
        assert out.shape == (1, 96)
        assert counters["inductor"]["select_algorithm_autotune"] == 0
    torch._dynamo.reset()
