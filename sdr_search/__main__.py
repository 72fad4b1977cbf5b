"""``python -m sdr_search`` is the ``sdr`` command."""

import sys

from .cli import main

sys.exit(main())
