"""Every knob of the demo in one place: environment variables (``MARLIN_*``) and matching CLI flags.

A Space is configured through its environment; a developer through flags. Both
land in one frozen ``Settings`` so every layer (engine, UI, bench) reads the
same values.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

from marlin_demo import variants

#: The variants every checkpoint has (``variants``' table); ``MARLIN_EXTRA_VARIANTS`` adds more by name, so
#: a variant in a signature is a ``Variant`` (any name the engine offers), one of these or an extra one.
BuiltinVariant = Literal["gptq", "bnb4", "bf16"]
VARIANTS: tuple[str, ...] = tuple(kind.name for kind in variants.kinds())
Variant: TypeAlias = str

#: The commands that take some settings as flags (the app, ``python app.py``, takes every one):
#: ``run`` is ``caption``/``find``, ``bench``, ``batch`` and ``search`` the commands of those names (``index``
#: and ``search`` also take batch's). A field's ``commands`` metadata says which of them offer it: the
#: one list every parser is built from.
Command = Literal["run", "bench", "batch", "search"]
COMMANDS: tuple[Command, ...] = ("run", "bench", "batch", "search")

#: The example clips of a source checkout (examples/ beside the package): the one place this path is
#: computed. An installed package has none there: ``MARLIN_EXAMPLES_DIR`` points at such a folder.
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES_FILE = "examples.json"

DEFAULT_BF16_ID = "NemoStation/Marlin-2B"
DEFAULT_GPTQ_ID = "NemoStation/Marlin-2B-GPTQ"


SPACE_DEFAULTS: dict[str, float] = {"max_duration_s": 600.0}
"""Settings whose default differs on a Space (a ``MARLIN_*`` variable or flag still wins): 30 minutes
of video is 30 caption windows, far past one ZeroGPU slot (``space.MAX_GPU_S``), so a visitor keeps the
10-minute limit (10 caption / 24 find windows)."""


@dataclass(frozen=True)
class Settings:
    """All configuration. ``help`` metadata feeds both the CLI and the README table; ``commands``
    which commands besides the app take the setting as a flag (see ``COMMANDS``)."""

    model: str = field(
        default="marlin",
        metadata={
            "env": "MARLIN_MODEL",
            "commands": ("run", "bench", "batch"),
            "help": "marlin (Hub checkpoints), tiny (offline stand-in) or a local dir",
        },
    )
    bf16_id: str = field(
        default=DEFAULT_BF16_ID,
        metadata={
            "env": "MARLIN_BF16_ID",
            "commands": ("bench", "batch"),
            "help": "16-bit Hub repo (bf16 and bnb4 variants)",
        },
    )
    gptq_id: str = field(
        default=DEFAULT_GPTQ_ID,
        metadata={
            "env": "MARLIN_GPTQ_ID",
            "commands": ("bench", "batch"),
            "help": "GPTQ Hub repo (gptq variant)",
        },
    )
    revision: str = field(
        default="main",
        metadata={
            "env": "MARLIN_REVISION",
            "commands": ("bench", "batch"),
            "help": "revision of the 16-bit repo",
        },
    )
    gptq_revision: str = field(
        default="main",
        metadata={
            "env": "MARLIN_GPTQ_REVISION",
            "commands": ("bench", "batch"),
            "help": "revision of the GPTQ repo",
        },
    )
    extra_variants: str = field(
        default="",
        metadata={
            "env": "MARLIN_EXTRA_VARIANTS",
            "commands": ("run", "bench", "batch"),
            "help": "more variants as name=DIR pairs, comma-separated (e.g. mixed=/ckpt/mixed)",
        },
    )
    variants: str = field(
        default="gptq,bnb4,bf16",
        metadata={
            "env": "MARLIN_VARIANTS",
            "commands": ("run", "batch"),
            "help": "variants offered, in order",
        },
    )
    gptq_backend: str = field(
        default="auto",
        metadata={
            "env": "MARLIN_GPTQ_BACKEND",
            "commands": ("run", "bench", "batch"),
            "help": "GPTQModel kernel: auto, gptq_marlin, gptq_exllama_v2, gptq_triton, gptq_torch...",
        },
    )
    gptq_build_dir: str = field(
        default="",
        metadata={
            "env": "MARLIN_GPTQ_BUILD_DIR",
            "commands": ("run",),
            "help": "where GPTQModel's nvcc-built kernels (Marlin) are cached "
            "(default ~/.cache/marlin-demo/gptq-kernels)",
        },
    )
    compile: bool = field(
        default=False,
        metadata={
            "env": "MARLIN_COMPILE",
            "commands": ("run", "bench"),
            "help": "decode with a static cache and torch.compile (CUDA graphs on GPU); "
            "turns prefix reuse off; off until measured to help",
        },
    )
    video_backend: str = field(
        default="auto",
        metadata={
            "env": "MARLIN_VIDEO_BACKEND",
            "commands": ("run", "bench", "batch"),
            "help": "video decode: reference (qwen-vl-utils pixels), fast, or auto (fast on big 8-bit clips)",
        },
    )
    prefix_cache_size: int = field(
        default=2,
        metadata={"env": "MARLIN_PREFIX_CACHE", "help": "video prefix states kept for reuse (0: off)"},
    )
    device: str = field(
        default="auto",
        metadata={"env": "MARLIN_DEVICE", "commands": ("run", "bench", "batch"), "help": "auto, cuda or cpu"},
    )
    compute_dtype: str = field(
        default="auto",
        metadata={
            "env": "MARLIN_COMPUTE_DTYPE",
            "commands": ("run", "bench", "batch"),
            "help": "what the model computes in: auto (bf16 on a GPU; on a CPU bf16 only where the "
            "processor runs it natively, else float32), bfloat16, float16 or float32",
        },
    )
    caption_max_new_tokens: int = field(
        default=768,
        metadata={
            "env": "MARLIN_CAPTION_MAX_NEW_TOKENS",
            "commands": ("run", "bench", "batch"),
            "help": "token limit for captions",
        },
    )
    find_max_new_tokens: int = field(
        default=64,
        metadata={
            "env": "MARLIN_FIND_MAX_NEW_TOKENS",
            "commands": ("run", "bench", "batch"),
            "help": "token limit for find answers",
        },
    )
    caption_window_s: float = field(
        default=60.0,
        metadata={
            "env": "MARLIN_CAPTION_WINDOW_S",
            "commands": ("run", "bench", "batch"),
            "help": "caption window length (s): a longer video is captioned window by window",
        },
    )
    find_window_s: float = field(
        default=30.0,
        metadata={
            "env": "MARLIN_FIND_WINDOW_S",
            "commands": ("run", "bench", "batch"),
            "help": "find window length (s) on a longer video",
        },
    )
    find_overlap_s: float = field(
        default=5.0,
        metadata={
            "env": "MARLIN_FIND_OVERLAP_S",
            "commands": ("run", "bench", "batch"),
            "help": "overlap of consecutive find windows (s)",
        },
    )
    max_windows: int = field(
        default=72,
        metadata={
            "env": "MARLIN_MAX_WINDOWS",
            "commands": ("run", "bench", "batch"),
            "help": "most windows one request may need (a longer video is refused)",
        },
    )
    top_k: int = field(
        default=5,
        metadata={
            "env": "MARLIN_TOP_K",
            "commands": ("run", "bench", "batch"),
            "help": "most moments a find returns",
        },
    )
    search_candidates: int = field(
        default=8,
        metadata={
            "env": "MARLIN_SEARCH_CANDIDATES",
            "commands": ("search",),
            "help": "caption windows a library search asks find in (the best by full-text rank)",
        },
    )
    max_upload_mb: float = field(
        default=200.0,
        metadata={
            "env": "MARLIN_MAX_UPLOAD_MB",
            "commands": ("run", "bench", "batch"),
            "help": "largest accepted video file (MB)",
        },
    )
    max_duration_s: float = field(
        default=1800.0,
        metadata={
            "env": "MARLIN_MAX_DURATION_S",
            "commands": ("run", "bench", "batch"),
            "help": "longest accepted video (s); on a Space the default is 600 (SPACE_DEFAULTS)",
        },
    )
    max_width: int = field(
        default=3840,
        metadata={"env": "MARLIN_MAX_WIDTH", "commands": ("batch",), "help": "widest accepted video"},
    )
    max_height: int = field(
        default=2160,
        metadata={"env": "MARLIN_MAX_HEIGHT", "commands": ("batch",), "help": "tallest accepted video"},
    )
    max_query_chars: int = field(
        default=500,
        metadata={
            "env": "MARLIN_MAX_QUERY_CHARS",
            "commands": ("run", "bench", "batch"),
            "help": "longest accepted find query",
        },
    )
    request_timeout_s: float = field(
        default=300.0,
        metadata={
            "env": "MARLIN_REQUEST_TIMEOUT_S",
            "commands": ("run", "bench", "batch"),
            "help": "time limit (s) of one window's (or one short clip's) model work; waiting for other "
            "requests does not count",
        },
    )
    stream_every_s: float = field(
        default=0.15,
        metadata={
            "env": "MARLIN_STREAM_EVERY_S",
            "help": "seconds between streamed text updates (0: every token)",
        },
    )
    queue_size: int = field(
        default=16,
        metadata={
            "env": "MARLIN_QUEUE_SIZE",
            "help": "requests answered in turns (window by window) at once; one more is told to try again",
        },
    )
    cache_dir: str = field(
        default="",
        metadata={
            "env": "MARLIN_CACHE_DIR",
            "commands": ("run", "bench", "batch"),
            "help": "where the tiny checkpoint is built",
        },
    )
    output_dir: str = field(
        default="", metadata={"env": "MARLIN_OUTPUT_DIR", "help": "where clips and downloads are written"}
    )
    mcp: bool = field(
        default=True,
        metadata={
            "env": "MARLIN_MCP",
            "help": "serve /caption, /find, /compare, /search as MCP tools at /gradio_api/mcp/ (same port)",
        },
    )
    # Gradio's own variables are honoured after ours (flag, MARLIN_*, GRADIO_*, default), as
    # Gradio users and hosting platforms expect.
    library_dir: str = field(
        default="",
        metadata={
            "env": "MARLIN_LIBRARY",
            "flag": "--library",
            "help": "a library folder built by `index` for the Library tab (default: the example clips)",
        },
    )
    examples_dir: str = field(
        default="",
        metadata={
            "env": "MARLIN_EXAMPLES_DIR",
            "help": "folder of examples.json and its clips (default: examples/ of a source checkout)",
        },
    )
    host: str = field(
        default="127.0.0.1",
        metadata={"env": "MARLIN_HOST", "fallback_env": "GRADIO_SERVER_NAME", "help": "server address"},
    )
    port: int = field(
        default=7860,
        metadata={"env": "MARLIN_PORT", "fallback_env": "GRADIO_SERVER_PORT", "help": "server port"},
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "env": "MARLIN_TRUST_REMOTE_CODE",
            "commands": ("bench", "batch"),
            "help": "run the checkpoint's own code (needs a pinned 40-hex revision)",
        },
    )

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

    def with_(self, **changes: Any) -> Settings:
        """A copy with some values changed (tests and the CLI use it)."""
        return replace(self, **changes)


def _convert(kind: str, raw: str) -> object:
    """``kind`` is the field's annotation, a string under ``from __future__ import annotations``."""
    if kind == "bool":
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    return raw


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``MARLIN_*`` variables (then Gradio's ``GRADIO_SERVER_*``), defaults elsewhere."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    if env.get("SPACE_ID"):  # a Hugging Face Space: what a visitor's GPU slot can afford
        values.update(SPACE_DEFAULTS)
    for f in fields(Settings):
        names = [f.metadata["env"], f.metadata.get("fallback_env")]
        name = next((n for n in names if n and env.get(n, "") != ""), None)
        if name is not None:
            try:
                values[f.name] = _convert(str(f.type), env[name])
            except ValueError as exc:
                raise ValueError(f"{name}={env[name]!r} is not a valid {f.type}") from exc
    return Settings(**values)


#: MARLIN_* variables that are not ``Settings`` fields: process-wide knobs read where no Settings is at
#: hand (the fast decoder's thread count, how the page caches its examples). Read with ``env_value``.
PROCESS_ENV = {"decode_threads": "MARLIN_DECODE_THREADS", "cache_examples": "MARLIN_CACHE_EXAMPLES"}


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The raw, stripped value ('' when unset) of a setting's variable (``MARLIN_*``, then its fallback)
    or of a ``PROCESS_ENV`` knob: the one way code outside this module reads a ``MARLIN_*`` variable.

    For code that runs without a ``Settings`` (the tiny checkpoint's cache, GPTQModel's build folder).
    """
    env = os.environ if environ is None else environ
    if name in PROCESS_ENV:
        return env.get(PROCESS_ENV[name], "").strip()
    meta = next((f.metadata for f in fields(Settings) if f.name == name), None)
    if meta is None:
        raise ValueError(f"unknown setting {name!r}")
    for var in (meta["env"], meta.get("fallback_env")):
        if var and env.get(var, "").strip():
            return env[var].strip()
    return ""


def env_name(name: str) -> str:
    """The ``MARLIN_*`` variable of a setting (named in messages that tell what to change)."""
    return next(str(f.metadata["env"]) for f in fields(Settings) if f.name == name)


def flags_for(command: Command) -> tuple[str, ...]:
    """The settings ``command`` takes as flags (field order), from each field's ``commands`` metadata."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}: choose from {', '.join(COMMANDS)}")
    return tuple(f.name for f in fields(Settings) if command in f.metadata.get("commands", ()))


def flag_of(name: str) -> str:
    """A setting's flag: ``--max-upload-mb`` for ``max_upload_mb`` unless its ``flag`` metadata names one."""
    meta = next(f.metadata for f in fields(Settings) if f.name == name)
    return str(meta.get("flag") or "--" + name.replace("_", "-"))


def add_arguments(
    parser: argparse.ArgumentParser, only: tuple[str, ...] | None = None, command: Command | None = None
) -> None:
    """One ``--flag`` per setting (``--model``, ``--max-upload-mb``...), defaulting to the environment.

    ``command``: only the settings that command takes (``flags_for``); ``only``: these names.
    """
    if command is not None:
        only = flags_for(command)
    for f in fields(Settings):
        if only is not None and f.name not in only:
            continue
        flag = flag_of(f.name)
        kind = str(f.type)  # already a string: annotations are postponed
        if kind == "bool":
            parser.add_argument(
                flag,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f.metadata["help"],
            )
        else:
            conv = {"int": int, "float": float}.get(kind, str)
            envs = " or ".join(f"${n}" for n in (f.metadata["env"], f.metadata.get("fallback_env")) if n)
            parser.add_argument(
                flag, dest=f.name, type=conv, default=None, help=f"{f.metadata['help']} ({envs})"
            )


def from_args(args: argparse.Namespace, base: Settings | None = None) -> Settings:
    """Environment first, then any flag given on the command line."""
    settings = base or from_env()
    given = {
        f.name: getattr(args, f.name) for f in fields(Settings) if getattr(args, f.name, None) is not None
    }
    return replace(settings, **given)


def settings_table() -> list[tuple[str, str, str, str]]:
    """(env var, flag, default, help) rows: docs/CONFIGURATION.md's table is checked against them."""
    return [
        (f.metadata["env"], flag_of(f.name), repr(f.default), f.metadata["help"]) for f in fields(Settings)
    ]
