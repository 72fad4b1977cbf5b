"""``python -m sdr_core`` is the ``sdr`` command."""

import sys

from .cli import main

sys.exit(main())
