"""``pipecheck attach PID``: a running training script that never imports pipecheck, measured
from outside with py-spy and psutil; its error paths; Ctrl-C; the report round trip."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipecheck import cli
from pipecheck.analysis.attach import analyze_attach
from pipecheck.analysis.stats import wilson_interval
from pipecheck.errors import ReportFormatError
from pipecheck.probes import stacks
from pipecheck.records import StacksRecord
from pipecheck.render.html import render_html
from pipecheck.render.markdown import render_markdown
from pipecheck.report import Report, load

from attach_target import own_stall  # noqa: E402
from paths import SUPPORT  # noqa: E402

TARGET = SUPPORT / "attach_target.py"

MARGIN = 0.05
"""The script's own stall must lie within the estimate's 95% Wilson interval widened by 5
percentage points on each side: the interval covers sampling noise; the margin covers the
alignment of the two windows (py-spy starts sampling a few hundred milliseconds after launch)
and py-spy's torn stacks on a loaded 2-core machine."""

pytestmark = pytest.mark.skipif(stacks.find_py_spy() is None, reason="py-spy is not installed")


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


def _ctrl_c_as_in_a_terminal() -> None:
    # A test run started in the background by a non-interactive shell (a CI runner, nohup)
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler in the
    # child: give it the default disposition a terminal's Ctrl-C finds.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_ends_the_window_and_still_writes_the_report(tmp_path):
    target, _ = _start_target(tmp_path, "--workers", "0")
    out = tmp_path / "attach.json"
    try:
        attach = subprocess.Popen([sys.executable, "-m", "pipecheck", "attach", str(target.pid),
                                   "--duration", "60", "--json", str(out)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=_ctrl_c_as_in_a_terminal)
        assert attach.stderr is not None
        line = attach.stderr.readline()  # printed once sampling has started
        assert "sampling PID" in line, line
        time.sleep(3)
        attach.send_signal(signal.SIGINT)
        _, err = attach.communicate(timeout=60)
        assert target.poll() is None  # Ctrl-C went to pipecheck only
    finally:
        _stop(target)
    assert attach.returncode == 130, err
    section = json.loads(out.read_text())["attach"]
    assert section["status"] == "interrupted"
    assert 1.0 < section["duration_s"] < 30 and section["main_thread_samples"] > 0


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
    monkeypatch.setattr(stacks, "run_dump", lambda py_spy, pid: (
        1, "", "Error: Operation not permitted (os error 1)\n\nStack backtrace:\n  0: x\n"))
    monkeypatch.setattr(stacks, "ptrace_scope", lambda: 1)
    assert cli.main(["attach", str(live_pid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"pipecheck: error: py-spy was denied access to PID {live_pid} "
                          "(Error: Operation not permitted (os error 1))")
    for how in ("CAP_SYS_PTRACE", "kernel.yama.ptrace_scope 0", "target's user", "(now 1;"):
        assert how in err


def test_ptrace_scope_3_is_refused_before_py_spy_runs(monkeypatch, capsys, live_pid):
    ran = []
    monkeypatch.setattr(stacks, "run_dump", lambda *a: ran.append(a) or (0, "", ""))
    monkeypatch.setattr(stacks, "ptrace_scope", lambda: 3)
    assert cli.main(["attach", str(live_pid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ptrace_scope is 3" in err and not ran


def test_py_spys_cause_lines_are_kept_and_its_backtrace_dropped(monkeypatch, capsys, live_pid):
    # What py-spy 0.4 prints when it may not read /proc/PID/exe.
    monkeypatch.setattr(stacks, "run_dump", lambda py_spy, pid: (1, "", (
        "Error: Failed to get process executable name. Check that the process is running.\n\n"
        "Caused by:\n    0: Permission denied (os error 13)\n"
        "    1: Permission denied (os error 13)\n\nStack backtrace:\n"
        "   0: <E as anyhow::context::ext::StdError>::ext_context\n")))
    monkeypatch.setattr(stacks, "ptrace_scope", lambda: None)
    assert cli.main(["attach", str(live_pid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "anyhow" not in err
    assert "(Error: Failed to get process executable name. Check that the process is running. " \
           "(Permission denied (os error 13))): run pipecheck as the target's user" in err
    assert "Yama is not enabled here" in err


def test_a_missing_py_spy_is_one_line_exit_2(monkeypatch, capsys, live_pid):
    monkeypatch.setattr(stacks, "find_py_spy", lambda: None)
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
    assert f"default {attach_module.DEFAULT_DURATION_S:g}:" in text
    assert f"default {attach_module.ATTACH_RATE_HZ}:" in text
