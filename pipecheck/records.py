"""Plain data: what the probes measured (raw records) and what analysis derived (summaries).

Everything here is a frozen dataclass of JSON-friendly fields, so a report round-trips through
JSON exactly (:func:`pipecheck.codec.to_jsonable` / :func:`pipecheck.codec.from_jsonable`).
Units live in field names: ``_s`` is
seconds, ``_bytes`` bytes, ``_per_s`` a rate per second, ``_fraction`` a 0-1 fraction and
``_percent`` 0-100 percent where 100 means one fully busy core for a process (psutil's
convention) and all cores busy for the whole system. Times named ``*_at_s`` are seconds since the
run started (the ``pipecheck.wrap()`` call, or the start of a stress trial). ``None`` means "not measured", never 0.

Nothing here measures or renders. One module of about 1,200 lines on purpose: it holds one job,
the JSON contract's types (docs/architecture.md), so the whole contract reads in one place and
every reader and writer imports it from one name; the codec is :mod:`pipecheck.codec` and the
sections only one driver writes are :mod:`pipecheck.report_sections`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pipecheck.kinds import (
    ComparisonStatus,
    ComparisonVerdict,
    ConsumerStatus,
    StragglerScope,
    FindingKindName,
    HeadOfLineStatus,
    TuneStatus,
    StagePlace,
    ProcessRole,
    ReportKind,
    Severity,
    Verdict,
    WorkerBound,
)
from pipecheck.loader_settings import LoaderSettings

# ---------------------------------------------------------------------------------------------
# Context: where the run happened and what loader it measured
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Environment:
    """The host the run happened on.

    ``cpu_count`` is logical CPUs (``os.cpu_count()``); ``usable_cpus`` the ones this process may
    run on (``os.sched_getaffinity``), which is what a worker count must respect.
    ``intra_op_threads``: torch's intra-op thread count in this process when the environment
    was read (``torch.get_num_threads()``; DataLoader workers run 1); ``None`` without torch
    or in older reports.
    """

    cpu_count: int
    usable_cpus: int
    python: str
    torch: Optional[str]
    platform: str
    cuda: bool
    cuda_device: Optional[str] = None
    total_memory_bytes: Optional[int] = None
    pipecheck: Optional[str] = None
    intra_op_threads: Optional[int] = None


@dataclass(frozen=True)
class LoaderConfig:
    """The loader's settings, with torch's keyword names. ``None`` where they do not apply
    (a generic iterable has no ``num_workers``)."""

    type: str
    num_workers: Optional[int] = None
    prefetch_factor: Optional[int] = None
    batch_size: Optional[int] = None
    pin_memory: Optional[bool] = None
    persistent_workers: Optional[bool] = None
    in_order: Optional[bool] = None
    drop_last: Optional[bool] = None
    multiprocessing_context: Optional[str] = None
    dataset_type: Optional[str] = None
    dataset_len: Optional[int] = None
    batches_per_epoch: Optional[int] = None


# ---------------------------------------------------------------------------------------------
# Raw consumer records (probes/consumer.py)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchTiming:
    """One batch seen by the consumer.

    ``start_at_s``: when the consumer called ``next()``; ``wait_s``: time blocked in ``next()``;
    ``compute_s``: time from ``next()`` returning to the following ``next()`` call (``None``
    when the loop ended without another call, e.g. on ``break``).
    """

    index: int
    epoch: int
    start_at_s: float
    wait_s: float
    compute_s: Optional[float]
    samples: int


@dataclass(frozen=True)
class EpochTiming:
    """One pass over the loader (one ``iter()`` call).

    ``first_batch_s`` is the wait for its first batch (worker start-up included);
    ``wall_s`` runs from ``iter()`` to the end of the pass. ``ended`` is one of
    ``exhausted`` (StopIteration), ``break`` (iterator dropped early), ``error`` (the loader's
    last ``next()`` raised and no batch came after it), ``interrupted`` (KeyboardInterrupt
    inside ``next()``) or ``running``.
    ``last_wait_s``: for an exhausted pass, the wait inside the final ``next()`` that raised
    StopIteration, in seconds (without ``persistent_workers`` torch shuts the workers down
    there); ``None`` otherwise.
    """

    epoch: int
    started_at_s: float
    batches: int
    samples: int
    wait_s: float
    compute_s: float
    wall_s: float
    first_batch_s: Optional[float]
    ended: str
    last_wait_s: Optional[float] = None


@dataclass(frozen=True)
class FoldedEpochs:
    """Running sums over the epochs a consumer record no longer lists one by one.

    A run lists its first epochs, its most recent ones, the first that delivered a batch and
    any still unfinished as :class:`EpochTiming` rows
    (:data:`pipecheck.probes.consumer.EPOCH_ROWS_FIRST`,
    :data:`~pipecheck.probes.consumer.EPOCH_ROWS_LAST`); every other epoch is added to these
    sums once it has ended, so memory stays bounded however many epochs run. The listed rows'
    figures plus these sums give every whole-run figure the analysis takes from epochs, and
    add up to the record's totals.

    ``epochs``: how many were folded; ``batches``, ``samples``, ``wait_s``, ``compute_s``,
    ``wall_s`` (seconds): their totals. ``started``: those that delivered a first batch,
    ``started_batches`` their batches, ``first_batch_s`` the sum of their first-batch waits and
    ``started_wall_s`` of their wall times (seconds). ``exhausted``: started epochs that ran
    to their end (``ended: exhausted``), ``exhausted_wall_s`` their wall times summed.
    ``last_waits``: exhausted epochs with batches whose final ``next()`` was timed,
    ``last_wait_s`` those waits summed (seconds). ``without_last_compute``: epochs with
    batches whose last step was never timed (ended on ``break``). ``errors``: epochs that
    ended with the loader's exception (``ended: error``), ``interrupted``: by Ctrl-C.
    ``untimed_batches``: their batches of a fast loop's sparse stretches
    (:attr:`ConsumerRecord.untimed_batches`).
    """

    epochs: int = 0
    batches: int = 0
    samples: int = 0
    wait_s: float = 0.0
    compute_s: float = 0.0
    wall_s: float = 0.0
    started: int = 0
    started_batches: int = 0
    first_batch_s: float = 0.0
    started_wall_s: float = 0.0
    exhausted: int = 0
    exhausted_wall_s: float = 0.0
    last_waits: int = 0
    last_wait_s: float = 0.0
    without_last_compute: int = 0
    errors: int = 0
    interrupted: int = 0
    untimed_batches: int = 0


@dataclass(frozen=True)
class ConsumerRecord:
    """Counters over the whole run plus a bounded, evenly spaced sample of batches.

    Batch and sample counts are exact; wait and compute are exact except in a fast loop's
    sparse stretches (``untimed_batches``). ``timeline`` keeps every ``timeline_stride``-th
    timed batch (the stride doubles whenever the buffer fills), so it covers the whole run in
    bounded memory. ``epochs`` lists the first epochs, the most recent ones, the first that
    delivered a batch and any unfinished, in epoch order; the others are summed in
    ``folded_epochs``. ``sampled_*`` fields come from reading
    the main process's CPU clock around a subset of batches (``process_time``, all its threads):
    CPU seconds spent per wall second while waiting and while computing. ``status``:
    ``not-started``, ``in-progress``, ``complete``, ``error`` (``error`` says what: raised by
    the loader, or uncaught in the training script), ``interrupted`` (Ctrl-C) or
    ``terminated`` (SIGTERM; both as recorded by the exit-time save, :mod:`pipecheck.autosave`).
    """

    batches: int
    samples: int
    tokens: Optional[int]
    wait_s: float
    compute_s: float
    wall_s: float
    epochs: list[EpochTiming]
    timeline: list[BatchTiming]
    timeline_stride: int
    status: ConsumerStatus
    error: Optional[str] = None
    """The last exception a ``next()`` raised, as one line; ``None`` when none did."""
    errors: int = 0
    """``next()`` calls that raised (the loop may have gone on after them, as torch allows)."""
    sampled_wait_wall_s: float = 0.0
    sampled_wait_cpu_s: float = 0.0
    sampled_compute_wall_s: float = 0.0
    sampled_compute_cpu_s: float = 0.0
    batch_bytes: Optional[int] = None
    """Bytes of tensor (and numpy) storage in the run's first batch; ``None``: not measured."""
    batch_tensors: Optional[int] = None
    """Tensors (and numpy arrays) in the run's first batch; ``None``: not measured."""
    sampled_wait_thread_cpu_s: Optional[float] = None
    """CPU seconds of the thread calling ``next()`` alone (``time.thread_time``) over the same
    sampled waits as ``sampled_wait_cpu_s``: with ``num_workers=0``, production's CPU without
    the other threads' (torch's intra-op pool); ``None`` in older reports."""
    sampled_compute_thread_cpu_s: Optional[float] = None
    """CPU seconds of the thread calling ``next()`` alone over the same sampled steps as
    ``sampled_compute_cpu_s``: the step's CPU without its intra-op threads'; short of
    ``sampled_compute_wall_s`` when that thread waited (for a core, a GPU, a lock or I/O);
    ``None`` in older reports."""
    untimed_batches: int = 0
    """Batches taken in a fast loop's sparse stretches without a clock read
    (:data:`pipecheck.probes.consumer_iterator.SPARSE_BELOW_S`): counted in ``batches``, ``samples``,
    ``wall_s`` and the epochs' figures, with their wait estimated at the timed blocks' share of
    wait in their wall time; absent from ``timeline``. 0 in loops slower than that."""
    sigterms_continued: int = 0
    """SIGTERMs the program received and went on after (its own handler returned, or it
    ignores SIGTERM): the run did not end there (:mod:`pipecheck.autosave`)."""
    folded_epochs: FoldedEpochs = field(default_factory=FoldedEpochs)
    """Sums over the epochs ``epochs`` does not list (:class:`FoldedEpochs`): ``epochs`` holds
    the first ones, the most recent ones, the first that delivered a batch and any unfinished;
    all zero while every epoch is listed."""
    flagged_batches: int = 0
    """Batches of the epochs opened with ``flagged=True``
    (:meth:`pipecheck.probes.consumer.ConsumerProbe.open_epoch`): the wrapper can flag the
    epochs whose production it timed, and scale the timed figures to their batches."""


# ---------------------------------------------------------------------------------------------
# Raw producer records (probes/workers.py)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerBatch:
    """One batch produced by a worker (``worker_id`` -1 is the main process when
    ``num_workers=0``). ``end_at_s`` is when collation finished."""

    worker_id: int
    end_at_s: float
    fetch_s: float
    collate_s: float
    samples: int


@dataclass(frozen=True)
class WorkerRecord:
    """Per-worker counters, plus the most recent timed batches (bounded ring).

    ``busy_s = fetch_s + collate_s``: wall time spent producing batches. ``pids`` lists every
    process that served this worker id (a new one per epoch without ``persistent_workers``).
    Exact for worker processes. In the main process (``num_workers=0``) of a wrapped loader,
    fast batches are sampled (:meth:`pipecheck.probes.workers.WorkerProbe.between_batches`):
    ``batches`` is then the consumer's count over the timed epochs, ``timed_batches`` were
    timed, and ``samples``, ``fetch_s``, ``collate_s`` and ``busy_s`` are the timed batches'
    totals scaled by ``batches / timed_batches`` (the ratio estimator: unbiased when which
    batch is timed does not depend on its cost, as with fixed windows); ``recent`` holds timed
    batches only. ``None``: every batch was timed.
    """

    id: int
    pid: int
    pids: list[int]
    batches: int
    samples: int
    fetch_s: float
    collate_s: float
    busy_s: float
    first_at_s: Optional[float]
    last_at_s: Optional[float]
    recent: list[WorkerBatch] = field(default_factory=list)
    timed_batches: Optional[int] = None


# ---------------------------------------------------------------------------------------------
# Raw host records (probes/host.py)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSample:
    """One tick of the host sampler.

    CPU percents of processes: 100 = one core. ``system_cpu_percent``: all cores, 0-100.
    ``read_bytes_per_s`` hit storage; ``read_chars_per_s`` include page-cache hits.
    """

    at_s: float
    system_cpu_percent: float
    iowait_percent: Optional[float]
    main_cpu_percent: float
    workers_cpu_percent: float
    main_rss_bytes: int
    workers_rss_bytes: int
    workers_pss_bytes: Optional[int]
    read_bytes_per_s: Optional[float]
    read_chars_per_s: Optional[float]
    available_memory_bytes: int
    usable_cpu_percent: Optional[float] = None
    """Busy share of the CPUs this process may use (0-100), when its affinity is a subset of
    the machine's CPUs; ``None`` otherwise."""


@dataclass(frozen=True)
class MemorySample:
    """One memory reading of one process (``memory_full_info``). ``uss_bytes``: pages only this
    process maps (what copy-on-read and leaks grow); ``pss_bytes``: its proportional share of
    all pages; ``rss_bytes``: resident pages, shared ones counted in full."""

    at_s: float
    rss_bytes: int
    pss_bytes: Optional[int]
    uss_bytes: Optional[int]


@dataclass(frozen=True)
class CpuSample:
    """A process's cumulative CPU and run-queue seconds and storage bytes read since it was
    first seen, at ``at_s``."""

    at_s: float
    cpu_s: float
    runqueue_s: Optional[float]
    read_bytes: Optional[int] = None


@dataclass(frozen=True)
class ProcessStats:
    """One process over the run: ``role`` is ``main``, ``worker`` or ``child`` (a process a
    worker started, or any other descendant). ``worker_id``: the DataLoader worker id of a
    worker, or of the worker a child descends from (``None`` otherwise).
    ``cpu_s`` is user+system CPU seconds consumed while observed.
    ``runqueue_s``: seconds its main thread was runnable but waiting for a core (Linux
    ``/proc/<pid>/schedstat``; ``None`` elsewhere). ``memory``: its USS/PSS readings over time;
    ``cpu``: its cumulative CPU and run-queue seconds per tick (both bounded: every other one is
    dropped when full)."""

    pid: int
    role: ProcessRole
    cpu_s: float
    cpu_percent_mean: float
    rss_max_bytes: int
    pss_max_bytes: Optional[int]
    read_bytes: Optional[int]
    read_chars: Optional[int]
    first_seen_at_s: float
    last_seen_at_s: float
    worker_id: Optional[int] = None
    runqueue_s: Optional[float] = None
    uss_max_bytes: Optional[int] = None
    memory: list[MemorySample] = field(default_factory=list)
    cpu: list[CpuSample] = field(default_factory=list)


@dataclass(frozen=True)
class HostRecord:
    """What the psutil sampler saw. ``overhead_cpu_s`` is the sampler thread's own CPU time;
    ``status`` is ``ok`` or ``unavailable`` (with ``note`` saying why).
    ``disk_busy_fraction_mean``: share of the run (0-1) the busiest disk (``busiest_disk``) had
    I/O in flight, system-wide (iostat's %util); ``None`` where not measured.
    ``usable_cpu_percent_mean``: busy share (0-100) of the CPUs the process may use, when its
    affinity is a subset of the machine's (``None`` otherwise).
    ``others_scanned_s``: seconds the scans of other processes covered
    (:mod:`pipecheck.probes.neighbours`), in which they used ``others_cpu_s`` CPU seconds, of which
    ``others_same_group_cpu_s`` by processes in this run's CPU scheduling group, and
    ``others_groups_cpu_s`` by each other group seen (largest first); ``None`` where not
    scanned (not Linux, a run shorter than two scans, or an older report)."""

    status: str
    interval_s: float
    samples_taken: int
    duration_s: float
    system_cpu_percent_mean: Optional[float]
    iowait_fraction_mean: Optional[float]
    read_bytes_per_s: Optional[float]
    read_chars_per_s: Optional[float]
    main_cpu_s: Optional[float]
    workers_cpu_s: Optional[float]
    overhead_cpu_s: float
    processes: list[ProcessStats] = field(default_factory=list)
    timeline: list[HostSample] = field(default_factory=list)
    note: Optional[str] = None
    disk_busy_fraction_mean: Optional[float] = None
    busiest_disk: Optional[str] = None
    usable_cpu_percent_mean: Optional[float] = None
    others_scanned_s: Optional[float] = None
    others_cpu_s: Optional[float] = None
    others_same_group_cpu_s: Optional[float] = None
    others_groups_cpu_s: Optional[list[float]] = None


@dataclass(frozen=True)
class ContainerStats:
    """A Python container held as an attribute of the dataset object (``name`` is the
    attribute path, e.g. ``dataset.samples``). ``approx_bytes`` is the container plus its items,
    estimated from a sample of items (``sys.getsizeof``, one level deep)."""

    name: str
    type: str
    items: int
    approx_bytes: int


@dataclass(frozen=True)
class SharedMemoryRecord:
    """Size and free space of the file system DataLoader workers pass tensors through
    (``/dev/shm`` on Linux), read when the run started."""

    path: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class HotFunction:
    """A function py-spy caught on a CPU: ``fraction`` of the samples of the processes it is
    counted over (0-1) with it as the innermost Python frame (``self``), and
    ``inclusive_fraction`` anywhere on the stack. ``line`` is its first line (py-spy
    ``--function``). ``stage``: the pipeline stage most of its samples ran in
    (:func:`pipecheck.probes.stacks.stage_of`), ``None`` for main-process functions."""

    function: str
    file: str
    line: Optional[int]
    fraction: float
    inclusive_fraction: float = 0.0
    samples: int = 0
    stage: Optional[str] = None


@dataclass(frozen=True)
class StacksRecord:
    """Hot stacks sampled with py-spy over a bounded window (``window_s``: seconds actually
    sampled, shorter than asked for when the report ended it early).

    ``status``: ``ok``, ``unavailable`` (py-spy missing, or ptrace not permitted before
    starting), ``failed`` (py-spy ran and failed, e.g. denied) or ``running`` (window not over
    when the report was taken and no partial output). ``top``: hottest functions over worker
    samples (over main-process samples when ``num_workers=0``), highest first; ``main_top``
    the same for the main process. ``worker_samples`` / ``main_samples`` count on-CPU stack
    samples (workers: while in torch's worker loop; ``worker_other_samples``: their start-up and
    shutdown). ``overhead_cpu_s``: py-spy's own CPU seconds. ``main_wait``: the main thread's
    samples inside the DataLoader's ``__next__`` (on or off the CPU, ``main_wait_samples`` in
    all) as fractions 0-1: ``queue-empty`` (no batch ready), ``receiving`` (unpickling a batch,
    attaching its shared memory), ``other``; ``pin_memory_busy_fraction``: share of the
    pin-memory thread's samples spent pinning. ``stages``: share (0-1) of worker samples per
    pipeline stage, largest first. ``note`` says why when not ``ok`` and how to enable it.
    ``main_thread_samples``: all the main thread's samples of the ``--idle`` sampler (on or off
    the CPU; ``main_wait_samples`` is the part inside ``__next__``). ``worker_busy_samples`` /
    ``worker_samples_by_pid`` (keys: worker pids as strings; filled only when the ``--idle``
    sampler covered the workers, as ``pipecheck attach`` does): each worker's samples fetching
    or collating, and all its samples inside torch's worker loop."""

    status: str
    window_s: float
    rate_hz: int
    worker_samples: int = 0
    main_samples: int = 0
    top: list[HotFunction] = field(default_factory=list)
    main_top: list[HotFunction] = field(default_factory=list)
    note: Optional[str] = None
    overhead_cpu_s: Optional[float] = None
    worker_other_samples: int = 0
    main_wait: dict[str, float] = field(default_factory=dict)
    main_wait_samples: int = 0
    stages: dict[str, float] = field(default_factory=dict)
    pin_memory_busy_fraction: Optional[float] = None
    main_thread_samples: int = 0
    worker_busy_samples: dict[str, int] = field(default_factory=dict)
    worker_samples_by_pid: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceRecord:
    """GPU idle caused by data, from CUDA events recorded at ``next()`` entry and exit on the
    current stream (resolved later with ``query()``, never synchronizing).

    ``idle_s``: stream time between the entry and exit events summed over resolved batches
    (the stream starved while the host was in ``next()``); ``idle_fraction`` = ``idle_s`` over
    the stream time spanned from the first resolved entry to the last resolved exit.
    ``unresolved``: pairs not complete when the snapshot was taken; ``dropped``: pairs not
    recorded because the event pool was exhausted. ``pinned_fraction``: share of checked batches
    whose tensors were in page-locked memory (``None``: none checked)."""

    status: str
    backend: str
    batches: int
    idle_s: Optional[float]
    idle_fraction: Optional[float]
    unresolved: int = 0
    dropped: int = 0
    pinned_fraction: Optional[float] = None
    note: Optional[str] = None


@dataclass(frozen=True)
class HeadOfLineSummary:
    """Head-of-line blocking totals of an in-order multi-worker loader
    (:class:`pipecheck.probes.hol.HeadOfLineProbe`).

    ``status`` is ``ok``, ``off`` (the loader is not in-order multi-worker, or the probe was
    never attached) or ``unavailable`` (torch's private iterator state is not as expected),
    with ``note`` saying why. ``waits`` / ``wait_s``: ``next()`` calls followed and the seconds
    waited in them; ``blocked_waits`` / ``blocked_wait_s``: those during which later batches
    were already done (the awaited batch blocked them); ``mean_ready_later``: batches done
    ahead on average during a blocked wait (``None`` with no blocked wait).
    ``wait_s_by_worker`` / ``blocked_s_by_worker``: the same seconds by the awaited batch's
    worker id (as text)."""

    status: HeadOfLineStatus
    note: Optional[str]
    waits: int
    wait_s: float
    blocked_waits: int
    blocked_wait_s: float
    mean_ready_later: Optional[float]
    wait_s_by_worker: dict[str, float] = field(default_factory=dict)
    blocked_s_by_worker: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RankInfo:
    """Which torch.distributed rank recorded a run: ``rank`` (0 to ``world_size - 1``) and
    ``local_rank`` (on its node, from ``LOCAL_RANK``; ``None`` when not set), ``backend`` of the
    default process group (``gloo``, ``nccl``, ...) and the node's ``hostname``."""

    rank: int
    world_size: int
    local_rank: Optional[int] = None
    backend: Optional[str] = None
    hostname: Optional[str] = None
    shards: Optional[list[list[str]]] = None
    """The WebDataset shard URLs each of this rank's DataLoader workers reads, one list per
    worker, replayed with the pipeline's own splitters (:mod:`pipecheck.probes.rank_shards`);
    ``None`` when the loader is not a webdataset pipeline over a fixed URL list."""

    def __post_init__(self) -> None:
        check_rank(self.rank, self.world_size)


MAX_WORLD_SIZE = 1 << 20
"""Largest ``world_size`` accepted (1,048,576 ranks): above the largest training jobs reported
(about 100,000 GPUs), and small enough that a per-rank list stays a few MB (a forged
``world_size`` of 10**8 would take GB)."""


def check_rank(rank: int, world_size: int) -> None:
    """Raise ``ValueError`` unless ``1 <= world_size <= MAX_WORLD_SIZE`` and
    ``0 <= rank < world_size``."""
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be 1 to {MAX_WORLD_SIZE}, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world size {world_size}")


@dataclass(frozen=True)
class RunRecord:
    """Everything one driver (wrap or stress) measured, before any analysis."""

    kind: ReportKind
    created: str
    environment: Environment
    loader: LoaderConfig
    consumer: ConsumerRecord
    workers: list[WorkerRecord]
    worker_probe: str
    host: Optional[HostRecord]
    probed_epochs: Optional[int] = None
    """Epochs the worker probe timed (``None``: all). With ``num_workers=0`` and batches that
    take under ``pipecheck.wrap.FAST_BATCH_S`` to produce, only some epochs are timed."""
    shared_memory: Optional[SharedMemoryRecord] = None
    dataset_containers: list[ContainerStats] = field(default_factory=list)
    stacks: Optional[StacksRecord] = None
    device: Optional[DeviceRecord] = None
    rank: Optional[RankInfo] = None
    """Set when a torch.distributed process group was initialized (``None``: a single process)."""
    stages: list[dict[str, Any]] = field(default_factory=list)
    """Per-process pipeline / user stage totals
    (:meth:`pipecheck.probes.stages.StageTotals.snapshot`)."""
    head_of_line: Optional[HeadOfLineSummary] = None
    """Head-of-line blocking totals (:meth:`pipecheck.probes.hol.HeadOfLineProbe.record`)."""
    sharding: Optional[ShardingSection] = None
    """The shard-assignment dry run of a WebDataset loader
    (:func:`pipecheck.analysis.sharding.analyze_sharding`)."""
    probes_off: dict[str, str] = field(default_factory=dict)
    """Probes that were asked for but turned themselves off, by name (``workers``,
    ``stages``), each with the one-line reason (``/dev/shm`` too full to reserve the shared
    file, a DataPipe dataset, a loader class that builds its iterators without torch's
    ``_get_iterator``, ...); the ``probe-off`` finding repeats them."""
    tune: Optional["TuneSection"] = None
    """Online tuning (``wrap(tune=True)``): trials, the settings kept; ``None`` without."""


# ---------------------------------------------------------------------------------------------
# Summaries (analysis/)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantiles:
    """Distribution of a duration in seconds (mean and percentiles)."""

    mean: float
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True)
class ConsumerSummary:
    """The consumer's side of the run (contract keys first).

    ``stall_fraction = wait_s / (wait_s + compute_s)`` over the whole run, epoch starts included;
    ``steady_stall_fraction`` leaves out each epoch's first batch. ``demand_batches_per_s`` is
    ``1 / mean(compute_s)`` without the run's first step (a warm-up): what the step could take
    if data were free.
    """

    batches: int
    samples: int
    wall_s: float
    wait_s: float
    compute_s: float
    stall_fraction: Optional[float]
    samples_per_s: Optional[float]
    batches_per_s: Optional[float]
    tokens_per_s: Optional[float]
    first_batch_s: Optional[float]
    tokens: Optional[int] = None
    epochs: int = 0
    steady_stall_fraction: Optional[float] = None
    demand_batches_per_s: Optional[float] = None
    wait_time_s: Optional[Quantiles] = None
    compute_time_s: Optional[Quantiles] = None
    status: ConsumerStatus = "complete"
    error: Optional[str] = None
    errors: int = 0
    """``next()`` calls that raised; the loop may have gone on past them."""
    untimed_batches: Optional[int] = None
    """Batches of a fast loop's sparse stretches, whose wait was estimated at the timed blocks'
    share of wait (:attr:`ConsumerRecord.untimed_batches`); 0: every batch was timed;
    ``None`` in older reports."""
    sigterms_continued: Optional[int] = None
    """SIGTERMs the program received and went on after (:attr:`ConsumerRecord
    .sigterms_continued`); ``None`` in older reports."""


@dataclass(frozen=True)
class WorkerSummary:
    """One worker id over the run. ``rate_batches_per_s = batches / busy_s`` is what the worker
    produces while busy; ``cpu_fraction`` is CPU seconds per busy second (1.0 = CPU-bound,
    near 0 = waiting on sleep, network or storage); ``runqueue_fraction`` is seconds spent
    runnable but waiting for a core per busy second (CPU contention);
    ``storage_read_bytes_per_s`` is bytes read from storage (not the page cache) per busy
    second. ``bound`` is ``cpu-bound``, ``io-bound`` or ``latency-bound``
    (:mod:`pipecheck.analysis.bound`). ``memory_growth_bytes_per_s`` is the Theil-Sen slope of
    the worker's USS over time (:mod:`pipecheck.analysis.memory`), ``None`` when too few
    readings."""

    id: int
    pid: int
    batches: int
    busy_s: float
    samples: int = 0
    fetch_s: float = 0.0
    collate_s: float = 0.0
    cpu_s: Optional[float] = None
    rate_batches_per_s: Optional[float] = None
    cpu_fraction: Optional[float] = None
    rss_max_bytes: Optional[int] = None
    pss_max_bytes: Optional[int] = None
    runqueue_fraction: Optional[float] = None
    storage_read_bytes_per_s: Optional[float] = None
    bound: Optional[WorkerBound] = None
    uss_max_bytes: Optional[int] = None
    memory_growth_bytes_per_s: Optional[float] = None


@dataclass(frozen=True)
class StageRow:
    """One pipeline stage's exclusive time in one place
    (:func:`pipecheck.analysis.stages.stage_table`).

    ``where``: ``main`` or ``workers``; ``exclusive_s``: seconds spent in the stage's own work
    (not in the stages it pulls from), summed over the processes of that place; ``fraction``:
    its share (0-1) of that place's stage time (``None`` when that is 0); ``samples_in`` /
    ``samples_out``: items pulled from upstream / yielded (``samples_in`` is ``None`` for a
    source or user stage; a filter shows as fewer out than in); ``bytes_read``: bytes of the
    local shard files an opener stage opened (0 for other stages; ``None`` in reports written
    before it was measured); ``workers``: exclusive seconds by process (worker id as text,
    ``main`` for the main process)."""

    name: str
    where: StagePlace
    exclusive_s: float
    fraction: Optional[float]
    samples_in: Optional[int]
    samples_out: int
    bytes_read: Optional[int] = None
    workers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ProducerSummary:
    """The producer's side. ``capacity_batches_per_s`` is what the loader could deliver with no
    consumer limit; ``capacity_basis`` says in words how it was derived. ``workers_class`` is
    the class (``cpu-bound``, ``io-bound``, ``latency-bound``) holding most of the workers' busy
    time, ``workers_class_basis`` the numbers behind it."""

    capacity_batches_per_s: Optional[float]
    batch_time_s: Optional[Quantiles]
    workers: list[WorkerSummary]
    probe: str = "none"
    capacity_samples_per_s: Optional[float] = None
    capacity_basis: Optional[str] = None
    per_worker_batches_per_s: Optional[float] = None
    cpu_per_batch_s: Optional[float] = None
    cpu_fraction: Optional[float] = None
    main_cpu_per_batch_s: Optional[float] = None
    workers_class: Optional[WorkerBound] = None
    workers_class_basis: Optional[str] = None
    stages: list[StageRow] = field(default_factory=list)
    """Exclusive time per pipeline stage, largest first
    (:func:`pipecheck.analysis.stages.stage_table`)."""
    head_of_line: Optional[HeadOfLineSummary] = None
    """Head-of-line blocking totals for in-order multi-worker loaders (``None``: not probed)."""


@dataclass(frozen=True)
class Finding:
    """One observation. ``kind`` is stable kebab-case (``input-bound``, ``slow-first-batch``);
    ``severity`` is ``info``, ``warning`` or ``critical``; ``evidence`` holds the numbers behind
    the message, with units in the keys."""

    kind: FindingKindName
    severity: Severity
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Judgement:
    """The one judgement the verdict line, the capacity / demand line and the recommendations are
    all derived from (:mod:`pipecheck.analysis.judgement`).

    ``stall_fraction`` is the stall the verdict was judged on (0-1; the steady stall when
    ``steady``), ``goodput_fraction`` its complement ``1 - stall_fraction`` (the share of loop
    time the step had data: data goodput). ``wait_per_batch_s`` is the mean wait per batch in
    seconds over the same batches; below ``min_wait_per_batch_s`` no stall makes a run
    input-bound. ``capacity_demand_ratio`` is the producer capacity estimate over the step's
    demand (``None`` when either was not measured). ``loader_keeps_up`` is the report's
    conclusion, which follows the measured stall: ``False`` when input-bound, ``True``
    otherwise, ``None`` with no data. ``capacity_note`` is set when the capacity estimate points
    the other way: it says which evidence wins and why."""

    stall_fraction: Optional[float]
    steady: bool
    goodput_fraction: Optional[float]
    wait_per_batch_s: Optional[float]
    min_wait_per_batch_s: float
    capacity_demand_ratio: Optional[float] = None
    loader_keeps_up: Optional[bool] = None
    capacity_note: Optional[str] = None


@dataclass(frozen=True)
class Diagnosis:
    """``verdict`` is ``input-bound``, ``compute-bound``, ``balanced`` or ``no-data``;
    ``thresholds`` are the stall fractions the verdict was judged against; ``judgement`` the
    figures the verdict, the capacity line and the recommendations share (``None`` in reports
    written before it existed)."""

    verdict: Verdict
    bottleneck: str
    findings: list[Finding]
    thresholds: dict[str, float] = field(default_factory=dict)
    judgement: Optional[Judgement] = None


MODEL_ERROR_FRACTION = 0.35
"""The model's own relative error, by which an interval is widened on each side where the
calibration suite has no measure of it (predictions from a run with workers, or at the
measured worker count; :func:`model_error_band`): ``python benchmarks/prediction.py --seconds
10`` (a torchvision-style JPEG pipeline, a CPU-bound and a latency-bound dataset, from
``num_workers=0``, quiet and beside a busy process) measured achieved / predicted - 1 from
-31% to +20% on the project's 2-core machine; rounded up (pipecheck's choice)."""


SERIAL_TO_WORKERS_ERROR = (0.10, 0.05)
"""The model's own error, as fractions ``(below, above)``, for a prediction with workers from
a run measured at ``num_workers=0``: its 90% interval's ends move down by the first and up by
the second beyond the run's own noise and the model's spans. Calibrated on the suite of
``python benchmarks/calibration.py``: of 36 measured rates (1-4 workers, 9 pipelines quiet
and beside a busy process, where pipecheck gives a figure) the interval without this band
held 23; 10% below and 5% above hold 33 (92%). docs/model.md, "The interval's model error",
has the figures and the command."""


def model_error_band(measured_workers: int, workers: int) -> tuple[float, float]:
    """The model's own error ``(below, above)`` (fractions, each in [0, 1)) for a prediction
    at ``workers`` workers from a run measured at ``measured_workers``:
    :data:`SERIAL_TO_WORKERS_ERROR` from ``num_workers=0`` to workers (the case the calibration
    suite measures), else :data:`MODEL_ERROR_FRACTION` either side (predictions from a run
    with workers, which the suite does not start from). ``ValueError`` for a negative count."""
    if measured_workers < 0 or workers < 0:
        raise ValueError(f"worker counts must be >= 0, got {measured_workers} and {workers}")
    if measured_workers == 0 and workers > 0:
        return SERIAL_TO_WORKERS_ERROR
    return MODEL_ERROR_FRACTION, MODEL_ERROR_FRACTION


UNCERTAIN_WIDTH = 3.0
"""Width of a 90% interval (``high / low``) above which it bounds nothing worth printing: the
expected figure is then marked ``uncertain`` (:attr:`Expected.uncertain`) and outputs say so
in words, with the measurement that settles it (a short ``pipecheck stress`` run), instead of
the range. Why 3: at 3x the interval's ends lie a factor sqrt(3) = 1.73 either side of its
middle, so it cannot tell whether a proposal pays at all (pipecheck proposes from a 5% gain,
:data:`pipecheck.recommend.limits.MIN_GAIN_FRACTION`), while the quietest run's interval is already
2.08x wide from the model's own error alone where that is not calibrated
(:data:`MODEL_ERROR_FRACTION`: 1.35 / 0.65), so a lower threshold would flag every such
figure; 3x leaves room for the run's own noise up to about +-18% of loop time on top.
pipecheck's choice."""


UNSURE_POINT_ERROR = 0.15
"""Relative error of a point prediction above which the model calls it unsure when its own
unknowns alone allow that much (:attr:`pipecheck.analysis.model.WorkerCpuSpread.unsure`):
issue 26's target for a quiet prediction. Which end of the worker's CPU range holds differs by
pipeline: ``python benchmarks/intra_op_cost.py --samples 200`` measured one thread paying the calling thread's CPU
(JPEG decode and crop, 1.30 against 1.36 ms a sample, the process 2.72) and the process's
(ToTensor and Normalize, 0.58 against 0.60, the calling thread 0.30), so no point inside it
is sure; a measurement settles it (docs/model.md#unsure-worker-cpu)."""


def interval_uncertain(low: Optional[float], high: Optional[float]) -> Optional[bool]:
    """Whether the interval ``[low, high]`` (any one unit, > 0) is wider than
    :data:`UNCERTAIN_WIDTH` (``high / low``); ``None`` when either end is unknown."""
    if low is None or high is None:
        return None
    return not (low > 0 and high <= UNCERTAIN_WIDTH * low)


@dataclass(frozen=True)
class Expected:
    """Predicted effect of a change; ``None`` fields could not be predicted.

    ``samples_per_s``, ``batches_per_s`` and ``tokens_per_s`` are the expected rates (tokens only
    when the run counted them); ``gain_samples_per_s`` / ``gain_tokens_per_s`` are those minus
    the measured run's rates. ``saved_s_per_10k_steps`` is the wall time in seconds saved over
    10,000 steps (batches) at the expected batch rate against the measured one;
    ``saved_s_per_epoch`` the same over one epoch, only when the loader's ``len()`` (batches per
    epoch) is known. Negative savings never occur in model proposals (a change expected to be
    slower is not proposed)."""

    samples_per_s: Optional[float]
    stall_fraction: Optional[float]
    note: Optional[str] = None
    batches_per_s: Optional[float] = None
    tokens_per_s: Optional[float] = None
    gain_samples_per_s: Optional[float] = None
    gain_tokens_per_s: Optional[float] = None
    saved_s_per_10k_steps: Optional[float] = None
    saved_s_per_epoch: Optional[float] = None
    samples_per_s_low: Optional[float] = None
    """Low end of the 90% interval of ``samples_per_s`` from the run's own noise (the other
    processes' load over the run, batch means of the loop time) widened by the model's own
    error (:func:`model_error_band`); ``None`` when not derived."""
    samples_per_s_high: Optional[float] = None
    """High end of the same interval."""
    uncertain: Optional[bool] = None
    """``True`` when the interval is wider than :data:`UNCERTAIN_WIDTH` (``high / low``): it
    bounds nothing, and outputs say "uncertain" with the measurement that settles it instead
    of printing the range; also ``True`` when the model's own unknowns alone can move the point
    by more than :data:`UNSURE_POINT_ERROR` (a worker's CPU a serial run's intra-op pool
    hides, :attr:`uncertain_reason`); ``False`` otherwise; ``None`` when
    there is no interval, and in reports written before the flag existed (readers then judge
    the range themselves, :func:`interval_uncertain`)."""
    uncertain_reason: Optional[str] = None
    """Why the figure is uncertain beyond its interval's width, with the measurement that
    settles it (one sentence, no trailing period); ``None`` when the width alone decides, and
    in reports written before it."""


@dataclass(frozen=True)
class Recommendation:
    """Change ``setting`` (a DataLoader keyword) from ``current`` to ``proposed``."""

    setting: str
    current: Any
    proposed: Any
    expected: Expected
    reason: str


@dataclass(frozen=True)
class RankSummary:
    """One rank's consumer side, as merged across ranks (:mod:`pipecheck.analysis.ranks`).
    ``wait_per_batch_s`` is ``wait_s / batches`` (the mean data wait per step); ``source`` is
    the file it came from, or ``gathered`` when rank 0 received it through torch.distributed."""

    rank: int
    batches: int
    samples: int
    wall_s: float
    wait_s: float
    compute_s: float
    stall_fraction: Optional[float]
    samples_per_s: Optional[float]
    wait_per_batch_s: Optional[float]
    verdict: Verdict
    hostname: Optional[str] = None
    status: ConsumerStatus = "complete"
    source: Optional[str] = None
    steady_stall_fraction: Optional[float] = None
    shards: Optional[int] = None
    """Shards this rank's workers read in one epoch (``None``: not a webdataset pipeline)."""
    local_rank: Optional[int] = None
    """The rank's index on its node (``LOCAL_RANK``, :class:`RankInfo`); ``None`` when unset."""
    top_finding: Optional[str] = None
    """The kind of the rank's own most severe finding (rank findings left out); ``None``: none."""
    top_recommendation: Optional[str] = None
    """The setting of the rank's first recommendation; ``None``: it has none."""
    tuned: Optional[str] = None
    """The settings online tuning (``wrap(tune=True)``) kept on this rank, as
    :meth:`LoaderSettings.short_label` writes them; ``None``: it did not tune, or chose
    nothing yet."""

    @property
    def failed(self) -> bool:
        """The rank's loop did not end normally: ``status`` is ``error``, ``interrupted``,
        ``terminated`` or ``not-started`` (``complete`` and ``in-progress`` are not)."""
        return self.status in ("error", "interrupted", "terminated", "not-started")


@dataclass(frozen=True)
class NodeSummary:
    """The ranks of one node (one ``hostname``) of a multi-rank run: how many reported, their
    median and largest mean data wait per step (seconds), the slowest of them and how many
    failed (:attr:`RankSummary.failed`)."""

    node: str
    ranks: int
    wait_per_batch_median_s: Optional[float]
    wait_per_batch_max_s: Optional[float]
    slowest_rank: Optional[int]
    failed: int = 0


@dataclass(frozen=True)
class JobShape:
    """The shape of a multi-rank job (:func:`pipecheck.analysis.ranks.job_shape`): the mean data
    wait per step over ranks (p50, p90, max, seconds; ``None`` with no measured rank), the
    spread of the nodes' median wait per step (largest minus smallest node median, seconds;
    ``None`` with fewer than 2 nodes), the slowest ranks and nodes (a few, slowest first),
    ``scope`` (``rank``, ``node``, ``job`` or ``none``: where the extra wait comes from; the
    rule is :func:`~pipecheck.analysis.ranks.job_shape`'s) with ``scope_reason`` in words,
    ``nodes`` (every node, in name order) and ``failed`` (the ranks whose loop did not end
    normally)."""

    wait_per_batch_p50_s: Optional[float]
    wait_per_batch_p90_s: Optional[float]
    wait_per_batch_max_s: Optional[float]
    node_spread_s: Optional[float]
    slowest_ranks: list[int]
    slowest_nodes: list[str]
    scope: StragglerScope
    scope_reason: str
    nodes: list[NodeSummary] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class TunedRanks:
    """Ranks whose online tuning kept the same ``settings`` (a
    :meth:`LoaderSettings.short_label`): how many (``ranks``, >= 1) and the first of them in
    rank order (``first_ranks``, at most :data:`pipecheck.analysis.ranks.TUNED_RANKS_LISTED`)."""

    settings: str
    ranks: int
    first_ranks: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RanksSummary:
    """Every rank of a multi-rank run side by side. ``straggler``: the rank whose mean data wait
    per step is highest (under synchronous gradients every rank waits for it; ``None`` with
    fewer than 2 ranks). ``missing``: ranks below ``world_size`` with no data (dead, or their
    file not given). ``samples_per_s``: the ranks' throughputs summed (the job's rate)."""

    world_size: int
    ranks: list[RankSummary]
    straggler: Optional[int] = None
    missing: list[int] = field(default_factory=list)
    samples_per_s: Optional[float] = None
    shape: Optional[JobShape] = None
    """The job's shape (distribution over ranks, nodes, the straggler's scope); ``None`` in
    reports written before it was recorded (renderers then work it out from ``ranks``)."""
    tuned: list[TunedRanks] = field(default_factory=list)
    """The settings online tuning kept, grouped over ranks, most ranks first (ties by
    settings); empty when no rank tuned. Two or more groups: the ranks disagree (finding
    ``ranks-tuned-differently``)."""

    def __post_init__(self) -> None:
        for rank in [s.rank for s in self.ranks] + list(self.missing):
            check_rank(rank, self.world_size)
        if self.straggler is not None:
            check_rank(self.straggler, self.world_size)


@dataclass(frozen=True)
class ShardReader:
    """One (rank, DataLoader worker) reader of a shard assignment: the ``shards`` it reads and
    their ``samples`` (counted or estimated by size; ``None`` when a shard could not be
    counted or estimated, e.g. a remote URL)."""

    rank: int
    worker: int
    shards: int
    samples: Optional[float]


@dataclass(frozen=True)
class ShardRank:
    """One rank of a shard assignment: its workers' ``samples`` summed (``None`` when a shard
    is not counted) and the ``batches`` they yield per epoch (``None`` without a batch size)."""

    rank: int
    samples: Optional[float]
    batches: Optional[int]


@dataclass(frozen=True)
class TuneTrial:
    """One online trial (``wrap(tune=True)``): the ``settings`` tried and what its measured
    window held: ``batches`` and ``samples`` taken, ``seconds`` of loop time (waits and steps),
    ``samples_per_s`` (samples / seconds), ``stall_fraction`` (wait / loop time, 0-1) and
    ``noise_fraction`` (2 x the standard error of its block rates over their mean,
    :func:`pipecheck.analysis.choice.block_rate_noise`; ``None`` with under 2 blocks).
    ``warmup_batches``: batches after the switch left out of the window (the old iterator's
    outstanding batches and the new workers' start)."""

    settings: LoaderSettings
    batches: int
    samples: int
    seconds: float
    samples_per_s: Optional[float]
    stall_fraction: Optional[float]
    noise_fraction: Optional[float] = None
    warmup_batches: int = 0


@dataclass(frozen=True)
class TuneSection:
    """The report's ``tune`` section: what ``wrap(tune=True)`` tried in the live run and kept.

    ``status`` (:data:`pipecheck.kinds.TuneStatus`) with ``reason`` (one line; ``None`` when
    there is nothing to explain); ``start`` the user's settings, ``chosen`` the settings kept
    (``None`` until chosen); ``trials`` in the order run; ``speedup`` the chosen trial's
    samples/s over the start's (``None`` unless both were measured); ``tuning_s`` loop time
    and ``tuning_batches`` batches spent tuning, all rounds (to now while tuning; ``None``
    in older reports); ``retunes`` how often the kept settings' rate fell by more than
    :data:`pipecheck.tune.watch.RETUNE_DROP` for a whole window and a new round of trials
    began (at most once an epoch; the choice and ``speedup`` are then the latest round's,
    ``speedup`` over the settings kept before it; each drop is in ``notes``); ``cost_s`` what the trials slower than the start
    cost: for each trial (the batches of its warm-up after the switch included), its loop
    time less the time the start's measured rate would have taken for the same samples,
    summed where positive, seconds >= 0 (``None`` without the start measured); ``pin_line`` the one line of code that pins the chosen settings;
    ``notes`` why settings were not tried (a guard, an iterable dataset that does not split
    by worker)."""

    status: TuneStatus
    reason: Optional[str] = None
    start: Optional[LoaderSettings] = None
    chosen: Optional[LoaderSettings] = None
    trials: list[TuneTrial] = field(default_factory=list)
    speedup: Optional[float] = None
    tuning_s: Optional[float] = None
    cost_s: Optional[float] = None
    tuning_batches: Optional[int] = None
    retunes: int = 0
    pin_line: Optional[str] = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ShardingSection:
    """The shard-assignment dry run of a WebDataset loader, the report's ``sharding`` section
    (:func:`pipecheck.analysis.sharding.analyze_sharding`).

    ``world_size`` ranks of ``num_workers`` workers each (``world_size_source`` says where the
    world size came from); ``splitters`` names the split: ``{node, worker}``, or
    ``{chain: [...]}`` for a loader's own. ``shards``: shard count, ``counted_shards`` of them
    counted from tar headers (the rest estimated by size); ``samples_total`` is ``None`` when a
    shard could be neither. ``resampled``: shards drawn with replacement (the fixed-split checks
    are skipped). ``assignments``: every (rank, worker) reader in order; ``ranks``: per rank;
    ``idle_fraction_at_epoch_end``: ``1 - mean / max`` samples (shards when not counted) per
    reader, 0-1. ``findings`` and ``recommendations`` (``num_shards``, ``resampled``,
    ``shuffle_buffer``: :func:`pipecheck.recommend.sharding.sharding_recommendations`) have the
    report's own shapes."""

    world_size: int
    num_workers: int
    world_size_source: Optional[str]
    splitters: dict[str, Any]
    shards: int
    samples_total: Optional[float]
    counted_shards: int
    resampled: bool
    assignments: list[ShardReader]
    ranks: list[ShardRank]
    idle_fraction_at_epoch_end: Optional[float]
    findings: list[Finding] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)


@dataclass(frozen=True)
class ComparedFigure:
    """One figure of two reports side by side (:mod:`pipecheck.analysis.compare`).

    ``name`` is the figure's name with its unit in it, as everywhere in a report:
    ``samples_per_s``, ``tokens_per_s``, ``batches_per_s``, ``steady_step_s`` (seconds per
    steady step, ``1 / consumer.demand_batches_per_s``), ``wait_per_batch_s`` (mean data wait
    per batch, seconds), ``stall_fraction`` (the stall the verdict was judged on, 0-1),
    ``goodput_fraction`` (``1 - stall_fraction``). ``old`` / ``new``: the earlier and the
    later report's value (``None``: not measured); ``ratio``: ``new / old`` (``None`` when
    either is missing or ``old`` is 0)."""

    name: str
    old: Optional[float]
    new: Optional[float]
    ratio: Optional[float] = None


@dataclass(frozen=True)
class ChangedValue:
    """A setting or a fact of the run that differs between two reports: ``name`` is its key in
    the report (``num_workers``, ``intra_op_threads``, ``cpu_count``, ``dataset_len``, ...),
    ``old`` / ``new`` its two values as the reports hold them."""

    name: str
    old: Any
    new: Any


@dataclass(frozen=True)
class Comparison:
    """A report compared with an earlier report (``pipecheck report --compare OLD NEW``, or
    the report that ``wrap(save=PATH)`` / ``pipecheck run --json PATH`` found at PATH before
    overwriting it), built by :func:`pipecheck.analysis.compare.compare_reports`.

    ``old_path``: the earlier report's file, as given; ``old_created``: its ``created`` time
    (``None`` when it could not be read). ``status``: ``compared``, or ``not-compared`` with
    ``note`` saying why (the file could not be read, is of another loader, is a merged
    multi-rank report); nothing else is set then.
    ``verdict``: what happened to throughput (samples/s): ``rose``, ``fell``,
    ``no-measurable-change`` or ``unknown`` (:data:`pipecheck.kinds.COMPARISON_VERDICTS`).
    ``samples_per_s_ratio``: new / old samples/s. ``old_noise_fraction`` /
    ``new_noise_fraction``: each run's own noise, the relative half-width (0 or more) of the
    90% prediction interval of its mean loop time per batch over a tenth of the run (batch
    means over its timeline's steady batches,
    :func:`pipecheck.analysis.stats.batch_means_spread`; a stress report's search noise
    without a timeline), ``None`` when it cannot be told (fewer than 20 steady batches);
    ``noise_fraction``: the two combined, ``sqrt(old^2 + new^2)``, ``None`` unless both are
    known; ``beyond_noise``: whether ``|samples_per_s_ratio - 1|`` exceeds it (``None``: cannot
    be told). ``figures``: the throughput, step, wait, stall and goodput figures side by side;
    ``settings``: the loader settings (and torch's intra-op threads) that changed;
    ``machine``: the facts of the machine and software that differ (CPUs, torch, Python, ...:
    the comparison may not hold); ``data``: the facts of the data and loop that differ
    (loader and dataset type, dataset length, report kind: perhaps not the same script)."""

    old_path: str
    status: ComparisonStatus
    note: Optional[str] = None
    old_created: Optional[str] = None
    verdict: Optional[ComparisonVerdict] = None
    samples_per_s_ratio: Optional[float] = None
    old_noise_fraction: Optional[float] = None
    new_noise_fraction: Optional[float] = None
    noise_fraction: Optional[float] = None
    beyond_noise: Optional[bool] = None
    figures: list[ComparedFigure] = field(default_factory=list)
    settings: list[ChangedValue] = field(default_factory=list)
    machine: list[ChangedValue] = field(default_factory=list)
    data: list[ChangedValue] = field(default_factory=list)


@dataclass(frozen=True)
class Timeline:
    """Bounded per-event detail for charts and traces."""

    batches: list[BatchTiming] = field(default_factory=list)
    epochs: list[EpochTiming] = field(default_factory=list)
    worker_batches: list[WorkerBatch] = field(default_factory=list)
    host: list[HostSample] = field(default_factory=list)
    folded_epochs: Optional[FoldedEpochs] = None
    """The sums over the epochs ``epochs`` does not list (:class:`FoldedEpochs`); ``None`` in
    reports written before epochs were folded (they list every epoch)."""
