"""Hot stacks: sample the training process and its DataLoader workers with py-spy for a bounded
window, and count which Python functions were on the CPU.

How it works, and why: docs/internals.md (``pipecheck/probes/stacks.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from typing import Any, Optional, Sequence

from pipecheck import _owned
from pipecheck._locks import bounded
from pipecheck.probes import py_spy_setup
from pipecheck.probes.speedscope import Frame, SampledStack, read_speedscope
from pipecheck.records import HotFunction, StacksRecord

DEFAULT_WINDOW_S = 10.0
"""Seconds sampled by default: about 200 samples per busy process at the default rate."""

DEFAULT_RATE_HZ = 20
"""Samples per second and process: at 20 Hz a function taking 10% of a worker's time is estimated
within about +-2% from 200 samples. py-spy's own CPU is reported in every record
(``overhead_cpu_s``). pipecheck's choice (docs/decisions.md#default_rate_hz)."""

TOP_FUNCTIONS = 10
"""Functions listed in ``top`` / ``main_top``."""


DIR_PREFIX = "pipecheck-stacks."
"""Name prefix of py-spy's output folders in the temp dir."""

_STOP_TIMEOUT_S = 10.0
"""Seconds py-spy gets to write its output after SIGINT before it is killed."""
_WORKER_LOOP = "_worker_loop"  # torch.utils.data._utils.worker._worker_loop
_OWN_THREAD = "HostProbe._run"  # pipecheck's sampler thread in the main process
HOT_OUTPUT = "stacks.json"
"""py-spy's on-CPU samples (speedscope JSON), in the sampler's folder."""
IDLE_OUTPUT = "main.json"
"""The ``--idle`` sampler's output (speedscope JSON), in the sampler's folder."""


class StackSampler:
    """py-spy over ``pid`` and its descendants for ``window_s`` seconds at ``rate_hz``.

    ``pid`` defaults to this process, which then opts itself in to being traced for the window
    (:func:`allow_ptrace`); another process (``pipecheck attach``) is never touched: it must
    already be traceable. ``idle_subprocesses``: the ``--idle`` sampler covers the workers
    too, so workers blocked off the CPU (sleeping in ``__getitem__``, waiting for indices) are
    seen and their busy share counted (``StacksRecord.worker_busy_samples``).

    :meth:`start` launches py-spy from the watcher thread (or records why it cannot); the
    watcher ends the window after ``window_s`` and waits for py-spy to write its output;
    :meth:`stop` ends the window early if it is still open, waits for the watcher and parses
    the output; :meth:`record` returns the :class:`~pipecheck.records.StacksRecord`
    (``running`` until the window is over and stopped). py-spy dies with this process
    (:func:`die_with_parent`). ``py_spy``: the executable (default: :func:`find_py_spy`).
    ``rate_hz`` is truncated to whole samples per second. Raises ``ValueError`` for a
    non-positive window or a rate below 1 Hz. Never raises from start/stop/record.
    """

    def __init__(
        self,
        pid: Optional[int] = None,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        rate_hz: int = DEFAULT_RATE_HZ,
        py_spy: Optional[str] = None,
        idle_subprocesses: bool = False,
    ) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0 seconds, got {window_s!r}")
        if not rate_hz >= 1:  # py-spy takes whole samples per second: 0.5 would become 0
            raise ValueError(f"rate_hz must be >= 1 samples/s, got {rate_hz!r}")
        self.pid = os.getpid() if pid is None else pid
        self.window_s = float(window_s)
        self.rate_hz = int(rate_hz)
        self._py_spy = py_spy if py_spy is not None else py_spy_setup.find_py_spy()
        self._idle_subprocesses = idle_subprocesses
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._processes: list[subprocess.Popen] = []  # hot, then idle; set by the watcher
        self._exits: list[tuple[Optional[int], str]] = []  # their (status, stderr) once reaped
        self._watcher: Optional[threading.Thread] = None
        self._dir: Optional[str] = None  # py-spy's output folder, owned (pipecheck._owned)
        self._dir_fd: Optional[int] = None
        self._ptrace_opened = False  # allow_ptrace() succeeded and is not yet revoked
        self._started_at: Optional[float] = None
        self._record: Optional[StacksRecord] = None
        self._overhead_cpu_s: Optional[float] = None
        self._sampled_s: Optional[float] = None

    def start(self) -> None:
        """Launch py-spy now (idempotent). Opts this process in to being traced first."""
        with self._lock:
            if self._started_at is not None or self._record is not None:
                return
            self._started_at = time.perf_counter()
            reason = py_spy_setup.unavailable_reason(self._py_spy, py_spy_setup.ptrace_scope(),
                                                     py_spy_setup.has_cap_sys_ptrace())
            if reason is not None:
                self._record = self._result("unavailable", note=reason)
                return
            assert self._py_spy is not None  # unavailable_reason() names a missing py-spy
            if self.pid == os.getpid():  # never change another process's state
                self._ptrace_opened = py_spy_setup.allow_ptrace()
            try:
                _owned.sweep(tempfile.gettempdir(), DIR_PREFIX)
                self._dir_fd, self._dir = _owned.create_folder(tempfile.gettempdir(),
                                                               DIR_PREFIX)
            except OSError as error:
                self._close_ptrace()
                self._record = self._result("failed", note=f"no folder for py-spy: {error}")
                return
            common = ["--format", "speedscope", "--function", "--full-filenames",
                      "--nonblocking", "--rate", str(self.rate_hz), "--pid", str(self.pid)]
            hot = [self._py_spy, "record", "--subprocesses", *common, "--output",
                   os.path.join(self._dir, HOT_OUTPUT)]
            idle = [self._py_spy, "record", "--idle",
                    *(["--subprocesses"] if self._idle_subprocesses else []), *common, "--output",
                    os.path.join(self._dir, IDLE_OUTPUT)]
            launched = threading.Event()
            failure: list[OSError] = []
            self._watcher = threading.Thread(target=self._watch,
                                             args=([hot, idle], launched, failure),
                                             name="pipecheck-stacks", daemon=True)
            self._watcher.start()
            # Popen returns once py-spy has exec'd, or raises; bounded all the same, as the
            # caller may be the training loop.
            if not launched.wait(_STOP_TIMEOUT_S):
                self._stop.set()  # the watcher ends the window as soon as py-spy is up
                failure.append(OSError(f"py-spy was not running after {_STOP_TIMEOUT_S:g} s"))
            if failure:
                self.remove_files()
                self._close_ptrace()
                self._record = self._result("failed",
                                            note=f"py-spy could not start: {failure[0]}")

    def _watch(self, commands: list[list[str]], launched: threading.Event,
               failure: list[OSError]) -> None:
        """The watcher thread: start py-spy (so it dies with this thread's process, see
        :func:`die_with_parent`), end the window after ``window_s`` or when stopped (read
        py-spy's CPU, then SIGINT: py-spy writes its output on Ctrl-C) and reap it."""
        try:
            for command in commands:
                self._processes.append(_launch(command))
        except OSError as error:
            for process in self._processes:  # the first may be running already
                process.kill()
                _finish(process)
            failure.append(error)
            launched.set()
            return
        launched.set()
        self._stop.wait(self.window_s)
        used = [_cpu_s(p.pid) for p in self._processes if p.poll() is None]
        self._overhead_cpu_s = sum(u for u in used if u is not None) if used else None
        for process in self._processes:
            if process.poll() is None:
                try:
                    process.send_signal(signal.SIGINT)
                except OSError:
                    pass
        self._exits = [_finish(process) for process in self._processes]

    def stop(self) -> None:
        """End the window now if open, wait for py-spy and parse what it wrote. Idempotent."""
        with bounded(self._lock) as held:
            if not held or self._record is not None or self._watcher is None:
                return  # not held: the holder is stopped (a signal handler saving the report)
            self._stop.set()
            # py-spy gets _STOP_TIMEOUT_S to write, then a kill and another wait.
            self._watcher.join(2 * _STOP_TIMEOUT_S + 1.0)
            assert self._started_at is not None
            self._sampled_s = min(self.window_s, time.perf_counter() - self._started_at)
            self._record = self._parse_result()
            self.remove_files()
            self._close_ptrace()

    def _close_ptrace(self) -> None:
        """The window is over: this process is no longer open to any tracer."""
        if self._ptrace_opened:
            self._ptrace_opened = not py_spy_setup.revoke_ptrace()

    def remove_files(self) -> None:
        """Delete py-spy's output folder now (idempotent; takes no lock, for a SIGTERM that
        ends the process: :mod:`pipecheck.autosave`)."""
        if self._dir is not None:
            fd, self._dir_fd = self._dir_fd, None
            _owned.remove(fd, self._dir)

    name = "stacks"

    def record(self) -> StacksRecord:
        """The result once stopped; before that a ``running`` record (or ``unavailable`` when
        sampling never started)."""
        with bounded(self._lock) as held:
            if self._record is not None:
                return self._record
            if not held:
                return self._result("running", note="the sampling window was still open")
            if self._started_at is None:
                return self._result("unavailable", note="stack sampling was not started")
            return self._result("running", note="the sampling window is still open")

    def _parse_result(self) -> StacksRecord:
        exits = list(self._exits)
        if len(exits) < len(self._processes):  # the watcher is stuck: py-spy never exited
            return self._result("failed", note="py-spy did not exit after SIGINT and SIGKILL")
        try:
            hot = self._read(HOT_OUTPUT)
            idle = self._read(IDLE_OUTPUT)
        except (OSError, ValueError) as error:
            return self._result("failed", note=f"py-spy's output could not be read: {error}")
        if not hot and not idle:
            stderr = "\n".join(err for _, err in exits)
            returncode = exits[0][0] if exits else None
            detail = py_spy_setup.last_error_line(stderr) or f"exit status {returncode}"
            if "permission" in stderr.lower() or "operation not permitted" in stderr.lower():
                return self._result(
                    "failed", note=f"py-spy was denied ({detail}); {py_spy_setup.ENABLE_HINT}.")
            return self._result("failed", note=f"py-spy recorded nothing ({detail}).")
        counts = hot_functions(hot, self.pid)
        counts.update(main_wait(idle, self.pid))
        return self._result("ok", **counts)

    def _read(self, name: str) -> list[SampledStack]:
        """The stacks in py-spy's output ``name``; none when it wrote nothing."""
        if self._dir is None:
            return []
        path = os.path.join(self._dir, name)
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            return []
        return read_speedscope(path)

    def _result(self, status: str, **fields: Any) -> StacksRecord:
        window_s = self._sampled_s if self._sampled_s is not None else self.window_s
        return StacksRecord(status=status, window_s=window_s, rate_hz=self.rate_hz,
                            overhead_cpu_s=self._overhead_cpu_s, **fields)


def _pid(stack: SampledStack, main_pid: int) -> int:
    """The process a stack was sampled in (``main_pid`` where py-spy named none)."""
    return stack.pid if stack.pid is not None else main_pid


def _has(frames: tuple[Frame, ...], function: str) -> bool:
    return any(frame.function == function for frame in frames)


def hot_functions(stacks: list[SampledStack], main_pid: int,
                  top: int = TOP_FUNCTIONS) -> dict[str, Any]:
    """Hot functions from py-spy's on-CPU samples (:func:`~pipecheck.probes.speedscope.
    read_speedscope`).

    Samples of ``main_pid`` count as main, others as worker samples. Each worker sample is put
    in the pipeline stage it ran in (:func:`stage_of`): ``stages`` gives each stage's share of
    worker samples and every hot function its commonest stage. Worker samples count only
    while torch's worker loop (``_worker_loop``) is on the stack, i.e. while producing batches:
    a spawned worker's start-up (importing torch and the user's modules, often most of a short
    window) and shutdown are counted apart as ``worker_other_samples``; when no sample shows the
    worker loop (not a torch worker), all worker samples count. Main-process samples of
    pipecheck's own sampler thread are left out. Returns ``worker_samples``,
    ``worker_other_samples``, ``main_samples``, ``top`` (over worker samples, or over main
    samples when there are none), ``main_top`` and ``stages``."""
    self_counts: dict[bool, Counter] = {True: Counter(), False: Counter()}
    inclusive: dict[bool, Counter] = {True: Counter(), False: Counter()}
    totals = {True: 0, False: 0}
    other: list[SampledStack] = []  # worker samples outside the worker loop
    stages: Counter = Counter()
    leaf_stages: dict[Frame, Counter] = {}

    def count(frames: tuple[Frame, ...], samples: int, is_worker: bool) -> None:
        totals[is_worker] += samples
        if is_worker:
            stage = stage_of(frames)
            stages[stage] += samples
            leaf_stages.setdefault(frames[-1], Counter())[stage] += samples
        self_counts[is_worker][frames[-1]] += samples
        for frame in set(frames):
            inclusive[is_worker][frame] += samples

    for stack in stacks:
        if not stack.frames:
            continue
        is_worker = _pid(stack, main_pid) != main_pid
        if is_worker and not _has(stack.frames, _WORKER_LOOP):
            other.append(stack)
        elif is_worker or not _has(stack.frames, _OWN_THREAD):
            count(stack.frames, stack.samples, is_worker)
    other_samples = sum(stack.samples for stack in other)
    if not totals[True]:  # no torch worker loop anywhere: not DataLoader workers, count them all
        for stack in other:
            count(stack.frames, stack.samples, True)
        other_samples = 0
    worker_top = _top(self_counts[True], inclusive[True], totals[True], top, leaf_stages)
    main_top = _top(self_counts[False], inclusive[False], totals[False], top)
    return {
        "worker_samples": totals[True],
        "worker_other_samples": other_samples,
        "main_samples": totals[False],
        "top": worker_top if totals[True] else main_top,
        "main_top": main_top,
        "stages": {name: n / totals[True] for name, n in stages.most_common()} if totals[True]
        else {},
    }


_COLLATE_FILE = "torch/utils/data/_utils/collate.py"
_FETCH_FILE = "torch/utils/data/_utils/fetch.py"


def stage_of(frames: Sequence[Frame]) -> str:
    """The pipeline stage a worker stack (outermost frame first) ran in: the innermost frame
    that names one. A webdataset pipeline stage (a module-level function or an ``__iter__`` in
    the ``webdataset`` package: ``map``, ``decode``, ``tarfile_samples``, ``url_opener``, ...),
    torch's ``collate`` (``torch/utils/data/_utils/collate.py``) or ``fetch`` (the dataset's
    ``__getitem__`` / ``__iter__``, called from ``_utils/fetch.py``); ``worker loop``
    otherwise (waiting for indices, sending batches)."""
    for frame in reversed(frames):
        function, file = frame.function, frame.file.replace("\\", "/")
        if "/webdataset/" in file:
            if "." not in function:
                return function.lstrip("_")
            if function.endswith(".__iter__"):
                return function[: -len(".__iter__")]
        elif file.endswith(_COLLATE_FILE):
            return "collate"
        elif file.endswith(_FETCH_FILE):
            return "fetch"
    return "worker loop"


_RECEIVING_FILES = ("torch/multiprocessing/reductions.py", "multiprocessing/resource_sharer.py",
                    "multiprocessing/reduction.py")
_NEXT_FRAME = "_BaseDataLoaderIter.__next__"
_QUEUE_GET = "Queue.get"
_THREAD_ROOT = "Thread._bootstrap"
_PIN_LOOP = "_pin_memory_loop"
_PINNING = "pin_memory"  # torch.utils.data._utils.pin_memory.pin_memory


def main_wait(stacks: list[SampledStack], main_pid: Optional[int] = None) -> dict[str, Any]:
    """The main thread's time inside the DataLoader's ``__next__`` and the pin-memory thread's
    busy share, from py-spy ``--idle`` samples of the main process (every thread's stack, on
    or off the CPU). Main-thread samples are those of ``main_pid`` (every process's when
    ``main_pid`` is ``None``) in the thread whose id is the pid (Linux's main thread), or, when
    py-spy gave no such thread id, in threads not rooted in ``Thread._bootstrap``. Returns
    ``main_wait`` (fractions of the main thread's in-``next()`` samples: ``queue-empty``,
    ``receiving``, ``other``), ``main_wait_samples``, ``main_thread_samples`` (all the main
    thread's samples: the denominator of the stall estimate of :mod:`pipecheck.analysis.attach`)
    and ``pin_memory_busy_fraction`` (``None`` without a pin-memory thread). Each other process
    whose stacks show torch's worker loop is a DataLoader worker: ``worker_busy_samples`` /
    ``worker_samples_by_pid`` count, by pid (a string), its samples in a pipeline stage
    (:func:`stage_of` other than ``worker loop``: fetching or collating) and all its samples
    inside the worker loop."""
    counts = {"queue-empty": 0, "receiving": 0, "other": 0}
    pin_total = pin_busy = main_thread = 0
    worker_busy: Counter = Counter()
    worker_all: Counter = Counter()
    native_ids = main_pid is not None and any(
        s.thread_id == main_pid and _pid(s, main_pid) == main_pid for s in stacks)
    for stack in stacks:
        frames, samples = stack.frames, stack.samples
        if not frames:
            continue
        if main_pid is not None and _pid(stack, main_pid) != main_pid:
            if _has(frames, _WORKER_LOOP):
                key = str(stack.pid)
                worker_all[key] += samples
                if stage_of(frames) != "worker loop":
                    worker_busy[key] += samples
            continue
        if _has(frames, _PIN_LOOP):
            pin_total += samples
            if _has(frames, _PINNING):
                pin_busy += samples
            continue
        if (stack.thread_id != main_pid if native_ids
                else frames[0].function == _THREAD_ROOT):
            continue
        main_thread += samples
        if not _has(frames, _NEXT_FRAME):
            continue
        if any(f.file.replace("\\", "/").endswith(_RECEIVING_FILES) for f in frames):
            counts["receiving"] += samples
        elif _has(frames, _QUEUE_GET):
            counts["queue-empty"] += samples
        else:
            counts["other"] += samples
    total = sum(counts.values())
    return {
        "main_wait": {k: v / total for k, v in counts.items()} if total else {},
        "main_wait_samples": total,
        "main_thread_samples": main_thread,
        "pin_memory_busy_fraction": pin_busy / pin_total if pin_total else None,
        "worker_busy_samples": {pid: worker_busy[pid] for pid in sorted(worker_all)},
        "worker_samples_by_pid": dict(sorted(worker_all.items())),
    }


def _launch(command: list[str]) -> subprocess.Popen:
    # Its own session: the user's Ctrl-C (or a terminal's hangup) goes to the trainer or to
    # pipecheck, which then stops py-spy itself. It dies with the thread that launches it.
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=py_spy_setup.die_with_parent())


def _finish(process: subprocess.Popen) -> tuple[Optional[int], str]:
    """Wait for a signalled py-spy (kill it past the timeout); its exit status and stderr."""
    try:
        _, stderr = process.communicate(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    return process.returncode, (stderr or b"").decode(errors="replace")


def _top(self_counts: Counter, inclusive: Counter, total: int, top: int,
         leaf_stages: Optional[dict[Frame, Counter]] = None) -> list[HotFunction]:
    if not total:
        return []
    out = []
    leaf_stages = leaf_stages or {}
    for frame, samples in self_counts.most_common(top):
        stage = leaf_stages[frame].most_common(1)[0][0] if frame in leaf_stages else None
        out.append(HotFunction(function=frame.function, file=frame.file, line=frame.line,
                               fraction=samples / total,
                               inclusive_fraction=inclusive[frame] / total, samples=samples,
                               stage=stage))
    return out


def _cpu_s(pid: int) -> Optional[float]:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat``), ``None`` if gone."""
    try:
        import psutil

        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except Exception:  # the process may have exited; psutil errors vary by platform
        return None


