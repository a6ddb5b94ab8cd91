"""``python -m marlin_demo``: see :mod:`marlin_demo.cli`."""

import sys

from marlin_demo.cli import main

sys.exit(main())
