"""``pipecheck.wrap(loader, save=PATH)``: the report is written when the process exits, and on
SIGTERM (how torchrun stops the surviving ranks), in real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pipecheck.report import load

SCRIPT = """
import sys, time
import torch
from torch.utils.data import DataLoader
import pipecheck

path, mode = sys.argv[1], sys.argv[2]
loader = pipecheck.wrap(DataLoader(list(range(64)), batch_size=4), save=path, host=False)
for i, batch in enumerate(loader):
    if mode == "sigterm" and i == 5:
        print("ready", flush=True)
        time.sleep(60)  # killed here
    if mode == "raise" and i == 3:
        raise RuntimeError("the training step failed")
"""


def _start(tmp_path, mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "run.json"), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_report_is_saved_at_normal_exit(tmp_path):
    child = _start(tmp_path, "normal")
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert load(tmp_path / "run.json").consumer.batches == 16


@pytest.mark.slow
def test_report_is_saved_when_the_program_raises(tmp_path):
    child = _start(tmp_path, "raise")
    _, err = child.communicate(timeout=60)
    assert child.returncode == 1 and "the training step failed" in err
    assert load(tmp_path / "run.json").consumer.batches == 4


@pytest.mark.slow
def test_report_is_saved_on_sigterm_and_the_process_still_terminates(tmp_path):
    child = _start(tmp_path, "sigterm")
    assert child.stdout.readline().strip() == "ready"
    started = time.monotonic()
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGTERM  # the default action, re-raised after saving
    assert time.monotonic() - started < 20  # not left running until its sleep ends
    assert load(tmp_path / "run.json").consumer.batches == 6
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
