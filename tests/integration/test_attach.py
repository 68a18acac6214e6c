"""``pipecheck attach PID``: a running training script that never imports pipecheck, measured
from outside with py-spy and psutil; its error paths; Ctrl-C; the report round trip."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from pipecheck import _owned, cli
from pipecheck.attach import STOP_SIGNALS, StopSignals
from pipecheck.analysis.attach import analyze_attach
from pipecheck.analysis.stats import wilson_interval
from pipecheck.errors import ReportFormatError
from pipecheck.probes import py_spy_setup, stacks
from pipecheck.records import StacksRecord
from pipecheck.render.html import render_html
from pipecheck.render.markdown import render_markdown
from pipecheck.report import Report, load

from attach_target import own_stall  # noqa: E402
from hostile_names import HOSTILE_NAME  # noqa: E402
from paths import SUPPORT  # noqa: E402
from py_spy_children import output_folder, py_spy_children, wait_gone  # noqa: E402

TARGET = SUPPORT / "attach_target.py"

MARGIN = 0.05
"""The script's own stall must lie within the estimate's 95% Wilson interval widened by 5
percentage points on each side: the interval covers sampling noise; the margin covers the
alignment of the two windows (py-spy starts sampling a few hundred milliseconds after launch)
and py-spy's torn stacks on a loaded 2-core machine."""

pytestmark = pytest.mark.skipif(py_spy_setup.find_py_spy() is None, reason="py-spy is not installed")


def _start_target(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    record, ready = tmp_path / "record.txt", tmp_path / "ready"
    target = subprocess.Popen([sys.executable, str(TARGET), "--record", str(record),
                               "--ready", str(ready), *args])
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert target.poll() is None, "the training script ended before its first batch"
        assert time.monotonic() < deadline, "the training script never delivered a batch"
        time.sleep(0.1)
    time.sleep(1.0)  # past the first batches: the loop is in its steady state
    return target, record


def _stop(target: subprocess.Popen) -> None:
    target.terminate()
    target.wait(timeout=30)


def _pipecheck(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipecheck", *args], capture_output=True,
                          text=True, timeout=120, **kw)


@pytest.mark.slow  # two 10 s attach windows: CI runs them with -m slow
@pytest.mark.parametrize("workers", [0, 2])
def test_the_stall_estimate_matches_the_scripts_own_over_the_attach_window(tmp_path, workers):
    # Latency-bound: each sample sleeps 10 ms (40 ms a batch), the step burns 20 ms of CPU.
    target, record = _start_target(tmp_path, "--loader", "latency", "--workers", str(workers))
    try:
        out = tmp_path / "attach.json"
        done = _pipecheck("attach", str(target.pid), "--duration", "6", "--json", str(out),
                          "--quiet")
        assert target.poll() is None  # the target was never harmed
    finally:
        _stop(target)
    assert done.returncode == 0, done.stderr
    section = json.loads(out.read_text())["attach"]
    own = own_stall(str(record), section["window_start_unix_s"], section["window_end_unix_s"])
    low, high = section["stall_interval"]
    assert low - MARGIN <= own <= high + MARGIN, (own, section["stall_fraction"], low, high)
    assert section["num_workers"] == workers
    assert len(section["workers"]) == workers
    assert all(w["bound"] == "latency-bound" for w in section["workers"])  # they sleep
    report = load(out)  # the saved report loads, and renders
    assert report.kind == "attach" and report.diagnosis.verdict != "no-data"
    shown = _pipecheck("report", str(out), "--width", "120")
    assert shown.returncode == 0, shown.stderr
    assert "Attached (py-spy + psutil, not wrapped)" in shown.stdout
    assert "cannot be known without wrapping" in shown.stdout
    assert "### Attached (py-spy + psutil, not wrapped)" in render_markdown(report)
    assert "cannot be known without wrapping" in render_html(report)
    data = json.loads(out.read_text())
    data["attach"]["stall_interval"] = "wide"
    with pytest.raises(ReportFormatError, match="attach.stall_interval"):
        Report.from_dict(data)


def test_a_failed_sampler_gives_no_verdict_and_says_why():
    failed = StacksRecord(status="failed", window_s=1.0, rate_hz=50,
                          note="py-spy was denied (Permission denied)")
    result = analyze_attach(failed, None, pid=1, status="complete", window_start_unix_s=0.0,
                            window_end_unix_s=1.0)
    assert result.diagnosis.verdict == "no-data"
    assert result.section.stall_fraction is None and result.section.num_workers is None
    assert [f.kind for f in result.diagnosis.findings] == ["probe-off", "insufficient-data"]
    assert "Permission denied" in result.diagnosis.findings[0].message


def test_samples_inside_next_are_the_stall_and_its_interval_is_wilsons():
    record = StacksRecord(status="ok", window_s=10.0, rate_hz=50, main_thread_samples=500,
                          main_wait_samples=60, worker_samples_by_pid={"7": 400},
                          worker_busy_samples={"7": 100})
    result = analyze_attach(record, None, pid=1, status="complete", window_start_unix_s=0.0,
                            window_end_unix_s=10.0)
    assert result.section.stall_fraction == pytest.approx(0.12)
    assert result.section.stall_interval == pytest.approx(list(wilson_interval(60, 500)))
    assert result.diagnosis.verdict == "input-bound"  # 12% >= the wrapped run's 10%
    assert "spans a verdict threshold" in result.diagnosis.findings[0].message  # 9.4%-15.1%
    assert result.section.workers[0].busy_fraction == pytest.approx(0.25)
    assert result.consumer.stall_fraction == pytest.approx(0.12)


@pytest.mark.slow
def test_ctrl_c_ends_the_window_and_still_writes_the_report(tmp_path, running_target):
    out = tmp_path / "attach.json"
    process, children, folder = _attach_sampling(running_target.pid, out)
    assert process.stderr is not None
    assert "sampling PID" in process.stderr.readline()  # printed once sampling has started
    time.sleep(2)
    process.send_signal(signal.SIGINT)  # Ctrl-C goes to pipecheck only (the target runs on)
    _, err = process.communicate(timeout=60)
    _ended_cleanly(process, children, folder, out, "SIGINT")
    assert "SIGINT received" in err


def test_an_unknown_pid_is_one_line_exit_2():
    finished = subprocess.Popen(["true"])
    finished.wait()  # an exited, reaped process: its PID names nothing now
    done = _pipecheck("attach", str(finished.pid))
    assert done.returncode == 2
    assert done.stderr == f"pipecheck: error: no process with PID {finished.pid}\n"


def test_a_process_that_is_not_python_is_one_line_exit_2():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        done = _pipecheck("attach", str(sleeper.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert f"PID {sleeper.pid} is not a Python process" in done.stderr


@pytest.fixture
def live_pid():
    sleeper = subprocess.Popen(["sleep", "60"])
    yield sleeper.pid
    sleeper.kill()
    sleeper.wait()


def test_py_spy_denied_is_one_line_naming_how_to_allow_it(monkeypatch, capsys, live_pid):
    monkeypatch.setattr(py_spy_setup, "run_dump", lambda py_spy, pid: (
        1, "", "Error: Operation not permitted (os error 1)\n\nStack backtrace:\n  0: x\n"))
    monkeypatch.setattr(py_spy_setup, "ptrace_scope", lambda: 1)
    assert cli.main(["attach", str(live_pid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"pipecheck: error: py-spy was denied access to PID {live_pid} "
                          "(Error: Operation not permitted (os error 1))")
    for how in ("CAP_SYS_PTRACE", "kernel.yama.ptrace_scope 0", "target's user", "(now 1;"):
        assert how in err


def test_ptrace_scope_3_is_refused_before_py_spy_runs(monkeypatch, capsys, live_pid):
    ran = []
    monkeypatch.setattr(py_spy_setup, "run_dump", lambda *a: ran.append(a) or (0, "", ""))
    monkeypatch.setattr(py_spy_setup, "ptrace_scope", lambda: 3)
    assert cli.main(["attach", str(live_pid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ptrace_scope is 3" in err and not ran


def test_py_spys_cause_lines_are_kept_and_its_backtrace_dropped(monkeypatch, capsys, live_pid):
    # What py-spy 0.4 prints when it may not read /proc/PID/exe.
    monkeypatch.setattr(py_spy_setup, "run_dump", lambda py_spy, pid: (1, "", (
        "Error: Failed to get process executable name. Check that the process is running.\n\n"
        "Caused by:\n    0: Permission denied (os error 13)\n"
        "    1: Permission denied (os error 13)\n\nStack backtrace:\n"
        "   0: <E as anyhow::context::ext::StdError>::ext_context\n")))
    monkeypatch.setattr(py_spy_setup, "ptrace_scope", lambda: None)
    assert cli.main(["attach", str(live_pid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "anyhow" not in err
    assert "(Error: Failed to get process executable name. Check that the process is running. " \
           "(Permission denied (os error 13))): run pipecheck as the target's user" in err
    assert "Yama is not enabled here" in err


def test_a_missing_py_spy_is_one_line_exit_2(monkeypatch, capsys, live_pid):
    monkeypatch.setattr(py_spy_setup, "find_py_spy", lambda: None)
    monkeypatch.setattr("pipecheck.attach.find_py_spy", lambda: None)
    assert cli.main(["attach", str(live_pid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "py-spy is not installed" in err


@pytest.mark.parametrize("args", [["0"], ["12", "--duration", "0"], ["12", "--rate", "0"]])
def test_bad_arguments_are_usage_errors(capsys, args):
    assert cli.main(["attach", *args]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_wilson_interval_matches_newcombes_worked_example():
    # Newcombe (1998), Statistics in Medicine 17:857-872, Table I: 81/263 -> 0.2553-0.3662.
    low, high = wilson_interval(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    assert wilson_interval(0, 0) is None
    low, high = wilson_interval(0, 10)  # stays inside 0-1 at the edges
    assert low == 0.0 and 0 < high < 0.35
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_the_help_states_the_defaults_attach_uses(capsys):
    from pipecheck import attach as attach_module
    from pipecheck.cli import main

    assert main(["attach", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"default {attach_module.DEFAULT_DURATION_S:g} s" in text
    assert f"default {attach_module.ATTACH_RATE_HZ} Hz" in text


# -- signals, PID reuse and hostile names ------------------------------------------------------


def test_stop_signals_are_recorded_by_a_lock_free_handler_and_the_old_handlers_come_back():
    # A test run started in the background (a shell's `&`, nohup, some CI runners) inherits
    # SIGINT ignored, and pipecheck leaves ignored signals ignored: give SIGINT the disposition
    # a terminal session has, as _default_stop_signals does for the child processes.
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    ignored = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with StopSignals() as signals:
            assert signals.wait(0.01) is None
            os.kill(os.getpid(), signal.SIGHUP)  # ignored stays ignored
            os.kill(os.getpid(), signal.SIGTERM)
            started = time.monotonic()
            assert signals.wait(30) == signal.SIGTERM
            assert time.monotonic() - started < 5  # woken, not timed out
            os.kill(os.getpid(), signal.SIGINT)  # a second one: noted, no KeyboardInterrupt
            assert signals.received == [signal.SIGTERM, signal.SIGINT]
            assert signals.first == signal.SIGTERM
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, ignored)
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before
    signal.signal(signal.SIGINT, interrupt)


@pytest.fixture(scope="module")
def running_target(tmp_path_factory):
    """One training script for the signal tests (none of them may harm it)."""
    target, _ = _start_target(tmp_path_factory.mktemp("target"), "--workers", "0")
    yield target
    assert target.poll() is None  # pipecheck's signals never reached it
    _stop(target)


def _attach_sampling(pid: int, out: Path, **popen) -> tuple[subprocess.Popen, list, str]:
    """``pipecheck attach PID`` once it samples: the process, its two py-spy children and
    py-spy's folder."""
    popen.setdefault("stderr", subprocess.PIPE)
    process = subprocess.Popen([sys.executable, "-m", "pipecheck", "attach", str(pid),
                                "--duration", "120", "--json", str(out)],
                               stdout=subprocess.DEVNULL, text=True,
                               preexec_fn=_default_stop_signals, **popen)
    children = py_spy_children(process.pid)
    return process, children, output_folder(children)


def _default_stop_signals() -> None:
    # A background test run may have inherited SIGINT or SIGHUP ignored (nohup, CI runners);
    # pipecheck leaves ignored signals ignored, so give the child the disposition a terminal
    # session has.
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _ended_cleanly(process, children, folder, out, name) -> dict:
    """The checks every stop signal shares: exit 128+N, no py-spy left, py-spy's folder
    removed, and a report whose window says what ended it. Returns the attach section."""
    assert process.returncode == 128 + getattr(signal, name)
    assert wait_gone(children) == []
    assert not os.path.exists(folder)
    section = json.loads(out.read_text())["attach"]
    assert section["signal"] == name
    assert section["status"] == ("interrupted" if name == "SIGINT" else "terminated")
    assert 0.5 < section["duration_s"] < 60 and section["main_thread_samples"] > 0
    return section


@pytest.mark.slow
def test_sigterm_stops_py_spy_and_still_writes_the_report(tmp_path, running_target):
    out = tmp_path / "attach.json"
    process, children, folder = _attach_sampling(running_target.pid, out)
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    _ended_cleanly(process, children, folder, out, "SIGTERM")
    assert "SIGTERM received" in err
    assert load(out).attach.signal == "SIGTERM"


@pytest.mark.slow
def test_a_closed_terminal_sighup_stops_py_spy_and_still_writes_the_report(tmp_path,
                                                                           running_target):
    # pipecheck attach in its own terminal session; closing the terminal (the pty's master)
    # hangs it up: the kernel sends SIGHUP, and every later write to the terminal fails.
    master, terminal = pty.openpty()

    def own_terminal() -> None:
        _default_stop_signals()
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    out = tmp_path / "attach.json"
    process = subprocess.Popen([sys.executable, "-m", "pipecheck", "attach",
                                str(running_target.pid), "--duration", "120", "--json",
                                str(out)], stdin=terminal, stdout=terminal, stderr=terminal,
                               preexec_fn=own_terminal)
    os.close(terminal)
    try:
        shown = b""
        while b"sampling PID" not in shown:
            assert select.select([master], [], [], 60)[0], shown
            shown += os.read(master, 4096)
        children = py_spy_children(process.pid)
        folder = output_folder(children)
        time.sleep(2)
    finally:
        os.close(master)  # the terminal window closes
    process.wait(timeout=60)
    _ended_cleanly(process, children, folder, out, "SIGHUP")


@pytest.mark.slow
def test_sigkill_leaves_no_py_spy_and_the_next_run_sweeps_the_folder(tmp_path, running_target):
    out = tmp_path / "attach.json"
    process, children, folder = _attach_sampling(running_target.pid, out)
    time.sleep(1)
    process.kill()
    process.wait(timeout=60)
    assert wait_gone(children) == []  # PR_SET_PDEATHSIG: they died with it
    assert not out.exists()  # SIGKILL runs no code: no report was promised
    assert folder in _owned.sweep(os.path.dirname(folder), stacks.DIR_PREFIX)


_REUSE = r"""
import json, os, subprocess, sys, time
python, target_pid_file = sys.executable, sys.argv[1]
target = subprocess.Popen([python, "-c", "import time\nwhile True: sum(range(10**5)); time.sleep(0.005)"])
attach = subprocess.Popen([python, "-m", "pipecheck", "attach", str(target.pid), "--duration",
                           "8", "--json", sys.argv[2]], stderr=subprocess.PIPE, text=True)
assert "sampling PID" in attach.stderr.readline()
started = time.time()
time.sleep(1.5)
target.kill()
target.wait()
exited = time.time()
for _ in range(100):  # a new Python process under the same PID
    with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
        handle.write(str(target.pid - 1))
    reuse = subprocess.Popen([python, "-c", "import time\nwhile True: time.sleep(0.01)"])
    if reuse.pid == target.pid:
        break
    reuse.kill()
    reuse.wait()
attach.communicate(timeout=120)
ended = time.time()
print(json.dumps({"reused": reuse.pid == target.pid, "attach_code": attach.returncode,
                  "sampling_started": started, "target_exited": exited, "attach_ended": ended}))
reuse.kill()
"""


def _pid_namespace_usable() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _pid_namespace_usable(), reason="needs unshare --pid --mount-proc (root)")
def test_a_target_whose_pid_is_reused_is_reported_as_exited_after_its_real_lifetime(tmp_path):
    # In a fresh PID namespace the next PID is ours to choose (ns_last_pid): the target ends
    # 1.5 s into an 8 s window and a new Python process takes its PID at once.
    script, out = tmp_path / "reuse.py", tmp_path / "attach.json"
    script.write_text(_REUSE)
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                           str(script), str(tmp_path / "pid"), str(out)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    times = json.loads(done.stdout.strip().splitlines()[-1])
    assert times["reused"], "the PID could not be reused"
    assert times["attach_code"] == 0
    section = json.loads(out.read_text())["attach"]
    assert section["status"] == "target-exited" and section["signal"] is None
    # The window ends with the target (within the 0.1 s check and a loaded machine's delay),
    # never at the 8 s the other process would have filled.
    assert section["window_end_unix_s"] < times["target_exited"] + 1.0
    assert section["duration_s"] < 4.0
    assert times["attach_ended"] - times["sampling_started"] < 7.5


@pytest.mark.slow
def test_function_names_with_newlines_and_semicolons_keep_the_stall_estimate_right(tmp_path):
    # The step and the samples' wait run under names (and file names) holding newlines, ";"
    # and text shaped like py-spy's raw lines: the estimate must still match the script's own.
    target, record = _start_target(tmp_path, "--loader", "latency", "--workers", "0",
                                   "--hostile-names")
    try:
        out = tmp_path / "attach.json"
        done = _pipecheck("attach", str(target.pid), "--duration", "6", "--json", str(out),
                          "--quiet")
    finally:
        _stop(target)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    section = report["attach"]
    own = own_stall(str(record), section["window_start_unix_s"], section["window_end_unix_s"])
    low, high = section["stall_interval"]
    assert low - MARGIN <= own <= high + MARGIN, (own, section["stall_fraction"], low, high)
    assert HOSTILE_NAME in {f["function"] for f in report["stacks"]["main_top"]}
