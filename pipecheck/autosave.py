"""Saving a wrapped loader's report when the process ends: ``pipecheck.wrap(loader,
save="run.json")``.

The report is written (to ``run.rank{N}.json`` under torch.distributed, see
:func:`pipecheck.distributed.rank_path`) when the interpreter exits, normally or through an
exception, and on SIGTERM, which is how torchrun stops the surviving ranks when one rank dies.
So each rank's measurements outlive a crash elsewhere in the job. A process killed with SIGKILL
runs no code and loses its own file (never the others').

The exit-time save never gathers across ranks (the others may be gone); rank 0 keeps the other
ranks' summaries from its last ``report()`` gather, if there was one. The SIGTERM handler is
installed only from the main thread; a handler the program already had is called after the save,
and the default one (terminate) is restored and re-raised. A SIGTERM that arrives during the
exit-time save lets that save finish (the process is exiting already).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Any


class AutoSave:
    """Save the wrapped loader's report (never gathering) to ``path`` at exit and on SIGTERM
    (the latest data each time). Holds ``wrapped`` until exit, so the report survives the
    loader going out of scope. Errors while saving are printed as one line on stderr, never
    raised: the program's own exit must not change."""

    def __init__(self, wrapped: Any, path: str | os.PathLike[str]) -> None:
        self._wrapped = wrapped
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._previous: Any = None
        atexit.register(self.save)
        if threading.current_thread() is threading.main_thread():
            try:
                self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            except (ValueError, OSError):  # not allowed here (embedded interpreters)
                self._previous = None

    def save(self) -> None:
        """Write the report now; skipped when a save is already under way (SIGTERM arriving
        during the exit-time save runs in the same thread: waiting would deadlock)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._wrapped._exit_report().save(self.path)
        except Exception as err:  # one line, never a traceback at exit
            print(f"pipecheck: could not save the report to {self.path}: "
                  f"{type(err).__name__}: {err}", file=sys.stderr)
        finally:
            self._lock.release()

    def cancel(self) -> None:
        """Stop saving at exit and on SIGTERM (the caller saved a final report itself); the
        SIGTERM handler the program had before is put back when ours is still installed."""
        atexit.unregister(self.save)
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM,
                              self._previous if self._previous is not None else signal.SIG_DFL)
        except (ValueError, OSError):
            pass

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self._lock.locked():
            # SIGTERM interrupted the exit-time save (torchrun stops the other ranks right
            # after one fails): let that save finish; the process is exiting anyway.
            return
        self.save()
        previous = self._previous
        if callable(previous):
            previous(signum, frame)
            return
        if previous == signal.SIG_IGN:
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
