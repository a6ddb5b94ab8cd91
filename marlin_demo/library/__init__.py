"""``index`` and ``search``: a folder of videos captioned once into a searchable library (docs/LIBRARY.md).

Its own layer, below the commands and the UI (which may use it) and above the service (the one request
path it runs every model call through). INPUT collection and the Ray pool live here too (``collection``,
``cluster``), so ``batch`` reads INPUT and runs Ray the same way.
"""

from marlin_demo.library.cli import register

__all__ = ["register"]
