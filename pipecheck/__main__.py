"""``python -m pipecheck``: the same command line as the ``pipecheck`` script."""

import sys

from pipecheck.cli import main

if __name__ == "__main__":
    sys.exit(main())
