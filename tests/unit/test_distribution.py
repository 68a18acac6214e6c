"""The distribution is ``torch-pipecheck`` (PyPI's ``pipecheck`` is another project); the import
name and the version pipecheck reports stay its own, whatever else is installed."""

from __future__ import annotations

import importlib.metadata

import pipecheck
from pipecheck import environment
from pipecheck._version import __version__


def test_reported_version_is_this_packages_own(monkeypatch):
    """With PyPI's ``pipecheck`` 0.4.2 installed beside it, the report still carries this
    package's version (it read ``importlib.metadata.version("pipecheck")``)."""
    real = importlib.metadata.version

    def other_project(name: str) -> str:
        return "0.4.2" if name == "pipecheck" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", other_project)
    assert environment._pipecheck_version() == __version__ == pipecheck.__version__
