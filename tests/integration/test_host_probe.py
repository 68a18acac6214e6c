"""HostProbe against real processes (DataLoader workers, subprocesses) and collect_environment."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psutil
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from pipecheck import _clock
from pipecheck._clock import FakeClock
from pipecheck.environment import collect_environment
from pipecheck.probes.host import HostProbe, _classify
from pipecheck.records import Environment, HostRecord

SAMPLE_COST_S = 0.02  # CPU burned (or wall time slept) per sample


class BurnDataset(Dataset):
    """Each sample burns SAMPLE_COST_S of this process's CPU (thread_time, so load-independent)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[int, int]:
        end = time.thread_time() + SAMPLE_COST_S
        while time.thread_time() < end:
            pass
        return os.getpid(), get_worker_info().id


class SleepDataset(BurnDataset):
    """Each sample sleeps SAMPLE_COST_S: busy in wall time, nearly idle in CPU."""

    def __getitem__(self, index: int) -> tuple[int, int]:
        time.sleep(SAMPLE_COST_S)
        return os.getpid(), get_worker_info().id


class PidMap:
    """pid -> worker id learned from batches; what the worker probe supplies in production."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[int, int] = {}

    def add_batch(self, batch: list[torch.Tensor]) -> None:
        pids, worker_ids = batch
        with self._lock:
            for pid, worker_id in zip(pids.tolist(), worker_ids.tolist()):
                self._ids[pid] = worker_id

    def __call__(self) -> dict[int, int]:
        with self._lock:
            return dict(self._ids)


def _loader(dataset: Dataset) -> DataLoader:
    return DataLoader(dataset, batch_size=2, num_workers=2, multiprocessing_context="fork")


def _measure_one_epoch(dataset: Dataset) -> tuple[HostRecord, PidMap]:
    """Run one epoch under the probe; stop the probe while the workers are still alive."""
    pid_map = PidMap()
    loader = _loader(dataset)
    probe = HostProbe(run_start=_clock.monotonic(), interval_s=0.1, worker_ids=pid_map)
    probe.start()
    iterator = iter(loader)
    for _ in range(len(loader)):  # no StopIteration yet: that would shut the workers down
        pid_map.add_batch(next(iterator))
    probe.stop()
    del iterator
    return probe.record(), pid_map


def _cpu_per_busy_s(record: HostRecord, pid_map: PidMap, samples_per_worker: int) -> float:
    workers = [p for p in record.processes if p.role == "worker"]
    assert {p.pid for p in workers} == set(pid_map())
    assert all(p.worker_id == pid_map()[p.pid] for p in workers)
    return sum(p.cpu_s for p in workers) / (len(workers) * samples_per_worker * SAMPLE_COST_S)


def test_workers_are_seen_and_cpu_tracks_their_work() -> None:
    samples = 40
    burn, burn_pids = _measure_one_epoch(BurnDataset(samples))
    sleep, sleep_pids = _measure_one_epoch(SleepDataset(samples))

    for record in (burn, sleep):
        assert record.status == "ok", record.note
        assert record.samples_taken >= 2
        assert [p.pid for p in record.processes if p.role == "main"] == [os.getpid()]
        assert record.main_cpu_s is not None and record.main_cpu_s >= 0
        assert len(record.timeline) == record.samples_taken
    assert all(p.cpu_s > 0 for p in burn.processes if p.role == "worker")
    burn_ratio = _cpu_per_busy_s(burn, burn_pids, samples // 2)
    sleep_ratio = _cpu_per_busy_s(sleep, sleep_pids, samples // 2)
    # burn: ~1 CPU second per busy second (less whatever ran after the last tick);
    # sleep: only Python overhead per sample
    assert burn_ratio > 0.5, burn_ratio
    assert sleep_ratio < 0.4, sleep_ratio
    assert burn_ratio > 2 * sleep_ratio
    assert burn.workers_cpu_s == pytest.approx(
        sum(p.cpu_s for p in burn.processes if p.role == "worker")
    )
    assert max(s.workers_cpu_percent for s in burn.timeline) > 20.0
    assert all(0.0 <= s.system_cpu_percent <= 100.0 for s in burn.timeline)
    assert all(s.workers_rss_bytes > 0 for s in burn.timeline)


def test_non_persistent_workers_exiting_between_epochs() -> None:
    pid_map = PidMap()
    loader = _loader(SleepDataset(24))
    epoch_pids: list[set[int]] = []
    with HostProbe(run_start=_clock.monotonic(), interval_s=0.05, worker_ids=pid_map) as probe:
        for _ in range(2):
            before = set(pid_map())
            for batch in loader:  # runs to StopIteration: the workers exit after each epoch
                pid_map.add_batch(batch)
            epoch_pids.append(set(pid_map()) - before)
        time.sleep(0.15)  # a few ticks after the second epoch's workers are gone
    record = probe.record()

    assert record.status == "ok", record.note
    assert record.note is None
    first, second = epoch_pids
    assert len(first) == 2 and len(second) == 2 and not first & second
    workers = {p.pid: p for p in record.processes if p.role == "worker"}
    assert first | second <= set(workers)
    assert workers[min(first)].last_seen_at_s < workers[min(second)].first_seen_at_s
    assert all(w.rss_max_bytes > 0 for w in workers.values())
    # each worker gets a PSS reading the first time it is seen
    assert all(w.pss_max_bytes is None or w.pss_max_bytes > 0 for w in workers.values())


def _io_counters_supported() -> bool:
    try:
        return getattr(psutil.Process().io_counters(), "read_chars", None) is not None
    except (AttributeError, NotImplementedError, psutil.AccessDenied):
        return False


@pytest.mark.skipif(not _io_counters_supported(), reason="psutil has no read_chars here")
def test_child_reading_a_file_shows_read_chars(tmp_path) -> None:
    path = tmp_path / "data.bin"
    size_bytes, passes = 4 * 1024 * 1024, 3
    child_code = (
        "import sys, time\n"
        "path, size, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
        "open(path, 'wb').write(b'x' * size)\n"
        "for _ in range(passes):\n"
        "    open(path, 'rb').read()\n"
        "time.sleep(0.4)\n"  # stay alive for a few ticks after reading
    )
    with HostProbe(run_start=_clock.monotonic(), interval_s=0.05) as probe:
        child = subprocess.Popen(
            [sys.executable, "-c", child_code, str(path), str(size_bytes), str(passes)]
        )
        assert child.wait(timeout=30) == 0
    record = probe.record()

    (stats,) = [p for p in record.processes if p.pid == child.pid]
    assert stats.role == "worker"  # no worker_ids mapping: a direct child counts as a worker
    assert stats.worker_id is None
    assert stats.read_chars is not None and stats.read_chars >= passes * size_bytes
    assert record.read_chars_per_s is not None and record.read_chars_per_s > 0
    assert record.read_bytes_per_s is not None and record.read_bytes_per_s >= 0


def test_stop_is_prompt_idempotent_and_snapshots_work_throughout() -> None:
    # A worker map naming no live process: without one every direct child of this process
    # would count as a worker, and earlier tests may leave one (multiprocessing's resource
    # tracker after a spawn test).
    probe = HostProbe(run_start=_clock.monotonic(), interval_s=0.5,
                      worker_ids=lambda: {2**22 + 1: 0})
    assert probe.record().status == "unavailable"  # not started yet
    probe.start()
    probe.start()  # idempotent
    time.sleep(1.2)
    running = probe.record()
    assert running.status == "ok" and running.samples_taken >= 1

    started = time.perf_counter()
    probe.stop()
    assert time.perf_counter() - started < 2.0
    probe.stop()  # idempotent
    final = probe.record()

    assert final.status == "ok", final.note
    assert final.samples_taken >= running.samples_taken
    assert final.duration_s >= running.duration_s
    assert final.interval_s == 0.5
    assert 0.0 <= final.overhead_cpu_s < 0.5  # a few ticks: milliseconds in practice
    assert final.system_cpu_percent_mean is not None
    assert 0.0 <= final.system_cpu_percent_mean <= 100.0
    if final.iowait_fraction_mean is not None:
        assert 0.0 <= final.iowait_fraction_mean <= 1.0
    assert final.workers_cpu_s is None  # no worker process was ever seen
    probe.start()  # single-use: does not restart
    assert probe.record().samples_taken == final.samples_taken


def test_timeline_stays_bounded_and_spans_the_run() -> None:
    probe = HostProbe(run_start=_clock.monotonic(), interval_s=0.01, max_samples=4)
    with probe:
        time.sleep(0.6)
    record = probe.record()

    assert record.samples_taken > 8
    assert 2 <= len(record.timeline) <= 4
    times = [s.at_s for s in record.timeline]
    assert times == sorted(times)
    assert times[-1] - times[0] > record.duration_s / 4  # decimated, not truncated


def test_sample_times_come_from_the_injected_clock() -> None:
    clock = FakeClock(start=100.0)
    with HostProbe(run_start=90.0, interval_s=0.02, clock=clock) as probe:
        time.sleep(0.2)
    record = probe.record()
    assert record.samples_taken >= 1
    assert {s.at_s for s in record.timeline} == {10.0}
    assert record.duration_s > 0.1  # rates still use real elapsed time


def test_main_process_vanishing_ends_sampling_with_a_note() -> None:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        probe = HostProbe(run_start=_clock.monotonic(), interval_s=0.02, pid=target.pid)
        probe.start()
        time.sleep(0.2)
    finally:
        target.kill()
        target.wait(timeout=10)
    time.sleep(0.2)
    probe.stop()
    record = probe.record()

    assert record.status == "ok"
    assert record.note is not None and "NoSuchProcess" in record.note
    assert record.samples_taken >= 1
    assert [p.role for p in record.processes] == ["main"]


def test_unreadable_main_process_is_unavailable_not_an_error() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    probe = HostProbe(run_start=_clock.monotonic(), pid=gone.pid)
    probe.start()
    probe.stop()
    record = probe.record()
    assert record.status == "unavailable"
    assert record.note is not None and str(gone.pid) in record.note
    assert record.main_cpu_s is None and record.processes == []


def test_roles_follow_the_process_tree() -> None:
    main, worker, stray, grandchild = 1, 2, 3, 4
    ppid_of = {worker: main, stray: main, grandchild: worker}
    mapping = {worker: 0}
    assert _classify(main, ppid_of, main, mapping) == ("main", None, False)
    assert _classify(worker, ppid_of, main, mapping) == ("worker", 0, True)
    assert _classify(grandchild, ppid_of, main, mapping) == ("child", 0, True)  # its worker's
    assert _classify(stray, ppid_of, main, mapping) == ("child", None, False)
    # without a mapping every direct child of main is a worker of unknown id
    assert _classify(stray, ppid_of, main, {}) == ("worker", None, True)


@pytest.mark.parametrize(
    "arguments",
    [{"interval_s": 0}, {"pss_interval_s": -1.0}, {"max_samples": 1}],
)
def test_bad_arguments_raise(arguments: dict) -> None:
    with pytest.raises(ValueError):
        HostProbe(run_start=0.0, **arguments)


def test_collect_environment_fields_are_typed_and_in_range() -> None:
    env = collect_environment()
    assert isinstance(env, Environment)
    assert env.cpu_count == os.cpu_count()
    assert 1 <= env.usable_cpus <= env.cpu_count
    assert env.python == "{}.{}.{}".format(*sys.version_info[:3])
    assert env.torch == torch.__version__
    assert isinstance(env.platform, str) and env.platform
    assert env.cuda is torch.cuda.is_available()
    assert env.cuda_device is None or (env.cuda and isinstance(env.cuda_device, str))
    assert env.total_memory_bytes == psutil.virtual_memory().total
    assert env.pipecheck is None or isinstance(env.pipecheck, str)
    assert not torch.cuda.is_initialized()  # collecting must not create a CUDA context
