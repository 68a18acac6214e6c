"""Fault injection: children forked after ``wrap(save=)`` must never write their stale copy of
the report over the parent's (they inherit the SIGTERM handler and the exit-time save)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pipecheck.report import load

TRAIN = """
import atexit, multiprocessing, os, sys, time
from torch.utils.data import DataLoader
import pipecheck

path, mode = sys.argv[1], sys.argv[2]
pool = None

def stop_pool():  # the workers are busy, so terminate() stops them with SIGTERM
    for _ in range(2):
        pool.apply_async(time.sleep, (30,))
    time.sleep(0.5)
    pool.terminate()

# Registered first, so it runs after pipecheck's exit-time save: the pool's workers get
# SIGTERM after the parent's report is written.
atexit.register(lambda: pool is not None and stop_pool())
loader = pipecheck.wrap(DataLoader(list(range(64)), batch_size=4, num_workers=2), save=path,
                        host=False)
if mode == "fork":
    child = os.fork()
    if child == 0:  # a daemon child: outlives the parent, then exits normally
        time.sleep(3)
        sys.exit(0)
    print(child, flush=True)
else:
    # Pool workers are forked now; at exit they are terminated with SIGTERM.
    pool = multiprocessing.get_context("fork").Pool(2)
    print(" ".join(str(p.pid) for p in pool._pool), flush=True)
    assert pool.apply(os.getpid) != os.getpid()
for batch in loader:
    pass
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("mode", [pytest.param("fork", marks=pytest.mark.slow), pytest.param("pool", marks=pytest.mark.slow)])
def test_a_forked_child_does_not_overwrite_the_parents_report(tmp_path, mode):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    path = tmp_path / "run.json"
    child = subprocess.Popen([sys.executable, str(script), str(path), mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    forked = [int(pid) for pid in child.stdout.readline().split()]
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in forked) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in forked)
    report = load(path)
    assert report.consumer.batches == 16
    assert report.consumer.status == "complete"
