"""Fault injection: a small or nearly full ``/dev/shm`` must never take the training run down.

Each case runs a real wrapped training loop (0 and 2 fork workers) in a child process inside a
private mount namespace whose ``/dev/shm`` is a 1 MiB tmpfs (``unshare -m``), empty or filled
to a few pages. Skipped where unshare or mounting is not permitted (non-root, no namespaces).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from pipecheck.probes._ring import AreaLayout
from pipecheck.report import load

SHM_SIZE = "1m"

TRAIN = """
import json, os, sys
from torch.utils.data import DataLoader
import pipecheck

workers, path, fill_mid_run = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "fill"
data = list(range(2000))
# collate_fn=list: batches travel through the workers' pipes, so torch itself needs no
# /dev/shm beyond its queue semaphores, and the unwrapped loader trains even when it is full.
make = lambda: DataLoader(data, batch_size=4, num_workers=workers, collate_fn=list)
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
                      fill_mid_run: bool = False) -> dict:
    """Run TRAIN with ``/dev/shm`` a fresh 1 MiB tmpfs; ``leave_free_kib``: fill it first
    until that many KiB are free (``None``: leave it empty); ``fill_mid_run``: the script
    fills it completely after its first wrapped batch."""
    fill = ""
    if leave_free_kib is not None:
        fill = (f"free=$(df -k --output=avail /dev/shm | tail -1); "
                f"dd if=/dev/zero of=/dev/shm/filler bs=1k count=$((free - {leave_free_kib})) "
                f"status=none; ")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    report_path = tmp_path / "run.json"
    command = (f"mount -t tmpfs -o size={SHM_SIZE} tmpfs /dev/shm && {fill}"
               f"exec {sys.executable} {script} {workers} {report_path} "
               f"{'fill' if fill_mid_run else 'no-fill'}")
    child = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    out["report"] = load(report_path)
    return out


BATCHES = 500


@pytest.mark.parametrize("workers", [0, 2])
def test_a_1mib_shm_filled_during_training_ends_normally_with_every_batch_timed(tmp_path,
                                                                                workers):
    # The worker timing file was reserved when wrap() made it, so filling /dev/shm later
    # cannot fault its pages (before: SIGBUS in add_batch once a record crossed into a page
    # never touched).
    out = _run_in_small_shm(tmp_path, workers, None, fill_mid_run=True)
    assert out["plain"] == out["batches"] == BATCHES
    report = out["report"]
    assert report.consumer.batches == BATCHES
    assert report.producer.probe == ("workers" if workers else "main-process")
    assert sum(w.batches for w in report.producer.workers) == BATCHES


@pytest.mark.parametrize("workers", [0, 2])
def test_nearly_full_shm_turns_the_worker_probe_off_with_a_finding(tmp_path, workers):
    # Less free than the worker timing file needs, enough for torch's own semaphores and
    # batches: the unwrapped loader trains in this /dev/shm, so the wrapped one must too.
    ring_kib = AreaLayout(num_slots=max(1, workers), ring_size=1024).size_bytes // 1024
    out = _run_in_small_shm(tmp_path, workers, leave_free_kib=ring_kib - 16)
    assert out["plain"] == out["batches"] == BATCHES
    report = out["report"]
    assert report.consumer.batches == BATCHES
    assert report.producer.probe == "none"
    notes = [f for f in report.diagnosis.findings if f.kind == "probe-off"]
    assert notes, [f.kind for f in report.diagnosis.findings]
    message = notes[0].message
    assert message.startswith("worker timing off: /dev/shm has ") and "free, needs" in message
    assert "worker timing off" in report.producer.capacity_basis
