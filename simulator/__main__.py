"""``python -m simulator``: the ``ctxsim`` command line (:mod:`simulator.cli`)."""

import sys

from simulator.cli import main

if __name__ == "__main__":
    sys.exit(main())
