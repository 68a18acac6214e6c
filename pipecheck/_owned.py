"""Files and folders that pipecheck creates in ``/dev/shm`` and the temp dir, owned by the
creating process for their lifetime.

The owner holds an exclusive ``flock`` on the file (or folder) from an open descriptor until it
removes it. A process killed with SIGKILL loses the lock with its descriptors (and so do its
forked children that inherited it, once they are gone), so any later run can tell a leftover
from a live file by trying the lock: :func:`sweep` removes what it can lock and leaves the rest.
This works across PID namespaces that share the folder, where a pid in the name would look dead
to a process that cannot see the owner. The entry is created under a hidden name and renamed
once locked, so a sweep never sees it unlocked.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile


def _lock_and_publish(fd: int, hidden: str) -> str:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    folder, name = os.path.split(hidden)
    final = os.path.join(folder, name[1:])
    os.rename(hidden, final)
    return final


def create_file(directory: str, prefix: str, suffix: str = "") -> tuple[int, str]:
    """Create ``directory/PREFIX<random>SUFFIX`` locked by this process; return the open
    descriptor (keep it open while the file is in use; closing it ends the ownership) and the
    path. Raises ``OSError`` when it cannot be created."""
    fd, hidden = tempfile.mkstemp(prefix=f".{prefix}", suffix=suffix, dir=directory)
    try:
        return fd, _lock_and_publish(fd, hidden)
    except BaseException:
        os.close(fd)
        os.unlink(hidden)
        raise


def create_folder(directory: str, prefix: str) -> tuple[int, str]:
    """Create the folder ``directory/PREFIX<random>`` locked by this process; return the open
    descriptor of the folder and its path (as :func:`create_file`)."""
    hidden = tempfile.mkdtemp(prefix=f".{prefix}", dir=directory)
    try:
        fd = os.open(hidden, os.O_RDONLY | os.O_DIRECTORY)
    except BaseException:
        os.rmdir(hidden)
        raise
    try:
        return fd, _lock_and_publish(fd, hidden)
    except BaseException:
        os.close(fd)
        shutil.rmtree(hidden, ignore_errors=True)
        raise


def remove(fd: int | None, path: str) -> None:
    """Remove an owned file or folder and close its descriptor (idempotent, never raises)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def sweep(directory: str, prefix: str) -> list[str]:
    """Remove the entries of ``directory`` named ``PREFIX...`` whose owner is gone (their lock
    can be taken); return their paths. Live entries, and anything that cannot be opened, are
    left alone."""
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(prefix):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its owner (or a child of it) is alive
            os.close(fd)
            continue
        remove(fd, path)
        removed.append(path)
    return removed
