"""``python -m experiments``: the sweep's command line (``python -m experiments.sweep``)."""

import sys

from .sweep import main

sys.exit(main())
