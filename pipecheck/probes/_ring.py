"""A fixed-size shared file that DataLoader workers write per-batch timings into.

How it works, and why: docs/internals.md (``pipecheck/probes/_ring.py``).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import tempfile
import time
from dataclasses import dataclass
from typing import NamedTuple, Optional

from pipecheck import _owned, units

MAGIC = 0x31305752_4B434550  # b"PECKRW01" read as a little-endian int64, marks our files
LAYOUT_VERSION = 1
WORD_BYTES = 8
AREA_HEADER_WORDS = 8
MAX_PIDS = 32
SLOT_HEADER_WORDS = 48  # 9 counters + MAX_PIDS pids, padded to a multiple of 8 words (64 bytes)
RECORD_WORDS = 5

# Slot header word indices.
SEQ, BATCHES, SAMPLES, FETCH_S, COLLATE_S, FIRST_END, LAST_END, PID, PID_COUNT, PIDS = range(10)
# Ring record word indices.
REC_SEQ, REC_END, REC_FETCH_S, REC_COLLATE_S, REC_SAMPLES = range(RECORD_WORDS)

_HEADER_FORMAT = "=qqqddddqq" + "q" * MAX_PIDS
_RECORD_FORMAT = "=qdddq"
_RECORD_STRUCT = struct.Struct(_RECORD_FORMAT)
_SEQ_STRUCT = struct.Struct("=q")

# How long a reader waits for a writer to leave its odd (writing) state before falling back:
# a live writer holds it for microseconds, so 50 ms covers being descheduled on a busy host.
READ_RETRY_DEADLINE_S = 0.05


@dataclass(frozen=True)
class AreaLayout:
    """Where each slot lives in the shared file. Picklable: workers receive it with the path."""

    num_slots: int
    ring_size: int

    def __post_init__(self) -> None:
        if self.num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {self.num_slots}")
        if self.ring_size < 1:
            raise ValueError(f"ring_size must be >= 1, got {self.ring_size}")

    @property
    def slot_words(self) -> int:
        words = SLOT_HEADER_WORDS + self.ring_size * RECORD_WORDS
        return -(-words // 8) * 8  # round up to 64 bytes so every slot starts on a cache line

    @property
    def size_bytes(self) -> int:
        return (AREA_HEADER_WORDS + self.num_slots * self.slot_words) * WORD_BYTES

    def header_word(self, slot: int) -> int:
        """Index (in 8-byte words) of ``slot``'s header."""
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot {slot} out of range 0..{self.num_slots - 1}")
        return AREA_HEADER_WORDS + slot * self.slot_words

    def ring_word(self, slot: int) -> int:
        """Index (in 8-byte words) of ``slot``'s first ring record."""
        return self.header_word(slot) + SLOT_HEADER_WORDS


def shared_dir() -> str:
    """``/dev/shm`` when it is a writable directory (RAM-backed on Linux), else the temp dir."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


AREA_PREFIX = "pipecheck-workers."
"""Name prefix of worker timing files (a dot: files of versions before ownership locks, named
``pipecheck-workers-PID-...``, are never swept by this one, which could not tell them live)."""


def remove_stale_areas(directory: str) -> list[str]:
    """Delete area files in ``directory`` whose owner is gone (killed before its finalizer
    ran); return their paths. Ownership is a lock held for the file's lifetime
    (:mod:`pipecheck._owned`), so a live run in another PID namespace is never swept."""
    return _owned.sweep(directory, AREA_PREFIX)


def free_bytes(directory: str) -> Optional[int]:
    """Bytes an unprivileged writer may still use in ``directory``'s file system (``None``
    when ``statvfs`` fails)."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


class NoSpaceError(OSError):
    """The shared file could not be reserved: its file system (``/dev/shm``) is too full.
    The message says how much was free and how much was needed."""


def reserve(fd: int, size_bytes: int, directory: str, what: str) -> None:
    """Allocate ``size_bytes`` of backing store for the file ``fd`` in ``directory`` now
    (``posix_fallocate``), so that a later store into a mapping of it can never fault with
    SIGBUS on a full tmpfs. Raises :class:`NoSpaceError` (``"<what> off: /dev/shm has 24 KiB
    free, needs 82 KiB"``) when the space is not there, ``OSError`` for other failures."""
    try:
        os.posix_fallocate(fd, 0, size_bytes)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        free = free_bytes(directory)
        raise NoSpaceError(
            err.errno, f"{what} off: {directory} has {units.size(free)} free, needs "
            f"{units.size(size_bytes)} (enlarge it, e.g. docker run --shm-size=...)") from err


SHM_HEADROOM_BYTES = 64 * 1024 * 1024
"""Free space (bytes) ``/dev/shm`` must keep *after* pipecheck's file when no anonymous memory
file can be made (:func:`create_area` without ``memfd_create``): torch's worker queues and
shared tensors live there, and pipecheck must never take the room they need. Docker's default
``/dev/shm`` is 64 MiB, so in such a container pipecheck then stays out of it altogether and
worker timing is off with the reason (pipecheck's choice)."""


@dataclass
class Area:
    """The shared memory of one :class:`~pipecheck.probes.workers.WorkerProbe`.

    ``path``: what a worker opens to map it (``/proc/PID/fd/N`` for an anonymous memory file,
    which takes nothing from ``/dev/shm`` and disappears with the processes that hold it; a
    file in ``/dev/shm`` or the temp dir otherwise). ``mapping``: the owner's shared mapping.
    ``fd``: the descriptor that keeps the memory (and, for a file, its ownership lock).
    ``device_inode``: ``(st_dev, st_ino)`` of it, so a forked worker can use the inherited
    descriptor when ``/proc`` cannot be opened. ``anonymous``: no file name to remove."""

    path: str
    mapping: mmap.mmap
    fd: int
    device_inode: tuple[int, int]
    anonymous: bool

    def release(self) -> None:
        """Unmap, close and (for a named file) delete it. Idempotent, never raises."""
        try:
            self.mapping.close()
        except (BufferError, ValueError):
            pass
        if self.anonymous:
            fd, self.fd = self.fd, -1
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        else:
            _owned.remove(self.fd if self.fd >= 0 else None, self.path)
            self.fd = -1

    def remove_name(self) -> None:
        """Delete a named file now, taking no lock (the SIGTERM save); nothing for anonymous
        memory, which goes with the process."""
        if not self.anonymous:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _anonymous_fd(size_bytes: int) -> Optional[int]:
    """An anonymous memory file of ``size_bytes`` (``memfd_create``, Linux 3.17+), its pages
    reserved; ``None`` where there is none (no ``memfd_create``, or it failed)."""
    create = getattr(os, "memfd_create", None)
    if create is None:
        return None
    try:
        fd = create("pipecheck-workers", getattr(os, "MFD_CLOEXEC", 1))
    except OSError:
        return None
    try:
        os.ftruncate(fd, size_bytes)
        os.posix_fallocate(fd, 0, size_bytes)  # no SIGBUS later, whatever memory does
        os.stat(f"/proc/{os.getpid()}/fd/{fd}")  # spawn workers reopen it there
    except OSError:
        os.close(fd)
        return None
    return fd


def create_area(layout: AreaLayout) -> Area:
    """Create zero-filled shared memory for ``layout``.

    Preferably an anonymous memory file (``memfd_create``): it takes nothing from ``/dev/shm``,
    where torch's queues and shared tensors live, and it goes with the last process holding
    it, so a killed run leaves nothing behind. Otherwise a file in ``/dev/shm`` (or the temp
    dir) owned through :mod:`pipecheck._owned` (files left by killed runs are swept first),
    made only when ``/dev/shm`` keeps :data:`SHM_HEADROOM_BYTES` free beside it, and its pages
    reserved (:func:`reserve`). Raises :class:`NoSpaceError` when that room is not there and
    ``OSError`` when the memory cannot be made otherwise. The caller owns the result:
    :meth:`Area.release` it when done.
    """
    fd = _anonymous_fd(layout.size_bytes)
    if fd is not None:
        path = f"/proc/{os.getpid()}/fd/{fd}"
        anonymous = True
    else:
        directory = shared_dir()
        remove_stale_areas(directory)
        free = free_bytes(directory)
        if directory == "/dev/shm" and free is not None \
                and free < layout.size_bytes + SHM_HEADROOM_BYTES:
            raise NoSpaceError(
                errno.ENOSPC, f"worker timing off: {directory} has {units.size(free)} free, "
                f"and pipecheck leaves it to the DataLoader below "
                f"{units.size(layout.size_bytes + SHM_HEADROOM_BYTES)}")
        fd, path = _owned.create_file(directory, AREA_PREFIX, ".bin")
        anonymous = False
        try:
            os.ftruncate(fd, layout.size_bytes)
            reserve(fd, layout.size_bytes, directory, "worker timing")
        except BaseException:
            _owned.remove(fd, path)
            raise
    try:
        mapping = mmap.mmap(fd, layout.size_bytes)
    except BaseException:
        if anonymous:
            os.close(fd)
        else:
            _owned.remove(fd, path)
        raise
    struct.pack_into("=qqqq", mapping, 0, MAGIC, LAYOUT_VERSION, layout.num_slots,
                     layout.ring_size)
    stat = os.fstat(fd)
    return Area(path=path, mapping=mapping, fd=fd, device_inode=(stat.st_dev, stat.st_ino),
                anonymous=anonymous)


def open_area(path: str, fd: int, device_inode: tuple[int, int]) -> int:
    """A new descriptor of the shared memory a worker writes into: ``path`` opened again, or,
    where that fails (``/proc`` hidden), a duplicate of the inherited descriptor ``fd`` when it
    still refers to the same memory (``device_inode``: a forked worker). Raises ``OSError``."""
    try:
        return os.open(path, os.O_RDWR)
    except OSError:
        stat = os.fstat(fd)  # OSError: not inherited (spawn)
        if (stat.st_dev, stat.st_ino) != device_inode:
            raise
        return os.dup(fd)


class SlotWriter:
    """The writing end of one slot, used inside the worker process that serves it.

    Counters are read-modify-written in the shared header, so a new process taking the same
    worker id (every epoch without ``persistent_workers``) adds to what earlier ones wrote.
    """

    __slots__ = ("_fd", "_area", "_words", "_floats", "_header", "_ring", "_ring_size", "_lock_at",
                 "_locking")

    def __init__(self, fd: int, layout: AreaLayout, slot: int, *, locking: bool = True) -> None:
        """Map the shared memory open as ``fd`` (:func:`open_area`; this writer owns the
        descriptor from now on). ``locking=False`` skips the per-update record lock (two
        syscalls) for a slot only one process can ever write: the main process's slot when
        ``num_workers=0``. Raises ``OSError`` if it cannot be mapped and ``ValueError`` if it
        is not an area of ``layout``."""
        try:
            area = mmap.mmap(fd, layout.size_bytes)
        except BaseException:
            os.close(fd)
            raise
        magic, version, num_slots, ring_size = struct.unpack_from("=qqqq", area, 0)
        if (magic, version, num_slots, ring_size) != (
            MAGIC,
            LAYOUT_VERSION,
            layout.num_slots,
            layout.ring_size,
        ):
            area.close()
            os.close(fd)
            raise ValueError(f"descriptor {fd} is not a pipecheck worker area for {layout}")
        self._fd = fd
        self._area = area
        # Two typed views of the same bytes: integer fields through one, float fields through
        # the other; an item assignment is a single aligned 8-byte store.
        self._words = memoryview(area).cast("q")
        self._floats = memoryview(area).cast("d")
        self._header = layout.header_word(slot)
        self._ring = layout.ring_word(slot)
        self._ring_size = layout.ring_size
        self._lock_at = self._header * WORD_BYTES
        self._locking = locking

    def register_process(self, pid: int) -> None:
        """Record ``pid`` as the slot's current process and add it to the pids seen."""
        words, h = self._words, self._header
        self._lock()
        try:
            seq = self._begin_write()
            words[h + PID] = pid
            count = words[h + PID_COUNT]
            recent = [words[h + PIDS + i] for i in range(min(count, MAX_PIDS))]
            if pid not in recent:
                words[h + PIDS + count % MAX_PIDS] = pid
                words[h + PID_COUNT] = count + 1
            words[h + SEQ] = seq + 2
        finally:
            self._unlock()

    def add_batch(self, end_time: float, fetch_s: float, collate_s: float, samples: int) -> None:
        """Commit one produced batch: a ring record, then the header counters.

        ``end_time`` is a perf_counter reading in seconds; durations are seconds.
        """
        words, floats, h = self._words, self._floats, self._header
        self._lock()
        try:
            batch_number = words[h + BATCHES] + 1
            r = self._ring + ((batch_number - 1) % self._ring_size) * RECORD_WORDS
            words[r + REC_SEQ] = 0  # invalid while the fields change
            floats[r + REC_END] = end_time
            floats[r + REC_FETCH_S] = fetch_s
            floats[r + REC_COLLATE_S] = collate_s
            words[r + REC_SAMPLES] = samples
            words[r + REC_SEQ] = batch_number  # last: the record is complete
            seq = self._begin_write()
            words[h + BATCHES] = batch_number
            words[h + SAMPLES] += samples
            floats[h + FETCH_S] += fetch_s
            floats[h + COLLATE_S] += collate_s
            if batch_number == 1:
                floats[h + FIRST_END] = end_time
            floats[h + LAST_END] = end_time
            words[h + SEQ] = seq + 2
        finally:
            self._unlock()

    def add_time(self, fetch_s: float, collate_s: float) -> None:
        """Add producing time that yielded no batch (a sample or collate that raised, the read
        that hit the end of an iterable dataset) to the totals, without counting a batch."""
        words, floats, h = self._words, self._floats, self._header
        self._lock()
        try:
            seq = self._begin_write()
            floats[h + FETCH_S] += fetch_s
            floats[h + COLLATE_S] += collate_s
            words[h + SEQ] = seq + 2
        finally:
            self._unlock()

    def close(self) -> None:
        """Release the views, the mapping and the file descriptor."""
        self._words.release()
        self._floats.release()
        self._area.close()
        os.close(self._fd)

    def _begin_write(self) -> int:
        """Make the header's seq odd and return the even value it started from. An odd value
        left by a writer killed mid-update is skipped over."""
        words, h = self._words, self._header
        seq = words[h + SEQ]
        if seq & 1:
            seq += 1
        words[h + SEQ] = seq + 1
        return seq

    def _lock(self) -> None:
        if self._locking:
            fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, self._lock_at)

    def _unlock(self) -> None:
        if self._locking:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, self._lock_at)


@dataclass(frozen=True)
class SlotHeader:
    """One consistent read of a slot header. Times are perf_counter seconds (absolute);
    ``first_end``/``last_end`` are ``None`` before the first batch. ``consistent`` is False when
    a writer never left its odd state within the retry deadline (it died mid-update)."""

    seq: int
    batches: int
    samples: int
    fetch_s: float
    collate_s: float
    first_end: Optional[float]
    last_end: Optional[float]
    pid: int
    pids: list[int]
    consistent: bool = True


class RingRecord(NamedTuple):
    """One batch from a slot's ring; ``end`` is a perf_counter reading in seconds."""

    seq: int
    end: float
    fetch_s: float
    collate_s: float
    samples: int


def _unpack_header(values: tuple, consistent: bool) -> SlotHeader:
    seq, batches, samples, fetch_s, collate_s, first_end, last_end, pid, pid_count = values[:9]
    stored = values[9 : 9 + min(pid_count, MAX_PIDS)]
    # The pid ring holds the newest MAX_PIDS; list them oldest first.
    start = pid_count % MAX_PIDS if pid_count > MAX_PIDS else 0
    pids = [p for p in stored[start:] + stored[:start] if p > 0]
    return SlotHeader(
        seq=seq,
        batches=batches,
        samples=samples,
        fetch_s=fetch_s,
        collate_s=collate_s,
        first_end=first_end if batches > 0 else None,
        last_end=last_end if batches > 0 else None,
        pid=pid,
        pids=pids,
        consistent=consistent,
    )


def read_header(
    area: mmap.mmap, layout: AreaLayout, slot: int, *, give_up_on_seq: Optional[int] = None
) -> SlotHeader:
    """Read ``slot``'s header without tearing, retrying while a writer is mid-update.

    If the seq stays odd past ``READ_RETRY_DEADLINE_S`` (or equals ``give_up_on_seq``, an odd
    value already known to be stuck), the last raw read is returned with ``consistent=False``.
    """
    offset = layout.header_word(slot) * WORD_BYTES
    deadline = None
    while True:
        (seq,) = _SEQ_STRUCT.unpack_from(area, offset)
        values = struct.unpack_from(_HEADER_FORMAT, area, offset)
        (seq_after,) = _SEQ_STRUCT.unpack_from(area, offset)
        if not seq & 1 and seq == seq_after == values[0]:
            return _unpack_header(values, consistent=True)
        now = time.perf_counter()
        if deadline is None:
            deadline = now + READ_RETRY_DEADLINE_S
        if seq == give_up_on_seq or now > deadline:
            return _unpack_header(values, consistent=False)
        time.sleep(0 if now + 0.005 < deadline else 0.001)  # yield to the writer


def read_ring(area: mmap.mmap, layout: AreaLayout, slot: int, batches: int) -> list[RingRecord]:
    """Return the committed records of ``slot`` still in its ring, oldest first (up to
    ``ring_size``).

    ``batches`` is the batch count from a consistent header read taken *before* this call.
    Records a writer may have been rewriting during the copy, and torn ones, are left out.
    """
    ring_size = layout.ring_size
    start = layout.ring_word(slot) * WORD_BYTES
    record_bytes = RECORD_WORDS * WORD_BYTES
    raw = area[start : start + ring_size * record_bytes]
    batches_after = read_header(area, layout, slot).batches
    # While we copied, the writer may have been writing records batches+1 .. batches_after+1,
    # which overwrite the positions of records up to batches_after + 1 - ring_size.
    oldest_untouched = batches_after + 2 - ring_size
    records = []
    for values in _RECORD_STRUCT.iter_unpack(raw):
        seq = values[REC_SEQ]
        if not 1 <= seq <= batches:
            continue
        if seq < oldest_untouched:
            # Possibly being overwritten. A writer invalidates the seq before touching the
            # fields, so if the seq is still the same now, the copy we hold is whole.
            position = start + ((seq - 1) % ring_size) * record_bytes
            if _SEQ_STRUCT.unpack_from(area, position)[0] != seq:
                continue
        records.append(RingRecord._make(values))
    records.sort()  # by seq, the first field
    return records
