"""``python -m diagnostics``: see ``diagnostics.cli``."""

import signal
import sys


class Terminated(BaseException):
    """SIGTERM (``kill``, ``timeout``, ``docker stop``) as an exception, so that the way out removes what the run
    made: its default ended the process at once and left the unpacked upload in the temporary folder."""


def _terminate(signum, frame):
    raise Terminated


signal.signal(signal.SIGTERM, _terminate)
try:
    from diagnostics.cli import main

    status = main()
except KeyboardInterrupt:  # Ctrl-C before main() catches it (torch and transformers take seconds to import)
    print("error: interrupted", file=sys.stderr)
    status = 130
except Terminated:
    print("error: terminated", file=sys.stderr)
    status = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM ended
sys.exit(status)
