"""CI thresholds on a saved report: ``pipecheck check RUN.json --max-stall 0.05
--min-samples-per-s 500``.

Each threshold is judged on one number of the report and gives one line, passed or violated:

* ``max_stall`` (a 0-1 fraction, 0.05 = 5%): the **steady-state** data stall (each epoch's
  first batch left out, what the verdict is judged on), the whole-run stall when the report has
  no steady-state figure;
* ``min_samples_per_s`` (> 0): the consumer's throughput in samples/s;
* ``max_wait_per_batch_s`` (> 0, seconds): the mean data wait per batch.

For a multi-rank report (``ranks`` set, from rank 0's gather or ``pipecheck report`` merging
rank files), stall and wait are judged on the straggler (the worst rank, which sets every
rank's pace) and throughput on the ranks' summed samples/s. A number that was not measured (a run
with no batches) violates its threshold: a guard must not pass on missing data. For the same
reason a multi-rank report with missing ranks (dead, or their file not given) adds one violated
line naming them: the straggler may be among them and the summed throughput leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from pipecheck.errors import BadArgumentError
from pipecheck.report import Report
from pipecheck.units import percent, rate, seconds


@dataclass(frozen=True)
class Thresholds:
    """What a run must meet; ``None`` skips that check. Raises
    :class:`~pipecheck.errors.BadArgumentError` (a ``ValueError``) when
    ``max_stall`` is outside 0-1 or another bound is not positive, or none is given."""

    max_stall: Optional[float] = None
    min_samples_per_s: Optional[float] = None
    max_wait_per_batch_s: Optional[float] = None

    def __post_init__(self) -> None:
        if self.max_stall is not None and not 0 <= self.max_stall <= 1:
            raise BadArgumentError(
                f"--max-stall is a 0-1 fraction (0.05 = 5%), got {self.max_stall:g}")
        for name, value in (("--min-samples-per-s", self.min_samples_per_s),
                            ("--max-wait-per-batch-s", self.max_wait_per_batch_s)):
            if value is not None and not 0 < value < float("inf"):
                raise BadArgumentError(f"{name} must be a positive number, got {value:g}")
        if (self.max_stall, self.min_samples_per_s, self.max_wait_per_batch_s) == (None,) * 3:
            raise BadArgumentError("give at least one threshold: --max-stall, --min-samples-per-s "
                             "or --max-wait-per-batch-s")


@dataclass(frozen=True)
class Outcome:
    """One threshold judged: ``passed`` and the line saying why (numbers with units)."""

    passed: bool
    line: str


def _stall(report: Report) -> tuple[Optional[float], str, str]:
    """(stall fraction, what it is, where) for the report, or its straggler rank's."""
    consumer = report.consumer
    steady, whole, where = consumer.steady_stall_fraction, consumer.stall_fraction, ""
    if report.ranks is not None and report.ranks.straggler is not None:
        worst = next(r for r in report.ranks.ranks if r.rank == report.ranks.straggler)
        steady, whole = worst.steady_stall_fraction, worst.stall_fraction
        where = f" on rank {worst.rank} (the straggler)"
    if steady is not None:
        return steady, "steady-state data stall", where
    return whole, "data stall", where


def _wait_per_batch(report: Report) -> tuple[Optional[float], str]:
    if report.ranks is not None and report.ranks.straggler is not None:
        worst = next(r for r in report.ranks.ranks if r.rank == report.ranks.straggler)
        return worst.wait_per_batch_s, f" on rank {worst.rank} (the straggler)"
    consumer = report.consumer
    return (consumer.wait_s / consumer.batches if consumer.batches else None), ""


def check(report: Report, thresholds: Thresholds) -> list[Outcome]:
    """Judge ``report`` against every threshold given, in the order stall, throughput, wait,
    after a violated line for missing ranks when the report has any."""
    outcomes = []
    if report.ranks is not None and report.ranks.missing:
        missing = ", ".join(str(rank) for rank in report.ranks.missing)
        outcomes.append(Outcome(False, f"rank(s) {missing} of {report.ranks.world_size} sent no "
                                "data (dead, or their file not given): the job's figures are "
                                "incomplete"))
    if thresholds.max_stall is not None:
        value, what, where = _stall(report)
        outcomes.append(_judge(
            f"{what}{where}", value, percent, "--max-stall", thresholds.max_stall, at_most=True))
    if thresholds.min_samples_per_s is not None:
        several = report.ranks is not None and len(report.ranks.ranks) > 1
        value = (report.ranks.samples_per_s if several and report.ranks is not None
                 else report.consumer.samples_per_s)
        outcomes.append(_judge(
            "throughput summed over ranks" if several else "throughput", value,
            lambda v: rate(v, "samples"), "--min-samples-per-s", thresholds.min_samples_per_s,
            at_most=False))
    if thresholds.max_wait_per_batch_s is not None:
        value, where = _wait_per_batch(report)
        outcomes.append(_judge(
            f"data wait per batch{where}", value, seconds, "--max-wait-per-batch-s",
            thresholds.max_wait_per_batch_s, at_most=True, measured_as="mean "))
    return outcomes


def _judge(what: str, value: Optional[float], shown: Callable[[float], str], option: str,
           limit: float, *, at_most: bool, measured_as: str = "") -> Outcome:
    """One threshold's line: ``what`` (prefixed with ``measured_as`` when measured) against
    ``option``'s ``limit``, both formatted with ``shown``; a value that was not measured fails."""
    if value is None:
        return Outcome(False, f"{what} was not measured (no batches); {option} {shown(limit)} "
                              "cannot be met")
    ok = value <= limit if at_most else value >= limit
    verb = ("is within" if ok else "exceeds") if at_most else ("meets" if ok else "is below")
    return Outcome(ok, f"{measured_as}{what} {shown(value)} {verb} {option} {shown(limit)}")
