"""``python -m convres``: see :mod:`convres.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
