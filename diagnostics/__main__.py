"""``python -m diagnostics``: see ``diagnostics.cli``."""

import sys

from diagnostics.cli import main

sys.exit(main())
