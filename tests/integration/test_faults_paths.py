"""Output paths are checked before the work starts: ``wrap(save=)`` at ``wrap()`` time, and the
stress command's outputs before its sweep (which would otherwise be lost at the end)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from torch.utils.data import DataLoader

import pipecheck
from paths import STRESS_TARGETS


def test_wrap_save_into_a_missing_folder_fails_at_wrap_time(tmp_path):
    path = tmp_path / "missing" / "run.json"
    with pytest.raises(ValueError, match="cannot save the report to .*missing.*no such directory"):
        pipecheck.wrap(DataLoader(list(range(8))), save=path, host=False)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to read-only folders")
def test_wrap_save_into_a_read_only_folder_fails_at_wrap_time(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    with pytest.raises(ValueError, match="cannot create files in"):
        pipecheck.wrap(DataLoader(list(range(8))), save=folder / "run.json", host=False)


def test_wrap_save_to_a_directory_fails_at_wrap_time(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        pipecheck.wrap(DataLoader(list(range(8))), save=tmp_path, host=False)


@pytest.mark.parametrize("option", ["--json", "--html", "--trace"])
def test_stress_checks_its_outputs_before_the_sweep(tmp_path, option):
    target = f"{STRESS_TARGETS}:sleepy_loader"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipecheck", "stress", target, "--workers",
                           "0,1,2", option, str(tmp_path / "missing" / "out")],
                          capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no such directory" in done.stderr
    assert took < 20  # refused up front: no trial ran (each takes seconds)
