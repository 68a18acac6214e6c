"""Text-file writes shared by the report writers (JSON, HTML, trace).

A regular file (or a path that does not exist yet) is written atomically: a temporary file in
the target's directory, flushed to disk, then renamed over the target, so a reader never sees
a half-written file. A symlink is followed: its target is replaced that way and the link kept.
Anything else (``/dev/null``, ``/dev/stdout``, a FIFO, a terminal) is written through, opened
as it is: renaming over it would replace the device or pipe with a plain file. ``-`` means
standard output.
"""

from __future__ import annotations

import os
import pathlib
import secrets
import stat
import sys

from pipecheck.errors import BadInputError

STDOUT = "-"
"""The output path that means standard output."""


def is_stdout(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is :data:`STDOUT` (``"-"``)."""
    return os.fspath(path) == STDOUT


def output_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be written as an output (one line), or ``None`` when it can: ``-``,
    a writable device or pipe, or a regular file (existing and writable, or new) in a folder
    that exists and where files can be created."""
    text = os.fspath(path)
    if is_stdout(text):
        return None
    if os.path.isdir(text):
        return f"{text} is a directory, not a file"
    if os.path.exists(text):
        if not os.access(text, os.W_OK):
            return f"{text} is not writable"
        if not os.path.isfile(text):
            return None  # a device or a pipe: written through, its folder does not matter
    folder = os.path.dirname(os.path.abspath(os.path.realpath(text)))
    if not os.path.isdir(folder):
        return f"no such directory: {folder}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot create files in {folder}"
    return None


def write_text_atomic(path: str | os.PathLike[str], text: str, what: str) -> pathlib.Path:
    """Write ``text`` (UTF-8) to ``path`` (atomically when it is a regular file or new) and
    return the path as given.

    ``what`` names the content in the error message (``"HTML report"``, ``"trace"``). Raises
    :class:`~pipecheck.errors.BadInputError` (one line naming the path) when the file cannot be
    written: missing directory, no permission, or ``path`` is a directory.
    """
    target = pathlib.Path(path)
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return target
    try:
        try:
            mode = os.stat(target).st_mode  # follows symlinks
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "is a directory")
        if mode is not None and not stat.S_ISREG(mode):
            with open(target, "w", encoding="utf-8") as handle:  # a device or a pipe
                handle.write(text)
            return target
        _replace(pathlib.Path(os.path.realpath(target)), text)
    except OSError as err:
        raise BadInputError(f"cannot write {what} to {target}: {err.strerror or err}") from err
    return target


def _replace(real: pathlib.Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``real`` (no symlink in its path), then
    rename it over ``real``."""
    temp = real.with_name(f".{real.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # 0o666 lets the umask decide permissions, as a plain open() would.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, real)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
