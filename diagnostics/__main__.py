"""``python -m diagnostics``: see ``diagnostics.cli``."""

import sys

try:
    from diagnostics.cli import main

    status = main()
except KeyboardInterrupt:  # Ctrl-C before main() catches it (torch and transformers take seconds to import)
    print("error: interrupted", file=sys.stderr)
    status = 130
sys.exit(status)
