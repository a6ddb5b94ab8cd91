"""``index`` and ``search``: a folder of videos captioned once into a searchable library (docs/LIBRARY.md).
A layer above the service; ``batch`` shares its INPUT reading (``inputs``) and Ray pool (``cluster``)."""

from marlin_demo.library.cli import register

__all__ = ["register"]
