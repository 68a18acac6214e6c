"""Run a program in a session of its own and wait until every process of it is gone: the
process side of ``pipecheck run`` (:mod:`pipecheck.launch`).

How it works, and why: docs/internals.md (``pipecheck/run_process.py``).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Optional, Sequence

from pipecheck.render.inert import visible

GRACE_S = 45.0
"""Default seconds the program's processes have to end after pipecheck passes SIGTERM or SIGHUP
on (or after its first process ended, for the ones it left running) before they are killed with
SIGKILL. More than torchrun's own 30 s between SIGTERM and SIGKILL for its workers
(``torch.distributed.elastic``'s ``close(timeout=30)``: a torchrun killed sooner would leave its
workers, which run in sessions of their own, behind) and than the hook's own save on SIGTERM,
which waits at most 10 s (:data:`pipecheck.autosave.SAVE_WAIT_S`). pipecheck's choice;
``pipecheck run --grace S`` sets it."""

KILL_WAIT_S = 5.0
"""Seconds pipecheck waits for processes it killed with SIGKILL to be gone. SIGKILL takes
effect when a process leaves the kernel; one in uninterruptible sleep (a hung network file
system read) may take longer, and then its run folder is kept (a line names it) rather than
removed under it. pipecheck's choice."""

_TO_GROUP = ("SIGINT", "SIGQUIT", "SIGWINCH", "SIGCONT")  # as a terminal sends them
_TO_PROGRAM = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")  # as `kill PID` sends them
_ENDING = ("SIGTERM", "SIGHUP")  # signals that start the grace period
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


class StartFailed(Exception):
    """The program could not be started (``__cause__``: the ``OSError`` from ``exec``)."""


def say(line: str) -> None:
    """One line of ``pipecheck run``'s own on stderr (control characters made visible: pids'
    command names and paths come from the program)."""
    try:
        print(visible(f"pipecheck run: {line}"), file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: nothing to tell
        pass


# -- running the program --------------------------------------------------------------------------


def _prctl() -> Optional[Callable[..., int]]:
    """libc's ``prctl`` (Linux), or ``None`` where there is none."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or ``128 + N`` for signal ``N``."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def describe(pids: Sequence[int]) -> str:
    """``1234 (python3), 1240 (bash)``: pids with their command names where still known."""
    import psutil

    parts = []
    for pid in pids:
        try:
            parts.append(f"{pid} ({psutil.Process(pid).name()})")
        except psutil.Error:
            parts.append(str(pid))
    return ", ".join(parts)


class Supervisor:
    """Runs one program in its own session and waits for all of its processes (module
    docstring). Use :meth:`run` from the main thread: it installs signal handlers, the wakeup
    file descriptor and the subreaper flag for its duration and restores them after."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.pgid: Optional[int] = None
        self.child_pid: Optional[int] = None
        self.code: Optional[int] = None
        self.pending: list[int] = []  # signals that came before the program started
        self.notes: list[str] = []  # lines the handlers leave for the loop to print
        self.ending_signal: Optional[int] = None
        self.deadline: Optional[float] = None  # monotonic: SIGKILL the rest then
        self.killed_at: Optional[float] = None
        self.leftovers_handled = False
        self.told: set[int] = set()  # processes the ending signal was passed on to
        self.stopped = False
        self.stuck: list[int] = []  # alive after SIGKILL and KILL_WAIT_S
        self._prctl = _prctl()
        self.reaps_orphans = False  # the program's orphans become our children
        self._restore_subreaper = False

    # -- signal handlers: no locks, no I/O but os.kill / os.killpg; notes for the loop --------

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.pgid is None:
            self.pending.append(signum)
            return
        name = signal.Signals(signum).name
        if name == "SIGTSTP":
            self._killpg(signal.SIGSTOP)
            self.stopped = True
            os.kill(os.getpid(), signal.SIGSTOP)  # the shell sees the job stop; SIGCONT resumes
            return
        if name == "SIGCONT":
            self.stopped = False
        if self.code is not None and name in ("SIGINT", *_ENDING):
            self.deadline = time.monotonic()  # the program has ended: stop what it left, now
            return
        if name in _TO_GROUP:
            self._killpg(signum)
        elif self.code is None:  # not reaped yet, so the pid is still the program's
            os.kill(self.child_pid, signum)  # type: ignore[arg-type]
        if name in _ENDING and self.ending_signal is None:
            self.ending_signal = signum
            self.deadline = time.monotonic() + self.grace_s
            self.notes.append(f"{name} passed on to the program; its processes still running "
                              f"in {self.grace_s:g} s are killed (SIGKILL)")
            if self.stopped:  # a stopped job acts on SIGTERM only once continued
                self._killpg(signal.SIGCONT)
                self.stopped = False

    def _on_child(self, signum: int, frame: Any) -> None:
        pass  # only wakes the loop (wakeup file descriptor)

    def _killpg(self, signum: int) -> None:
        try:
            os.killpg(self.pgid, signum)  # type: ignore[arg-type]
        except OSError:  # the group is gone (or already dying)
            pass

    # -- the run --------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], env: dict[str, str], stdout: Optional[int]) -> int:
        """Start ``argv`` and return its exit code once every process of it is gone (or
        killed). Raises :class:`StartFailed` when it cannot be started."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        previous_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        previous: dict[int, Any] = {}
        try:
            for name in (*_TO_GROUP, *_TO_PROGRAM, "SIGTSTP"):
                signum = getattr(signal, name)
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    previous[signum] = signal.signal(signum, self._on_signal)
            previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._on_child)
            self._set_subreaper(True)
            try:
                child = subprocess.Popen(list(argv), env=env, stdout=stdout,
                                         start_new_session=True,
                                         preexec_fn=self._die_with_parent(os.getpid()))
            except OSError as err:
                raise StartFailed(err.strerror or str(err)) from err
            self.child_pid = self.pgid = child.pid
            for signum in self.pending:
                self._on_signal(signum, None)
            self._wait(wake_r)
            if self.code is None:  # its first process outlived SIGKILL (docs/internals.md)
                self.code = 128 + signal.SIGKILL
            child.returncode = self.code  # reaped here, not by Popen
            return self.code
        finally:
            self._set_subreaper(False)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(previous_wakeup)
            os.close(wake_r)
            os.close(wake_w)

    def _die_with_parent(self, parent: int) -> Optional[Callable[[], None]]:
        """The child's ``preexec_fn``: SIGTERM to the program's first process if pipecheck
        itself is killed (``PR_SET_PDEATHSIG``), so it can save and end rather than run on
        unwatched."""
        prctl = self._prctl
        if prctl is None:
            return None

        def arm() -> None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent:  # pipecheck died before the flag was set
                os.kill(os.getpid(), signal.SIGTERM)

        return arm

    def _set_subreaper(self, on: bool) -> None:
        """Make this process the subreaper of the program's orphans (``on``), or put the flag
        back as it was; ``reaps_orphans`` says whether orphans come here."""
        if self._prctl is None:
            return
        if not on:
            if self._restore_subreaper:
                self._prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
                self._restore_subreaper = False
            return
        flag = ctypes.c_int(0)
        self._prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
        if flag.value or os.getpid() == 1:  # one already (a container's init): leave it so
            self.reaps_orphans = True
            return
        self.reaps_orphans = self._restore_subreaper = (
            self._prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)

    def _reap(self) -> bool:
        """Reap every ended child (the program's first process and orphans of it); whether any
        child is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.child_pid:
                self.code = _exit_code(status)

    def _alive(self) -> bool:
        """Whether any process of the program is left (reaping those that ended)."""
        children = self._reap()
        return children or (not self.reaps_orphans and self._group_alive())

    def _group_alive(self) -> bool:
        """Without the subreaper flag, orphans are init's: the process group tells instead."""
        try:
            os.killpg(self.pgid, 0)  # type: ignore[arg-type]
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True

    def _wait(self, wake_r: int) -> None:
        while True:
            for note in self._take_notes():
                say(note)
            if not self._alive():
                return
            now = time.monotonic()
            if self.code is not None:
                if not self.leftovers_handled:
                    self._stop_leftovers()
                self._tell_orphans()
            if self.deadline is not None and now >= self.deadline:
                if self.killed_at is None:
                    self._kill_all()
                    continue
                self.stuck = self._descendants() or [self.pgid]  # type: ignore[list-item]
                return
            timeout = None if self.deadline is None else self.deadline - now
            if not self.reaps_orphans:
                timeout = 0.1 if timeout is None else min(timeout, 0.1)  # poll the group
            try:
                select.select([wake_r], [], [], timeout)
                os.read(wake_r, 512)
            except (BlockingIOError, InterruptedError):
                pass

    def _take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    def _descendants(self) -> list[int]:
        """Every live process below this one (zombies, ended and not yet reaped, left out)."""
        import psutil

        pids = []
        try:
            for process in psutil.Process().children(recursive=True):
                try:
                    if process.status() != psutil.STATUS_ZOMBIE:
                        pids.append(process.pid)
                except psutil.Error:  # gone meanwhile
                    pass
        except psutil.Error:
            pass
        return pids

    def _signal_each(self, pids: Sequence[int], signum: int) -> None:
        import psutil

        for pid in pids:
            try:
                psutil.Process(pid).send_signal(signum)  # checks the pid was not reused
            except psutil.Error:
                pass

    def _stop_leftovers(self) -> None:
        """The program's first process has ended: what it left running is stopped like it,
        with SIGTERM (unless an ending signal was passed on already) and the grace period."""
        self.leftovers_handled = True
        self.told.add(self.child_pid)  # type: ignore[arg-type]
        pids = self._descendants()
        if not pids and (self.reaps_orphans or not self._group_alive()):
            return
        if self.ending_signal is None:
            self.ending_signal = signal.SIGTERM
            self.deadline = time.monotonic() + self.grace_s
            if not self.reaps_orphans:  # the orphans are init's: the group is all we can reach
                self._killpg(signal.SIGTERM)
            say(f"the program's first process ended (exit code {self.code}) and left "
                f"{len(pids)} process(es) running: {describe(pids)}; SIGTERM to those left "
                f"without their parent, SIGKILL to all in {self.grace_s:g} s")
        if self.stopped:
            self._signal_each(pids, signal.SIGCONT)

    def _tell_orphans(self) -> None:
        """Pass the ending signal on to each process the program's ending left as this
        process's child (the training a shell wrapper started, the workers of a process that
        called ``os._exit``), once each, as to the program's first process: their own
        children are theirs to stop (DataLoader workers that got SIGTERM beside their main
        process would make torch raise in it)."""
        if self.ending_signal is None or not self.reaps_orphans:
            return
        import psutil

        try:
            orphans = [p.pid for p in psutil.Process().children() if p.pid not in self.told]
        except psutil.Error:
            return
        self.told.update(orphans)
        self._signal_each(orphans, self.ending_signal)

    def _kill_all(self) -> None:
        pids = self._descendants()
        self._killpg(signal.SIGKILL)
        self._signal_each(pids, signal.SIGKILL)
        self.killed_at = time.monotonic()
        self.deadline = self.killed_at + KILL_WAIT_S
        if pids:
            say(f"killed (SIGKILL) {len(pids)} process(es) of the program still running "
                f"{self.grace_s:g} s after {self._why()}: {describe(pids)}")

    def _why(self) -> str:
        if self.ending_signal is not None:
            return signal.Signals(self.ending_signal).name
        return "its first process ended"


def run_until_all_gone(argv: Sequence[str], env: dict[str, str], *, grace_s: float = GRACE_S,
                       stdout: Optional[int] = None) -> tuple[int, list[int]]:
    """Run ``argv`` with ``env`` and wait until every process of it is gone (module
    docstring); return its exit code (``128 + N`` for signal ``N``) and the pids still alive
    :data:`KILL_WAIT_S` after SIGKILL (normally none). ``stdout``: a file descriptor for the
    program's standard output (``None``: ours). Call from the main thread (signal handlers).
    Raises :class:`StartFailed` when the program cannot be started."""
    supervisor = Supervisor(grace_s)
    code = supervisor.run(argv, env, stdout)
    return code, supervisor.stuck
