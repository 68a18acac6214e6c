"""torch.distributed support: which rank recorded a run, per-rank file names, and gathering
every rank's summary onto rank 0.

Under an initialized process group each rank's ``pipecheck.wrap`` records its own run (its
:class:`~pipecheck.records.RankInfo` in ``report.rank``). ``loader.report()`` is then a
collective, like any torch.distributed call: every rank calls it, each sends its
:class:`~pipecheck.records.RankSummary` (a few hundred bytes) to rank 0 through a gloo subgroup
(``new_group(backend="gloo")``, so it works when the default backend is NCCL), and rank 0's
report carries every rank side by side (``report.ranks``). The subgroup is created on the
first gather with its timeout; a rank that is dead or never calls ``report()`` makes the gather
fail after that timeout, and rank 0's report then lists the ranks it has no data from (finding
``ranks-missing``) instead of hanging or raising.

Every rank can also save its own file: :meth:`pipecheck.Report.save` of a report with a rank
writes ``NAME.rank{N}.json`` (:func:`rank_path`), and ``pipecheck report run.rank*.json`` merges
the files (:mod:`pipecheck.merge`), so a dead rank never loses the others' data.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any, Optional

from pipecheck.errors import BadArgumentError, one_line
from pipecheck.kinds import FindingKind
from pipecheck.rank_files import rank_path as rank_path  # re-exported: its documented home
from pipecheck.records import RankInfo, RankSummary
from pipecheck.codec import from_jsonable, to_jsonable

DEFAULT_GATHER_TIMEOUT_S = 60.0
"""Seconds rank 0 waits for the other ranks' summaries (the gloo subgroup's timeout). A
step-synchronous job's ranks reach ``report()`` within a step of each other; 60 s leaves room
for an uneven last epoch without leaving a job hanging long after a rank died."""

_groups: dict[int, tuple[Any, Any]] = {}


def _dist() -> Any:
    """``torch.distributed`` when it is usable and a process group is initialized, else None.
    Called at every epoch's start: the module is looked up once."""
    global _dist_module
    dist: Any = _dist_module
    if dist is None:
        try:
            import torch.distributed as found
        except ImportError:
            return None
        if not found.is_available():
            return None
        _dist_module = dist = found
    if not dist.is_initialized():
        return None
    return dist


_dist_module: Any = None  # torch.distributed once found usable (is_available() is fixed at build)


def current_rank() -> Optional[RankInfo]:
    """This process's rank, world size, local rank, backend and hostname when a
    torch.distributed process group is initialized; ``None`` otherwise."""
    dist = _dist()
    if dist is None:
        return None
    local = os.environ.get("LOCAL_RANK")
    try:
        backend: Optional[str] = str(dist.get_backend())
    except Exception:  # some custom process groups do not report a backend
        backend = None
    return RankInfo(rank=dist.get_rank(), world_size=dist.get_world_size(),
                    local_rank=int(local) if local and local.isdigit() else None,
                    backend=backend, hostname=socket.gethostname())


class GatherFailed(RuntimeError):
    """The summaries could not be gathered (a rank dead, or not calling ``report()`` in
    time); the message is one line."""


def _gloo_group(dist: Any, timeout_s: float) -> Any:
    """A gloo subgroup over all ranks, created once per default process group (creating it is
    itself a collective: every rank must get here)."""
    world = dist.group.WORLD
    cached = _groups.get(id(world))
    # The entry holds ``world`` itself: a later default group (after destroy_process_group
    # and a new init) can then never reuse its id() and be handed the destroyed subgroup.
    if cached is None or cached[0] is not world:
        cached = _groups[id(world)] = (world, dist.new_group(
            backend="gloo", timeout=datetime.timedelta(seconds=timeout_s)))
    return cached[1]


def gather_summaries(summary: RankSummary,
                     timeout_s: float = DEFAULT_GATHER_TIMEOUT_S) -> Optional[list[RankSummary]]:
    """Send ``summary`` to rank 0; on rank 0 return every rank's summary in rank order, on the
    other ranks ``None``. A collective: every rank of the default group must call it.

    ``timeout_s`` (> 0) bounds the wait; it is fixed when the gloo subgroup is first created.
    Raises :class:`GatherFailed` when no process group is initialized, a rank does not answer
    within the timeout, or the transport fails (a rank died).
    """
    if not timeout_s > 0:
        raise BadArgumentError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    dist = _dist()
    if dist is None:
        raise GatherFailed("no torch.distributed process group is initialized")
    try:
        group = _gloo_group(dist, timeout_s)
        received: Optional[list[Any]] = None
        if dist.get_rank() == 0:
            received = [None] * dist.get_world_size()
        dist.gather_object(to_jsonable(summary), received, dst=0, group=group)
    except Exception as err:  # gloo raises RuntimeError (timeout, connection closed) and others
        raise GatherFailed(one_line(err, limit=200)) from err
    if received is None:
        return None
    return [from_jsonable(RankSummary, item, f"rank {i}") for i, item in enumerate(received)]


def gather_report(report: Any, timeout_s: float = DEFAULT_GATHER_TIMEOUT_S) -> Any:
    """``report`` (a :class:`~pipecheck.Report` with ``rank`` set) after gathering every rank's
    summary: on rank 0 with ``ranks`` and the rank findings (:func:`pipecheck.merge.with_ranks`),
    on the other ranks unchanged. A collective (see :func:`gather_summaries`). When the gather
    fails, rank 0's report lists the other ranks as missing and carries finding
    ``gather-failed`` with the reason; nothing is raised."""
    import dataclasses

    from pipecheck.merge import own_summary, with_ranks
    from pipecheck.records import Finding

    assert report.rank is not None
    own = own_summary(report)
    world_size = report.rank.world_size
    try:
        gathered = gather_summaries(own, timeout_s)
    except GatherFailed as err:
        if report.rank.rank != 0:
            return report
        merged = with_ranks(report, [own], world_size)
        failed = Finding(kind=FindingKind.GATHER_FAILED, severity="warning",
                         message=f"Gathering the other ranks' summaries failed after at most "
                         f"{timeout_s:g} s ({err}); each rank's own file still holds its data.",
                         evidence={"timeout_s": timeout_s, "error": str(err)})
        diagnosis = dataclasses.replace(merged.diagnosis,
                                        findings=[*merged.diagnosis.findings, failed])
        return dataclasses.replace(merged, diagnosis=diagnosis)
    if gathered is None:
        return report
    summaries = [s if s.rank == own.rank else dataclasses.replace(s, source="gathered")
                 for s in gathered]
    return with_ranks(report, summaries, world_size)


def reuse_gathered(report: Any, last: Any) -> Any:
    """``report`` (fresh, this rank's own data) with the other ranks' summaries from ``last``,
    an earlier gathered report of this rank (its ``gather-failed`` finding kept): what rank 0
    saves at exit, when the other ranks can no longer be asked."""
    import dataclasses

    from pipecheck.merge import own_summary, with_ranks

    assert report.rank is not None and last.ranks is not None
    own = own_summary(report)
    others = [s for s in last.ranks.ranks if s.rank != own.rank]
    merged = with_ranks(report, [own, *others], report.rank.world_size)
    failed = [f for f in last.diagnosis.findings if f.kind == FindingKind.GATHER_FAILED]
    if not failed:
        return merged
    return dataclasses.replace(merged, diagnosis=dataclasses.replace(
        merged.diagnosis, findings=[*merged.diagnosis.findings, *failed]))
