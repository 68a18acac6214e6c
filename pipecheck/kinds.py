"""The names a report uses for its enumerations, and the catalogue of finding kinds.

Plain data: ``Literal`` aliases for the fields of :mod:`pipecheck.records` and
:class:`pipecheck.report.Report` that take one of a few fixed strings, named constants for
those strings, and :class:`FindingKind`, every ``Finding.kind`` pipecheck emits, each with
what it means. The strings are the JSON values of the report contract (``docs/architecture.md``)
and never change; a report a newer pipecheck wrote may hold values not listed here and still
loads (:func:`pipecheck.codec.from_jsonable` checks only that they are strings).

Imports nothing from pipecheck, so any module may import it.
"""

from __future__ import annotations

from typing import Final, Literal

# ---------------------------------------------------------------------------------------------
# Verdict (``Diagnosis.verdict``, ``RankSummary.verdict``)
# ---------------------------------------------------------------------------------------------

Verdict = Literal["input-bound", "compute-bound", "balanced", "no-data"]
"""What holds the training loop back: the input pipeline, the step, neither, or unknown."""

INPUT_BOUND: Final = "input-bound"
COMPUTE_BOUND: Final = "compute-bound"
BALANCED: Final = "balanced"
NO_DATA: Final = "no-data"
VERDICTS: Final[tuple[Verdict, ...]] = (INPUT_BOUND, COMPUTE_BOUND, BALANCED, NO_DATA)

# ---------------------------------------------------------------------------------------------
# Severity (``Finding.severity``), least severe first
# ---------------------------------------------------------------------------------------------

Severity = Literal["info", "warning", "critical"]

INFO: Final = "info"
WARNING: Final = "warning"
CRITICAL: Final = "critical"
SEVERITIES: Final[tuple[Severity, ...]] = (INFO, WARNING, CRITICAL)

# ---------------------------------------------------------------------------------------------
# Consumer status (``ConsumerRecord.status``, ``ConsumerSummary.status``, ``RankSummary.status``)
# ---------------------------------------------------------------------------------------------

StragglerScope = Literal["rank", "node", "job", "none"]
"""Where a multi-rank job's extra data wait comes from (:func:`pipecheck.analysis.ranks.job_shape`):
one ``rank``, one ``node`` (most of its ranks), the whole ``job`` (every rank waits alike) or
``none`` (no wait worth acting on)."""

ConsumerStatus = Literal["complete", "in-progress", "not-started", "error", "interrupted",
                         "terminated"]
"""How the training loop's last epoch ended: ``error`` when a ``next()`` raised and the loop
stopped there (or an uncaught exception ended the program), ``interrupted`` on Ctrl-C,
``terminated`` on SIGTERM."""

COMPLETE: Final = "complete"
IN_PROGRESS: Final = "in-progress"
NOT_STARTED: Final = "not-started"
ERROR: Final = "error"
INTERRUPTED: Final = "interrupted"
TERMINATED: Final = "terminated"
CONSUMER_STATUSES: Final[tuple[ConsumerStatus, ...]] = (
    COMPLETE, IN_PROGRESS, NOT_STARTED, ERROR, INTERRUPTED, TERMINATED)

# ---------------------------------------------------------------------------------------------
# Process role (``ProcessRecord.role``)
# ---------------------------------------------------------------------------------------------

ProcessRole = Literal["main", "worker", "child"]
"""``child``: a process a worker or the main process started that is not a DataLoader worker."""

MAIN: Final = "main"
WORKER: Final = "worker"
CHILD: Final = "child"
PROCESS_ROLES: Final[tuple[ProcessRole, ...]] = (MAIN, WORKER, CHILD)

# ---------------------------------------------------------------------------------------------
# Worker bound class (``WorkerSummary.bound``, ``ProducerSummary.workers_class``)
# ---------------------------------------------------------------------------------------------

WorkerBound = Literal["cpu-bound", "io-bound", "latency-bound"]
"""What a worker waits on while busy (:mod:`pipecheck.analysis.bound` classifies)."""

CPU_BOUND: Final = "cpu-bound"
IO_BOUND: Final = "io-bound"
LATENCY_BOUND: Final = "latency-bound"
WORKER_BOUNDS: Final[tuple[WorkerBound, ...]] = (CPU_BOUND, IO_BOUND, LATENCY_BOUND)

# ---------------------------------------------------------------------------------------------
# Report kind (``RunRecord.kind``, ``Report.kind``)
# ---------------------------------------------------------------------------------------------

ReportKind = Literal["wrap", "stress", "attach"]
"""``wrap``: measured online inside the training run; ``stress``: the offline sweep;
``attach``: py-spy samples of a running process, no batch timing."""

WRAP: Final = "wrap"
STRESS: Final = "stress"
ATTACH: Final = "attach"
REPORT_KINDS: Final[tuple[ReportKind, ...]] = (WRAP, STRESS, ATTACH)

# ---------------------------------------------------------------------------------------------
# Comparison with an earlier report (``Comparison.status``, ``Comparison.verdict``)
# ---------------------------------------------------------------------------------------------

ComparisonStatus = Literal["compared", "not-compared"]
"""``compared``: the figures of both reports are side by side; ``not-compared``: the earlier
report could not be read or is of another loader (``Comparison.note`` says which)."""

COMPARED: Final = "compared"
NOT_COMPARED: Final = "not-compared"
COMPARISON_STATUSES: Final[tuple[ComparisonStatus, ...]] = (COMPARED, NOT_COMPARED)

ComparisonVerdict = Literal["rose", "fell", "no-measurable-change", "unknown"]
"""What happened to throughput (samples/s) from the earlier report to the later one:
``rose`` / ``fell`` (beyond the runs' own noise, or with that noise unknown),
``no-measurable-change`` (within it, or exactly equal), ``unknown`` (either run has no
samples/s)."""

ROSE: Final = "rose"
FELL: Final = "fell"
NO_MEASURABLE_CHANGE: Final = "no-measurable-change"
UNKNOWN_CHANGE: Final = "unknown"
COMPARISON_VERDICTS: Final[tuple[ComparisonVerdict, ...]] = (
    ROSE, FELL, NO_MEASURABLE_CHANGE, UNKNOWN_CHANGE)

# ---------------------------------------------------------------------------------------------
# Where a pipeline stage ran (``StageRow.where``)
# ---------------------------------------------------------------------------------------------

StagePlace = Literal["main", "workers"]
"""``main``: the main process (``num_workers=0``, or a stage after the DataLoader);
``workers``: the DataLoader's worker processes."""

# ---------------------------------------------------------------------------------------------
# Head-of-line probe status (``HeadOfLineSummary.status``)
# ---------------------------------------------------------------------------------------------

HeadOfLineStatus = Literal["ok", "off", "unavailable"]
"""``off``: not an in-order multi-worker iterator (or never attached); ``unavailable``: torch's
private iterator state is not as expected."""

# ---------------------------------------------------------------------------------------------
# Online tuning status (``TuneSection.status``, ``wrap(tune=True)``)
# ---------------------------------------------------------------------------------------------

TuneStatus = Literal["settled", "tuning", "off", "skipped"]
"""``settled``: trials are over and the chosen settings are in use; ``tuning``: trials still
running when the report was taken; ``off``: tuning failed and turned itself off, the loop
went on with the user's own settings (``reason`` says what failed); ``skipped``: this loader
cannot be tuned online (``reason`` says why), nothing was tried."""

# ---------------------------------------------------------------------------------------------
# Finding kinds
# ---------------------------------------------------------------------------------------------

FindingKindName = Literal[
    "input-bound", "compute-bound", "balanced",
    "loader-error", "run-interrupted", "no-batches", "slow-first-batch", "workers-unbalanced",
    "cpu-saturated", "slow-batch-handover", "short-run", "insufficient-data",
    "contended-host", "intra-op-threads", "probe-off", "cpu-bound-workers", "io-bound-workers",
    "latency-bound-workers", "memory-growth", "shm-headroom", "stacks-unavailable",
    "hot-function", "gpu-idle", "head-of-line-blocking", "dominant-stage",
    "ranks-missing", "straggler-rank", "gather-failed", "ranks-tuned-differently",
    "empty-workers", "shard-imbalance", "unequal-rank-batches", "shard-size-skew",
    "small-shuffle-buffer", "no-dataloader",
]
"""Every ``Finding.kind`` this pipecheck emits (the values of :class:`FindingKind`). A loaded
report may hold others (a newer writer's); code reading findings compares against
:class:`FindingKind` constants and passes unknown kinds through."""


class FindingKind:
    """The catalogue of finding kinds: one constant per ``Finding.kind`` pipecheck emits,
    stable kebab-case JSON values. :data:`FINDING_KINDS` is the set of them."""

    # The verdict, restated as a finding with the numbers behind it (analysis.verdict,
    # analysis.attach); "no-data" gives no finding.
    INPUT_BOUND: Final = "input-bound"
    """The loop waited for data at least the input-bound share of its time."""
    COMPUTE_BOUND: Final = "compute-bound"
    """The loop waited for data at most the compute-bound share, or negligibly per batch."""
    BALANCED: Final = "balanced"
    """The stall lies between the compute-bound and input-bound thresholds."""

    # The run as a whole (analysis.verdict)
    LOADER_ERROR: Final = "loader-error"
    """A ``next()`` on the loader raised (critical when it ended the loop)."""
    RUN_INTERRUPTED: Final = "run-interrupted"
    """The run ended on Ctrl-C or SIGTERM before its loop finished."""
    NO_BATCHES: Final = "no-batches"
    """The loop received no batch: nothing to judge."""
    SLOW_FIRST_BATCH: Final = "slow-first-batch"
    """An epoch's first batch waited far longer than the steady batches (worker start-up; with
    ``num_workers=0`` the first fetch)."""
    WORKERS_UNBALANCED: Final = "workers-unbalanced"
    """The fastest worker's busy rate exceeds the slowest one's by more than the set ratio."""
    CPU_SATURATED: Final = "cpu-saturated"
    """Main process plus workers used nearly all the usable CPUs."""
    SLOW_BATCH_HANDOVER: Final = "slow-batch-handover"
    """Receiving each batch from a worker costs the main thread material CPU time."""
    SHORT_RUN: Final = "short-run"
    """Too few steady batches for the figures to be more than rough."""
    INSUFFICIENT_DATA: Final = "insufficient-data"
    """No model could be built, so no recommendation is predicted; says what was missing."""

    # Causes (analysis.causes)
    CONTENDED_HOST: Final = "contended-host"
    """Other processes took the cores the workers needed: the workers waited to run."""
    PROBE_OFF: Final = "probe-off"
    """A probe asked for turned itself off during the run, with its reason."""
    INTRA_OP_THREADS: Final = "intra-op-threads"
    """With ``num_workers=0``, production ran on torch's intra-op pool, whose overhead inflates
    its CPU beyond what a one-thread worker would pay."""
    CPU_BOUND_WORKERS: Final = "cpu-bound-workers"
    """The producer's workers spend their busy time on the CPU."""
    IO_BOUND_WORKERS: Final = "io-bound-workers"
    """The producer's workers spend their busy time reading storage."""
    LATENCY_BOUND_WORKERS: Final = "latency-bound-workers"
    """The producer's workers mostly wait (sleep, network) while cores idle."""
    MEMORY_GROWTH: Final = "memory-growth"
    """A worker's (or the main process's) memory grew steadily over the run."""
    SHM_HEADROOM: Final = "shm-headroom"
    """``/dev/shm`` has little room left for the batches in flight (critical: too little)."""
    STACKS_UNAVAILABLE: Final = "stacks-unavailable"
    """Hot stacks were asked for but could not be sampled (py-spy missing, ptrace refused)."""
    HOT_FUNCTION: Final = "hot-function"
    """The function the sampled stacks spent most time in."""
    GPU_IDLE: Final = "gpu-idle"
    """The CUDA stream starved while the loop waited in ``next()``."""
    HEAD_OF_LINE_BLOCKING: Final = "head-of-line-blocking"
    """In-order delivery made ready batches wait behind a slow one (analysis.hol)."""
    DOMINANT_STAGE: Final = "dominant-stage"
    """One pipeline stage takes most of the producer's time (analysis.stages)."""

    # Several ranks (analysis.ranks, distributed)
    RANKS_MISSING: Final = "ranks-missing"
    """Ranks below the world size gave no data (dead, or their file not given)."""
    STRAGGLER_RANK: Final = "straggler-rank"
    """One rank waits for data per step far longer than the others: every rank waits for it."""
    GATHER_FAILED: Final = "gather-failed"
    """Gathering the ranks' reports through torch.distributed failed."""
    RANKS_TUNED_DIFFERENTLY: Final = "ranks-tuned-differently"
    """Online tuning (``wrap(tune=True)``) kept different loader settings on different ranks."""

    # The shard-assignment dry run of a webdataset loader (analysis.sharding)
    EMPTY_WORKERS: Final = "empty-workers"
    """Some (rank, worker) readers get no shard and yield nothing."""
    SHARD_IMBALANCE: Final = "shard-imbalance"
    """Workers get unequal shard counts, so some idle at the end of an epoch."""
    UNEQUAL_RANK_BATCHES: Final = "unequal-rank-batches"
    """Ranks get unequal batch counts, which hangs synchronous training at epoch end."""
    SHARD_SIZE_SKEW: Final = "shard-size-skew"
    """Shards hold very different sample counts."""
    SMALL_SHUFFLE_BUFFER: Final = "small-shuffle-buffer"
    """The shuffle buffer is smaller than a shard: batches mix only neighbouring samples."""

    # pipecheck attach (analysis.attach)
    NO_DATALOADER: Final = "no-dataloader"
    """The attached process showed no DataLoader in its sampled stacks."""


FINDING_KINDS: Final[frozenset[str]] = frozenset(
    value for name, value in vars(FindingKind).items()
    if name.isupper() and isinstance(value, str))
"""Every finding kind in the catalogue."""

FINDINGS_PAGE: Final = "docs/findings.md"
"""The docs page that explains every finding kind, one heading each (its anchor: the kind), with
the evidence and sources a finding's message leaves out."""

WORKERS_FINDING: Final[dict[WorkerBound, FindingKindName]] = {
    CPU_BOUND: FindingKind.CPU_BOUND_WORKERS,
    IO_BOUND: FindingKind.IO_BOUND_WORKERS,
    LATENCY_BOUND: FindingKind.LATENCY_BOUND_WORKERS,
}
"""The finding kind naming each worker bound class as the producer's cause."""

VERDICT_FINDING: Final[dict[Verdict, FindingKindName]] = {
    INPUT_BOUND: FindingKind.INPUT_BOUND,
    COMPUTE_BOUND: FindingKind.COMPUTE_BOUND,
    BALANCED: FindingKind.BALANCED,
}
"""The finding kind restating each verdict (``no-data`` has none)."""
