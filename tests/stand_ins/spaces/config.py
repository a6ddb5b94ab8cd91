"""``spaces.config`` as the app reads it: ``Config.zero_gpu`` from SPACES_ZERO_GPU."""

from __future__ import annotations

import os


class Config:
    zero_gpu = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")
