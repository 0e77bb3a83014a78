"""``python -m convwgrad``: the ``convwgrad`` command (see convwgrad.cli)."""

import sys

from .cli import main

sys.exit(main())
