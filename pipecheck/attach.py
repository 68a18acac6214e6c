"""``pipecheck attach PID``: measure a training process that was never wrapped, from outside.

Two py-spy processes sample the target for ``duration_s`` (:class:`~pipecheck.probes.stacks.
StackSampler` with ``idle_subprocesses``: on-CPU hot functions of the main process and its
workers, and every stack of the main thread and the workers, on or off the CPU), and psutil
reads the target's and its children's CPU, IO and memory
(:class:`~pipecheck.probes.host.HostProbe` on the target's pid). py-spy runs with
``--nonblocking``: it reads the target's memory without ever pausing it, so the training loop
runs at its own pace. py-spy's documentation states the trade-off: not pausing "will reduce the
performance impact on the target python process, but can lead to incorrect results like
partial stack traces being returned or a higher sampling error rate" (``Config.non_blocking``).
Measured with ``benchmarks/attach_accuracy.py`` (three loaders, 0 and 2 workers, 10 s), the
nonblocking estimate stayed within 2.9 percentage points of the script's own stall, inside its
Wilson interval every time, so torn stacks do not bias it measurably; pausing the target for
every sample is a cost pipecheck will not impose on someone else's training run. pipecheck never signals
the target, never writes into it and does not change its ptrace permissions: a target that
cannot be traced is refused up front with a one-line reason
(:func:`~pipecheck.probes.stacks.check_target`).

Ctrl-C ends the window early; what was measured is still analysed and reported
(``attach.status`` ``interrupted``). The analysis is :mod:`pipecheck.analysis.attach`.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import signal
import threading
import time
from datetime import datetime, timezone
from typing import Callable, Optional

import psutil

from pipecheck import _clock
from pipecheck._version import __version__
from pipecheck.analysis.attach import analyze_attach
from pipecheck.errors import BadInputError
from pipecheck.probes.host import HostProbe
from pipecheck.probes.stacks import StackSampler, check_target, find_py_spy
from pipecheck.records import Environment, LoaderConfig, Timeline
from pipecheck.report import Report

DEFAULT_DURATION_S = 10.0
"""Seconds sampled by default: 500 main-thread samples at the default rate, a Wilson interval
of at most +-4.4 percentage points (at a 50% stall)."""

ATTACH_RATE_HZ = 50
"""Samples per second and process while attached. Higher than :data:`~pipecheck.probes.stacks.
DEFAULT_RATE_HZ` (20) because the stall estimate's interval narrows with the main thread's
sample count (10 s give 500 samples instead of 200). py-spy and the psutil sampler run in
pipecheck's processes: 4.4% of one core with a 0-worker target, 12% with 2 workers; on a host
with no idle core that CPU is taken from the target (a latency-bound 0-worker target ran 3.4%
slower while attached, the paired median of 6 interleaved 10 s rounds on the project's loaded
2-core machine; ``benchmarks/attach_overhead.py``)."""

HOST_INTERVAL_S = 0.5
"""Seconds between psutil readings of the target and its children."""

HOST_PSS_INTERVAL_S = 0.5
"""Seconds between USS/PSS readings: a 10 s window then has about 20, well above what the
memory-growth test needs (:data:`pipecheck.analysis.memory.MIN_READINGS` after its warm-up
third)."""

_POLL_S = 0.1


def attach(pid: int, duration_s: Optional[float] = None, *, rate_hz: Optional[int] = None,
           on_started: Optional[Callable[[float], None]] = None) -> Report:
    """Sample process ``pid`` for ``duration_s`` seconds (> 0; ``None``:
    :data:`DEFAULT_DURATION_S`) at ``rate_hz`` (>= 1; ``None``: :data:`ATTACH_RATE_HZ`)
    samples per second and return its :class:`~pipecheck.report.Report` (``kind="attach"``).

    Ends early when the target exits (``attach.status`` ``target-exited``) or on Ctrl-C
    (``interrupted``: the report covers what was measured; the caller decides the exit code).
    ``on_started`` is called with the duration once sampling has started. Raises
    :class:`~pipecheck.errors.BadInputError` (one line) for a bad duration or rate, no such
    process, this process itself, a process that is not Python, or one py-spy may not trace
    (with how to allow it)."""
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
    py_spy = find_py_spy()
    problem, python_version = check_target(pid, py_spy)
    if problem is not None:
        raise BadInputError(problem)
    environment = _environment(pid, python_version)
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
    if on_started is not None:
        on_started(duration_s)
    status = "complete"
    try:
        status = _wait(pid, started + duration_s)
    except KeyboardInterrupt:
        status = "interrupted"
    ended = time.time()
    with _no_interrupts():  # a second Ctrl-C must not lose what was measured
        sampler.stop()
        stacks = sampler.record()
        with lock:
            workers.update({int(p): i for i, p in enumerate(
                sorted(stacks.worker_samples_by_pid, key=int))})
        host.stop()
        host_record = host.record()
    analysis = analyze_attach(stacks, host_record, pid=pid, status=status,
                              window_start_unix_s=started, window_end_unix_s=ended)
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


def _wait(pid: int, until: float) -> str:
    """Sleep until ``until`` (``time.time()``) or the target's exit: ``complete`` or
    ``target-exited``."""
    try:
        target = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return "target-exited"
    while (left := until - time.time()) > 0:
        time.sleep(min(_POLL_S, left))
        try:
            if target.status() == psutil.STATUS_ZOMBIE:
                return "target-exited"
        except psutil.NoSuchProcess:
            return "target-exited"
    return "complete"


class _no_interrupts:
    """Ignore SIGINT inside the block (main thread only; elsewhere a no-op), restoring the
    previous handler after."""

    def __enter__(self) -> None:
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


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
