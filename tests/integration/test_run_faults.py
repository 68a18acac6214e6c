"""``pipecheck run`` under faults (issue 25): the program's exit code is its own whatever happens
to the reports, stdout holds one report or none of pipecheck's output, signals reach the whole
program and nothing of it is left running, a reused pid loses no report, and what a program
that ends abruptly leaves is swept and named. Real ``pipecheck run`` subprocesses of a real
training script with a real DataLoader, real signals, a real shell wrapper and a real
terminal (a pty)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

import pipecheck

# A training loop over 2 epochs of 8 batches (train loader: loader 0), each followed by 2
# validation batches of 16 samples (loader 1), then `sys.exit(N)` for a numeric mode. Other
# modes act at the second epoch's 5th training batch (13 delivered, validation 2).
TRAIN = textwrap.dedent("""
    import os, signal, sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, index):
            time.sleep(0.002)
            return torch.tensor([index])

    def main():
        workers, mode = int(sys.argv[1]), sys.argv[2]
        train = DataLoader(Slow(), batch_size=4, num_workers=workers)
        val = DataLoader(Slow(), batch_size=16)
        print("pid", os.getpid(), flush=True)
        for epoch in range(2):
            for i, batch in enumerate(train):
                if epoch == 1 and i == 4:
                    if mode == "stubborn":  # the program's own handler: goes on
                        signal.signal(signal.SIGTERM,
                                      lambda *_: print("ignoring SIGTERM", flush=True))
                    if mode in ("wait", "stubborn"):
                        print("waiting", flush=True)
                        time.sleep(120)
                    if mode == "os_exit":
                        os._exit(3)
                    if mode == "exec":
                        os.execv("/bin/sh", ["sh", "-c", "exit 4"])
            for batch in val:
                pass
        print("trained", flush=True)
        sys.exit(int(mode))

    if __name__ == "__main__":
        main()
""")

WRAPPER = textwrap.dedent("""\
    #!/bin/sh
    # A job script: the training runs as a child of the shell, not of pipecheck.
    "$PYTHON" "$(dirname "$0")/train.py" "$@"
    echo "wrapper: training ended with $?"
""")


@pytest.fixture
def program(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    wrapper = tmp_path / "train.sh"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    return tmp_path


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")


def _pipecheck(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipecheck", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def _start(*args: str, cwd: Path) -> subprocess.Popen:
    """``pipecheck ARGS`` in the background, with SIGINT's default disposition (a test run
    started in the background has SIGINT ignored, which the child would inherit)."""
    return subprocess.Popen([sys.executable, "-m", "pipecheck", *args], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _read_until(process: subprocess.Popen, marker: str, timeout: float = 240) -> list[str]:
    """Lines of ``process``'s stdout up to the one holding ``marker``."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} from the program: {lines}")


def _training_pid(lines: list[str]) -> int:
    return next(int(line.split()[1]) for line in lines if line.startswith("pid "))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "--pid", "--fork", "true"],
                          capture_output=True).returncode == 0


needs_unshare = pytest.mark.skipif(not _unshare_works(),
                                   reason="needs root and unshare (mount and PID namespaces)")


# -- quick ones, in the default run (no torch) ----------------------------------------------------


def test_stdout_report_never_mixes_with_the_programs_output(tmp_path):
    result = _pipecheck("run", "--json", "-", "--", sys.executable, "-c",
                        "print('the program speaks'); raise SystemExit(7)", cwd=tmp_path)
    assert result.returncode == 7
    assert result.stdout == ""  # no report, and the program's line went elsewhere
    assert "the program speaks" in result.stderr
    assert "no report" in result.stderr


def test_sigterm_reaches_the_training_a_shell_wrapper_started(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent("""\
        #!/bin/sh
        "$PYTHON" -c 'import os, time; print("pid", os.getpid(), flush=True); time.sleep(120)'
        echo "wrapper: training ended"
    """))
    script.chmod(0o755)
    process = _start("run", "--", str(script), cwd=tmp_path)
    try:
        training = _training_pid(_read_until(process, "pid "))
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert _gone(training)  # was: still sleeping, orphaned
    assert time.monotonic() - started < 30
    assert "SIGTERM passed on to the program" in err


def test_special_files_take_one_report_and_bad_grace_is_refused(tmp_path, capsys):
    from pipecheck.cli import main
    from pipecheck.cli.running import _takes_one_report

    fifo = tmp_path / "reports.fifo"
    os.mkfifo(fifo)
    assert [_takes_one_report(p) for p in ("-", "/dev/null", "/dev/stdout", "/dev/fd/1",
                                           "/proc/self/fd/1", str(fifo))] == [True] * 6
    assert not _takes_one_report(str(tmp_path / "run.json"))
    assert not _takes_one_report("/dev/shm/run.json")  # a folder of regular files
    for grace in ("0", "-1", "inf", "nan", "soon"):
        assert main(["run", "--grace", grace, "--", "true"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("pipecheck: error: argument --grace: ") and err.count("\n") == 1


# -- a report that cannot be written -------------------------------------------------------------


@pytest.mark.slow
def test_a_report_that_cannot_be_written_keeps_the_exit_code_and_the_summary(program):
    started = time.time()
    result = _pipecheck("run", "--json", "/dev/full", "--", "train.py", "0", "7", cwd=program)
    assert result.returncode == 7, result.stderr  # was 2, and no summary
    assert "trained" in result.stdout
    assert "==> loader 0: 16 batches <==" in result.stdout  # both summaries still printed
    assert "==> loader 1: 4 batches <==" in result.stdout
    lines = result.stderr.splitlines()
    assert ("pipecheck: loader 0 report not saved: cannot write report to /dev/full: "
            "No space left on device") in lines
    assert any(line.startswith("pipecheck: --json /dev/full takes one report (loader 0: 16 "
                               "batches); not saved: loader 1: 4 batches.") for line in lines)
    assert not os.path.exists("/dev/full.loader1.json")

    result = _pipecheck("run", "--json", "/dev/null", "--quiet", "--", "train.py", "0", "0",
                        cwd=program)
    assert result.returncode == 0, result.stderr
    assert "--json /dev/null takes one report" in result.stderr
    stray = Path("/dev/null.loader1.json")
    assert not stray.exists() or stray.stat().st_mtime < started  # never written now


@pytest.mark.slow
@needs_unshare
def test_a_full_disk_keeps_the_exit_code_and_the_summary(program):
    # A real file system with no room for the report: a 4 KiB tmpfs in a private mount
    # namespace.
    full = program / "full"
    full.mkdir()
    command = (f"mount -t tmpfs -o size=4k tmpfs {full} && "
               f"exec {sys.executable} -m pipecheck run --json {full}/run.json -- "
               "train.py 0 7")
    result = subprocess.run(["unshare", "-m", "sh", "-c", command], cwd=program, env=_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 7, result.stderr
    assert "INPUT-BOUND" in result.stdout or "COMPUTE-BOUND" in result.stdout \
        or "BALANCED" in result.stdout  # the summary of what was measured
    assert re.search(rf"pipecheck: loader 0 report not saved: cannot write report to "
                     rf"{full}/run.json: No space left on device", result.stderr), result.stderr
    assert re.search(rf"pipecheck: loader 1 report not saved: .*{full}/run.loader1.json: No "
                     "space left on device", result.stderr), result.stderr


# -- stdout -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_json_to_stdout_holds_one_report_and_nothing_else(program):
    result = _pipecheck("run", "--json", "-", "--", "train.py", "0", "0", cwd=program)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert report["consumer"]["batches"] == 16
    assert "trained" in result.stderr  # the program's own stdout went to stderr
    assert "==> loader 0: 16 batches <==" in result.stderr  # and so did the summary
    assert ("--json - takes one report (loader 0: 16 batches); not saved: loader 1: 4 batches. "
            "Give --json a regular file") in result.stderr
    assert not (program / "-.loader1.json").exists()


# -- signals, process groups, grace ----------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_through_a_shell_wrapper_waits_for_the_training_and_saves(program):
    process = _start("run", "--json", "run.json", "--quiet", "--", "./train.sh", "2", "wait",
                     cwd=program)
    try:
        lines = _read_until(process, "waiting")
        training = _training_pid(lines)
        workers = [child.pid for child in psutil.Process(training).children()]
        assert len(workers) == 2
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    # was: exit in 0.2 s with "no report", the training orphaned, its save failing later
    assert process.returncode == 128 + signal.SIGTERM, err
    assert all(_gone(pid) for pid in [training, *workers])
    report = pipecheck.load(program / "run.json")
    # its own SIGTERM save, not torch's error for workers killed beside it
    assert report.consumer.batches == 13 and report.consumer.status == "terminated"


@pytest.mark.slow
def test_a_program_that_ignores_sigterm_is_killed_after_the_grace_period(program):
    process = _start("run", "--grace", "3", "--json", "run.json", "--quiet", "--", "train.py",
                     "0", "stubborn", cwd=program)
    try:
        training = _training_pid(_read_until(process, "waiting"))
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
        took = time.monotonic() - started
    finally:
        process.kill()
    assert "ignoring SIGTERM" in out
    assert process.returncode == 128 + signal.SIGKILL, err
    assert 3 <= took < 60
    assert _gone(training)
    assert re.search(rf"killed \(SIGKILL\) 1 process\(es\) of the program still running 3 s "
                     rf"after SIGTERM: {training} \(python", err), err
    # its handler replaced the hook's, so the only save is the exit-time one SIGKILL prevents
    assert f"no report from pid {training} for its loader 0" in err


def _terminal(argv: list[str], cwd: Path):
    """Run ``argv`` as the foreground job of a new terminal (a pty): it is the session
    leader and its process group gets the terminal's signals (Ctrl-C, Ctrl-Z)."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child execs at once
        try:
            os.chdir(cwd)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execve(argv[0], argv, _env())
        finally:
            os._exit(127)
    return pid, fd


def _read_terminal(fd: int, until: bytes, timeout: float, seen: bytearray) -> None:
    deadline = time.monotonic() + timeout
    while until not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal closed: everything ended
                return
            if not chunk:
                return
            seen += chunk


def _states(pids: list[int]) -> set[str]:
    return {psutil.Process(pid).status() for pid in pids}


def _eventually(condition, timeout: float = 30) -> bool:
    """Whether ``condition()`` holds within ``timeout`` seconds (a loaded machine may take a
    while to schedule the processes that act on a signal)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow
def test_ctrl_c_and_ctrl_z_in_a_terminal_work_as_without_pipecheck(program):
    argv = [sys.executable, "-m", "pipecheck", "run", "--json", "run.json", "--quiet", "--",
            "./train.sh", "2", "wait"]
    pid, fd = _terminal(argv, program)
    seen = bytearray()
    try:
        _read_terminal(fd, b"waiting", 240, seen)
        assert b"waiting" in seen, seen.decode(errors="replace")
        training = int(re.search(rb"pid (\d+)", seen).group(1))
        job = [training, *(c.pid for c in psutil.Process(training).children())]
        os.write(fd, b"\x1a")  # Ctrl-Z: the whole job stops, pipecheck too
        _, status = os.waitpid(pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        assert _eventually(lambda: _states(job) == {psutil.STATUS_STOPPED}), _states(job)
        os.kill(pid, signal.SIGCONT)  # fg
        assert _eventually(lambda: psutil.STATUS_STOPPED not in _states(job)), _states(job)
        os.write(fd, b"\x03")  # Ctrl-C: the training gets one KeyboardInterrupt
        _read_terminal(fd, b"\x00never", 120, seen)
        _, status = os.waitpid(pid, 0)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)
    text = seen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGINT, text
    assert text.count("KeyboardInterrupt") == 1, text
    report = pipecheck.load(program / "run.json")
    assert report.consumer.batches == 13 and report.consumer.status == "interrupted"
    assert all(_gone(p) for p in job)


# -- pid reuse ----------------------------------------------------------------------------------


@pytest.mark.slow
@needs_unshare
def test_two_processes_with_the_same_pid_keep_both_reports(program):
    # Each runs as pid 1 of a PID namespace of its own: the same pid, one after the other.
    (program / "twice.py").write_text(textwrap.dedent(f"""
        import subprocess, sys
        for batches in ("3", "5"):
            subprocess.run(["unshare", "--pid", "--fork", {sys.executable!r}, "once.py",
                            batches], check=True)
    """))
    (program / "once.py").write_text(textwrap.dedent("""
        import os, sys
        import torch
        from torch.utils.data import DataLoader
        assert os.getpid() == 1
        for batch in DataLoader(list(range(4 * int(sys.argv[1]))), batch_size=4):
            pass
    """))
    result = _pipecheck("run", "--json", "run.json", "--quiet", "--", "twice.py", cwd=program)
    assert result.returncode == 0, result.stderr
    batches = sorted(pipecheck.load(program / name).consumer.batches
                     for name in ("run.json", "run.loader1.json"))
    assert batches == [3, 5]  # was: one report, the second overwriting the first


# -- a program that ends abruptly ------------------------------------------------------------------


@pytest.mark.slow
@needs_unshare
@pytest.mark.parametrize("mode, code", [("os_exit", 3), ("exec", 4)])
def test_an_end_without_exit_hooks_still_saves_and_leaves_nothing(program, mode, code):
    # A private /dev/shm and temp dir, so no other run's sweep races this one and what is left
    # can be listed. os._exit and exec run no exit hook: the hook makes them save first.
    temp = program / "tmp"
    temp.mkdir()
    command = (f"mount -t tmpfs -o size=256m tmpfs /dev/shm && "
               f"{sys.executable} -m pipecheck run --json run.json --quiet -- train.py 2 "
               f"{mode}; code=$?; echo shm: $(ls -A /dev/shm | grep pipecheck); exit $code")
    result = subprocess.run(["unshare", "-m", "sh", "-c", command], cwd=program,
                            env=dict(_env(), TMPDIR=str(temp)), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == code, result.stderr
    err = result.stderr
    assert "no report from pid" not in err, err
    train, val = (pipecheck.load(program / name) for name in ("run.json", "run.loader1.json"))
    assert (train.consumer.batches, val.consumer.batches) == (13, 2)
    assert train.producer.probe == "workers" and sum(
        w.batches for w in train.producer.workers) >= 13
    assert "file(s) of pipecheck's" not in err  # nothing for the parent to sweep
    assert result.stdout.splitlines()[-1] == "shm:"  # nothing of pipecheck's in /dev/shm
    assert not [n for n in os.listdir(temp) if n.startswith("pipecheck-stages")]
