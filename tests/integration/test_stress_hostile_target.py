"""Stress targets that hang, exit or crash while being imported or called: pipecheck checks
them in a child process under --timeout and says in one line what happened (exit 2), instead
of hanging or dying with them. Real ``pipecheck stress`` subprocesses, each bounded in time."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

LIMIT_S = 120
"""Seconds any one pipecheck run may take here (start-up of two interpreters importing torch on
a loaded 2-core machine, plus the 3 s timeout), far below a hang."""

TARGETS = {
    "hangs_in_call": "import time\ndef make(**kwargs):\n    time.sleep(3600)\n",
    "hangs_on_import": "import time\ntime.sleep(3600)\ndef make(**kwargs):\n    pass\n",
    "exits": "import os\ndef make(**kwargs):\n    os._exit(7)\n",
    "kills_itself": ("import os, signal\ndef make(**kwargs):\n"
                     "    os.kill(os.getpid(), signal.SIGKILL)\n"),
    "segfaults": "import ctypes\ndef make(**kwargs):\n    ctypes.string_at(0)\n",
}


def _stress(tmp_path, name: str, *options: str) -> tuple[subprocess.CompletedProcess, float]:
    path = tmp_path / f"{name}.py"
    path.write_text(TARGETS.get(name) or _LOADERS[name])
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipecheck", "stress", f"{path}:make", "--workers", "0",
         "--timeout", "3", "--batches", "3", "--quiet", *options],
        capture_output=True, text=True, timeout=LIMIT_S)
    return done, time.monotonic() - started


@pytest.mark.parametrize(("name", "what"), [
    pytest.param("hangs_in_call", "timed out after 3 s while importing it and calling it once",
                 marks=pytest.mark.slow),
    pytest.param("hangs_on_import", "timed out after 3 s while importing it and calling it once",
                 marks=pytest.mark.slow),
    pytest.param("exits", "exited with status 7 while importing it and calling it once",
                 marks=pytest.mark.slow),
    pytest.param("kills_itself", "killed by signal SIGKILL while importing it and calling it once",
                 marks=pytest.mark.slow),
    pytest.param("segfaults", "killed by signal SIGSEGV", marks=pytest.mark.slow),
])
def test_a_target_that_hangs_or_dies_is_exit_2_with_one_line(tmp_path, name, what):
    done, _ = _stress(tmp_path, name)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"pipecheck: error: target {tmp_path / name}.py:make")
    assert what in lines[0]


_LOADERS = {
    "segfaults_in_trial": textwrap.dedent("""
        import ctypes
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Crash(Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, index):
                ctypes.string_at(0)

        def make(num_workers=0, **kwargs):
            return DataLoader(Crash(), batch_size=2, num_workers=num_workers, **kwargs)
        """),
}


@pytest.mark.slow
def test_a_trial_killed_by_a_signal_names_the_signal_not_a_warning(tmp_path):
    done, _ = _stress(tmp_path, "segfaults_in_trial")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "num_workers=0" in line and "trial process killed by signal SIGSEGV" in line
    assert "Warning" not in line
