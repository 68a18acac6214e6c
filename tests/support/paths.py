"""Where the test suite's files lie: the repository root and this support folder (on
``sys.path`` through pytest's ``pythonpath`` setting; subprocesses need it on ``PYTHONPATH``)."""

from __future__ import annotations

import pathlib

SUPPORT = pathlib.Path(__file__).resolve().parent
REPO_ROOT = SUPPORT.parents[1]
STRESS_TARGETS = SUPPORT / "stress_targets.py"
