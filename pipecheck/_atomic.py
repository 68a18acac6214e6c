"""Text-file writes shared by the report writers (JSON, HTML, trace).

A regular file (or a path that does not exist yet) is written atomically: a temporary file in
the target's directory, flushed to disk, then renamed over the target, so a reader never sees
a half-written file. The new file keeps the mode (permission bits; setuid, setgid and sticky
bits are dropped) and, where this process may set them, the owner and group of the file it
replaces; a new file gets the umask's mode. A file with several hard links is written in place
(truncated, written and flushed to disk: not atomic, but every name keeps seeing the one file)
except in a sticky, world-writable directory, where it is refused (another user may have
linked it there). A symlink is followed: its target is replaced that way and the link kept;
but a symlink in a sticky, world-writable directory (``/tmp``) that is owned neither by this
process's user nor by the directory's owner is refused, as the kernel's
``fs.protected_symlinks`` refuses it (another user may have planted it to make us overwrite a
file of ours). The path is followed one component at a time through open directory
descriptors (``openat``), each symlink checked as it is met, and the file is created and
renamed relative to the directory found, so nothing can be swapped in between. Anything else
(``/dev/null``, ``/dev/stdout``, a FIFO, a terminal) is written through, opened as it is:
renaming over it would replace the device or pipe with a plain file; so is what one of
``/proc``'s own links leads to (``/dev/stdout`` is ``/proc/self/fd/1``: a file or pipe this
process already has open). ``-`` means standard output.
"""

from __future__ import annotations

import errno
import os
import pathlib
import secrets
import stat
import sys
from dataclasses import dataclass
from typing import Optional

from pipecheck.errors import BadInputError

STDOUT = "-"
"""The output path that means standard output."""

MAX_LINKS = 40
"""Most symlinks followed in one path, as Linux's ``MAXSYMLINKS`` (then ``ELOOP``)."""

_STICKY_SHARED = stat.S_ISVTX | stat.S_IWOTH
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


class UnsafePath(BadInputError):
    """A symlink or hard link another user may have planted in a sticky, world-writable
    directory; the message names it (one line)."""


def is_stdout(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is :data:`STDOUT` (``"-"``)."""
    return os.fspath(path) == STDOUT


@dataclass
class _Located:
    """Where a path leads: the open directory holding its last component (``dir_fd``, closed by
    :meth:`close`), that component's ``name`` there and ``lstat`` (``None`` when it does not
    exist), the directory's path and ``fstat`` (for messages and the sticky check).
    ``kernel_link``: the walk stopped at one of ``/proc``'s own links (``/proc/self``,
    ``/proc/self/fd/1``, whose text may be no path, ``pipe:[123]``), which the kernel follows
    to something this process already has open."""

    dir_fd: int
    directory: str
    directory_stat: os.stat_result
    name: str
    stat: Optional[os.stat_result]
    kernel_link: bool = False

    @property
    def path(self) -> str:
        return os.path.join(self.directory, self.name)

    def close(self) -> None:
        os.close(self.dir_fd)


def _sticky_shared(directory_stat: os.stat_result) -> bool:
    return directory_stat.st_mode & _STICKY_SHARED == _STICKY_SHARED


def _check_link(located: _Located, link_stat: os.stat_result) -> None:
    """Raise :class:`UnsafePath` for a symlink the kernel's ``fs.protected_symlinks`` would not
    follow: in a sticky, world-writable directory, owned neither by the follower (this
    process's effective user) nor by the directory's owner."""
    if not _sticky_shared(located.directory_stat):
        return
    owner = link_stat.st_uid
    if owner in (os.geteuid(), located.directory_stat.st_uid):
        return
    raise UnsafePath(f"{located.path} is a symlink owned by another user (uid {owner}) in the "
                     f"sticky, world-writable directory {located.directory}: not followed, as "
                     "the kernel's fs.protected_symlinks would not (remove it or write "
                     "elsewhere)")


def _locate(path: str) -> _Located:
    """Follow ``path`` one component at a time with ``openat`` and ``O_NOFOLLOW``, checking
    each symlink met (:func:`_check_link`) and following it by hand, up to :data:`MAX_LINKS`.
    Raises :class:`UnsafePath`, ``FileNotFoundError`` / ``NotADirectoryError`` for a missing or
    non-directory folder on the way, ``OSError(ELOOP)`` for too many links. Stops at a link in
    ``/proc`` (``kernel_link``)."""
    absolute = path.startswith("/")
    directory = "/" if absolute else os.getcwd()
    fd = os.open("/" if absolute else ".", _DIRECTORY_FLAGS)
    pending = [part for part in reversed(path.split("/")) if part not in ("", ".")]
    links = 0
    try:
        while True:
            located = _Located(fd, directory, os.fstat(fd), pending.pop() if pending else ".",
                               None)
            name, last = located.name, not pending
            if name == "..":
                fd, directory = _enter(fd, "..", os.path.dirname(directory))
                continue
            try:
                located.stat = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if last:
                    return located
                raise FileNotFoundError(errno.ENOENT, "no such directory", located.path)
            if stat.S_ISLNK(located.stat.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                _check_link(located, located.stat)
                if directory == "/proc" or directory.startswith("/proc/"):
                    located.kernel_link = True
                    return located
                text = os.readlink(name, dir_fd=fd)
                if text.startswith("/"):
                    fd, directory = _enter(fd, "/", "/")
                pending += [part for part in reversed(text.split("/")) if part not in ("", ".")]
                continue
            if last:
                return located
            if not stat.S_ISDIR(located.stat.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", located.path)
            fd, directory = _enter(fd, name, located.path)
    except BaseException:
        os.close(fd)
        raise


def _enter(fd: int, name: str, directory: str) -> tuple[int, str]:
    """Open directory ``name`` relative to ``fd`` (without following a symlink), close ``fd``
    and return the new descriptor with its path."""
    flags = _DIRECTORY_FLAGS | (0 if name in ("/", "..") else os.O_NOFOLLOW)
    new = os.open(name, flags, dir_fd=fd) if name != "/" else os.open("/", flags)
    os.close(fd)
    return new, os.path.normpath(directory)


def output_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be written as an output (one line), or ``None`` when it can: ``-``,
    a writable device or pipe, or a regular file (existing and writable, or new) in a folder
    that exists and where files can be created, reached through no symlink another user
    planted in a sticky, world-writable directory, and with one hard link (or several, outside
    such a directory)."""
    text = os.fspath(path)
    if is_stdout(text):
        return None
    try:
        located = _locate(text)
    except UnsafePath as err:
        return str(err)
    except FileNotFoundError:
        return f"no such directory: {os.path.dirname(os.path.abspath(text))}"
    except NotADirectoryError as err:
        return f"{err.filename or text} is not a directory"
    except OSError as err:
        return f"cannot write {text}: {err.strerror or err}"
    try:
        found = located.stat
        if located.kernel_link:
            try:
                found = os.stat(text)
            except OSError as err:
                return f"cannot write {text}: {err.strerror or err}"
        if found is not None:
            if stat.S_ISDIR(found.st_mode):
                return f"{text} is a directory, not a file"
            if not os.access(text, os.W_OK):
                return f"{text} is not writable"
            if not stat.S_ISREG(found.st_mode):
                return None  # a device or a pipe: written through, its folder does not matter
            if found.st_nlink > 1 and _sticky_shared(located.directory_stat):
                return _hard_link_problem(located, found)
        if not os.access(".", os.W_OK | os.X_OK, dir_fd=located.dir_fd):
            return f"cannot create files in {located.directory}"
        return None
    finally:
        located.close()


def _hard_link_problem(located: _Located, found: os.stat_result) -> str:
    return (f"{located.path} has {found.st_nlink} hard links and sits in the sticky, "
            f"world-writable directory {located.directory}: not written, another user may "
            "have linked it there (remove it or write elsewhere)")


def write_text_atomic(path: str | os.PathLike[str], text: str, what: str) -> pathlib.Path:
    """Write ``text`` (UTF-8) to ``path`` (atomically when it is a regular file with one link,
    or new) and return the path as given. See the module docstring for symlinks, hard links,
    modes and owners.

    ``what`` names the content in the error message (``"HTML report"``, ``"trace"``). Raises
    :class:`~pipecheck.errors.BadInputError` (one line naming the path) when the file cannot be
    written: missing directory, no permission, ``path`` is a directory, or a symlink or hard
    link in a sticky, world-writable directory that another user may have planted.
    """
    target = pathlib.Path(path)
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return target
    data = text.encode("utf-8")
    try:
        located = _locate(os.fspath(target))
        try:
            _write(located, os.fspath(target), data)
        finally:
            located.close()
    except UnsafePath as err:
        raise UnsafePath(f"cannot write {what} to {target}: {err}") from None
    except OSError as err:
        raise BadInputError(f"cannot write {what} to {target}: {err.strerror or err}") from err
    return target


def _write(located: _Located, path: str, data: bytes) -> None:
    found = located.stat
    if located.kernel_link:  # /dev/stdout and the like: what this process has open
        with open(path, "wb") as handle:
            handle.write(data)
        return
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    if found is not None and not stat.S_ISREG(found.st_mode):
        # A device or a pipe: written through, opened as it is.
        fd = os.open(located.name, os.O_WRONLY | os.O_NOCTTY | os.O_NOFOLLOW
                     | getattr(os, "O_CLOEXEC", 0), dir_fd=located.dir_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return
    if found is not None and found.st_nlink > 1:
        if _sticky_shared(located.directory_stat):
            raise UnsafePath(_hard_link_problem(located, found))
        _write_in_place(located, found, data)
        return
    _replace(located, found, data)


def _write_in_place(located: _Located, found: os.stat_result, data: bytes) -> None:
    """Truncate and rewrite the file itself (every hard link sees it), then ``fsync``."""
    fd = os.open(located.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY
                 | getattr(os, "O_CLOEXEC", 0), dir_fd=located.dir_fd)
    with os.fdopen(fd, "wb") as handle:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (found.st_dev, found.st_ino):
            raise OSError(errno.EAGAIN, "the file was replaced while being written", located.path)
        handle.truncate(0)
        handle.write(data)
        handle.flush()
        os.fsync(fd)


def _replace(located: _Located, found: Optional[os.stat_result], data: bytes) -> None:
    """Write ``data`` to a temporary file in the located directory, give it the replaced
    file's mode and owner, ``fsync`` it, then rename it over the located name."""
    temp = f".{located.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    # 0o666 lets the umask decide a new file's permissions, as a plain open() would.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | getattr(os, "O_CLOEXEC", 0), 0o666, dir_fd=located.dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            if found is not None:
                _keep_owner_and_mode(fd, found)
            handle.write(data)
            handle.flush()
            os.fsync(fd)
        os.replace(temp, located.name, src_dir_fd=located.dir_fd, dst_dir_fd=located.dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=located.dir_fd)
        except OSError:
            pass
        raise


def _keep_owner_and_mode(fd: int, found: os.stat_result) -> None:
    """Give the new file ``found``'s owner and group where this process may (root, or a group
    it belongs to; otherwise its own stay) and its permission bits (``chown`` first: it clears
    setuid bits, which are not kept anyway)."""
    mine = os.fstat(fd)
    for uid, gid in ((found.st_uid, found.st_gid), (-1, found.st_gid)):
        if (uid in (-1, mine.st_uid)) and gid == mine.st_gid:
            break
        try:
            os.fchown(fd, uid, gid)
            break
        except PermissionError:
            continue
    os.fchmod(fd, stat.S_IMODE(found.st_mode) & 0o777)
