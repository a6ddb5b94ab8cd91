"""The exit codes of every command (a mistake in the input vs a failure) and the lines all print alike."""

from __future__ import annotations

import sys

EXIT_OK = 0
#: a model could not be loaded, or the work itself failed (quantize, a batch that could not run)
EXIT_FAILED = 1
#: bad input: one ``error:`` line on stderr says what is wrong and what is allowed
EXIT_BAD_INPUT = 2
#: stopped with Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED = 130
#: printed before an answer of the tiny model (caption, find, search)
TINY_NOTE = "Note: the tiny offline stand-in has random weights: its answers are meaningless."


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Say what went wrong as the command's one ``error:`` line on stderr; returns the code to exit with."""
    print(f"error: {message}", file=sys.stderr)
    return code


#: pyproject.toml's extras: what each brings that a command imports (the Space installs none of them)
EXTRAS = {"batch": ("ray",), "bench": ("matplotlib",)}


def missing_extra(extra: str, command: str) -> str | None:
    """How to install the extra ``command`` needs (from a checkout) when it is missing, else None."""
    import importlib.util

    def absent(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except ValueError:  # in sys.modules as None: an import blocked on purpose
            return True

    missing = [m for m in EXTRAS[extra] if absent(m)]
    if not missing:
        return None
    return f"{command} needs the [{extra}] extra ({', '.join(missing)}): pip install -e '.[{extra}]'"
