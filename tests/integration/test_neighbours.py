"""The scan of other processes (:class:`pipecheck.probes.neighbours.NeighbourScan`) against real
busy processes: one in this session's scheduling group but outside this process tree (started
through a shell that exits, as a job from the same terminal is), one in a new session (its own
autogroup). Linux only; the second needs autogroups in the root ``cpu`` cgroup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from pipecheck.probes.host import HostProbe
from pipecheck.probes.neighbours import NeighbourScan, scheduling_group

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

BURN = [sys.executable, "-c", "while True: pass"]


def detached_burner(*, new_session: bool) -> int:
    """A CPU-burning process reparented away from this process (its shell exits at once);
    returns its pid."""
    shell = subprocess.run(
        ["sh", "-c", " ".join(f"'{a}'" for a in BURN) + " >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True, start_new_session=new_session)
    return int(shell.stdout.strip())


@pytest.fixture
def burners():
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def wait_for_cpu(pid: int, seconds: float, timeout_s: float = 20.0) -> None:
    """Return once ``pid`` has run ``seconds`` more CPU time (on a loaded machine a new
    interpreter can take seconds to start and to be scheduled); fail after ``timeout_s``."""
    start, deadline = cpu_s(pid), time.monotonic() + timeout_s
    while cpu_s(pid) - start < seconds:
        assert time.monotonic() < deadline, f"pid {pid} ran under {seconds} s in {timeout_s} s"
        time.sleep(0.05)


def test_a_busy_process_in_this_session_counts_as_the_runs_group(burners):
    own = scheduling_group(os.getpid())
    if own is None:
        pytest.skip("this process's scheduling group is not readable")
    same = detached_burner(new_session=False)
    burners.append(same)
    assert psutil.Process(same).ppid() != os.getpid()
    wait_for_cpu(same, 0.05)  # past its start-up, in its loop
    scan = NeighbourScan(os.getpid())
    scan.maybe_scan(0.0, {os.getpid()})
    before = cpu_s(same)
    wait_for_cpu(same, 0.3)
    after = cpu_s(same)
    scan.maybe_scan(100.0, {os.getpid()})
    totals = scan.totals
    assert totals.window_s == pytest.approx(100.0)
    # Every CPU second the burner used between the scans is in the group's figure (other
    # processes in the session may add more).
    assert totals.same_group_cpu_s >= 0.9 * (after - before) > 0
    assert totals.others_cpu_s >= totals.same_group_cpu_s
    assert not scan.due(101.0)  # the next scan waits MIN_SCAN_INTERVAL_S


def test_a_busy_process_in_a_new_session_is_another_group(burners):
    own = scheduling_group(os.getpid())
    if own is None or own[1] is None:
        pytest.skip("no autogroups here (disabled, or not in the root cpu cgroup)")
    apart = detached_burner(new_session=True)
    burners.append(apart)
    assert scheduling_group(apart) != own
    wait_for_cpu(apart, 0.05)  # past its start-up, in its loop
    scan = NeighbourScan(os.getpid())
    scan.maybe_scan(0.0, {os.getpid()})
    before = cpu_s(apart)
    wait_for_cpu(apart, 0.3)
    scan.maybe_scan(100.0, {os.getpid()})
    used = cpu_s(apart) - before  # what the burner ran between the scans (about)
    totals = scan.totals
    assert used > 0.1
    # Its CPU is in "others" and in one of the other groups' figures, never in the run's.
    assert totals.others_cpu_s >= 0.8 * used
    assert totals.other_groups_cpu_s and max(totals.other_groups_cpu_s) >= 0.8 * used
    assert totals.same_group_cpu_s <= totals.others_cpu_s - 0.8 * used


def test_the_host_probe_leaves_the_runs_own_children_out_of_the_scan():
    child = subprocess.Popen(BURN, stdout=subprocess.DEVNULL)
    try:
        probe = HostProbe(run_start=time.monotonic(), interval_s=0.2)
        probe.start()
        scan = probe._neighbours
        assert scan is not None
        excluded: list[set[int]] = []
        real_scan = scan.maybe_scan

        def spy(now_s, own_pids):
            excluded.append(set(own_pids))
            real_scan(now_s, own_pids)

        scan.maybe_scan = spy  # type: ignore[method-assign]
        scan._next_at = 0.0  # the next tick scans now rather than after 5 s
        time.sleep(1.0)
        probe.stop()
        record = probe.record()
    finally:
        child.kill()
        child.wait()
    assert excluded and all({os.getpid(), child.pid} <= pids for pids in excluded)
    assert record.others_scanned_s is not None and record.others_scanned_s > 0
    assert record.others_cpu_s is not None and record.others_same_group_cpu_s is not None
    assert 0 <= record.others_same_group_cpu_s <= record.others_cpu_s


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and 2 CPUs")
def test_a_process_pinned_to_one_cpu_has_that_cpus_busy_share_measured():
    # The target may use CPU 0 only; a burner pinned to the same CPU makes it busy whatever the
    # rest of the machine does, and the probe reads that CPU's own busy share.
    def pin():
        os.sched_setaffinity(0, {0})

    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              preexec_fn=pin)
    burner = subprocess.Popen(BURN, preexec_fn=pin, stdout=subprocess.DEVNULL)
    try:
        probe = HostProbe(run_start=time.monotonic(), interval_s=0.25, pid=target.pid)
        probe.start()
        time.sleep(1.5)
        probe.stop()
        record = probe.record()
    finally:
        for process in (target, burner):
            process.kill()
            process.wait()
    assert record.status == "ok"
    assert record.usable_cpu_percent_mean is not None
    assert record.usable_cpu_percent_mean >= 80.0
    assert all(s.usable_cpu_percent is not None for s in record.timeline)


def test_a_process_on_every_cpu_has_no_separate_usable_share():
    probe = HostProbe(run_start=time.monotonic(), interval_s=0.2)
    if len(os.sched_getaffinity(0)) < (os.cpu_count() or 1):
        pytest.skip("this test process is itself pinned to a subset of the CPUs")
    probe.start()
    time.sleep(0.5)
    probe.stop()
    record = probe.record()
    assert record.usable_cpu_percent_mean is None


def test_a_failing_scan_or_per_cpu_read_turns_only_itself_off(monkeypatch):
    import pipecheck.probes.host as host_module

    real_cpu_times = psutil.cpu_times

    def cpu_times(percpu=False):
        if percpu:
            raise OSError("per-CPU times unreadable")
        return real_cpu_times()

    monkeypatch.setattr(host_module.psutil, "cpu_times", cpu_times)
    monkeypatch.setattr(host_module, "_affinity_subset", lambda process: [0])

    def broken_scan(self, now_s, own_pids):
        raise RuntimeError("scan broke")

    monkeypatch.setattr(host_module.NeighbourScan, "maybe_scan", broken_scan)
    probe = HostProbe(run_start=time.monotonic(), interval_s=0.1)
    probe.start()
    time.sleep(0.5)
    probe.stop()
    record = probe.record()
    assert record.status == "ok" and record.note is None
    assert record.samples_taken >= 2
    assert record.usable_cpu_percent_mean is None and record.others_scanned_s is None
