"""``pipecheck attach PID``: measure a training process that was never wrapped, from outside.

How it works, and why: docs/internals.md (``pipecheck/attach.py``).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import select
import signal
import threading
import time
from datetime import datetime, timezone
from types import FrameType
from typing import Callable, Optional

import psutil

from pipecheck import _clock
from pipecheck._version import __version__
from pipecheck.analysis.attach import analyze_attach
from pipecheck.errors import BadInputError
from pipecheck.probes.host import HostProbe
from pipecheck.probes.py_spy_setup import check_target, find_py_spy
from pipecheck.probes.stacks import StackSampler
from pipecheck.records import Environment, LoaderConfig, Timeline
from pipecheck.report import Report

DEFAULT_DURATION_S = 10.0
"""Seconds sampled by default: 500 main-thread samples at the default rate, a Wilson interval
of at most +-4.4 percentage points (at a 50% stall)."""

ATTACH_RATE_HZ = 50
"""Samples per second and process while attached: higher than
:data:`~pipecheck.probes.stacks.DEFAULT_RATE_HZ` (20) because the stall estimate's interval
narrows with the main thread's sample count (10 s give 500 samples instead of 200). Its cost:
docs/decisions.md#attach_rate_hz."""

HOST_INTERVAL_S = 0.5
"""Seconds between psutil readings of the target and its children."""

HOST_PSS_INTERVAL_S = 0.5
"""Seconds between USS/PSS readings: a 10 s window then has about 20, well above what the
memory-growth test needs (:data:`pipecheck.analysis.memory.MIN_READINGS` after its warm-up
third)."""

_POLL_S = 0.1
"""Seconds between checks that the target still runs (same PID, same start time)."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that end the window early and still give a report (:class:`StopSignals`)."""


def signal_status(signum: int) -> str:
    """``attach.status`` for a window ended by signal ``signum``: ``interrupted`` for SIGINT
    (Ctrl-C), ``terminated`` otherwise (SIGTERM, SIGHUP)."""
    return "interrupted" if signum == signal.SIGINT else "terminated"


class StopSignals:
    """While entered (from the main thread; elsewhere a no-op, as Python delivers signals to
    the main thread only): SIGINT, SIGTERM and SIGHUP are recorded instead of ending the
    process, and wake :meth:`wait`. The handler takes no lock (a list append and a one-byte
    write to a pipe). A signal whose disposition was ``SIG_IGN`` (``nohup``) is left ignored.
    The previous handlers are put back on exit. The CLI enters it around sampling *and*
    writing the report, so a second signal cannot lose the report either."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._pipe: Optional[tuple[int, int]] = None
        self._previous: dict[int, object] = {}

    @property
    def first(self) -> Optional[int]:
        """The first stop signal received (its number), ``None`` before any."""
        return self.received[0] if self.received else None

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is not threading.main_thread():
            return self
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._pipe = (read, write)
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) == signal.SIG_IGN:
                continue
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        self.received.append(signum)
        if self._pipe is not None:
            try:
                os.write(self._pipe[1], b"s")
            except OSError:  # the pipe is full: a byte is waiting already
                pass

    def wait(self, timeout_s: float) -> Optional[int]:
        """Sleep up to ``timeout_s`` seconds, less when a stop signal arrives; the first
        signal received so far (its number) or ``None``."""
        if self.first is None:
            if self._pipe is None:
                time.sleep(timeout_s)
            else:
                select.select([self._pipe[0]], [], [], timeout_s)
        return self.first


class StoppedBeforeSampling(Exception):
    """A stop signal (``signum``) arrived while the target was being checked, before any
    sampling: there is nothing to report."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"{signal.Signals(signum).name} received before sampling started")
        self.signum = signum


class _Target:
    """The attached process: its PID and its start time, so a reused PID is another process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.create_time = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            raise BadInputError(f"no process with PID {pid}") from None
        except psutil.Error as error:
            raise BadInputError(f"cannot read PID {pid}: {error}") from None

    def running(self) -> bool:
        """Whether the target still runs: a process with its PID and start time, not a
        zombie (read afresh from ``/proc/PID/stat``)."""
        try:
            now = psutil.Process(self.pid)
            return (now.create_time() == self.create_time
                    and now.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False


def attach(pid: int, duration_s: Optional[float] = None, *, rate_hz: Optional[int] = None,
           on_started: Optional[Callable[[float], None]] = None,
           signals: Optional[StopSignals] = None) -> Report:
    """Sample process ``pid`` for ``duration_s`` seconds (> 0; ``None``:
    :data:`DEFAULT_DURATION_S`) at ``rate_hz`` (>= 1; ``None``: :data:`ATTACH_RATE_HZ`)
    samples per second and return its :class:`~pipecheck.report.Report` (``kind="attach"``).

    Ends early when the target exits or its PID is reused (``attach.status``
    ``target-exited``), or on SIGINT, SIGTERM or SIGHUP (``interrupted`` / ``terminated``,
    ``attach.signal`` naming it: the report covers what was measured; the caller decides the
    exit code: the CLI's is ``128 + N``). ``signals``: an entered :class:`StopSignals` the
    caller holds beyond this call (the CLI, to write the report under it too; a signal it
    received while the target was checked raises :class:`StoppedBeforeSampling`); without it,
    one is entered for the sampling only. ``on_started`` is called with the duration once
    sampling has started. Raises :class:`~pipecheck.errors.BadInputError` (one line) for a bad
    duration or rate, no such process, this process itself, a process that is not Python, or
    one py-spy may not trace (with how to allow it)."""
    duration_s = DEFAULT_DURATION_S if duration_s is None else duration_s
    rate_hz = ATTACH_RATE_HZ if rate_hz is None else rate_hz
    if not 0 < duration_s < float("inf"):
        raise BadInputError(f"--duration must be a positive number of seconds, got {duration_s}")
    if rate_hz < 1:
        raise BadInputError(f"--rate must be at least 1 sample per second, got {rate_hz}")
    if pid <= 0 or not psutil.pid_exists(pid):
        raise BadInputError(f"no process with PID {pid}")
    if pid == os.getpid():
        raise BadInputError(f"PID {pid} is pipecheck itself; give the training process's PID")
    target = _Target(pid)
    py_spy = find_py_spy()
    problem, python_version = check_target(pid, py_spy)
    if signals is not None and signals.first is not None:  # py-spy dump may have had it too
        raise StoppedBeforeSampling(signals.first)
    if problem is not None:
        raise BadInputError(problem)
    environment = _environment(pid, python_version)
    if signals is not None:
        return _sample(target, duration_s, rate_hz, py_spy, environment, on_started, signals)
    with StopSignals() as own:
        return _sample(target, duration_s, rate_hz, py_spy, environment, on_started, own)


def _sample(target: _Target, duration_s: float, rate_hz: int, py_spy: Optional[str],
            environment: Environment, on_started: Optional[Callable[[float], None]],
            signals: StopSignals) -> Report:
    """Sample ``target`` until the window ends; the report."""
    pid = target.pid
    workers: dict[int, int] = {}
    lock = threading.Lock()

    def worker_ids() -> dict[int, int]:
        with lock:
            return dict(workers)

    host = HostProbe(run_start=_clock.monotonic(), interval_s=HOST_INTERVAL_S,
                     pss_interval_s=HOST_PSS_INTERVAL_S, worker_ids=worker_ids, pid=pid)
    sampler = StackSampler(pid, window_s=duration_s, rate_hz=rate_hz, py_spy=py_spy,
                           idle_subprocesses=True)
    created = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    started = time.time()
    host.start()
    sampler.start()
    status = "complete"
    try:
        if on_started is not None:
            on_started(duration_s)
        status = _wait(target, started + duration_s, signals)
    finally:  # py-spy stopped and its folder removed whatever happened
        ended = time.time()
        sampler.stop()
        stacks = sampler.record()
        with lock:
            workers.update({int(p): i for i, p in enumerate(
                sorted(stacks.worker_samples_by_pid, key=int))})
        host.stop()
        host_record = host.record()
    stop_signal = signals.first if status in ("interrupted", "terminated") else None
    analysis = analyze_attach(stacks, host_record, pid=pid, status=status,
                              window_start_unix_s=started, window_end_unix_s=ended,
                              signal=(signal.Signals(stop_signal).name
                                      if stop_signal is not None else None))
    processes = [dataclasses.replace(p, cpu=[]) for p in host_record.processes]
    return Report(
        kind="attach",
        created=created,
        environment=environment,
        loader=LoaderConfig(type="DataLoader" if analysis.section.dataloader_seen
                            else "unknown", num_workers=analysis.section.num_workers),
        consumer=analysis.consumer,
        producer=analysis.producer,
        host=dataclasses.replace(host_record, timeline=[], processes=processes),
        diagnosis=analysis.diagnosis,
        recommendations=[],
        timeline=Timeline(host=list(host_record.timeline)),
        stacks=stacks,
        attach=analysis.section,
    )


def _wait(target: _Target, until: float, signals: StopSignals) -> str:
    """Wait until ``until`` (``time.time()``), the target's exit (or its PID's reuse) or a stop
    signal: ``complete``, ``target-exited``, ``interrupted`` or ``terminated``."""
    while True:
        if not target.running():
            return "target-exited"
        left = until - time.time()
        if left <= 0:
            return "complete"
        signum = signals.wait(min(_POLL_S, left))
        if signum is not None:
            return signal_status(signum)


def _environment(pid: int, python_version: Optional[str]) -> Environment:
    """The host and the target as far as they can be read from outside: its CPU affinity, its
    Python version (py-spy's), its torch version and CUDA use from the libraries it has mapped
    (:func:`_mapped`); ``None`` / ``False`` where they cannot be read."""
    cpu_count = os.cpu_count() or 1
    torch_version, cuda = _mapped(pid)
    try:
        usable = len(psutil.Process(pid).cpu_affinity() or []) or cpu_count
    except (psutil.Error, AttributeError):
        usable = cpu_count
    return Environment(
        cpu_count=cpu_count,
        usable_cpus=usable,
        python=python_version or "unknown",
        torch=torch_version,
        platform=platform.platform(),
        cuda=cuda,
        total_memory_bytes=int(psutil.virtual_memory().total),
        pipecheck=__version__,
    )


_TORCH_LIB = re.compile(r"(\S*)/torch/lib/libtorch[^/]*\.so")
_TORCH_DIST = re.compile(r"^torch-([^-]+)\.dist-info$")


def _mapped(pid: int) -> tuple[Optional[str], bool]:
    """``(torch version, CUDA in use)`` from the target's ``/proc/PID/maps``: the version is
    read from the ``torch-VERSION.dist-info`` folder beside the ``torch/lib/libtorch*.so`` it
    mapped; CUDA is in use when it mapped ``libcuda`` (it created a CUDA context)."""
    version: Optional[str] = None
    cuda = False
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                cuda = cuda or "libcuda.so" in line
                found = _TORCH_LIB.search(line) if version is None else None
                if found is not None:
                    version = _dist_version(found.group(1))
    except OSError:
        pass
    return version, cuda


def _dist_version(site_packages: str) -> Optional[str]:
    try:
        names = os.listdir(site_packages)
    except OSError:
        return None
    versions = [m.group(1) for m in map(_TORCH_DIST.match, names) if m is not None]
    return versions[0] if len(versions) == 1 else None
