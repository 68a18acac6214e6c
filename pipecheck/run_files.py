"""The report files of ``pipecheck run``: how a measuring process names its loader's report in
the run folder, and how the parent reads the names back.

A process claims its name when it starts measuring a loader: ``loader{i}.p{pid}.json`` is
created empty with ``O_EXCL``, and if that name exists already (a process with the same pid,
earlier in the run or in another PID namespace sharing the folder) the next free
``loader{i}.p{pid}.{k}.json`` is taken. No two processes can hold one name, so a reused pid never
overwrites a report. The empty file is a placeholder: the exit-time save replaces it with the
report (or, under torch.distributed, writes ``....rank{N}.json`` beside it), so a placeholder
still empty when the program has ended names a process whose report never came (``os._exit``,
``exec``, SIGKILL, a crash).

Standard library only: the hook imports this in every measured process.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

MAX_CLAIMS = 1000
"""Most names tried for one loader index and pid (``.1`` to ``.999`` after the plain one): far
more than PID reuse within one run can need; past it :func:`claim_report_path` raises."""

REPORT_NAME = re.compile(
    r"^loader(?P<index>\d+)\.p(?P<pid>\d+)(?:\.(?P<claim>\d+))?(?:\.rank(?P<rank>\d+))?\.json$")
"""A report file's name: loader index, pid, the claim number when the plain name was taken,
and the rank under torch.distributed."""


@dataclass(frozen=True)
class ReportName:
    """A parsed report file name (:data:`REPORT_NAME`). ``claim`` is 0 for the plain name;
    ``rank`` is ``None`` outside torch.distributed."""

    index: int
    pid: int
    claim: int
    rank: Optional[int]

    @property
    def claimed(self) -> str:
        """The name the process claimed (without the rank), shared by its rank files."""
        return _name(self.index, self.pid, self.claim)


def _name(index: int, pid: int, claim: int) -> str:
    return f"loader{index}.p{pid}" + (f".{claim}" if claim else "") + ".json"


def parse(name: str) -> Optional[ReportName]:
    """The parts of a report file's name, or ``None`` for any other file."""
    match = REPORT_NAME.match(name)
    if match is None:
        return None
    rank = match["rank"]
    return ReportName(index=int(match["index"]), pid=int(match["pid"]),
                      claim=int(match["claim"] or 0), rank=None if rank is None else int(rank))


def claim_report_path(folder: str, index: int, pid: Optional[int] = None) -> str:
    """Create this process's empty placeholder for loader ``index`` in ``folder`` (``O_EXCL``:
    a name no other process holds) and return its path; the report is saved over it. ``pid``
    defaults to this process's. Raises ``OSError`` when the folder cannot be written, or
    ``FileExistsError`` after :data:`MAX_CLAIMS` names are taken."""
    pid = os.getpid() if pid is None else pid
    for claim in range(MAX_CLAIMS):
        path = os.path.join(folder, _name(index, pid, claim))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return path
    raise FileExistsError(f"{MAX_CLAIMS} report names for loader {index} of pid {pid} are "
                          f"taken in {folder}")
