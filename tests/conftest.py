"""Fixtures shared by the CLI test modules."""

from __future__ import annotations

import pytest

from report_factory import sample_report


@pytest.fixture
def saved(tmp_path):
    """A sample report saved as ``run.json`` in a fresh folder; its path."""
    return sample_report().save(tmp_path / "run.json")
