"""Limits that agree: the duration limit, the per-window time limit and the ZeroGPU calls, derived from the
measured speeds (service/speeds.json), never contradict each other; contradicting settings are refused."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import media_factory
import pytest

from marlin_demo import cli
from marlin_demo import settings as settings_mod
from marlin_demo.model_io import VideoParams
from marlin_demo.service import capacity, cost, gpu_calls, zerogpu_rules
from marlin_demo.service.startup import check_limits
from marlin_demo.settings import Settings
from marlin_demo.tasks import TASKS, get_task
from marlin_demo.video import plan_sampling, probe

LOCAL = settings_mod.from_env({})
ON_SPACE = settings_mod.from_env({"SPACE_ID": "owner/space"})


def test_speeds_table_has_every_figure() -> None:
    table = capacity.speeds()
    assert {"h200", "cpu-tiny"} <= set(table)
    for speed in table.values():
        assert speed.decode_tokens_per_s > 0 and speed.prefill_s > 0 and speed.source


@pytest.mark.parametrize(
    ("settings", "device", "zero_gpu"),
    [(LOCAL, "cuda", False), (LOCAL.with_(model="tiny"), "cpu", False), (ON_SPACE, "cuda", True)],
    ids=["local-gpu", "local-tiny-cpu", "space-zerogpu"],
)
def test_defaults_agree_with_the_estimate(settings: Settings, device: str, zero_gpu: bool) -> None:
    assert capacity.conflicts(settings, device, zero_gpu) == []
    speed = capacity.speed_for(settings, device)
    assert speed is not None
    for task in TASKS:
        # one window, its frames included, always fits the per-window time limit
        assert capacity.window_s(task, settings, speed) <= settings.request_timeout_s
        # the duration limit accepts nothing the windows cannot cover
        assert capacity.longest_video_s(task, settings) == settings.max_duration_s
        # every ZeroGPU call of the longest accepted video fits one call's cap, and they add up
        per_call = capacity.gpu_call_s(task, settings, speed)
        assert capacity.MIN_GPU_S <= per_call <= capacity.MAX_GPU_S
        windows = len(settings_mod_windows(task, settings.max_duration_s, settings))
        assert capacity.request_gpu_s(task, settings.max_duration_s, settings, speed) == windows * per_call


def settings_mod_windows(task: str, duration: float, settings: Settings) -> list[object]:
    from marlin_demo.longvideo.policy import plan_for

    return list(plan_for("caption" if task == "caption" else "find", duration, settings))


def test_header_states_each_tasks_longest_video() -> None:
    assert capacity.limits_line(LOCAL) == "captions up to 30 min, find up to 30 min"
    assert capacity.limits_line(ON_SPACE) == "captions up to 10 min, find up to 10 min"
    # fewer windows allowed: each task's own longest video, shorter than the duration limit
    few = LOCAL.with_(max_windows=5)
    assert capacity.limits_line(few) == "captions up to 5 min, find up to 130 s"


def test_a_short_time_limit_is_refused_naming_the_conflict() -> None:
    found = capacity.conflicts(LOCAL.with_(request_timeout_s=20.0), "cuda")
    assert found and all("MARLIN_REQUEST_TIMEOUT_S=20" in s for s in found)
    assert "caption window" in found[0] and "MARLIN_CAPTION_MAX_NEW_TOKENS" in found[0]
    with pytest.raises(ValueError, match="raise it to at least"):
        check_limits(LOCAL.with_(model="tiny", device="cpu", request_timeout_s=5.0))


def test_a_zero_gpu_call_over_the_cap_is_refused() -> None:
    greedy = ON_SPACE.with_(caption_max_new_tokens=8000, request_timeout_s=3600.0)
    found = capacity.conflicts(greedy, "cuda", zero_gpu=True)
    assert len(found) == 1 and "MARLIN_CAPTION_MAX_NEW_TOKENS=8000" in found[0] and "300 s" in found[0]
    assert capacity.conflicts(greedy, "cuda", zero_gpu=False) == []  # no ZeroGPU call off a Space


def test_cli_refuses_contradicting_settings_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        ["caption", "examples/flower.mp4", "--model", "tiny", "--device", "cpu", "--request-timeout-s", "5"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: MARLIN_REQUEST_TIMEOUT_S=5 ") and "\n" not in err


def test_gpu_request_follows_windows_and_the_note_says_it(monkeypatch: pytest.MonkeyPatch) -> None:
    s = ON_SPACE
    each = gpu_calls.call_seconds("caption", s)
    assert gpu_calls.estimate_gpu_seconds(600, s, task="caption") == 10 * each  # ten 60 s caption windows
    assert gpu_calls.estimate_gpu_seconds(30, s, task="caption") == each
    monkeypatch.setattr(zerogpu_rules, "duration_factor", lambda card=None: 1.5)  # the Space's card
    one = cost.request_gpu_line("caption", 30, s)  # said before every run, the card's factor counted
    # what the call needs left to start (its request x the factor), and what it is charged: its use
    assert one.startswith(
        f"This run makes 1 GPU call of up to {each} s: it needs {round(each * 1.5)} s of a visitor's daily "
        f"GPU quota left to start ({each} s x1.5 on this card), then is charged only the time it uses"
    )
    use = capacity.model_s("caption", s, capacity.speeds()["h200"])  # no margin: what a call uses at most
    most = round(use * 1.5)
    assert f"up to {most} s if the answer runs to its 768-token limit" in one and most < round(each * 1.5)
    # the day's quotas are a sentence of their own, after the call's (one long sentence read as a wall)
    assert one.endswith(
        "-token limit. A visitor has 2 min of GPU a day without signing in, 5 min with a free account."
    )
    assert "sign in (" not in one
    note = cost.request_gpu_line("caption", 600, s)
    assert f"makes 10 GPU calls of up to {each} s each" in note
    # each call is admitted on its own request and charged its use: the tenth starts only while the nine
    # before it leave its request, in each tier's day
    start = round(each * 1.5)
    assert (
        f"in the 2 min of a visitor who is not signed in, its last call starts only if the 9 calls before it "
        f"are charged at most {120 - start} s in all; in the 5 min of a free account, its last call starts "
        f"only if the 9 calls before it are charged at most {300 - start} s in all (their answers, run to "
        f"their limits, are charged {round(9 * use * 1.5)} s)"
    ) in note
    # no account's day holds them: a range that fits each, and PRO's day named
    assert "choose a time range of at most 60 s without signing in or 3 min with a free account" in note
    assert "(a PRO account has 40 min a day)" in note


def test_a_call_is_sized_by_its_frames_down_to_the_floor(tmp_path: Path) -> None:
    """A 1-second clip's call asks for less than a full window's (its prefill), never less than decoding
    every allowed token needs; a find's lands on ``MIN_GPU_S``."""
    clip = media_factory.make("uhd_4k", tmp_path)  # 1 s at the full pixel budget: its largest frames
    share = capacity.prefill_share(plan_sampling(probe(clip), VideoParams()).video_tokens)
    h200 = capacity.speeds()["h200"]
    full = capacity.gpu_call_s("caption", ON_SPACE, h200)
    one_second = capacity.gpu_call_s("caption", ON_SPACE, h200, share)
    decode = get_task("caption").tokens(ON_SPACE) / h200.decode_tokens_per_s
    assert 0 < share < 0.05
    assert math.ceil(capacity.GPU_MARGIN * (h200.overhead_s + decode)) <= one_second < full == 66
    assert capacity.gpu_call_s("find", ON_SPACE, h200, share) == capacity.MIN_GPU_S
    assert capacity.prefill_share(10**9) == 1.0 and capacity.prefill_share(0) == 0.0


@pytest.mark.parametrize(
    "argv",
    [
        ["batch", "examples/flower.mp4", "--task", "caption", "--out", "{tmp}/out"],
        ["index", "examples/flower.mp4", "--library", "{tmp}/lib"],
        ["bench", "--out", "{tmp}/bench"],
        ["bench", "search", "--out", "{tmp}/search"],
    ],
    ids=["batch", "index", "bench", "bench-search"],
)
def test_every_command_refuses_contradicting_settings_before_it_runs(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """batch, index and bench check the settings against the speeds as caption/find and the app do,
    in one line, before any model loads or any output is written."""
    monkeypatch.setenv("MARLIN_MODEL", "tiny")
    monkeypatch.setenv("MARLIN_DEVICE", "cpu")
    monkeypatch.setenv("MARLIN_REQUEST_TIMEOUT_S", "5")
    code = cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error: MARLIN_REQUEST_TIMEOUT_S=5 ") and "\n" not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written


# --------------------------------------------------------------------------- the real model on a CPU

REAL_CPU = LOCAL.with_(device="cpu")
CPU_ENTRIES = sorted(k for k, s in capacity.speeds().items() if s.isa)


def _cpu(isa: str, threads: int, dtype: str = "bfloat16") -> capacity.Speed:
    """A CPU entry as --apply-speeds writes it (figures made up: the matching is under test)."""
    return capacity.Speed(
        name=capacity.cpu_key(isa, threads),
        decode_tokens_per_s=2.0,
        prefill_s=600.0,
        prepare_s=15.0,
        overhead_s=5.0,
        isa=isa,
        threads=threads,
        variants={"gptq": {"compute_dtype": dtype, "window_peak_mb": 5000}},
    )


def test_a_cpu_entry_is_matched_by_class_compute_type_and_threads() -> None:
    entries = [_cpu("avx512bf16", 2), _cpu("avx2", 2, "float32"), _cpu("avx2", 8, "float32")]
    table = {s.name: s for s in entries}
    bf16, avx2_2, avx2_8 = entries
    assert capacity.cpu_speed(table, "avx512bf16", 2, "bfloat16") == (bf16, 1.0)
    assert capacity.cpu_speed(table, "avx512bf16", 16, "bfloat16") == (bf16, 1.0)  # more threads: as measured
    assert capacity.cpu_speed(table, "avx2", 4, "float32") == (avx2_2, 1.0)  # the most threads at or under
    assert capacity.cpu_speed(table, "avx2", 8, "float32") == (avx2_8, 1.0)
    assert capacity.cpu_speed(table, "avx2", 1, "float32") == (avx2_2, 0.5)  # fewer: scaled down
    # AVX512 without native bf16 computes in float32: the slower measured class's float32 figures
    assert capacity.cpu_speed(table, "avx512", 2, "float32") == (avx2_2, 1.0)
    assert capacity.cpu_speed(table, "avx512bf16", 2, "float32") == (avx2_2, 1.0)
    # nothing measured in that type, or below AVX2: nothing derived
    assert capacity.cpu_speed(table, "avx2", 2, "bfloat16") is None
    assert capacity.cpu_speed(table, "default", 2, "float32") is None
    half = capacity.scaled(avx2_2, 0.5)
    assert (half.decode_tokens_per_s, half.prefill_s, half.prepare_s) == (1.0, 1200.0, 15.0)


def test_cpu_class_follows_what_torch_reports() -> None:
    from marlin_demo.models.compute import CpuCaps

    assert capacity.cpu_isa(CpuCaps(x86=True, aten="AVX512", avx512_bf16=True)) == "avx512bf16"
    assert capacity.cpu_isa(CpuCaps(x86=True, aten="AVX512", amx_tile=True)) == "avx512bf16"
    assert capacity.cpu_isa(CpuCaps(x86=True, aten="AVX512")) == "avx512"
    # ATEN_CPU_CAPABILITY=avx2 on a bf16 machine: ATen runs AVX2 kernels, so the class is avx2
    assert capacity.cpu_isa(CpuCaps(x86=True, aten="AVX2", avx512_bf16=True)) == "avx2"
    assert capacity.cpu_isa(CpuCaps(x86=True, aten="DEFAULT")) == "default"
    assert capacity.cpu_key("avx2", 2) == "cpu-avx2-2t"


@pytest.mark.parametrize("key", CPU_ENTRIES)
def test_a_measured_cpu_entry_has_every_variants_figures(key: str) -> None:
    """Written by scripts/cpu_check.py --apply-speeds: its own rates are the slowest variant's."""
    speed = capacity.speeds()[key]
    assert key == capacity.cpu_key(speed.isa, speed.threads) and "scripts/cpu_check.py" in speed.source
    ran = {v: f for v, f in speed.variants.items() if "error" not in f}
    assert ran, speed.variants
    for fig in ran.values():
        assert fig["peak_mb"] > 0 and fig["window_peak_mb"] >= fig["peak_mb"] * 0.5
        assert fig["load_s"] > 0 and fig["prefill_tokens_per_s"] > 0 and fig["decode_tokens_per_s"] > 0
    assert speed.decode_tokens_per_s == min(f["window_decode_tokens_per_s"] for f in ran.values())
    assert speed.prefill_s == max(f["prefill_s"] for f in ran.values())


@pytest.mark.parametrize("key", CPU_ENTRIES)
def test_limits_derived_from_a_cpu_entry(key: str) -> None:
    """One window's time on a CPU: its measured prefill, every allowed token at its measured decode rate,
    the recorded preparation and overhead; far beyond the GPU-sized default time limit, which says so."""
    speed = capacity.speeds()[key]
    for task in TASKS:
        tokens = get_task(task).tokens(REAL_CPU)
        expected = speed.overhead_s + speed.prefill_s + tokens / speed.decode_tokens_per_s
        assert capacity.model_s(task, REAL_CPU, speed) == pytest.approx(expected)
        assert capacity.window_s(task, REAL_CPU, speed) == pytest.approx(expected + speed.prepare_s)
    need = math.ceil(capacity.window_s("caption", REAL_CPU, speed))
    assert need > REAL_CPU.request_timeout_s
    enough = REAL_CPU.with_(request_timeout_s=float(need))
    assert capacity.window_s("caption", enough, speed) <= enough.request_timeout_s


def test_this_cpu_gets_its_measured_entry_and_a_time_limit_to_match(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real model on this CPU: the entry of its class in its compute type (every x86 CPU with AVX2
    or more has one: bf16 where native, else the AVX2 float32 one). Its window takes longer than the
    default time limit: unset, the limit becomes that window's time (logged); set shorter, it is refused."""
    if capacity.cpu_isa() not in ("avx2", "avx512", "avx512bf16"):
        pytest.skip(f"no entry measured for a {capacity.cpu_isa()} CPU")
    monkeypatch.delenv("MARLIN_REQUEST_TIMEOUT_S", raising=False)
    speed = capacity.speed_for(REAL_CPU, "cpu")
    assert speed is not None and speed.isa
    found = capacity.conflicts(REAL_CPU, "cpu")
    assert found and "raise it to at least" in found[0]
    need = max(math.ceil(capacity.window_s(t, REAL_CPU, speed)) for t in TASKS)
    with caplog.at_level("WARNING"):
        derived = check_limits(REAL_CPU)
    assert derived.request_timeout_s == need > REAL_CPU.request_timeout_s
    assert f"raised from 300 to {need} s" in caplog.text
    assert capacity.conflicts(derived, "cpu") == []
    monkeypatch.setenv("MARLIN_REQUEST_TIMEOUT_S", "300")  # chosen by the user: kept, and refused
    with pytest.raises(ValueError, match="raise it to at least"):
        check_limits(REAL_CPU)
    monkeypatch.delenv("MARLIN_REQUEST_TIMEOUT_S")
    with pytest.raises(ValueError, match="raise it to at least"):  # a flag's value other than the default
        check_limits(REAL_CPU.with_(request_timeout_s=600.0))
    assert capacity.speed_for(REAL_CPU.with_(model="tiny"), "cpu") == capacity.speeds()["cpu-tiny"]


@pytest.mark.parametrize("key", CPU_ENTRIES)
def test_a_variant_that_does_not_fit_the_memory_is_withheld(key: str) -> None:
    """Each variant's measured peak for a full window against a machine's memory (a parameter here):
    over 90% of it, the variant is not offered, in one sentence; one that failed on that CPU never is."""
    speed = capacity.speeds()[key]
    failed = {v for v, f in speed.variants.items() if "error" in f}
    peaks = {v: f["window_peak_mb"] for v, f in speed.variants.items() if v not in failed}
    roomy = max(peaks.values()) / capacity.MEMORY_SHARE + 1
    assert set(capacity.withheld(speed, roomy)) == failed
    smallest = min(peaks.values()) / capacity.MEMORY_SHARE + 1
    out = capacity.withheld(speed, smallest)
    assert set(out) == failed | {v for v, p in peaks.items() if p > min(peaks.values())}
    for sentence in out.values():
        assert sentence.endswith(".") and sentence.count(". ") == 0, sentence
    assert all("GB" in out[v] for v in set(out) - failed)
    # a 16 GB cpu-basic machine: exactly the variants whose measured window peak is over 90% of it
    cpu_basic = capacity.withheld(speed, 16 * 1024)
    assert set(cpu_basic) == failed | {v for v, p in peaks.items() if p > capacity.MEMORY_SHARE * 16 * 1024}
    assert capacity.withheld(capacity.speeds()["h200"], 1.0) == {}  # not a CPU entry: nothing withheld


def test_start_up_offers_only_what_fits_this_machines_memory() -> None:
    from marlin_demo.service.startup import offered, start_engine

    speed = capacity.speed_for(REAL_CPU, "cpu")
    if speed is None:
        pytest.skip("no CPU entry for this machine")
    failed = {v for v, f in speed.variants.items() if "error" in f}
    roomy, why = offered(REAL_CPU, total_mb=10**9)
    assert set(why) == failed and roomy.variant_list == [v for v in REAL_CPU.variant_list if v not in failed]
    none_fit, why = offered(REAL_CPU, total_mb=1.0)
    assert none_fit.variant_list == [] and set(why) == {"gptq", "bnb4", "bf16"}
    engine, status = start_engine(REAL_CPU, total_mb=1.0)  # nothing fits: the stand-in, and why
    assert engine.settings.is_tiny and status.fell_back and status.fallback_reason == status.withheld_note
    assert engine.variants == ["gptq", "bnb4", "bf16"]  # the stand-in runs them all
    assert offered(REAL_CPU.with_(model="tiny"), total_mb=1.0)[1] == {}


def test_a_variant_that_cannot_run_here_is_named_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A speeds table whose entry for this CPU says bf16 failed there: the CLI refuses --variant bf16 with
    that sentence before loading anything, and start-up leaves it out, saying why (the table is test data
    in a file of its own; nothing measured is replaced)."""
    from marlin_demo.service.startup import ModelStatus, offered

    speed = capacity.speed_for(REAL_CPU, "cpu")
    if speed is None:
        pytest.skip("no CPU entry for this machine")
    table = json.loads(capacity.SPEEDS_FILE.read_text())
    key = speed.name.split(" ")[0]
    table[key]["variants"]["bf16"] = {"error": "RuntimeError: no CPU kernel for this op"}
    speeds = tmp_path / "speeds.json"
    speeds.write_text(json.dumps(table))
    monkeypatch.setattr(capacity, "SPEEDS_FILE", speeds)
    capacity.speeds.cache_clear()
    try:
        model = tmp_path / "model"
        model.mkdir()
        argv = [
            "caption",
            "examples/flower.mp4",
            "--model",
            str(model),
            "--device",
            "cpu",
            "--variant",
            "bf16",
        ]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == "error: bf16 (16-bit) cannot run on this CPU: RuntimeError: no CPU kernel for this op."
        # start-up leaves it out and keeps the sentence for the page (the variant radio's note)
        settings, why = offered(REAL_CPU.with_(model=str(model)), total_mb=10**9)
        assert "bf16" not in settings.variant_list and why["bf16"] == err.removeprefix("error: ")
        assert ModelStatus(requested=str(model), withheld=why).withheld_note.count("bf16 (16-bit)") == 1
    finally:
        capacity.speeds.cache_clear()


def test_the_page_says_why_a_variant_is_not_offered() -> None:
    """Caption's and Find's variant choices leave the variant out and carry start-up's sentence."""
    import gradio as gr

    from marlin_demo.engine import Engine
    from marlin_demo.service.startup import ModelStatus
    from marlin_demo.ui.blocks import build_demo

    tiny = LOCAL.with_(model="tiny", device="cpu")
    why = {"bnb4": "bnb4 (nf4 4-bit) cannot run on this CPU: a reason."}
    demo, _ = build_demo(Engine(tiny.with_(variants="gptq,bf16")), tiny, ModelStatus("marlin", withheld=why))
    radios = {
        b.elem_id: b
        for b in demo.blocks.values()
        if isinstance(b, gr.Radio) and b.elem_id in ("caption-variant", "find-variant")
    }
    assert set(radios) == {"caption-variant", "find-variant"}
    for radio in radios.values():
        assert radio.info == why["bnb4"] and [c[1] for c in radio.choices] == ["gptq", "bf16"]


def test_a_call_is_sized_for_the_decoding_its_variant_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls sized for CUDA graphs use the graphs rate plus one capture per call (its process may be fresh),
    once the GPU check has measured them; until then, and for eager decoding, eager's slowest rate."""
    settings = Settings()
    h200 = capacity.speeds()["h200"]
    eager = gpu_calls.call_seconds("caption", settings, decode="eager")
    assert (
        gpu_calls.call_seconds("caption", settings) == eager == capacity.gpu_call_s("caption", settings, h200)
    )
    if h200.graphs_decode_tokens_per_s is None:  # not measured yet: a graphs call is sized as an eager one
        assert gpu_calls.call_seconds("caption", settings, decode="graphs") == eager
    measured = {"h200": dataclasses.replace(h200, graphs_decode_tokens_per_s=80.0, graphs_capture_s=1.5)}
    monkeypatch.setattr(capacity, "speeds", lambda: measured)
    fast = capacity.for_decode(measured["h200"], "graphs")
    assert fast.decode_tokens_per_s == 80.0 and fast.overhead_s == h200.overhead_s + 1.5
    expected = math.ceil(capacity.GPU_MARGIN * (h200.overhead_s + 1.5 + h200.prefill_s + 768 / 80.0))
    graphs = gpu_calls.call_seconds("caption", settings, decode="graphs")
    assert graphs == max(capacity.MIN_GPU_S, expected) < eager
    assert (
        gpu_calls.call_seconds("caption", settings, decode="eager") == eager
    )  # a fallback's call: eager's size
    assert capacity.for_decode(measured["h200"], "static") is measured["h200"]
