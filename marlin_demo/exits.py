"""The exit codes of every command (``caption``, ``find``, ``bench``, ``quantize``, ``batch``, ``tiny``).

Scripts tell a mistake in their input from a failure of the machine by them; the README
lists them.
"""

from __future__ import annotations

EXIT_OK = 0
#: a model could not be loaded, or the work itself failed (quantize, a batch that could not run)
EXIT_FAILED = 1
#: bad input: one ``error:`` line on stderr says what is wrong and what is allowed
EXIT_BAD_INPUT = 2
#: stopped with Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED = 130
