"""Saving a measured loader's report when the process ends: ``pipecheck.wrap(loader,
save="run.json")``, the framework callbacks and ``pipecheck run``.

How it works, and why: docs/internals.md (``pipecheck/autosave.py``).
"""

from __future__ import annotations

import atexit
import os
import pathlib
import select
import signal
import sys
import threading
import time
import weakref
from typing import Any, Optional

from pipecheck import _atomic
from pipecheck.errors import BadArgumentError, one_line

SAVE_WAIT_S = 10.0
"""Longest time (seconds) the SIGTERM handler waits for the saver thread before going on to
the previous handler or termination: torchrun waits 30 s between SIGTERM and SIGKILL by default,
and a report normally takes well under a second. pipecheck's choice."""

_ARMED: "weakref.WeakSet[AutoSave]" = weakref.WeakSet()


class AutoSave:
    """Save a measured loader's report (never gathering) to ``path`` at exit and on SIGTERM
    (the latest data each time). ``measurement`` is a :class:`pipecheck.measurement
    .Measurement` (anything with its ``final_report``, ``mark_ended``, ``mark_continued`` and
    ``release_files``): it is held until exit, so the report survives the loader going out of
    scope, and it holds nothing of the user's, so the loader does not outlive the user's last
    reference. Errors while saving are printed as one line on stderr, never raised: the
    program's own exit must not change.

    A report already at ``path`` is read once, when saving is armed (before this run can
    overwrite it; :func:`pipecheck.report.read_earlier`), and every report saved, or taken with
    ``report()``, holds its comparison with it (:meth:`compared`); a file that cannot be read
    is a note in that comparison, never an error.

    Arming builds one report (a warm-up: it imports everything saving needs), starts the saver
    thread ``pipecheck-autosave`` once per process and, from the main thread, installs the
    SIGTERM handler (:func:`install`). Raises ``ValueError`` (one line naming ``path``) when
    ``path`` cannot be written: its folder is missing or not writable, or it is a directory
    (:func:`pipecheck._atomic.output_problem`)."""

    def __init__(self, measurement: Any, path: str | os.PathLike[str]) -> None:
        self.check_path(path)
        self._measurement = measurement
        self.path = os.fspath(path)
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self._earlier: dict[str, Any] = {}
        self._earlier_at(self.path)  # read once, now: before this run can overwrite it
        self._warm_up()
        atexit.register(self._at_exit)
        _ARMED.add(self)
        _SAVER.start()
        install()

    @staticmethod
    def check_path(path: str | os.PathLike[str]) -> None:
        """Raise :class:`~pipecheck.errors.BadArgumentError` (a ``ValueError``, one line
        naming ``path``) when a report could not be saved there
        (:func:`pipecheck._atomic.output_problem`)."""
        problem = _atomic.output_problem(path)
        if problem is not None:
            raise BadArgumentError(f"cannot save the report to {os.fspath(path)}: {problem}")

    def _warm_up(self) -> None:
        """Build one report now so that every module the saver needs (numpy's lazily loaded
        parts included) is imported before a signal can interrupt an import."""
        try:
            self.compared(self._measurement.final_report()).to_json()
            import pipecheck.analysis.compare  # noqa: F401  # what a comparison needs
        except Exception:  # the real save reports its own errors
            pass

    def save(self) -> None:
        """Write the report now; skipped when a save is already under way, or in a process
        other than the one that armed saving (a forked child)."""
        if os.getpid() != self._owner or not self._lock.acquire(blocking=False):
            return
        try:
            self.compared(self._measurement.final_report()).save(self.path)
        except Exception as err:  # one line, never a traceback at exit
            print(f"pipecheck: could not save the report to {self.path}: "
                  f"{one_line(err)}", file=sys.stderr)
        finally:
            self._lock.release()

    def compared(self, report: Any) -> Any:
        """``report`` with its comparison against the report its save replaces
        (:func:`pipecheck.report.compared_with_earlier`): the file at ``path`` read when saving
        was armed, or, for a report saved to its rank's file (``run.rank{N}.json``), that file
        read the first time it is needed. Each file is read at most once, so a later save never
        compares the run with its own earlier save. A merged multi-rank report (rank 0's
        gathered one), or one compared already, is left as it is. Raises nothing."""
        try:
            if report.ranks is not None or report.comparison is not None:
                return report
            from pipecheck.rank_files import rank_path
            from pipecheck.report import compared_with_earlier

            target = self.path
            if report.rank is not None and not _atomic.is_stdout(self.path):
                target = os.fspath(rank_path(pathlib.Path(self.path), report.rank.rank))
            return compared_with_earlier(report, self._earlier_at(target))
        except Exception:
            return report

    def _earlier_at(self, path: str) -> Any:
        """The report at ``path`` before this run saved there, read once
        (:func:`pipecheck.report.read_earlier`; ``None``: nothing there)."""
        if path not in self._earlier:
            from pipecheck.report import read_earlier

            try:
                self._earlier[path] = read_earlier(path)
            except Exception:
                self._earlier[path] = None
        return self._earlier[path]

    def saving(self) -> bool:
        """Whether a save is under way now (no lock taken)."""
        return self._lock.locked()

    def cancel(self) -> None:
        """Stop saving at exit and on SIGTERM (the caller saved a final report itself). The
        SIGTERM handler stays (it does what SIGTERM would do when nothing is armed)."""
        atexit.unregister(self._at_exit)
        _ARMED.discard(self)

    def _at_exit(self) -> None:
        # An uncaught exception (Ctrl-C included) has been printed by now and left in
        # sys.last_value; the loader probe saw only what happened inside next().
        if os.getpid() == self._owner:
            exc = getattr(sys, "last_value", None)
            if isinstance(exc, KeyboardInterrupt):
                self._measurement.mark_ended("interrupted")
            elif isinstance(exc, Exception):
                self._measurement.mark_ended("error", exc)
        self.save()


# -- the saver thread ----------------------------------------------------------------------------


class _Saver:
    """The daemon thread that saves every armed report when the SIGTERM handler asks: one
    request byte in, one done byte out (pipes, so the handler takes no lock)."""

    def __init__(self) -> None:
        self._pipes: Optional[tuple[int, int, int, int]] = None  # request r/w, done r/w
        self._pid = -1
        self._starting = threading.Lock()

    def start(self) -> None:
        """Start the thread in this process, once (again after a fork)."""
        if self._pid == os.getpid():
            return
        with self._starting:
            if self._pid == os.getpid():
                return
            request_r, request_w = os.pipe()
            done_r, done_w = os.pipe()
            self._pipes = (request_r, request_w, done_r, done_w)
            threading.Thread(target=self._serve, args=(self._pipes,), name="pipecheck-autosave",
                             daemon=True).start()
            self._pid = os.getpid()

    def _serve(self, pipes: tuple[int, int, int, int]) -> None:
        request_r, _, _, done_w = pipes
        while True:
            try:
                if not os.read(request_r, 1):
                    return
            except OSError:
                return
            for autosave in list(_ARMED):
                autosave.save()
            try:
                os.write(done_w, b"d")
            except OSError:
                return

    def request(self) -> None:
        """Wake the saver thread and wait for it, at most :data:`SAVE_WAIT_S`. No locks."""
        pipes = self._pipes
        if pipes is None or self._pid != os.getpid():
            return
        _, request_w, done_r, _ = pipes
        try:
            while select.select([done_r], [], [], 0)[0]:  # a reply to an earlier timed-out wait
                os.read(done_r, 64)
            os.write(request_w, b"s")
            deadline = time.monotonic() + SAVE_WAIT_S
            while (left := deadline - time.monotonic()) > 0:
                if select.select([done_r], [], [], left)[0]:
                    os.read(done_r, 1)
                    return
        except OSError:
            return

    def forget_after_fork(self) -> None:
        """In a forked child: the thread does not exist here; close the parent's pipes."""
        pipes, self._pipes = self._pipes, None
        self._pid = -1
        for fd in pipes or ():
            try:
                os.close(fd)
            except OSError:
                pass


_SAVER = _Saver()


# -- the SIGTERM handler -------------------------------------------------------------------------

_installed_pid = -1
_previous: Any = None  # the handler SIGTERM had before pipecheck's
_handling = False


def install() -> bool:
    """Install pipecheck's SIGTERM handler in this process (idempotent; from the main thread
    only: elsewhere, or in an embedded interpreter that forbids it, nothing happens). True when
    it is installed now."""
    global _installed_pid, _previous
    if _installed_pid == os.getpid() and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is _on_sigterm:  # inherited over a fork whose hook did not run
            current = _previous
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, TypeError):
        return False
    _previous = current if previous is _on_sigterm else previous
    _installed_pid = os.getpid()
    return True


def _on_sigterm(signum: int, frame: Any) -> None:
    global _handling
    if os.getpid() != _installed_pid:  # a forked child whose fork hook could not disarm
        _pass_on(signum, frame, [])
        return
    armed = [a for a in list(_ARMED) if a._owner == _installed_pid]
    if _handling or any(a.saving() for a in armed):
        # A second SIGTERM while we wait, or one that interrupted the exit-time save
        # (torchrun stops the other ranks right after one fails): let that save finish.
        return
    _handling = True
    try:
        for autosave in armed:
            autosave._measurement.mark_ended("terminated")
        if armed:
            _SAVER.request()
        _pass_on(signum, frame, armed)
    finally:
        _handling = False


def _pass_on(signum: int, frame: Any, armed: list[AutoSave]) -> None:
    """What SIGTERM would have done without pipecheck: the program's handler, nothing
    (ignored), or termination (after removing every armed run's files). When the program goes
    on, each armed run notes that it received SIGTERM and continued."""
    previous = _previous
    if callable(previous):
        previous(signum, frame)  # may raise (SystemExit): the program ends as it chose
        _continued(armed)
        return
    if previous == signal.SIG_IGN:
        _continued(armed)
        return
    for autosave in armed:
        try:
            autosave._measurement.release_files()
        except Exception:
            pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _continued(armed: list[AutoSave]) -> None:
    for autosave in armed:
        try:
            autosave._measurement.mark_continued()
        except Exception:
            pass


def save_all_before_leaving() -> None:
    """Save every report armed in this process and remove their files, now: the process is
    about to leave Python without running exit hooks (``os._exit``, an ``exec``). Never
    raises; takes no lock a signal handler could hold (each save skips itself when one is
    under way)."""
    for autosave in list(_ARMED):
        if autosave._owner != os.getpid():
            continue
        try:
            autosave.save()
            atexit.unregister(autosave._at_exit)
            autosave._measurement.release_files()
        except Exception:
            pass
        _ARMED.discard(autosave)


def _disarm_all_in_child() -> None:
    """After ``fork``, in the child: no exit-time saves, the previous SIGTERM behaviour back,
    the saver's pipes closed (its thread does not exist here)."""
    global _installed_pid
    for autosave in list(_ARMED):
        atexit.unregister(autosave._at_exit)
    _ARMED.clear()
    _SAVER.forget_after_fork()
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM,
                          _previous if _previous is not None else signal.SIG_DFL)
    except (ValueError, OSError):  # forked from a thread other than the main one
        pass  # the handler checks the pid and passes the signal on
    _installed_pid = -1


os.register_at_fork(after_in_child=_disarm_all_in_child)
