"""``pipecheck stress``'s progress tells the truth: the line fits the terminal with the time left
in it, its bar counts the trials the budget holds (not every candidate: "0/31" when 2 were
measured), a budget that held only the baseline says so with a hint, and nothing is written to
a stderr that is not a terminal (a stray blank line came after every run, errors included).

The planning runs on a fake clock and trial runner; the CLI in real subprocesses, one on a
pseudo-terminal."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest
from rich.console import Console

from pipecheck.stress.progress import SweepProgress
from pipecheck.stress.search import run_search
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.tracker import ProgressEvent, Tracker
from pipecheck.stress.trial import TrialLimits
from paths import REPO_ROOT, STRESS_TARGETS, SUPPORT
from stress_fakes import FakeClock, fake_runner, short_trial

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
DESCRIPTION = ("num_workers=12 prefetch_factor=4 persistent_workers=False in_order=False: "
               "1,234 batches, 41.3 batches/s")


# -- the line ------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [20, 40, 60, 80, 100, 200])
def test_the_line_fits_the_width_and_keeps_the_time_left(width):
    from pipecheck.stress.progress import progress_line

    line = progress_line(width, 2, 7, 65.0, DESCRIPTION).plain
    assert len(line) < width
    assert "2/7" in line and "1 min 05 s left" in line


def test_a_wide_terminal_shows_the_whole_description():
    from pipecheck.stress.progress import progress_line

    line = progress_line(200, 2, 7, 65.0, DESCRIPTION).plain
    assert line.startswith("stress ") and line.endswith(DESCRIPTION)


def _drawn(event: ProgressEvent, width: int) -> list[str]:
    """The lines the live display draws for ``event`` on a ``width``-column terminal."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=width)
    with SweepProgress(console=console) as display:
        display(event)
        display._progress.refresh()
    text = ANSI.sub("", out.getvalue())
    return [line for line in re.split(r"[\r\n]", text) if line.strip()]


def test_at_80_columns_the_display_keeps_the_time_left():
    """rich's table of five columns was cut at 80 columns, the time left first."""
    event = ProgressEvent("batch", LoaderSettings(12, 4, in_order=False), 1, 31, elapsed_s=10,
                          budget_s=60, mean_trial_s=3.0, batches=1234, trial_elapsed_s=29.9)
    for line in _drawn(event, 80):
        assert len(line) < 80
    assert any("at most" in line and "left" in line for line in _drawn(event, 80))


def test_the_display_counts_the_trials_planned():
    event = ProgressEvent("done", LoaderSettings(0), 1, 31, elapsed_s=10, budget_s=20,
                          finished=1, planned=2)
    drawn = " ".join(_drawn(event, 100))
    assert "1/2" in drawn and "/31" not in drawn


def test_nothing_is_drawn_when_stderr_is_not_a_terminal():
    out = io.StringIO()
    with SweepProgress(console=Console(file=out)) as display:
        display(ProgressEvent("start", LoaderSettings(0), 0, 3, elapsed_s=0, budget_s=60))
    assert out.getvalue() == ""


# -- the plan ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_result():
    return short_trial()


def test_the_planned_count_is_what_the_budget_holds_not_every_candidate(short_result):
    clock, events = FakeClock(), []
    candidates = [LoaderSettings(0)] + [LoaderSettings(n, 2) for n in range(1, 31)]
    tracker = Tracker(0, 20.0, events.append, clock=clock,
                      runner=fake_runner(clock, short_result, 2.0))
    tracker.later_trials = 1  # e.g. the profiling trial, held in no reserve here
    sweep = run_search("target", candidates, TrialLimits(seconds=3.0), step=None, budget_s=20.0,
                       timeout_s=10.0, tracker=tracker)
    measured = len(sweep.trials)
    assert 1 <= measured < 5
    assert all(e.total == 31 for e in events)  # the candidates, as before
    assert all(e.planned is not None and e.planned < 31 for e in events)
    final = [e for e in events if e.event in ("done", "skipped")][-1]
    assert final.finished == measured and final.planned == measured + 1
    assert all(e.finished is not None and e.finished <= e.planned for e in events)


def test_follow_on_trials_continue_the_count(short_result):
    clock, events = FakeClock(), []
    tracker = Tracker(2, 60.0, events.append, clock=clock,
                      runner=fake_runner(clock, short_result, 0.5))
    tracker.later_trials = 2
    limits = TrialLimits(seconds=1.0)
    for done, config in enumerate([LoaderSettings(0), LoaderSettings(1, 2)]):
        tracker.run("target", config, limits, step=None, timeout_s=5.0, done=done)
    later = tracker.follow_on(2, events.append)
    later.run("target", LoaderSettings(1, 2), limits, step=None, timeout_s=5.0, done=0)
    assert [(e.finished, e.planned) for e in events if e.event == "done"] == [
        (1, 4), (2, 4), (3, 4)]


# -- the command -----------------------------------------------------------------------------


def _env(columns: int) -> dict[str, str]:
    path = os.pathsep.join([str(REPO_ROOT), str(SUPPORT)] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)
    return env


def _on_a_terminal(argv: list[str], columns: int) -> tuple[int, str, str]:
    """Run ``argv`` with stderr on a pseudo-terminal ``columns`` wide: exit code, stdout, and
    what the terminal received."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave,
                            stdin=subprocess.DEVNULL, env=_env(columns), cwd=str(REPO_ROOT))
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the last writer closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        stdout = proc.stdout.read() if proc.stdout is not None else b""
        proc.wait(timeout=120)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, stdout.decode(), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
def test_a_run_on_an_80_column_terminal_shows_the_plan_and_a_too_small_budget():
    """The progress line fits 80 columns with the time left, counts the trials the budget
    holds, and a budget that held the baseline only ends with a line that says so."""
    code, stdout, terminal = _on_a_terminal(
        [sys.executable, "-m", "pipecheck", "stress", f"{STRESS_TARGETS}:sleepy_loader",
         "--budget", "8", "--trial-seconds", "1", "--no-stacks"], 80)
    assert code == 0, terminal
    lines = [line for line in re.split(r"[\r\n]", ANSI.sub("", terminal)) if line.strip()]
    drawn = [line for line in lines if line.startswith("stress ")]
    assert drawn, terminal
    assert all(len(line) < 80 for line in drawn), drawn
    assert any(re.search(r" \d+/\d+ at most .* left", line) for line in drawn), drawn
    counts = {int(m.group(1)) for line in drawn for m in [re.search(r" \d+/(\d+)", line)] if m}
    assert counts and max(counts) < 31, counts
    notes = [line for line in lines if line.startswith("pipecheck: ")]
    assert any("held only the baseline trial" in n and "raise --budget" in n for n in notes), lines
    assert "the budget held only the baseline" in " ".join(stdout.split())
    assert "the baseline was the fastest configuration measured" not in stdout


@pytest.mark.slow
def test_no_blank_line_on_stderr_errors_included():
    done = subprocess.run(
        [sys.executable, "-m", "pipecheck", "stress", "no/such/target.py:make"],
        capture_output=True, text=True, env=_env(80), cwd=str(REPO_ROOT), timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("pipecheck: error: ") and done.stderr.count("\n") == 1
