"""Fault injection: SIGTERM at any moment of a wrapped training run (with workers) must end the
process promptly with a valid report, whatever lock the interrupted frame held."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pytest

from pipecheck.report import load

EXIT_WITHIN_S = 15.0

TRAIN = """
import sys, time
import torch
from torch.utils.data import DataLoader
import pipecheck

path, hold = sys.argv[1], sys.argv[2]

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 100000
    def __getitem__(self, i):
        time.sleep(0.0005)
        return torch.full((8,), float(i))

loader = pipecheck.wrap(DataLoader(Slow(), batch_size=8, num_workers=2), save=path,
                        host_interval_s=0.05)
for i, batch in enumerate(loader):
    if i == 3:
        print("ready", flush=True)
    if hold != "none" and i == 3:
        # The frame SIGTERM interrupts holds a probe's lock (as inside report() or a fold).
        probes = loader._measurement
        lock = probes._workers._lock if hold == "workers" else probes._consumer._lock
        with lock:
            time.sleep(120)
    if i % 7 == 0:
        loader.report()  # takes every probe's lock now and then, as users do
    time.sleep(0.002)
"""


def _start(tmp_path, hold: str, name: str = "run.json") -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    # stderr to a file: the DataLoader workers outlive the killed process by up to torch's 5 s
    # parent check, holding a pipe open; the test times the training process itself.
    with open(tmp_path / f"{name}.err", "w") as err:
        return subprocess.Popen([sys.executable, str(script), str(tmp_path / name), hold],
                                stdout=subprocess.PIPE, stderr=err, text=True)


def _terminate_and_check(child: subprocess.Popen, path) -> float:
    """SIGTERM ``child``; return the seconds it took to exit, after checking the report."""
    started = time.monotonic()
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=EXIT_WITHIN_S + 5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        pytest.fail(f"still running {EXIT_WITHIN_S + 5:.0f} s after SIGTERM")
    took = time.monotonic() - started
    child.stdout.close()
    assert child.returncode == -signal.SIGTERM, (path.parent / f"{path.name}.err").read_text()
    assert took < EXIT_WITHIN_S
    report = load(path)
    assert report.consumer.batches >= 1
    return took


@pytest.mark.parametrize("hold", [pytest.param("workers", marks=pytest.mark.slow), "consumer"])
def test_sigterm_while_the_interrupted_frame_holds_a_probe_lock(tmp_path, hold):
    child = _start(tmp_path, hold)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # inside the held lock now
    _terminate_and_check(child, tmp_path / "run.json")
    assert load(tmp_path / "run.json").producer.probe == "workers"


@pytest.mark.slow
def test_twenty_sigterms_at_random_moments_all_end_with_a_valid_report(tmp_path):
    rng = random.Random(12)
    for pair in range(10):  # two at a time: the machine has two cores
        children = [(_start(tmp_path, "none", f"run{pair}-{k}.json"), f"run{pair}-{k}.json")
                    for k in range(2)]
        for child, name in children:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.6))
            _terminate_and_check(child, tmp_path / name)
