"""Run one trial of a named target in a child process, with a no-progress watchdog.

The child (``python -m pipecheck.stress.trial``; for the up-front check of a target,
``python -m pipecheck.stress.target_child``: :func:`check_target`) runs in a new session, so on a timeout the
whole process group (the child and its DataLoader workers) is killed with SIGKILL. The watchdog
counts seconds since the child's last sign of life: it started (imports done), it built the
loader, or it received a batch; start-up itself gets at least :data:`STARTUP_TIMEOUT_S`. The
child's stdout is discarded; its stderr is kept in a file and, when it dies without a result,
the signal or exit status is reported with the last stderr line that is not a warning.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

from pipecheck import _owned
from pipecheck.errors import BadInputError
from pipecheck.probes._ring import AREA_PREFIX, shared_dir
from pipecheck.probes.stages import FOLDER_PREFIX
from pipecheck.stress.settings import Step
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.target import is_file_target, split_target
from pipecheck.stress.trial import TrialLimits, TrialResult, failed, result_from_json

POLL_S = 0.05
"""Seconds between checks of the child's progress file."""

GROUP_EXIT_WAIT_S = 2.0
"""Longest wait (seconds) for the killed trial's other processes (its DataLoader workers) to
be gone before its shared files are swept; SIGKILL takes effect within milliseconds, so this
bound only matters where exited processes are not reaped (pipecheck's choice)."""

STARTUP_TIMEOUT_S = 60.0
"""Seconds the child may take to start (a fresh interpreter importing torch: 2-3 s on an idle
2-core machine, several times that under load) before its first sign of life, when that is
longer than the trial's own silence limit: a short ``--timeout`` must not fail a trial whose
interpreter is still starting (pipecheck's choice)."""


@dataclasses.dataclass(frozen=True)
class ChildOutcome:
    """How a child process of :func:`run_child` ended. ``timed_out``: killed by the watchdog;
    ``progress``: bytes in its progress file (its signs of life); ``returncode``: its exit
    status (negative: the signal that killed it); ``result``: its parsed ``result.json``
    (``None`` when it wrote none); ``reason``: the last stderr line that is not a warning (a
    traceback's exception line), ``None`` when there is none; ``wall_s``: seconds it ran."""

    timed_out: bool
    progress: int
    returncode: int
    result: Optional[dict]
    reason: Optional[str]
    wall_s: float

    def death(self) -> str:
        """How the process ended without a result: ``killed by signal SIGSEGV`` or ``exited
        with status 3``, with the stderr reason when there is one."""
        code = self.returncode
        if code < 0:
            try:
                how = f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        return f"{how}: {self.reason}" if self.reason else how


def run_child(module: str, request: dict, timeout_s: float,
              on_batches: Optional[Callable[[int], None]] = None) -> ChildOutcome:
    """Run ``python -m module REQUEST.json`` in a new session under the no-progress watchdog
    (module docstring) and return how it ended; the whole process group is SIGKILLed on the
    way out. ``request`` gets ``sys_path`` added; the child reads it, appends to the
    ``progress`` file beside it and writes ``result.json`` there."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pipecheck-trial-") as folder:
        request = {**request, "sys_path": [p for p in sys.path if p]}
        request_path = os.path.join(folder, "request.json")
        with open(request_path, "w", encoding="utf-8") as handle:
            json.dump(request, handle)
        progress_path = os.path.join(folder, "progress")
        stderr_path = os.path.join(folder, "stderr.txt")
        with open(stderr_path, "wb") as stderr:
            # The child's temp files (py-spy's folder, multiprocessing's listener sockets)
            # go in the trial's folder, removed with it even when the child is killed.
            child = subprocess.Popen(
                [sys.executable, "-m", module, request_path],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                start_new_session=True, env=dict(os.environ, TMPDIR=folder))
        try:
            timed_out = _watch(child, progress_path, timeout_s, on_batches)
        finally:
            _kill_group(child)
            _sweep_shared_files()
        result_path = os.path.join(folder, "result.json")
        result = None
        if not timed_out and os.path.exists(result_path):
            with open(result_path, encoding="utf-8") as handle:
                result = json.load(handle)
        return ChildOutcome(timed_out, _size(progress_path), child.returncode, result,
                            _last_error(stderr_path), time.perf_counter() - started)


def run_isolated(target: str, config: LoaderSettings, limits: TrialLimits, *,
                 step: Optional[Step], timeout_s: float,
                 on_batches: Optional[Callable[[int], None]] = None) -> TrialResult:
    """Run the trial in a child process and return its result.

    ``timeout_s`` (> 0) is the longest silence tolerated once the child has started: no loader
    or batch within that many seconds kills the child and gives a failed result ("timed out
    ..."); start-up itself may take up to ``max(timeout_s, STARTUP_TIMEOUT_S)``. A child that dies
    (worker crash, segfault) gives a failed result naming the signal or exit status and its last
    stderr line that is not a warning. ``on_batches`` is called with the batches delivered so
    far whenever that count changes (checked every :data:`POLL_S` seconds). Never raises for the
    trial's own failures.
    """
    request = {"target": target, "config": config.to_dict(),
               "step": step.to_dict() if step is not None else None,
               "limits": dataclasses.asdict(limits)}
    outcome = run_child("pipecheck.stress.trial", request, timeout_s, on_batches)
    if outcome.timed_out and outcome.progress == 0:
        return failed(config, f"timed out: the trial process did not start within "
                              f"{max(timeout_s, STARTUP_TIMEOUT_S):g} s; trial killed",
                      outcome.wall_s)
    if outcome.timed_out:
        got = _batches(outcome.progress)
        return failed(config, f"timed out: nothing delivered for {timeout_s:g} s "
                              f"(after {got} batches); trial killed", outcome.wall_s)
    if outcome.result is not None:
        return result_from_json(outcome.result)
    return failed(config, f"trial process {outcome.death()}", outcome.wall_s)


def check_target(target: str, config: LoaderSettings, *, baseline: Optional[dict],
                 derive_baseline: bool, timeout_s: float) -> Optional[LoaderSettings]:
    """Validate a named target in a child process (:mod:`pipecheck.stress.target_child`) under
    the trials' watchdog: import it, call it once with ``config`` and, when
    ``derive_baseline``, once with the baseline (``baseline``, the user's settings as
    ``LoaderSettings`` keywords, or the defaults of the function's own parameters; see
    :func:`pipecheck.stress._baseline`). Returns that baseline (``None``: keep ``config``).

    The parent never imports the user's code, so a target that hangs, exits or crashes cannot
    hang or kill pipecheck. Raises :class:`~pipecheck.errors.BadInputError`, one line naming the
    target, when the target is bad (missing, raises, returns no loader) or its process stays
    silent for ``timeout_s`` seconds after start-up (start-up: up to
    ``max(timeout_s, STARTUP_TIMEOUT_S)``), is killed by a signal or exits without a result.
    """
    # What can be told without the user's code is told at once (no child, no torch import).
    where, _ = split_target(target)
    if is_file_target(where) and not os.path.isfile(where):
        raise BadInputError(f"no such target file: {where}")
    request = {"target": target, "config": config.to_dict(), "baseline": baseline,
               "derive_baseline": derive_baseline}
    outcome = run_child("pipecheck.stress.target_child", request, timeout_s)
    doing = "while importing it and calling it once"
    if outcome.timed_out:
        waited = timeout_s if outcome.progress else max(timeout_s, STARTUP_TIMEOUT_S)
        raise BadInputError(f"target {target} timed out after {waited:g} s {doing} "
                            f"(--timeout); its process was killed")
    if outcome.result is None:
        raise BadInputError(f"target {target}: its process {outcome.death()} {doing}")
    if outcome.result.get("error"):
        raise BadInputError(outcome.result["error"])
    first = outcome.result.get("baseline")
    return LoaderSettings.from_dict(first) if first is not None else None


def _watch(child: subprocess.Popen, progress_path: str, timeout_s: float,
           on_batches: Optional[Callable[[int], None]]) -> bool:
    """Wait for ``child`` to exit; True when it stayed silent for ``timeout_s`` seconds (before
    its first sign of life: :data:`STARTUP_TIMEOUT_S` when that is longer)."""
    last_size, last_change = -1, time.monotonic()
    startup_s = max(timeout_s, STARTUP_TIMEOUT_S)
    while child.poll() is None:
        size = _size(progress_path)
        now = time.monotonic()
        if size != last_size:
            last_size, last_change = size, now
            if on_batches is not None and _batches(size) > 0:
                on_batches(_batches(size))
        elif now - last_change > (timeout_s if size > 0 else startup_s):
            return True
        time.sleep(POLL_S)
    return False


def _kill_group(child: subprocess.Popen) -> None:
    """SIGKILL the child's process group (leftover DataLoader workers included) and reap it."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()
    # The workers die asynchronously; until they have, their files still look live.
    deadline = time.monotonic() + GROUP_EXIT_WAIT_S
    while time.monotonic() < deadline:
        try:
            os.killpg(child.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(POLL_S)


def _sweep_shared_files() -> None:
    """Remove the ``/dev/shm`` files of trials whose processes are all gone (a killed trial's
    worker timing file and stages folder; live runs' files are kept, :mod:`pipecheck._owned`)."""
    directory = shared_dir()
    for prefix in (AREA_PREFIX, FOLDER_PREFIX):
        _owned.sweep(directory, prefix)


def _batches(progress_bytes: int) -> int:
    """Batches delivered, from the progress file's size: one byte at start, one when the loader
    was built, then one per batch (:mod:`pipecheck.stress.trial`)."""
    return max(progress_bytes - 2, 0)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _last_error(path: str) -> Optional[str]:
    """The last line of the child's stderr that says what went wrong: warnings (``...Warning:``
    lines, such as runpy's, and the source line printed under them) are skipped; ``None`` when
    nothing is left."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [line.rstrip() for line in handle if line.strip()]
    except OSError:
        return None
    kept: list[str] = []
    under_warning = False
    for line in lines:
        if _WARNING.search(line):
            under_warning = True
        elif not (under_warning and line[:1].isspace()):  # not the source line under one
            under_warning = False
            kept.append(line.strip())
    return kept[-1] if kept else None


_WARNING = re.compile(r"^(\S.*:\d+: )?\w*Warning: ")
"""A warnings-module line (``file.py:12: UserWarning: text``)."""
