"""``python -m streamk.cli ARGS``: the ``streamk`` command."""

import sys

from . import main

sys.exit(main())
