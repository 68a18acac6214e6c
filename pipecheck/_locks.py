"""Bounded lock waits for readers that must never hang: the report built on SIGTERM runs in a
saver thread while the main thread is stopped in the signal handler, possibly in a frame that
holds the very lock a snapshot needs (:mod:`pipecheck.autosave`). Such readers wait at most
:data:`SNAPSHOT_LOCK_TIMEOUT_S` and then fall back to their last consistent data."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

SNAPSHOT_LOCK_TIMEOUT_S = 1.0
"""Longest wait (seconds) of a snapshot for its probe's lock. Every holder keeps it for well
under a millisecond to a few milliseconds (one fold of 4096 batches, one host tick), so a
second means the holder is stopped (interrupted by a signal, or dead). pipecheck's choice: the
SIGTERM save reads about five such locks inside :data:`pipecheck.autosave.SAVE_WAIT_S`."""


@contextlib.contextmanager
def bounded(lock: threading.Lock,
            timeout_s: float = SNAPSHOT_LOCK_TIMEOUT_S) -> Iterator[bool]:
    """``with bounded(lock) as held:`` -- ``held`` is True when ``lock`` was acquired within
    ``timeout_s`` seconds (it is released on exit), False when the wait timed out: the caller
    then must not touch what the lock guards and returns its last consistent copy."""
    held = lock.acquire(timeout=timeout_s)
    try:
        yield held
    finally:
        if held:
            lock.release()
