"""``python -m riskppo.cli ARGS``: the ``riskppo`` command."""

from __future__ import annotations

import sys

from riskppo.cli.main import main

sys.exit(main())
