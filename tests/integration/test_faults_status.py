"""The exit-time save says how the run ended: an uncaught exception in the loop body, Ctrl-C
in the loop body, or SIGTERM with the program's own handler is never reported ``complete``."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from pipecheck.report import load

SCRIPT = """
import os, signal, sys, time
from torch.utils.data import DataLoader
import pipecheck

path, mode = sys.argv[1], sys.argv[2]
if mode == "sigterm-handler":
    def on_term(signum, frame):  # the program's own handler: checkpoint, then exit cleanly
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
loader = pipecheck.wrap(DataLoader(list(range(64)), batch_size=4), save=path, host=False)
for i, batch in enumerate(loader):
    if i == 3:
        if mode == "raise":
            raise RuntimeError("the training step failed")
        if mode == "ctrl-c":
            raise KeyboardInterrupt
        if mode == "sigterm-handler":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
"""


@pytest.mark.parametrize("mode, status, error", [
    pytest.param("raise", "error", "RuntimeError: the training step failed",
                 marks=pytest.mark.slow),
    pytest.param("ctrl-c", "interrupted", None, marks=pytest.mark.slow),
    pytest.param("sigterm-handler", "terminated", None, marks=pytest.mark.slow),
])
def test_the_saved_status_says_how_the_run_ended(tmp_path, mode, status, error):
    path = tmp_path / "run.json"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path), mode],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != -signal.SIGTERM, done.stderr
    report = load(path)
    assert report.consumer.status == status
    assert report.consumer.error == error
    assert report.consumer.batches == 4


@pytest.mark.slow  # the default run stays under 5 minutes
def test_a_run_that_ends_normally_is_complete(tmp_path):
    path = tmp_path / "run.json"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path), "normal"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert load(path).consumer.status == "complete"
