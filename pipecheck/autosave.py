"""Saving a wrapped loader's report when the process ends: ``pipecheck.wrap(loader,
save="run.json")``.

The report is written (to ``run.rank{N}.json`` under torch.distributed, see
:func:`pipecheck.distributed.rank_path`) when the interpreter exits, normally or through an
exception, and on SIGTERM, which is how torchrun stops the surviving ranks when one rank dies.
So each rank's measurements outlive a crash elsewhere in the job. A process killed with SIGKILL
runs no code and loses its own file (never the others').

The SIGTERM handler takes no lock: it writes one byte to a pipe and waits (``select``, at most
:data:`SAVE_WAIT_S`) for a daemon saver thread, started when saving was armed, to build and
write the report. The interrupted frame may hold a probe's lock; the probes' readers wait for
their locks only a bounded time and fall back to their last consistent data
(:mod:`pipecheck._locks`). Everything the report needs is imported, and one report built, when
saving is armed, so the saver never waits on an import the interrupted frame is inside.

The exit-time save never gathers across ranks (the others may be gone); rank 0 keeps the other
ranks' summaries from its last ``report()`` gather, if there was one. The SIGTERM handler is
installed only from the main thread; a handler the program already had is called after the save,
and the default one (terminate) is restored and re-raised after pipecheck's shared files are
removed. A SIGTERM that arrives during the exit-time save lets that save finish (the process is
exiting already).

Saving belongs to the process that armed it: a child forked later (a daemon ``fork``, a
``multiprocessing`` worker) neither saves at its exit nor on SIGTERM, so it can never write its
stale copy over the parent's report.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import sys
import threading
import time
import weakref
from typing import Any

from pipecheck import _atomic

SAVE_WAIT_S = 10.0
"""Longest time (seconds) the SIGTERM handler waits for the saver thread before going on to
the previous handler or termination: torchrun waits 30 s between SIGTERM and SIGKILL by default,
and a report normally takes well under a second. pipecheck's choice."""

_ARMED: "weakref.WeakSet[AutoSave]" = weakref.WeakSet()


class AutoSave:
    """Save the wrapped loader's report (never gathering) to ``path`` at exit and on SIGTERM
    (the latest data each time). Holds ``wrapped`` until exit, so the report survives the
    loader going out of scope. Errors while saving are printed as one line on stderr, never
    raised: the program's own exit must not change.

    Arming builds one report (a warm-up: it imports everything saving needs) and starts the
    saver thread ``pipecheck-autosave`` in the main thread's process. Raises ``ValueError``
    (one line naming ``path``) when ``path`` cannot be written: its folder is missing or not
    writable, or it is a directory (:func:`pipecheck._atomic.output_problem`)."""

    def __init__(self, wrapped: Any, path: str | os.PathLike[str]) -> None:
        self.check_path(path)
        self._wrapped = wrapped
        self.path = os.fspath(path)
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self._previous: Any = None
        self._handling = False
        self._pipes: tuple[int, int, int, int] | None = None  # request r/w, done r/w
        self._warm_up()
        atexit.register(self._at_exit)
        _ARMED.add(self)
        if threading.current_thread() is not threading.main_thread():
            return
        request_r, request_w = os.pipe()
        done_r, done_w = os.pipe()
        self._pipes = (request_r, request_w, done_r, done_w)
        threading.Thread(target=self._serve, name="pipecheck-autosave", daemon=True).start()
        try:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        except (ValueError, OSError):  # not allowed here (embedded interpreters)
            self._previous = None

    @staticmethod
    def check_path(path: str | os.PathLike[str]) -> None:
        """Raise ``ValueError`` (one line naming ``path``) when a report could not be saved
        there (:func:`pipecheck._atomic.output_problem`)."""
        problem = _atomic.output_problem(path)
        if problem is not None:
            raise ValueError(f"cannot save the report to {os.fspath(path)}: {problem}")

    def _warm_up(self) -> None:
        """Build one report now so that every module the saver needs (numpy's lazily loaded
        parts included) is imported before a signal can interrupt an import."""
        try:
            self._wrapped.final_report().to_json()
        except Exception:  # the real save reports its own errors
            pass

    def save(self) -> None:
        """Write the report now; skipped when a save is already under way, or in a process
        other than the one that armed saving (a forked child)."""
        if os.getpid() != self._owner or not self._lock.acquire(blocking=False):
            return
        try:
            self._wrapped.final_report().save(self.path)
        except Exception as err:  # one line, never a traceback at exit
            print(f"pipecheck: could not save the report to {self.path}: "
                  f"{type(err).__name__}: {err}", file=sys.stderr)
        finally:
            self._lock.release()

    def cancel(self) -> None:
        """Stop saving at exit and on SIGTERM (the caller saved a final report itself); the
        SIGTERM handler the program had before is put back when ours is still installed."""
        atexit.unregister(self._at_exit)
        _ARMED.discard(self)
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM,
                              self._previous if self._previous is not None else signal.SIG_DFL)
        except (ValueError, OSError):
            pass

    def _at_exit(self) -> None:
        # An uncaught exception (Ctrl-C included) has been printed by now and left in
        # sys.last_value; the loader probe saw only what happened inside next().
        if os.getpid() == self._owner:
            exc = getattr(sys, "last_value", None)
            if isinstance(exc, KeyboardInterrupt):
                self._wrapped._consumer.mark_ended("interrupted")
            elif isinstance(exc, Exception):
                self._wrapped._consumer.mark_ended("error", exc)
        self.save()

    def _disarm_in_child(self) -> None:
        """After ``fork``, in the child: no exit-time save, the previous SIGTERM behaviour
        back, and the parent's pipes closed (the saver thread does not exist here)."""
        atexit.unregister(self._at_exit)
        if self._pipes is not None:
            for fd in self._pipes:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._pipes = None
        try:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM,
                              self._previous if self._previous is not None else signal.SIG_DFL)
        except (ValueError, OSError):  # forked from a thread other than the main one
            pass  # the handler checks the pid and passes the signal on

    def _serve(self) -> None:
        """The saver thread: one save per request byte, then one byte back."""
        assert self._pipes is not None
        request_r, _, _, done_w = self._pipes
        while True:
            try:
                if not os.read(request_r, 1):
                    return
            except OSError:
                return
            self.save()
            try:
                os.write(done_w, b"d")
            except OSError:
                return

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._owner:  # a forked child whose fork hook could not disarm
            self._pass_on(signum, frame)
            return
        if self._handling or self._lock.locked():
            # A second SIGTERM while we wait, or one that interrupted the exit-time save
            # (torchrun stops the other ranks right after one fails): let that save finish.
            return
        self._handling = True
        try:
            self._wrapped._consumer.mark_ended("terminated")
            self._request_save()
        finally:
            self._handling = False
        self._pass_on(signum, frame)

    def _request_save(self) -> None:
        """Wake the saver thread and wait for it, at most :data:`SAVE_WAIT_S`. No locks."""
        if self._pipes is None:
            return
        _, request_w, done_r, _ = self._pipes
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

    def _pass_on(self, signum: int, frame: Any) -> None:
        """What SIGTERM would have done without pipecheck: the program's handler, nothing
        (ignored), or termination (after removing pipecheck's shared files)."""
        previous = self._previous
        if callable(previous):
            previous(signum, frame)
            return
        if previous == signal.SIG_IGN:
            return
        if os.getpid() == self._owner:
            self._wrapped._release_files()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _disarm_all_in_child() -> None:
    for autosave in list(_ARMED):
        autosave._disarm_in_child()
    _ARMED.clear()


os.register_at_fork(after_in_child=_disarm_all_in_child)
