"""Ctrl-C in the middle of `pipecheck demo` still leaves the report of the steps run so far."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def _ctrl_c_as_in_a_terminal() -> None:
    # A test run started in the background by a non-interactive shell (a CI runner, nohup)
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler in the
    # child: give it the default disposition a terminal's Ctrl-C finds.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_mid_demo_saves_and_prints_the_partial_report(tmp_path):
    out = tmp_path / "partial.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipecheck", "demo", "--data", str(tmp_path / "data"),
         "--images", "64", "--steps", "100000", "--batch-size", "8", "--json", str(out),
         "--width", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=_ctrl_c_as_in_a_terminal)
    try:
        # The demo announces its data before training starts; give it a few steps after that
        # (6 s: on a 2-core machine running two other busy processes 3 s was not always enough
        # for the first batch).
        deadline = time.monotonic() + 120
        line = ""
        while "demo data:" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "demo exited before training"
        time.sleep(6.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    saved = json.loads(out.read_text())
    assert saved["consumer"]["batches"] > 0
    assert saved["consumer"]["status"] == "interrupted"
    assert stdout.splitlines()[0].split(":")[0] in ("INPUT-BOUND", "COMPUTE-BOUND", "BALANCED")
