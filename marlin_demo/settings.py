"""Every knob of the demo in one place: ``MARLIN_*`` variables (a Space) and matching CLI flags (a
developer), landing in one frozen ``Settings`` every layer reads."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

from marlin_demo import variants

#: The variants every checkpoint has; a ``Variant`` is any name the engine offers (``MARLIN_EXTRA_VARIANTS``).
VARIANTS: tuple[str, ...] = tuple(kind.name for kind in variants.kinds())
Variant: TypeAlias = str

#: The commands that take some settings as flags (the app takes every one; ``run`` is ``caption``/``find``,
#: ``index`` and ``search`` also take batch's): a field's ``commands`` metadata names which offer it.
Command = Literal["run", "bench", "batch", "search"]
COMMANDS: tuple[Command, ...] = ("run", "bench", "batch", "search")

#: The example clips of a source checkout (an installed package: ``MARLIN_EXAMPLES_DIR``).
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES_FILE = "examples.json"

DEFAULT_BF16_ID = "NemoStation/Marlin-2B"
DEFAULT_GPTQ_ID = "NemoStation/Marlin-2B-GPTQ"


SPACE_DEFAULTS: dict[str, float] = {"max_duration_s": 600.0}
"""Settings whose default differs on a Space (a ``MARLIN_*`` variable or flag still wins): 30 minutes
of video is 30 caption windows, far past one ZeroGPU slot (``space.MAX_GPU_S``), so a visitor keeps the
10-minute limit (10 caption / 24 find windows)."""


def _setting(
    env: str, default: Any, help: str, commands: tuple[Command, ...] = ("run", "bench", "batch"), **meta: str
) -> Any:
    """A ``Settings`` field; ``commands``: those besides the app that take it as a flag (``()``: the app
    alone); ``meta``: its own ``flag`` or ``fallback_env``."""
    return field(default=default, metadata={"env": env, "commands": commands, "help": help, **meta})


@dataclass(frozen=True)
class Settings:
    """All configuration. ``help`` metadata feeds both the CLI and the README table (``_setting``)."""

    model: str = _setting(
        "MARLIN_MODEL", "marlin", "marlin (Hub checkpoints), tiny (offline stand-in) or a local dir"
    )
    bf16_id: str = _setting(
        "MARLIN_BF16_ID", DEFAULT_BF16_ID, "16-bit Hub repo (bf16 and bnb4 variants)", ("bench", "batch")
    )
    gptq_id: str = _setting(
        "MARLIN_GPTQ_ID", DEFAULT_GPTQ_ID, "GPTQ Hub repo (gptq variant)", ("bench", "batch")
    )
    revision: str = _setting("MARLIN_REVISION", "main", "revision of the 16-bit repo", ("bench", "batch"))
    gptq_revision: str = _setting(
        "MARLIN_GPTQ_REVISION", "main", "revision of the GPTQ repo", ("bench", "batch")
    )
    extra_variants: str = _setting(
        "MARLIN_EXTRA_VARIANTS",
        "",
        "more variants as name=DIR pairs, comma-separated (e.g. mixed=/ckpt/mixed)",
    )
    variants: str = _setting(
        "MARLIN_VARIANTS", "gptq,bnb4,bf16", "variants offered, in order", ("run", "batch")
    )
    gptq_backend: str = _setting(
        "MARLIN_GPTQ_BACKEND",
        "auto",
        "GPTQModel kernel: auto, gptq_marlin, gptq_exllama_v2, gptq_triton, gptq_torch...",
    )
    gptq_build_dir: str = _setting(
        "MARLIN_GPTQ_BUILD_DIR",
        "",
        "where GPTQModel's nvcc-built kernels (Marlin) are cached "
        "(default ~/.cache/marlin-demo/gptq-kernels)",
        ("run",),
    )
    compile: bool = _setting(
        "MARLIN_COMPILE",
        False,
        "decode with a static cache and torch.compile (CUDA graphs on GPU); "
        "turns prefix reuse off; off until measured to help",
        ("run", "bench"),
    )
    decode: str = _setting(
        "MARLIN_DECODE",
        "auto",
        "token decoding: auto (CUDA graphs on a GPU, eager on a CPU), graphs (on a CPU: the same "
        "static-cache step, uncaptured) or eager",
        ("run", "bench"),
    )
    video_backend: str = _setting(
        "MARLIN_VIDEO_BACKEND",
        "auto",
        "video decode: reference (qwen-vl-utils pixels), fast, or auto (fast on big 8-bit clips)",
    )
    prefix_cache_size: int = _setting(
        "MARLIN_PREFIX_CACHE", 2, "video prefix states kept for reuse (0: off)", ()
    )
    device: str = _setting("MARLIN_DEVICE", "auto", "auto, cuda or cpu")
    compute_dtype: str = _setting(
        "MARLIN_COMPUTE_DTYPE",
        "auto",
        "what the model computes in: auto (bf16 on a GPU; on a CPU bf16 only where the "
        "processor runs it natively, else float32), bfloat16, float16 or float32",
    )
    caption_max_new_tokens: int = _setting("MARLIN_CAPTION_MAX_NEW_TOKENS", 768, "token limit for captions")
    find_max_new_tokens: int = _setting("MARLIN_FIND_MAX_NEW_TOKENS", 64, "token limit for find answers")
    caption_window_s: float = _setting(
        "MARLIN_CAPTION_WINDOW_S",
        60.0,
        "caption window length (s): a longer video is captioned window by window",
    )
    find_window_s: float = _setting("MARLIN_FIND_WINDOW_S", 30.0, "find window length (s) on a longer video")
    find_overlap_s: float = _setting("MARLIN_FIND_OVERLAP_S", 5.0, "overlap of consecutive find windows (s)")
    max_windows: int = _setting(
        "MARLIN_MAX_WINDOWS", 72, "most windows one request may need (a longer video is refused)"
    )
    top_k: int = _setting("MARLIN_TOP_K", 5, "most moments a find returns")
    search_candidates: int = _setting(
        "MARLIN_SEARCH_CANDIDATES",
        8,
        "caption windows a library search asks find in (the best by full-text rank)",
        ("search",),
    )
    max_upload_mb: float = _setting("MARLIN_MAX_UPLOAD_MB", 200.0, "largest accepted video file (MB)")
    max_duration_s: float = _setting(
        "MARLIN_MAX_DURATION_S",
        1800.0,
        "longest accepted video (s); on a Space the default is 600 (SPACE_DEFAULTS)",
    )
    max_width: int = _setting("MARLIN_MAX_WIDTH", 3840, "widest accepted video", ("batch",))
    max_height: int = _setting("MARLIN_MAX_HEIGHT", 2160, "tallest accepted video", ("batch",))
    max_query_chars: int = _setting("MARLIN_MAX_QUERY_CHARS", 500, "longest accepted find query")
    request_timeout_s: float = _setting(
        "MARLIN_REQUEST_TIMEOUT_S",
        300.0,
        "time limit (s) of one window's (or one short clip's) model work; waiting for other "
        "requests does not count",
    )
    stream_every_s: float = _setting(
        "MARLIN_STREAM_EVERY_S", 0.15, "seconds between streamed text updates (0: every token)", ()
    )
    queue_size: int = _setting(
        "MARLIN_QUEUE_SIZE",
        16,
        "requests answered in turns (window by window) at once; one more is told to try again",
        (),
    )
    cache_dir: str = _setting("MARLIN_CACHE_DIR", "", "where the tiny checkpoint is built")
    output_dir: str = _setting("MARLIN_OUTPUT_DIR", "", "where clips and downloads are written", ())
    mcp: bool = _setting(
        "MARLIN_MCP",
        True,
        "serve /caption, /find, /compare, /search as MCP tools at /gradio_api/mcp/ (same port)",
        (),
    )
    # Gradio's own variables are honoured after ours (flag, MARLIN_*, GRADIO_*, default), as
    # Gradio users and hosting platforms expect.
    library_dir: str = _setting(
        "MARLIN_LIBRARY",
        "",
        "a library folder built by `index` for the Library tab (default: the example clips)",
        (),
        flag="--library",
    )
    examples_dir: str = _setting(
        "MARLIN_EXAMPLES_DIR",
        "",
        "folder of examples.json and its clips (default: examples/ of a source checkout)",
        (),
    )
    host: str = _setting("MARLIN_HOST", "127.0.0.1", "server address", (), fallback_env="GRADIO_SERVER_NAME")
    port: int = _setting("MARLIN_PORT", 7860, "server port", (), fallback_env="GRADIO_SERVER_PORT")
    trust_remote_code: bool = _setting(
        "MARLIN_TRUST_REMOTE_CODE",
        False,
        "run the checkpoint's own code (needs a pinned 40-hex revision)",
        ("bench", "batch"),
    )
    #: the values of the settings registered tasks bring (``value`` reads them), as (name, value) pairs
    task_values: tuple[tuple[str, Any], ...] = ()

    @property
    def variant_list(self) -> list[str]:
        names = [v.strip() for v in self.variants.split(",") if v.strip()]
        return names + [n for n in self.extra_variant_dirs if n not in names]

    @property
    def extra_variant_dirs(self) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for pair in filter(None, (p.strip() for p in self.extra_variants.split(","))):
            name, _, path = pair.partition("=")
            if not name or not path:
                raise ValueError(f"MARLIN_EXTRA_VARIANTS entry {pair!r} is not name=DIR")
            out[name.strip()] = Path(path.strip()).expanduser()
        return out

    @property
    def examples_path(self) -> Path:
        """The examples folder in use: ``examples_dir`` when set, else the checkout's ``EXAMPLES_DIR``."""
        return Path(self.examples_dir).expanduser() if self.examples_dir else EXAMPLES_DIR

    @property
    def is_tiny(self) -> bool:
        return self.model == "tiny"

    def value(self, name: str) -> Any:
        """A setting by name: a field, or one a registered task brings (``register_setting``)."""
        if name in _TASK_SETTINGS:
            return dict(self.task_values).get(name, _TASK_SETTINGS[name].default)
        return getattr(self, name)

    def with_(self, **changes: Any) -> Settings:
        """A copy with some values changed (tests and the CLI use it), a task's settings among them."""
        own = {k: v for k, v in changes.items() if k not in _TASK_SETTINGS}
        brought = {k: v for k, v in changes.items() if k in _TASK_SETTINGS}
        if brought:
            own["task_values"] = tuple(sorted({**dict(self.task_values), **brought}.items()))
        return replace(self, **own)


@dataclass(frozen=True)
class Spec:
    """One setting as the environment, the flags and the docs' table know it: a ``Settings`` field, or one
    a registered task brings (``TaskSetting``)."""

    name: str
    kind: str  # "int", "float", "str" or "bool"
    default: Any
    meta: Mapping[str, Any]  # env, commands, help (and a field's own flag or fallback_env)


@dataclass(frozen=True)
class TaskSetting:
    """A setting a task brings in its entry (its token limit, window length...): a task outside the package
    adds no ``Settings`` field; ``Settings.value`` reads it, its variable and flag work as a field's."""

    name: str
    default: int | float
    env: str
    help: str
    commands: tuple[Command, ...] = ("run", "bench", "batch")


_TASK_SETTINGS: dict[str, TaskSetting] = {}


def register_setting(setting: TaskSetting) -> None:
    """Make a task's setting known (``tasks.register_task`` calls it for each one its entry brings)."""
    if setting.name in {f.name for f in fields(Settings)}:
        raise ValueError(f"{setting.name!r} is already a setting")
    _TASK_SETTINGS[setting.name] = setting


def unregister_setting(name: str) -> None:
    _TASK_SETTINGS.pop(name, None)


def specs() -> list[Spec]:
    """Every setting: the fields (``task_values`` aside), then those the registered tasks brought."""
    own = [Spec(f.name, str(f.type), f.default, f.metadata) for f in fields(Settings) if f.metadata]
    return own + [
        Spec(
            s.name,
            type(s.default).__name__,
            s.default,
            {"env": s.env, "commands": s.commands, "help": s.help},
        )
        for s in _TASK_SETTINGS.values()
    ]


_TYPES: dict[str, type] = {"int": int, "float": float}  # a field's annotation -> how its text is read


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``MARLIN_*`` variables (then Gradio's ``GRADIO_SERVER_*``), defaults elsewhere."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    if env.get("SPACE_ID"):  # a Hugging Face Space: what a visitor's GPU slot can afford
        values.update(SPACE_DEFAULTS)
    for spec in specs():
        names = [spec.meta["env"], spec.meta.get("fallback_env")]
        name = next((n for n in names if n and env.get(n, "") != ""), None)
        if name is not None:
            raw, kind = env[name], spec.kind
            truthy = raw.strip().lower() in {"1", "true", "yes", "on"}
            try:
                values[spec.name] = truthy if kind == "bool" else _TYPES.get(kind, str)(raw)
            except ValueError as exc:
                raise ValueError(f"{name}={env[name]!r} is not a valid {kind}") from exc
    return Settings().with_(**values)


#: MARLIN_* variables that are not ``Settings`` fields: process-wide knobs read with ``env_value``.
PROCESS_ENV = {"decode_threads": "MARLIN_DECODE_THREADS", "cache_examples": "MARLIN_CACHE_EXAMPLES"}


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The raw, stripped value ('' when unset) of a setting's variable or a ``PROCESS_ENV`` knob: the one way
    code without a ``Settings`` reads a ``MARLIN_*`` variable."""
    env = os.environ if environ is None else environ
    if name in PROCESS_ENV:
        return env.get(PROCESS_ENV[name], "").strip()
    meta = next((s.meta for s in specs() if s.name == name), None)
    if meta is None:
        raise ValueError(f"unknown setting {name!r}")
    for var in (meta["env"], meta.get("fallback_env")):
        if var and env.get(var, "").strip():
            return env[var].strip()
    return ""


def env_name(name: str) -> str:
    """The ``MARLIN_*`` variable of a setting (named in messages that tell what to change)."""
    return next(str(s.meta["env"]) for s in specs() if s.name == name)


def flags_for(command: Command) -> tuple[str, ...]:
    """The settings ``command`` takes as flags (field order), from each field's ``commands`` metadata."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}: choose from {', '.join(COMMANDS)}")
    return tuple(s.name for s in specs() if command in s.meta.get("commands", ()))


def flag_of(name: str) -> str:
    """A setting's flag: ``--max-upload-mb`` for ``max_upload_mb`` unless its ``flag`` metadata names one."""
    meta = next(s.meta for s in specs() if s.name == name)
    return str(meta.get("flag") or "--" + name.replace("_", "-"))


def add_arguments(parser: argparse.ArgumentParser, only: tuple[str, ...] | None = None) -> None:
    """One ``--flag`` per setting, defaulting to the environment; ``only``: these names (``flags_for``)."""
    for spec in specs():
        if only is not None and spec.name not in only:
            continue
        how: dict[str, Any] = {"action": argparse.BooleanOptionalAction, "help": spec.meta["help"]}
        if spec.kind != "bool":
            envs = " or ".join(f"${n}" for n in (spec.meta["env"], spec.meta.get("fallback_env")) if n)
            how = {"type": _TYPES.get(spec.kind, str), "help": f"{how['help']} ({envs})"}
        parser.add_argument(flag_of(spec.name), dest=spec.name, default=None, **how)


def from_args(args: argparse.Namespace, base: Settings | None = None) -> Settings:
    """Environment first, then any flag given on the command line."""
    settings = base or from_env()
    given = {s.name: getattr(args, s.name) for s in specs() if getattr(args, s.name, None) is not None}
    return settings.with_(**given)


def settings_table() -> list[tuple[str, str, str, str]]:
    """(env var, flag, default, help) rows: docs/CONFIGURATION.md's table is checked against them."""
    return [(s.meta["env"], flag_of(s.name), repr(s.default), s.meta["help"]) for s in specs()]
