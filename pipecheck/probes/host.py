"""Host sampler: CPU, memory and read IO of the training process, its DataLoader workers and
their children, plus system-wide CPU, iowait and available memory.

A daemon thread reads psutil every ``interval_s`` seconds. CPU percents are computed from
``cpu_times()`` deltas (psutil's own ``cpu_percent()`` returns a meaningless 0 on its first call).
PSS and USS (``memory_full_info``, which walks the process's page tables: its CPU cost grows with
the resident size, see ``benchmarks/memory.py uss-cost``) are read at most every
``early_pss_interval_s`` during the first ``early_pss_window_s`` seconds (so a short run gets
enough readings for the memory-growth test) and every ``pss_interval_s`` after that, plus, with
``pss_on_first_sight``, once when a process is first seen so that short-lived workers get a
value (without persistent workers that is two reads per worker per epoch).
``read_bytes`` counts reads that hit storage; ``read_chars`` also counts page-cache hits.
On Linux each tick also reads ``/proc/<pid>/schedstat`` (about 15 us): the time a process's main
thread spent runnable but waiting for a core, which tells CPU contention from waiting on sleep,
network or storage. Every PSS read also keeps the process's USS and PSS in a bounded per-process
series, for the memory-growth test (:mod:`pipecheck.analysis.memory`).

Known blind spots, by construction of polling: a process that is born and exits between two ticks
is never seen, and a process that exits loses the CPU and IO it used after the last tick it was
seen in (at most ``interval_s`` worth). CPU of reaped grandchildren that the kernel folds into a
parent's ``children_*`` times is not counted, so nothing is counted twice.

One module of about 800 lines on purpose: one job, the sampling thread and the per-process
tracking it feeds (each tick reads every process once and updates its track); the scan of other
processes is :mod:`pipecheck.probes.neighbours`.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, cast

import psutil

from pipecheck import _clock
from pipecheck._clock import Clock
from pipecheck._locks import bounded
from pipecheck.errors import one_line
from pipecheck.kinds import CHILD, MAIN, WORKER, ProcessRole
from pipecheck.probes.neighbours import NeighbourScan
from pipecheck.records import CpuSample, HostRecord, HostSample, MemorySample, ProcessStats

DEFAULT_MAX_SAMPLES = 2048
"""Timeline samples kept before decimation halves them (2048 ticks of 0.5 s = 17 minutes at full
resolution; a longer run keeps every 2nd, 4th, ... tick)."""

MAX_MEMORY_SAMPLES = 256
"""Memory readings kept per process before every other one is dropped (256 readings of 5 s
cover 21 minutes at full resolution)."""

_JOIN_TIMEOUT_S = 5.0
"""How long stop() waits for the sampler thread; one tick takes milliseconds per process."""

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied)  # ZombieProcess is a NoSuchProcess

WorkerIds = Callable[[], dict[int, int]]
"""Returns pid -> DataLoader worker id for the worker processes known so far."""


class _ProcessReading(NamedTuple):
    """One process read at one tick. Counters are cumulative since the process started."""

    key: tuple[int, float]  # (pid, create_time) so a reused pid is a new process
    ppid: int
    cpu_s: float
    rss_bytes: int
    pss_bytes: Optional[int]
    read_bytes: Optional[int]
    read_chars: Optional[int]
    runqueue_s: Optional[float] = None
    uss_bytes: Optional[int] = None


class _Tick(NamedTuple):
    elapsed_s: float  # real seconds (perf_counter), the denominator of every rate
    at_s: float  # seconds since run_start on the injected clock, read with elapsed_s
    processes: dict[tuple[int, float], _ProcessReading]
    system_cpu: Any  # psutil.cpu_times() namedtuple
    available_memory_bytes: int
    disk_busy_ms: Optional[dict[str, int]] = None  # per disk, cumulative (Linux, FreeBSD)
    usable_cpu: Any = None  # system_cpu summed over the process's CPUs, when a subset


@dataclass
class _ProcessTrack:
    """Running totals for one process, updated once per tick it is seen in."""

    pid: int
    ppid: int
    first_seen_at_s: float
    last_seen_at_s: float
    baseline_cpu_s: float
    last_cpu_s: float
    observed_s: float = 0.0
    rss_max_bytes: int = 0
    pss_max_bytes: Optional[int] = None
    pss_last_bytes: Optional[int] = None
    baseline_read_bytes: Optional[int] = None
    last_read_bytes: Optional[int] = None
    baseline_read_chars: Optional[int] = None
    last_read_chars: Optional[int] = None
    baseline_runqueue_s: Optional[float] = None
    last_runqueue_s: Optional[float] = None
    uss_max_bytes: Optional[int] = None
    memory: list[MemorySample] = field(default_factory=list)
    memory_stride: int = 1
    memory_readings: int = 0
    cpu_series: list[CpuSample] = field(default_factory=list)
    cpu_stride: int = 1
    cpu_readings: int = 0

    @property
    def cpu_s(self) -> float:
        return self.last_cpu_s - self.baseline_cpu_s

    def add_memory(self, sample: MemorySample) -> None:
        """Keep every ``memory_stride``-th reading; halve the series when it fills."""
        if self.memory_readings % self.memory_stride == 0:
            self.memory.append(sample)
            if len(self.memory) > MAX_MEMORY_SAMPLES:
                self.memory = self.memory[::2]
                self.memory_stride *= 2
        self.memory_readings += 1

    def add_cpu(self, sample: CpuSample) -> None:
        """The same bounded decimation for the per-tick CPU series."""
        if self.cpu_readings % self.cpu_stride == 0:
            self.cpu_series.append(sample)
            if len(self.cpu_series) > MAX_MEMORY_SAMPLES:
                self.cpu_series = self.cpu_series[::2]
                self.cpu_stride *= 2
        self.cpu_readings += 1


class _Role(NamedTuple):
    name: ProcessRole
    worker_id: Optional[int]
    in_worker_tree: bool  # a worker or a descendant of one: counts towards workers_cpu_s


class HostProbe:
    """Samples the host in a background thread; :meth:`record` returns a ``HostRecord``.

    ``run_start``: a ``clock()`` value; sample times (``at_s``) are seconds since it.
    ``interval_s`` (> 0): seconds between ticks. ``pss_interval_s`` (> 0): least seconds between
    PSS reads; ``early_pss_interval_s`` (> 0, default ``pss_interval_s``): the same during the
    first ``early_pss_window_s`` seconds (>= 0, default 0) after :meth:`start`, so a short run
    gets enough readings for the growth test; ``pss_on_first_sight``: also read a process's PSS
    at its first tick.
    ``worker_ids``: returns pid -> DataLoader worker id (called from the sampler thread,
    so it must be thread-safe); when it is ``None`` or returns ``{}``, every direct child of the
    main process counts as a worker with ``worker_id`` ``None``. ``pid``: the main process
    (default: this one). ``max_samples`` (>= 2): timeline bound; when full, every other sample is
    dropped and the stride doubles. Raises ``ValueError`` for out-of-range arguments.

    Roles are re-derived from the latest ``worker_ids()`` when a snapshot is taken, so a worker
    reported late still counts as one. ``main_cpu_s`` includes the sampler thread's own CPU time,
    reported separately as ``overhead_cpu_s``, when ``pid`` is this process (for another
    process, ``pipecheck attach``, the sampler's CPU is this process's, not the target's). The probe is single-use: ``start()`` after
    ``stop()`` does nothing. Never raises from the thread: a failure there ends sampling and is
    recorded in ``note``.
    """

    def __init__(
        self,
        *,
        run_start: float,
        interval_s: float = 0.5,
        pss_interval_s: float = 1.0,
        early_pss_interval_s: Optional[float] = None,
        early_pss_window_s: float = 0.0,
        pss_on_first_sight: bool = True,
        worker_ids: Optional[WorkerIds] = None,
        clock: Clock = _clock.monotonic,
        pid: Optional[int] = None,
        max_samples: int = DEFAULT_MAX_SAMPLES,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        if not pss_interval_s > 0:
            raise ValueError(f"pss_interval_s must be > 0, got {pss_interval_s!r}")
        if early_pss_interval_s is not None and not early_pss_interval_s > 0:
            raise ValueError(f"early_pss_interval_s must be > 0, got {early_pss_interval_s!r}")
        if not early_pss_window_s >= 0:
            raise ValueError(f"early_pss_window_s must be >= 0, got {early_pss_window_s!r}")
        if max_samples < 2:
            raise ValueError(f"max_samples must be >= 2, got {max_samples!r}")
        self._run_start = run_start
        self._interval_s = float(interval_s)
        self._pss_interval_s = float(pss_interval_s)
        self._early_pss_interval_s = float(
            pss_interval_s if early_pss_interval_s is None else early_pss_interval_s)
        self._early_pss_window_s = float(early_pss_window_s)
        self._started_elapsed_s: Optional[float] = None  # perf_counter at the first tick
        self._pss_on_first_sight = pss_on_first_sight
        self._worker_ids = worker_ids
        self._clock = clock
        self._pid = os.getpid() if pid is None else pid
        self._max_samples = max_samples

        self._stop_event = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = False
        self._stopped = False
        self._tick_lock = threading.Lock()  # one tick at a time (thread vs stop()'s last tick)
        self._lock = threading.Lock()  # guards everything below

        self._main: Optional[psutil.Process] = None
        self._last_pss_elapsed_s: Optional[float] = None
        self._pss_read_pids: set[int] = set()  # a new process gets its first PSS read at once
        self._first_tick: Optional[_Tick] = None
        self._last_tick: Optional[_Tick] = None
        self._tracks: dict[tuple[int, float], _ProcessTrack] = {}
        self._timeline: list[HostSample] = []
        self._stride = 1
        self._delta_ticks = 0
        self._overhead_cpu_s = 0.0
        self._failed = False
        self._unavailable = False
        self._note: Optional[str] = None
        self._last_record: Optional[HostRecord] = None  # for a reader whose lock wait timed out
        self._neighbours: Optional[NeighbourScan] = None  # other processes, by scheduling group
        self._affinity: Optional[list[int]] = None  # the process's CPUs, when not all of them

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Take the baseline reading now and start the sampler thread. Idempotent.

        If psutil cannot read the main process at all, the probe stays idle and its snapshot has
        status ``unavailable``; nothing is raised.
        """
        if self._started or self._stopped:
            return
        self._started = True
        cpu_before_s = time.thread_time()
        try:
            self._main = psutil.Process(self._pid)
            self._main.cpu_times()  # fails now, not in the thread, if the process is unreadable
            self._neighbours = _neighbour_scan(self._pid)
            self._affinity = _affinity_subset(self._main)
            with self._tick_lock:
                self._tick()
        except Exception as error:  # psutil unusable here: report it, never break the run
            with self._lock:
                self._unavailable = True
                self._note = f"psutil cannot read process {self._pid}: {one_line(error)}"
            return
        finally:
            with self._lock:
                self._overhead_cpu_s += time.thread_time() - cpu_before_s
        self._thread = threading.Thread(
            target=self._run, name="pipecheck-host-probe", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (within a tick's duration) and take one last reading. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(_JOIN_TIMEOUT_S)
        with self._lock:
            take_last = self._first_tick is not None and not self._failed
        if not take_last or not self._tick_lock.acquire(timeout=_JOIN_TIMEOUT_S):
            return
        cpu_before_s = time.thread_time()
        try:
            self._tick()
        except Exception as error:
            self._record_failure(error)
        finally:
            self._tick_lock.release()
            with self._lock:
                self._overhead_cpu_s += time.thread_time() - cpu_before_s

    def __enter__(self) -> "HostProbe":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop_event.wait(self._interval_s):
            cpu_before_s = time.thread_time()
            try:
                with self._tick_lock:
                    if self._stop_event.is_set():
                        break  # stop() takes the last reading itself
                    self._tick()
            except Exception as error:
                self._record_failure(error)
                break
            finally:
                with self._lock:
                    self._overhead_cpu_s += time.thread_time() - cpu_before_s

    def _record_failure(self, error: BaseException) -> None:
        with self._lock:
            self._failed = True
            at_s = self._last_tick.at_s if self._last_tick is not None else 0.0
            self._note = f"sampling stopped after at_s={at_s:.2f}: {one_line(error)}"

    # -- one tick ----------------------------------------------------------------------------

    def _tick(self) -> None:
        """Read everything, then fold the reading into the totals. Caller holds _tick_lock."""
        tick = self._read()
        mapping = self._current_worker_ids()
        with self._lock:
            self._apply(tick, mapping)

    def _read(self) -> _Tick:
        assert self._main is not None
        elapsed_s = time.perf_counter()
        # Stamped with the clock read that decides whether memory is due, not after the reads
        # (which take milliseconds, more on a busy host): readings are then never closer in
        # at_s than the memory interval.
        at_s = self._clock() - self._run_start
        if self._started_elapsed_s is None:
            self._started_elapsed_s = elapsed_s
        early = elapsed_s - self._started_elapsed_s < self._early_pss_window_s
        pss_due = (
            self._last_pss_elapsed_s is None
            or elapsed_s - self._last_pss_elapsed_s
            >= (self._early_pss_interval_s if early else self._pss_interval_s)
        )
        if pss_due:
            self._last_pss_elapsed_s = elapsed_s
        # The main process must stay readable: if it is not, the exception ends sampling.
        main = _read_process(self._main, pss_due, must_succeed=True)
        assert main is not None  # must_succeed=True raises instead of returning None
        processes = {main.key: main}
        for child in self._main.children(recursive=True):
            want_pss = pss_due or (self._pss_on_first_sight
                                   and child.pid not in self._pss_read_pids)
            reading = _read_process(child, want_pss, must_succeed=False)
            if reading is not None:
                processes[reading.key] = reading
        self._pss_read_pids.update(
            key[0] for key, reading in processes.items() if reading.pss_bytes is not None
        )
        self._scan_neighbours(elapsed_s, {key[0] for key in processes})
        return _Tick(
            elapsed_s=elapsed_s,
            at_s=at_s,
            processes=processes,
            system_cpu=psutil.cpu_times(),
            usable_cpu=self._usable_cpu_times(),
            available_memory_bytes=psutil.virtual_memory().available,
            disk_busy_ms=_disk_busy_ms(),
        )

    def _usable_cpu_times(self) -> Any:
        """The CPU times of the process's own CPUs (when a subset); a failure turns only this
        reading off (the analysis then spreads other processes' load over the machine)."""
        try:
            return _usable_cpu_times(self._affinity)
        except Exception:
            self._affinity = None
            return None

    def _scan_neighbours(self, elapsed_s: float, own_pids: set[int]) -> None:
        """Other processes' CPU by scheduling group, every few seconds. A failure turns only
        this scan off (the analysis then treats every other process as another group's)."""
        scan = self._neighbours
        if scan is None:
            return
        try:
            scan.maybe_scan(elapsed_s, own_pids)
        except Exception:
            self._neighbours = None

    def _current_worker_ids(self) -> dict[int, int]:
        if self._worker_ids is None:
            return {}
        try:
            return dict(self._worker_ids())
        except Exception:  # a broken callback must not stop host sampling
            return {}

    def _apply(self, tick: _Tick, mapping: dict[int, int]) -> None:
        previous = self._last_tick
        is_baseline = previous is None
        dt_s = 0.0 if previous is None else tick.elapsed_s - previous.elapsed_s
        cpu_delta_s: dict[tuple[int, float], float] = {}
        read_bytes_delta = read_chars_delta = None

        for key, reading in tick.processes.items():
            track = self._tracks.get(key)
            if track is None:
                track = self._new_track(reading, tick.at_s, is_baseline)
                self._tracks[key] = track
            cpu_delta_s[key] = reading.cpu_s - track.last_cpu_s
            read_bytes_delta = _add_delta(
                read_bytes_delta, reading.read_bytes, track.last_read_bytes
            )
            read_chars_delta = _add_delta(
                read_chars_delta, reading.read_chars, track.last_read_chars
            )
            _update_track(track, reading, tick.at_s, dt_s)

        if self._first_tick is None:
            self._first_tick = tick
        self._last_tick = tick
        if previous is None:
            return
        system_cpu_percent, iowait_percent = _system_percents(previous.system_cpu, tick.system_cpu)
        usable_cpu_percent = (None if tick.usable_cpu is None or previous.usable_cpu is None
                              else _system_percents(previous.usable_cpu, tick.usable_cpu)[0])
        if system_cpu_percent is None:
            # Less than one kernel clock tick since the last reading (stop() right
            # after a thread tick): rates over so short a span are noise. Totals are kept.
            return
        roles = self._roles(mapping)
        main_key = next(key for key in tick.processes if key[0] == self._pid)
        in_workers = [key for key in tick.processes if roles[key].in_worker_tree]
        pss = [self._tracks[key].pss_last_bytes for key in in_workers]
        self._append_sample(
            HostSample(
                at_s=tick.at_s,
                system_cpu_percent=system_cpu_percent,
                usable_cpu_percent=usable_cpu_percent,
                iowait_percent=iowait_percent,
                main_cpu_percent=100.0 * cpu_delta_s[main_key] / dt_s,
                workers_cpu_percent=100.0 * sum(cpu_delta_s[key] for key in in_workers) / dt_s,
                main_rss_bytes=tick.processes[main_key].rss_bytes,
                workers_rss_bytes=sum(tick.processes[key].rss_bytes for key in in_workers),
                # None unless every live worker has a PSS reading: a partial sum would mislead
                workers_pss_bytes=sum(p or 0 for p in pss) if pss and None not in pss else None,
                read_bytes_per_s=None if read_bytes_delta is None else read_bytes_delta / dt_s,
                read_chars_per_s=None if read_chars_delta is None else read_chars_delta / dt_s,
                available_memory_bytes=tick.available_memory_bytes,
            )
        )

    def _new_track(
        self, reading: _ProcessReading, at_s: float, is_baseline: bool
    ) -> _ProcessTrack:
        # A process present at the baseline is counted from then on; one first seen later was
        # born since the previous tick, so all of its counters belong to the observed window.
        cpu_s = reading.cpu_s if is_baseline else 0.0
        read_bytes = reading.read_bytes if is_baseline else 0
        read_chars = reading.read_chars if is_baseline else 0
        runqueue_s = reading.runqueue_s if is_baseline else 0.0
        return _ProcessTrack(
            pid=reading.key[0],
            ppid=reading.ppid,
            first_seen_at_s=at_s,
            last_seen_at_s=at_s,
            baseline_cpu_s=cpu_s,
            last_cpu_s=cpu_s,
            baseline_read_bytes=None if reading.read_bytes is None else read_bytes,
            last_read_bytes=None if reading.read_bytes is None else read_bytes,
            baseline_read_chars=None if reading.read_chars is None else read_chars,
            last_read_chars=None if reading.read_chars is None else read_chars,
            baseline_runqueue_s=None if reading.runqueue_s is None else runqueue_s,
            last_runqueue_s=None if reading.runqueue_s is None else runqueue_s,
        )

    def _append_sample(self, sample: HostSample) -> None:
        if self._delta_ticks % self._stride == 0:
            self._timeline.append(sample)
            if len(self._timeline) > self._max_samples:
                self._timeline = self._timeline[::2]
                self._stride *= 2
        self._delta_ticks += 1

    def _roles(self, mapping: dict[int, int]) -> dict[tuple[int, float], _Role]:
        ppid_of = {track.pid: track.ppid for track in self._tracks.values()}
        return {
            key: _classify(track.pid, ppid_of, self._pid, mapping)
            for key, track in self._tracks.items()
        }

    # -- results -----------------------------------------------------------------------------

    name = "host"

    def record(self) -> HostRecord:
        """A consistent copy of what was measured so far; callable any time, from any thread.

        ``samples_taken`` counts ticks that produced a timeline sample (the baseline reading in
        ``start()`` does not); ``duration_s`` is real seconds from the baseline to the latest
        reading. ``main_cpu_s`` includes ``overhead_cpu_s``; ``workers_cpu_s`` covers workers and
        their descendants and is ``None`` when no worker process was ever seen. Per process,
        ``read_bytes`` / ``read_chars`` are totals over the observed window (``None`` when the
        platform or permissions hide them). Status is ``unavailable`` before ``start()`` or when
        psutil could not read the main process. When the lock is not free within
        :data:`~pipecheck._locks.SNAPSHOT_LOCK_TIMEOUT_S` (its holder was stopped by a signal
        whose handler is saving the report) the previous snapshot is returned, or without one
        the data is read as the stopped holder left it.
        """
        mapping = self._current_worker_ids()
        with bounded(self._lock) as held:
            if held or self._last_record is None:
                # Unheld only when the holder is stopped: read what is there rather than nothing.
                self._last_record = self._build_record(mapping)
            return self._last_record

    def _build_record(self, mapping: dict[int, int]) -> HostRecord:
        first, last = self._first_tick, self._last_tick
        if self._unavailable or first is None or last is None:
            return HostRecord(
                status="unavailable",
                interval_s=self._interval_s,
                samples_taken=0,
                duration_s=0.0,
                system_cpu_percent_mean=None,
                iowait_fraction_mean=None,
                read_bytes_per_s=None,
                read_chars_per_s=None,
                main_cpu_s=None,
                workers_cpu_s=None,
                overhead_cpu_s=self._overhead_cpu_s,
                note=self._note or "host probe not started",
            )
        roles = self._roles(mapping)
        processes = sorted(
            (_process_stats(track, roles[key]) for key, track in self._tracks.items()),
            key=lambda stats: (stats.first_seen_at_s, stats.pid),
        )
        duration_s = last.elapsed_s - first.elapsed_s
        system_cpu_percent, iowait_percent = _system_percents(first.system_cpu, last.system_cpu)
        usable_cpu_percent = (None if first.usable_cpu is None or last.usable_cpu is None
                              else _system_percents(first.usable_cpu, last.usable_cpu)[0])
        in_worker_tree = [
            track for key, track in self._tracks.items() if roles[key].in_worker_tree
        ]
        main_cpu_s = sum(t.cpu_s for k, t in self._tracks.items() if roles[k].name == MAIN)
        disk, disk_busy = _busiest_disk(first.disk_busy_ms, last.disk_busy_ms, duration_s)
        seen = self._neighbours.totals if self._neighbours is not None else None
        if seen is not None and not seen.window_s > 0:
            seen = None
        return HostRecord(
            status="ok",
            interval_s=self._interval_s,
            samples_taken=self._delta_ticks,
            duration_s=duration_s,
            system_cpu_percent_mean=system_cpu_percent,
            usable_cpu_percent_mean=usable_cpu_percent,
            iowait_fraction_mean=None if iowait_percent is None else iowait_percent / 100.0,
            read_bytes_per_s=_rate(_total(p.read_bytes for p in processes), duration_s),
            read_chars_per_s=_rate(_total(p.read_chars for p in processes), duration_s),
            main_cpu_s=main_cpu_s,
            workers_cpu_s=sum(t.cpu_s for t in in_worker_tree) if in_worker_tree else None,
            overhead_cpu_s=self._overhead_cpu_s,
            processes=processes,
            timeline=list(self._timeline),
            note=self._note,
            disk_busy_fraction_mean=disk_busy,
            busiest_disk=disk,
            others_scanned_s=None if seen is None else seen.window_s,
            others_cpu_s=None if seen is None else seen.others_cpu_s,
            others_same_group_cpu_s=None if seen is None else seen.same_group_cpu_s,
            others_groups_cpu_s=None if seen is None else list(seen.other_groups_cpu_s),
        )


# -- helpers ---------------------------------------------------------------------------------


def _read_process(
    proc: psutil.Process, want_pss: bool, *, must_succeed: bool
) -> Optional[_ProcessReading]:
    """Read one process; ``None`` if it vanished or is unreadable (unless ``must_succeed``)."""
    try:
        with proc.oneshot():  # one read of /proc/<pid>/stat and statm for all of these
            ppid = proc.ppid()
            create_time = proc.create_time()
            cpu = proc.cpu_times()
            rss_bytes = proc.memory_info().rss
    except _GONE:
        if must_succeed:
            raise
        return None
    read_bytes = read_chars = pss_bytes = uss_bytes = None
    try:
        io = proc.io_counters()
        read_bytes = io.read_bytes
        read_chars = getattr(io, "read_chars", None)  # Linux only
    except (*_GONE, AttributeError, NotImplementedError):  # no io_counters on this platform
        pass
    if want_pss:
        try:
            full = proc.memory_full_info()
            pss_bytes = getattr(full, "pss", None)  # Linux only
            uss_bytes = getattr(full, "uss", None)
        except (*_GONE, AttributeError, NotImplementedError):
            pass
    return _ProcessReading(
        key=(proc.pid, create_time),
        ppid=ppid,
        cpu_s=cpu.user + cpu.system,
        rss_bytes=rss_bytes,
        pss_bytes=pss_bytes,
        read_bytes=read_bytes,
        read_chars=read_chars,
        runqueue_s=_runqueue_s(proc.pid),
        uss_bytes=uss_bytes,
    )


def _runqueue_s(pid: int) -> Optional[float]:
    """Seconds the process's main thread has waited runnable for a core (second field of
    ``/proc/<pid>/schedstat``, nanoseconds); ``None`` where the file does not exist."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _affinity_subset(process: psutil.Process) -> Optional[list[int]]:
    """The CPUs ``process`` may run on when that is not all of them (``cpu_affinity``, Linux
    and Windows); ``None`` otherwise, or where it cannot be read."""
    try:
        cpus = sorted(process.cpu_affinity() or [])
    except Exception:  # not on this platform, or unreadable: the machine-wide figure only
        return None
    count = psutil.cpu_count() or 0
    return cpus if cpus and len(cpus) < count else None


def _usable_cpu_times(cpus: Optional[list[int]]) -> Any:
    """``psutil.cpu_times()`` fields summed over ``cpus`` (from the per-CPU times), or ``None``
    without a subset or when the per-CPU times do not cover it."""
    if cpus is None:
        return None
    per_cpu = psutil.cpu_times(percpu=True)
    if max(cpus) >= len(per_cpu):
        return None
    chosen = [per_cpu[i] for i in cpus]
    return type(chosen[0])(*(sum(values) for values in zip(*chosen)))


def _neighbour_scan(pid: int) -> Optional[NeighbourScan]:
    """A :class:`NeighbourScan` for ``pid``'s scheduling group; ``None`` where it cannot be
    read (not Linux, no procfs) or fails, so no scan runs."""
    try:
        scan = NeighbourScan(pid)
    except Exception:  # never the host sampler's failure
        return None
    return scan if scan.group is not None else None


def _update_track(track: _ProcessTrack, reading: _ProcessReading, at_s: float, dt_s: float) -> None:
    track.ppid = reading.ppid
    track.last_seen_at_s = at_s
    track.observed_s += dt_s
    track.last_cpu_s = reading.cpu_s
    track.rss_max_bytes = max(track.rss_max_bytes, reading.rss_bytes)
    if reading.pss_bytes is not None or reading.uss_bytes is not None:
        if reading.pss_bytes is not None:
            track.pss_last_bytes = reading.pss_bytes
            track.pss_max_bytes = max(track.pss_max_bytes or 0, reading.pss_bytes)
        if reading.uss_bytes is not None:
            track.uss_max_bytes = max(track.uss_max_bytes or 0, reading.uss_bytes)
        track.add_memory(MemorySample(at_s=at_s, rss_bytes=reading.rss_bytes,
                                      pss_bytes=reading.pss_bytes, uss_bytes=reading.uss_bytes))
    if reading.runqueue_s is not None:
        if track.baseline_runqueue_s is None:
            track.baseline_runqueue_s = reading.runqueue_s
        track.last_runqueue_s = reading.runqueue_s
    track.add_cpu(CpuSample(
        at_s=at_s, cpu_s=track.cpu_s,
        runqueue_s=_delta_s(track.baseline_runqueue_s, track.last_runqueue_s),
        read_bytes=cast(Optional[int], _delta_s(track.baseline_read_bytes, track.last_read_bytes))))
    if reading.read_bytes is not None:
        if track.baseline_read_bytes is None:  # became readable later: count from here
            track.baseline_read_bytes = reading.read_bytes
        track.last_read_bytes = reading.read_bytes
    if reading.read_chars is not None:
        if track.baseline_read_chars is None:
            track.baseline_read_chars = reading.read_chars
        track.last_read_chars = reading.read_chars


def _classify(
    pid: int, ppid_of: dict[int, int], main_pid: int, mapping: dict[int, int]
) -> _Role:
    """Role of ``pid`` in the main process's tree: main, worker (per ``mapping``, or any direct
    child of main when the mapping is empty) or child (anything else)."""

    def is_worker(candidate: int) -> bool:
        if mapping:
            return candidate in mapping
        return ppid_of.get(candidate) == main_pid

    if pid == main_pid:
        return _Role(MAIN, None, False)
    if is_worker(pid):
        return _Role(WORKER, mapping.get(pid), True)
    seen = {pid}
    ancestor = ppid_of.get(pid)
    while ancestor is not None and ancestor != main_pid and ancestor not in seen:
        if is_worker(ancestor):  # a process a worker started: its CPU is that worker's
            return _Role(CHILD, mapping.get(ancestor), True)
        seen.add(ancestor)
        ancestor = ppid_of.get(ancestor)
    return _Role(CHILD, None, False)


def _process_stats(track: _ProcessTrack, role: _Role) -> ProcessStats:
    def delta(baseline: Optional[int], last: Optional[int]) -> Optional[int]:
        return None if baseline is None or last is None else last - baseline

    return ProcessStats(
        pid=track.pid,
        role=role.name,
        cpu_s=track.cpu_s,
        # over the ticks it was seen in; 0.0 only when seen at a single instant (cpu_s is 0 too)
        cpu_percent_mean=100.0 * track.cpu_s / track.observed_s if track.observed_s > 0 else 0.0,
        rss_max_bytes=track.rss_max_bytes,
        pss_max_bytes=track.pss_max_bytes,
        read_bytes=delta(track.baseline_read_bytes, track.last_read_bytes),
        read_chars=delta(track.baseline_read_chars, track.last_read_chars),
        first_seen_at_s=track.first_seen_at_s,
        last_seen_at_s=track.last_seen_at_s,
        worker_id=role.worker_id,
        runqueue_s=_delta_s(track.baseline_runqueue_s, track.last_runqueue_s),
        uss_max_bytes=track.uss_max_bytes,
        memory=list(track.memory),
        cpu=list(track.cpu_series),
    )


def _delta_s(baseline: Optional[float], last: Optional[float]) -> Optional[float]:
    return None if baseline is None or last is None else last - baseline


def _disk_busy_ms() -> Optional[dict[str, int]]:
    """Cumulative milliseconds each disk had I/O in flight (``busy_time``, iostat's %util
    numerator; about 60 us to read here); ``None`` where psutil has no such counter."""
    try:
        counters = psutil.disk_io_counters(perdisk=True) or {}
    except (OSError, RuntimeError, NotImplementedError):
        return None
    busy = {name: c.busy_time for name, c in counters.items() if hasattr(c, "busy_time")}
    return busy or None


def _busiest_disk(
    before: Optional[dict[str, int]], after: Optional[dict[str, int]], duration_s: float
) -> tuple[Optional[str], Optional[float]]:
    """(name, busy share 0-1) of the disk busiest between two readings."""
    if not before or not after or duration_s <= 0:
        return None, None
    shares = {name: (after[name] - before[name]) / 1e3 / duration_s
              for name in after if name in before}
    if not shares:
        return None, None
    name = max(shares, key=lambda n: shares[n])
    return name, _clamp_percent(100.0 * shares[name]) / 100.0


def _system_percents(before: Any, after: Any) -> tuple[Optional[float], Optional[float]]:
    """(busy percent of all cores, iowait percent) between two ``psutil.cpu_times()`` readings,
    computed the way psutil's ``cpu_percent`` does; ``None`` when no time passed or the platform
    has no iowait."""
    total_s = _cpu_total_s(after) - _cpu_total_s(before)
    if total_s <= 0:
        return None, None
    idle_s = after.idle - before.idle
    has_iowait = hasattr(after, "iowait")
    iowait_s = after.iowait - before.iowait if has_iowait else 0.0
    busy_percent = 100.0 * (total_s - idle_s - iowait_s) / total_s
    iowait_percent = 100.0 * iowait_s / total_s if has_iowait else None
    if iowait_percent is not None:
        iowait_percent = _clamp_percent(iowait_percent)
    return _clamp_percent(busy_percent), iowait_percent


def _cpu_total_s(times: Any) -> float:
    # On Linux guest time is already inside user/nice; psutil and htop subtract it too.
    return sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _clamp_percent(value: float) -> float:
    return min(100.0, max(0.0, value))  # counters read microseconds apart can overshoot a hair


def _add_delta(total: Optional[int], now: Optional[int], before: Optional[int]) -> Optional[int]:
    """Add ``now - before`` to a running total; ``None`` stays ``None`` until a delta is known."""
    if now is None or before is None:
        return total
    return (total or 0) + now - before


def _total(values: Any) -> Optional[int]:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _rate(amount: Optional[int], duration_s: float) -> Optional[float]:
    if amount is None or duration_s <= 0:
        return None
    return amount / duration_s


