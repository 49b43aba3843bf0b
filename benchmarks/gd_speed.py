"""Time a sweep of gradient-descent runs: a plain PyTorch loop against convres's batched engine.

A thin wrapper around :mod:`convres.bench` (the same as ``python -m convres bench``)::

    python benchmarks/gd_speed.py                  # full profile, plain-text report
    python benchmarks/gd_speed.py --json           # one JSON object
    python benchmarks/gd_speed.py --profile book   # the size the book's Performance chapter uses

The result is also cached, so the chapter *Performance* shows it without re-running it.
"""

import sys

from convres.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
