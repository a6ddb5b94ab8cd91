"""``python -m marlin_demo batch``: caption or search a whole collection, locally or on Ray Data."""

from marlin_demo.batch.cli import register

__all__ = ["register"]
