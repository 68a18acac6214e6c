"""Fault injection: a small or nearly full ``/dev/shm`` must never take the training run down.

Each case runs a real wrapped training loop (0 and 2 fork workers) in a child process inside a
private mount namespace whose ``/dev/shm`` is a 64 MiB tmpfs (``unshare -m``; Docker's default
size), empty or filled to a few pages. Skipped where unshare or mounting is not permitted
(non-root, no namespaces).

pipecheck's own shared memory is an anonymous memory file (``memfd_create``): it takes nothing
from ``/dev/shm``, so a loader that trains unwrapped in what is left trains wrapped, with its
workers timed. Without ``memfd_create`` pipecheck falls back to a file in ``/dev/shm`` only with
ample room left beside it, and otherwise turns worker timing off with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from pipecheck.report import load

SHM_SIZE = "64m"

TRAIN = """
import json, os, sys
from torch.utils.data import DataLoader
import pipecheck

workers, path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
fill_mid_run = mode == "fill"
if mode == "no-memfd":  # a kernel or platform without memfd_create
    del os.memfd_create
data = list(range(2000))
if mode == "fill":
    # collate_fn=list: batches travel through the workers' pipes, so torch itself needs no
    # /dev/shm beyond its queue semaphores, and the unwrapped loader trains even when full.
    make = lambda: DataLoader(data, batch_size=4, num_workers=workers, collate_fn=list)
else:  # tensor batches: worker processes hand them over through /dev/shm
    make = lambda: DataLoader(data, batch_size=4, num_workers=workers)
plain = sum(1 for _ in make())
loader = pipecheck.wrap(make(), host=False)
batches = 0
for batch in loader:
    batches += 1
    if batches == 1 and fill_mid_run:  # fill /dev/shm to the last byte while training
        filler = os.open("/dev/shm/filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(filler, b"x" * 4096)
        except OSError:
            os.close(filler)
report = loader.report()
loader.close()
report.save(path)
print(json.dumps({"plain": plain, "batches": batches}))
"""


def _namespace_usable() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c",
                            f"mount -t tmpfs -o size={SHM_SIZE} tmpfs /dev/shm"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _namespace_usable(),
                                reason="needs unshare -m and mount (root in a mount namespace)")


def _run_in_small_shm(tmp_path, workers: int, leave_free_kib: int | None,
                      mode: str = "no-fill") -> dict:
    """Run TRAIN with ``/dev/shm`` a fresh 64 MiB tmpfs; ``leave_free_kib``: fill it first
    until that many KiB are free (``None``: leave it empty); ``mode`` ``fill``: the script
    fills it completely after its first wrapped batch; ``no-memfd``: the script runs without
    ``os.memfd_create``."""
    fill = ""
    if leave_free_kib is not None:
        fill = (f"free=$(df -k --output=avail /dev/shm | tail -1); "
                f"dd if=/dev/zero of=/dev/shm/filler bs=1k count=$((free - {leave_free_kib})) "
                f"status=none; ")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    report_path = tmp_path / "run.json"
    command = (f"mount -t tmpfs -o size={SHM_SIZE} tmpfs /dev/shm && {fill}"
               f"exec {sys.executable} {script} {workers} {report_path} {mode}")
    child = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    out["report"] = load(report_path)
    return out


BATCHES = 500


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_1mib_shm_filled_during_training_ends_normally_with_every_batch_timed(tmp_path,
                                                                                workers):
    # The worker timing file was reserved when wrap() made it, so filling /dev/shm later
    # cannot fault its pages (before: SIGBUS in add_batch once a record crossed into a page
    # never touched).
    out = _run_in_small_shm(tmp_path, workers, None, mode="fill")
    assert out["plain"] == out["batches"] == BATCHES
    report = out["report"]
    assert report.consumer.batches == BATCHES
    assert report.producer.probe == ("workers" if workers else "main-process")
    assert sum(w.batches for w in report.producer.workers) == BATCHES


@pytest.mark.parametrize("workers", [pytest.param(0, marks=pytest.mark.slow), 2])
def test_a_nearly_full_shm_trains_wrapped_as_unwrapped_with_workers_timed(tmp_path, workers):
    # 128 KiB free of 64 MiB: the unwrapped loader trains (its queues and its batches' shared
    # tensors fit), so the wrapped one must too; pipecheck's memory is not in /dev/shm.
    out = _run_in_small_shm(tmp_path, workers, leave_free_kib=128)
    assert out["plain"] == out["batches"] == BATCHES
    report = out["report"]
    assert report.consumer.batches == BATCHES
    assert report.producer.probe == ("workers" if workers else "main-process")
    assert not [f for f in report.diagnosis.findings if f.kind == "probe-off"]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_without_memfd_a_nearly_full_shm_turns_the_worker_probe_off_with_a_finding(tmp_path,
                                                                                  workers):
    out = _run_in_small_shm(tmp_path, workers, leave_free_kib=128, mode="no-memfd")
    assert out["plain"] == out["batches"] == BATCHES
    report = out["report"]
    assert report.consumer.batches == BATCHES
    assert report.producer.probe == "none"
    notes = [f for f in report.diagnosis.findings if f.kind == "probe-off"]
    assert notes, [f.kind for f in report.diagnosis.findings]
    message = notes[0].message
    assert message.startswith("worker timing off: /dev/shm has ") and "free" in message
    assert "leaves it to the DataLoader" in message
    assert "worker timing off" in report.producer.capacity_basis
