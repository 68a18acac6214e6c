"""How a measured program ends, and what its report then says: ``os._exit``, ``exec`` into
another program, SIGTERM handled by the program, SIGTERM with several loaders or a loader in a
thread, a forked child iterating its parent's loader. Real child processes, real DataLoader
workers; each checks the report and that no file of pipecheck's is left in the run's temp dir."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pipecheck.report import load

COMMON = textwrap.dedent("""
    import os, signal, sys, threading, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Squares(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            time.sleep(0.001)
            return torch.tensor([index * index])

    def loader(workers=2):
        return DataLoader(Squares(), batch_size=4, num_workers=workers)
""")


def _temp(tmp_path) -> str:
    """A short TMPDIR of the test's own: multiprocessing puts its AF_UNIX sockets under
    TMPDIR, whose paths may not pass 108 bytes, and pytest-xdist's ``tmp_path`` (pytest-NNN/
    popen-gwN/test_name_0/) leaves too little room: torch's workers then hang handing file
    descriptors over."""
    digest = hashlib.sha1(str(tmp_path).encode()).hexdigest()[:10]
    temp = os.path.join("/tmp", f"pcf-{digest}")
    os.makedirs(temp, exist_ok=True)
    return temp


def _env(tmp_path) -> dict:
    return dict(os.environ, TMPDIR=_temp(tmp_path))


def _leftovers(tmp_path) -> list[str]:
    temp = _temp(tmp_path)
    return sorted(name for name in os.listdir(temp) if name.startswith(".pipecheck")
                  or name.startswith("pipecheck-stages") or name.startswith("pipecheck-workers"))


def _script(tmp_path, body: str):
    path = tmp_path / "train.py"
    path.write_text(COMMON + textwrap.dedent(body))
    return path


def _run_measured(tmp_path, body: str, *args: str) -> subprocess.CompletedProcess:
    script = _script(tmp_path, body)
    return subprocess.run([sys.executable, "-m", "pipecheck", "run", "--json",
                           str(tmp_path / "run.json"), "--", sys.executable, str(script), *args],
                          capture_output=True, text=True, timeout=300, env=_env(tmp_path))


@pytest.mark.parametrize("ending", ["os._exit", pytest.param("execv", marks=pytest.mark.slow)])
def test_a_program_leaving_python_without_exit_hooks_still_leaves_its_report(tmp_path, ending):
    leave = ("os._exit(3)" if ending == "os._exit"
             else "os.execv('/bin/sh', ['sh', '-c', 'exit 3'])")
    done = _run_measured(tmp_path, f"""
        seen = sum(1 for _ in loader())
        sys.stdout.flush()
        {leave}
    """)
    assert done.returncode == 3, done.stderr[-2000:]
    report = load(tmp_path / "run.json")
    assert report.consumer.batches == 16 and report.consumer.status == "complete"
    assert _leftovers(tmp_path) == []


def _start(tmp_path, body: str) -> subprocess.Popen:
    script = _script(tmp_path, body)
    return subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(tmp_path))


@pytest.mark.slow
def test_sigterm_the_program_handles_is_reported_as_received_and_the_run_going_on(tmp_path):
    child = _start(tmp_path, """
        import pipecheck
        stop = []
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
        wrapped = pipecheck.wrap(loader(), save=os.path.join(sys.argv[1], "run.json"))
        for epoch in range(4):
            for i, batch in enumerate(wrapped):
                if epoch == 0 and i == 2:
                    print("ready", flush=True)
                    while not stop:
                        time.sleep(0.01)
        print("trained on", flush=True)
    """)
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0 and "trained on" in out, err[-2000:]
    report = load(tmp_path / "run.json")
    assert report.consumer.batches == 4 * 16  # three more epochs after the SIGTERM
    assert report.consumer.status == "complete"  # not "terminated": the run went on
    assert report.consumer.sigterms_continued == 1
    assert _leftovers(tmp_path) == []


@pytest.mark.slow
def test_sigterm_with_two_loaders_saves_both_and_leaves_no_files(tmp_path):
    child = _start(tmp_path, """
        import pipecheck
        first = pipecheck.wrap(loader(), save=os.path.join(sys.argv[1], "a.json"))
        second = pipecheck.wrap(loader(0), save=os.path.join(sys.argv[1], "b.json"))
        list(first)
        for i, batch in enumerate(second):
            if i == 3:
                print("ready", flush=True)
                time.sleep(60)
    """)
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM  # terminated as without pipecheck
    assert load(tmp_path / "a.json").consumer.batches == 16
    second = load(tmp_path / "b.json")
    assert second.consumer.batches == 4 and second.consumer.status == "terminated"
    assert _leftovers(tmp_path) == []


@pytest.mark.slow
def test_a_loader_first_iterated_in_a_thread_is_saved_on_sigterm_under_run(tmp_path):
    script = _script(tmp_path, """
        def train():
            for i, batch in enumerate(loader()):
                if i == 3:
                    print("ready", flush=True)
                    time.sleep(60)

        thread = threading.Thread(target=train)
        thread.start()
        thread.join()
    """)
    child = subprocess.Popen([sys.executable, "-m", "pipecheck", "run", "--json",
                              str(tmp_path / "run.json"), "--", sys.executable, str(script)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=_env(tmp_path))
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    child.send_signal(signal.SIGTERM)  # to pipecheck run, which passes it on
    child.communicate(timeout=120)
    report = load(tmp_path / "run.json")
    assert report.consumer.batches == 4 and report.consumer.status == "terminated"
    assert _leftovers(tmp_path) == []


@pytest.mark.slow
def test_a_forked_child_iterating_its_parents_loader_counts_in_its_own_report_only(tmp_path):
    child = _start(tmp_path, """
        import pipecheck
        wrapped = pipecheck.wrap(loader(), save=os.path.join(sys.argv[1], "run.json"))
        for batch in wrapped:
            pass
        pid = os.fork()
        if pid == 0:  # a forked child (an evaluation helper, a daemon) uses the loader too
            n = sum(1 for _ in wrapped)
            sys.exit(0 if n == 16 else 1)  # a normal exit: exit hooks and finalizers run
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        for batch in wrapped:
            pass
        stage_dirs = [n for n in os.listdir(os.environ["TMPDIR"])
                      if n.startswith("pipecheck-stages")]
        print("stage folders", len(stage_dirs), flush=True)
    """)
    out, err = child.communicate(timeout=180)
    assert child.returncode == 0, err[-2000:]
    assert "stage folders 1" in out  # the child's exit left the parent's folder alone
    report = load(tmp_path / "run.json")
    assert report.consumer.batches == 32  # the parent's two epochs
    # Batches produced as counted by the worker probe: the parent's only.
    assert sum(w.batches for w in report.producer.workers) == 32
    assert _leftovers(tmp_path) == []
