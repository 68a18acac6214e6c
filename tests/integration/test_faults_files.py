"""Fault injection: pipecheck's files in ``/dev/shm`` and the temp dir never outlive their run
(SIGTERM removes them, a SIGKILLed run's are swept by the next run) and a live run's files are
never swept by another, even one in another PID namespace.

The process cases run in a private mount namespace with a fresh ``/dev/shm`` and their own
TMPDIR, so other runs on the machine neither disturb nor are disturbed by them; skipped where
``unshare -m`` is not permitted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from paths import STRESS_TARGETS
from pipecheck import _owned
from pipecheck.probes import _ring, stacks, stages

# Without memfd_create, so that worker timing takes its named-file fallback: the one way it
# can leave a file behind (a memfd ring has no name and goes with its last descriptor). The
# tmpfs below is 256 MiB so that the file keeps _ring.SHM_HEADROOM_BYTES free beside it.
TRAIN = """
import os, sys, time
del os.memfd_create
import torch
from torch.utils.data import DataLoader
import pipecheck

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 100000
    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.full((4,), float(i))

loader = pipecheck.wrap(DataLoader(Slow(), batch_size=4, num_workers=2), save=sys.argv[1],
                        stacks=True, host=False)
for i, batch in enumerate(loader):
    if i == 5:
        print("ready", flush=True)
    if sys.argv[2] == "short" and i == 20:
        break
"""

DRIVER = """
import json, os, signal, subprocess, sys, time

script, folder = sys.argv[1], sys.argv[2]
os.environ["TMPDIR"] = tmp = os.path.join(folder, "tmp")
os.makedirs(tmp)

def ours():
    return sorted(n for d in ("/dev/shm", tmp) for n in os.listdir(d) if "pipecheck" in n)

def run(how):
    child = subprocess.Popen([sys.executable, script, os.path.join(folder, how + ".json"),
                              "long" if how != "next" else "short"],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    if how == "next":
        child.wait(120)
        return []
    assert child.stdout.readline().strip() == "ready"
    during = ours()
    child.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
    child.wait(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # its DataLoader workers notice and exit
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    return during

out = {"during_term": run("term"), "after_term": ours()}
out["during_kill"] = run("kill")
out["after_kill"] = ours()
run("next")
out["after_next"] = ours()
print(json.dumps(out))
"""


def _namespace_usable() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _namespace_usable(), reason="needs unshare -m and mount (root)")
def test_no_leftovers_after_sigterm_and_sigkill_leftovers_are_swept_by_the_next_run(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    command = (f"mount -t tmpfs -o size=256m tmpfs /dev/shm && exec {sys.executable} "
               f"{tmp_path / 'driver.py'} {tmp_path / 'train.py'} {tmp_path}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True,
                          text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # While running: the worker timing file, the stages folder and py-spy's folder.
    for during in (out["during_term"], out["during_kill"]):
        assert any(n.startswith(_ring.AREA_PREFIX) for n in during), during
        assert any(n.startswith(stages.FOLDER_PREFIX) for n in during), during
        assert any(n.startswith(stacks.DIR_PREFIX) for n in during), during
    assert out["after_term"] == []
    assert out["after_kill"]  # SIGKILL runs no code ...
    assert out["after_next"] == []  # ... the next run sweeps what it left


def test_a_live_file_whose_owner_pid_looks_dead_is_not_swept(tmp_path):
    # A run in another PID namespace sharing /dev/shm: its pid means nothing here (here it
    # names no process), but it holds its file's lock, so the file is live.
    dead = subprocess.Popen(["true"])
    dead.wait()
    fd, live = _owned.create_file(str(tmp_path), f"{_ring.AREA_PREFIX}{dead.pid}-", ".bin")
    try:
        assert _ring.remove_stale_areas(str(tmp_path)) == []
        assert os.path.exists(live)
    finally:
        _owned.remove(fd, live)
    assert not os.path.exists(live)


def test_a_live_file_of_a_process_in_another_pid_namespace_is_not_swept(tmp_path):
    if not _namespace_usable():
        pytest.skip("needs unshare (root)")
    # Without memfd_create, so that the probe makes a named file (with it there is no file).
    script = ("import os, sys, time\n"
              "del os.memfd_create\n"
              "from pipecheck.probes.workers import WorkerProbe\n"
              "probe = WorkerProbe(2, run_start=0.0)\n"
              "print(probe.path, flush=True)\n"
              "time.sleep(60)\n")
    child = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
                              "sh", "-c", f"exec {sys.executable} -c '{script}'"],
                             stdout=subprocess.PIPE, text=True)
    try:
        path = child.stdout.readline().strip()
        assert os.path.exists(path)
        assert path not in _ring.remove_stale_areas(os.path.dirname(path))
        assert os.path.exists(path)
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
@pytest.mark.skipif(not _namespace_usable(), reason="needs unshare -m and mount (root)")
def test_no_leftovers_after_a_timed_out_stress_trial(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    target = f"{STRESS_TARGETS}:hangs_with_one_worker"
    listing = ("import os; print(sorted(n for d in ('/dev/shm', os.environ['TMPDIR']) "
               "for n in os.listdir(d)))")
    command = (f"mount -t tmpfs -o size=64m tmpfs /dev/shm && {sys.executable} -m pipecheck "
               f"stress {target} --workers 0,1 --timeout 3 --batches 5 --quiet "
               f"--json {tmp_path / 'run.json'} && exec {sys.executable} -c \"{listing}\"")
    env = dict(os.environ, TMPDIR=str(tmp))
    done = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = json.loads((tmp_path / "run.json").read_text())["stress"]["trials"]
    assert trials[1]["error"].startswith("timed out")  # the trial was killed by the watchdog
    assert done.stdout.strip().splitlines()[-1] == "[]"
