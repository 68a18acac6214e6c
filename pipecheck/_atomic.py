"""Atomic text-file writes shared by the report writers (HTML, trace): write a temporary file in
the target's directory, flush it to disk, then rename it over the target, so a reader never sees
a half-written file."""

from __future__ import annotations

import os
import pathlib
import secrets

from pipecheck.errors import BadInputError


def write_text_atomic(path: str | os.PathLike[str], text: str, what: str) -> pathlib.Path:
    """Write ``text`` (UTF-8) to ``path`` atomically and return the path.

    ``what`` names the content in the error message (``"HTML report"``, ``"trace"``). Raises
    :class:`~pipecheck.errors.BadInputError` (one line naming the path) when the file cannot be
    written: missing directory, no permission, or ``path`` is a directory.
    """
    target = pathlib.Path(path)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "is a directory")
        # 0o666 lets the umask decide permissions, as a plain open() would.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    except OSError as err:
        raise BadInputError(f"cannot write {what} to {target}: {err.strerror or err}") from err
    return target
