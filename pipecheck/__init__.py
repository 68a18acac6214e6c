"""pipecheck: is your PyTorch input pipeline holding training back, why, and what to change.

Public API::

    loader = pipecheck.wrap(loader)      # measure inside the real training loop
    report = loader.report()             # pipecheck.Report: print it, save it
    report = pipecheck.load("run.json")  # read a saved report back
    report = pipecheck.stress("data.py:make_loader", num_workers=[0, 2, 4])  # offline sweep
    section = pipecheck.shards("train-{000..127}.tar", num_workers=8)  # shard dry run

``import pipecheck`` needs neither py-spy, a GPU, NVML nor any training framework.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from pipecheck._version import __version__
from pipecheck.errors import BadInputError, CheckFailed, PipecheckError, ReportFormatError

if TYPE_CHECKING:
    from pipecheck.probes.stages import stage
    from pipecheck.report import SCHEMA, Report, load
    from pipecheck.shards import shards
    from pipecheck.stress import stress
    from pipecheck.wrap import WrappedLoader, wrap

_LAZY = {
    "SCHEMA": "pipecheck.report",
    "Report": "pipecheck.report",
    "load": "pipecheck.report",
    "WrappedLoader": "pipecheck.wrap",
    "wrap": "pipecheck.wrap",
    "shards": "pipecheck.shards",
    "stage": "pipecheck.probes.stages",
    "stress": "pipecheck.stress",
}
"""Public names imported on first use (PEP 562), so that reading a saved report
(``pipecheck.load``, ``pipecheck report``, ``pipecheck check``) does not import torch."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pipecheck' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """``pipecheck.shards``, ``pipecheck.stress`` and ``pipecheck.wrap`` are functions named
    like the submodules that define them. Importing a submodule sets the package's attribute of
    that name to the module; this ignores that, so the attribute stays the public function
    whichever is imported first."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("shards", "stress", "wrap") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
