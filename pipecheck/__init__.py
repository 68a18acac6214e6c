"""pipecheck: is your PyTorch input pipeline holding training back, why, and what to change.

Public API::

    loader = pipecheck.wrap(loader)      # measure inside the real training loop
    report = loader.report()             # pipecheck.Report: print it, save it
    report = pipecheck.load("run.json")  # read a saved report back
    report = pipecheck.stress("data.py:make_loader", workers=[0, 2, 4])  # offline sweep
    section = pipecheck.shards("train-{000..127}.tar", num_workers=8)  # shard dry run

``import pipecheck`` needs neither py-spy, a GPU, NVML nor any training framework.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import BadInputError, CheckFailed, PipecheckError, ReportFormatError
from .probes.stages import stage
from .report import SCHEMA, Report, load
from .shards import shards
from .stress import stress
from .wrap import WrappedLoader, wrap

__all__ = [
    "SCHEMA",
    "BadInputError",
    "CheckFailed",
    "PipecheckError",
    "Report",
    "ReportFormatError",
    "WrappedLoader",
    "__version__",
    "load",
    "shards",
    "stage",
    "stress",
    "wrap",
]
