"""What-if throughput model: predicts batches/s and stall for other loader settings from one
measured run (:class:`ThroughputModel`, built by :func:`build_model`).

Per steady batch it prices the step (demand), the main process's receive cost, the workers'
CPU and off-CPU time under max-min fair shares of the cores left by other processes
(:mod:`pipecheck.analysis.contention`), the intra-op pool's spin, the hand-over through shared
memory, the batch-time tail against the prefetch lead, and each epoch's start-up and shutdown.
Every prediction obeys hard bounds (:meth:`ThroughputModel.bounds`: never above the step's own
ceiling nor the producer's capacity, always finite and > 0) and comes with a 90% interval
(:meth:`ThroughputModel.interval`). The equations, assumptions and the calibration behind each
constant: docs/model.md ("The model", then the terms' evidence).

One module of about 1,000 lines on purpose: the model is one job (its terms price each other:
contention, receive cost, the epoch start and the tail), and splitting it would spread one
equation over several files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from pipecheck.analysis.consumer import (
    cold_start_s,
    shutdown_wait_s,
    started_epoch_count,
    steady_batch_count,
    steady_batches_per_s,
    steady_wait_s,
    step_on_cpu_fraction,
    wait_cpu_per_batch_s,
    warm_start_s,
    warmup_step_s,
)
from pipecheck.analysis.producer import (
    ASSUMED_PRODUCTION_CPU_FRACTION,
    INTRA_OP_INFLATION_MIN,
    cpu_cap_batches_per_s,
    intra_op_inflation,
    main_cpu_per_batch_s,
)
from pipecheck.analysis.contention import HostLoad, fair_shares, host_load
from pipecheck.analysis.stats import batch_means_spread, ratio
from pipecheck.loader_settings import LoaderSettings
from pipecheck.records import (
    ConsumerRecord,
    ConsumerSummary,
    ProducerSummary,
    UNSURE_POINT_ERROR,
    RunRecord,
    model_error_band,
)

RECEIVE_FIXED_S = 0.6e-3
"""Main-thread CPU seconds to receive one ready batch from a worker (queue get, unpickling),
besides :data:`RECEIVE_S_PER_TENSOR`; used when the run had no workers to measure it in. Measured
(docs/decisions.md#receive_fixed_s)."""

RECEIVE_S_PER_TENSOR = 90e-6
"""Further main-thread CPU seconds per tensor in the batch (each is its own shared-memory
storage to rebuild), from the same three runs (90-91 us); a ``(images, labels)`` batch has 2."""

DEFAULT_BATCH_TENSORS = 2
"""Tensors taken per batch when the count was not measured: an ``(inputs, labels)`` pair."""


def estimated_receive_s(batch_tensors: Optional[int]) -> float:
    """The hand-over estimate in seconds per batch for a batch of ``batch_tensors`` tensors
    (``None``: :data:`DEFAULT_BATCH_TENSORS`); see :data:`RECEIVE_FIXED_S`."""
    tensors = DEFAULT_BATCH_TENSORS if batch_tensors is None else batch_tensors
    return RECEIVE_FIXED_S + RECEIVE_S_PER_TENSOR * tensors


SHM_WORKER_FIXED_S = 1.7e-3
SHM_WORKER_S_PER_BYTE = 1.19e-9
"""A worker's extra seconds per batch for handing it over through shared memory, which a run
measured at ``num_workers=0`` never paid: a fixed part (pickling, the queue, passing the file
descriptors) and a part per byte of the batch (torch collates into fresh ``/dev/shm``
storage each batch: allocating, zeroing and faulting in its pages, then copying). Fitted by
``python benchmarks/shm_cost.py`` on the project's 2-core machine over 0.8 to 9.6 MB batches
(1.19 ms a MB; the intercept 1.7 ms); see docs/model.md."""

SHM_MAIN_S_PER_BYTE = 0.09e-9
"""The main process's extra seconds per batch byte with workers: its first touch of each
shared-memory page faults it in (the same benchmark: 0.09 ms a MB)."""

POOL_SPIN_S = 9e-3
"""Seconds each of torch's other intra-op threads stays runnable after a parallel region ends
(libgomp busy-waits before it sleeps, ``GOMP_SPINCOUNT``): after each step the main process's
pool keeps its other threads spinning this long, time workers beside it cannot use. Measured
by ``python benchmarks/pool_spin.py`` on the project's 2-core machine (median 8.7-9.1 ms; 2
threads, torch 2.13 CPU wheel); see docs/model.md."""

MAX_NOISE_FRACTION = 0.9
"""Largest relative half-width of loop time the interval's high end takes (a 10x rate): the
batch-means spread of a short, noisy run can exceed 1, where ``r / (1 - h)`` is unbounded."""

MIN_STEADY_BATCHES = 20
"""Fewest steady batches (not first of an epoch) pipecheck builds a model and recommends from;
fewer give rates dominated by warm-up noise. pipecheck's choice."""

MIN_SLOW_STEADY_BATCHES = 5
MIN_SLOW_STEADY_S = 10.0
"""Slow batches suffice in fewer numbers: at least :data:`MIN_SLOW_STEADY_BATCHES` steady batches
spanning at least this many seconds of waiting and computing also support a model. pipecheck's
choice (docs/decisions.md#min_slow_steady_s)."""


def enough_steady_batches(record: ConsumerRecord) -> bool:
    """Whether ``record`` has enough steady batches for a model: :data:`MIN_STEADY_BATCHES`,
    or :data:`MIN_SLOW_STEADY_BATCHES` over :data:`MIN_SLOW_STEADY_S` of loop time."""
    steady = steady_batch_count(record)
    if steady >= MIN_STEADY_BATCHES:
        return True
    steady_s = steady_wait_s(record) + record.compute_s
    return steady >= MIN_SLOW_STEADY_BATCHES and steady_s >= MIN_SLOW_STEADY_S


POOL_EVIDENCE_MIN_CORES = 0.01
"""Cores' worth of CPU the main process's threads other than the calling one must use over the
sampled loop (waits and steps together) before the ratios that tell an active intra-op pool
(:func:`active_pool_threads`) count as evidence: below it, those ratios rest on a few
microseconds of pipecheck's sampler, the garbage collector or the user's own threads landing
in a short window. pipecheck's choice, measured with ``python benchmarks/pool_evidence.py``
quiet and ``--busy`` (docs/model.md#pool-evidence): a sleeping loader with no step,
0.001-0.0043 cores while its ratios reached 1.40 and 1.24; the latency pipeline's MLP step,
whose pool spins after each step, 0.041-0.051 cores; the calibration suite's other
pipelines 0.27 cores or more."""

POOL_STARVED_SHARE = 0.8
"""Share of a core the main process's runnable threads got (1 - run-queue fraction) under which
an active intra-op pool is taken to be starved (:attr:`ThroughputModel.pool_starved`).
pipecheck's choice (docs/decisions.md#pool_starved_share)."""


@dataclass(frozen=True)
class Prediction:
    """Predicted outcome of some settings: ``batches_per_s``, ``samples_per_s`` and
    ``stall_fraction`` over a whole run (epoch starts included, comparable with the consumer
    summary's), ``steady_*`` between epoch starts. ``limit`` names what sets the pace: ``step``
    (the consumer), ``workers`` (N x per-worker rate), ``cpu`` (the CPU cap), ``batch-time tail``
    (slow batches outrun the prefetch lead) or ``serial`` (``num_workers=0``)."""

    batches_per_s: float
    samples_per_s: Optional[float]
    stall_fraction: float
    capacity_batches_per_s: float
    limit: str
    steady_batches_per_s: float
    steady_stall_fraction: float


@dataclass(frozen=True)
class Bounds:
    """Hard upper bounds, in batches/s (finite, > 0), on any rate predicted for one setting at
    one load of the other processes (:meth:`ThroughputModel.bounds`): ``step_batches_per_s``
    the step's own ceiling (1 / :meth:`ThroughputModel.step_s`, the steady step under the
    contention predicted for that setting: no loader setting makes the loop faster than its
    step) and ``producer_batches_per_s`` the producer's capacity
    (:meth:`ThroughputModel.capacity`: no loop consumes batches faster than they are made)."""

    step_batches_per_s: float
    producer_batches_per_s: float

    @property
    def batches_per_s(self) -> float:
        """The tighter of the two bounds."""
        return min(self.step_batches_per_s, self.producer_batches_per_s)


def bounded_rate(rate: float, bound: float) -> float:
    """``rate`` (batches/s) held to ``(0, bound]``: a NaN or infinite rate, or one above
    ``bound``, becomes ``bound``; a rate below :data:`_TINY_RATE` (1e-12) becomes that floor
    (a prediction is never 0, negative or NaN). ``bound`` must be finite and > 0."""
    if not math.isfinite(rate) or rate > bound:
        return bound
    return max(rate, _TINY_RATE)


_TINY_RATE = 1e-12
"""Least rate in batches/s any prediction or interval end takes (one batch in ~30,000 years):
a floor that keeps every figure > 0 and every ratio finite, never reached by a real run."""

_HUGE_RATE = 1e12
"""Largest rate in batches/s a bound takes: free production (no CPU, no waiting: a worker's
time per batch 0) has no finite capacity, and a bound must be finite."""


def _finite_bound(rate: float) -> float:
    """``rate`` as a bound: finite, within ``[_TINY_RATE, _HUGE_RATE]``."""
    if math.isnan(rate):
        return _TINY_RATE
    return min(max(rate, _TINY_RATE), _HUGE_RATE)


@dataclass(frozen=True)
class Cycle:
    """One steady batch with workers under processor sharing: ``step_s`` the step's wall time,
    ``worker_s`` a worker's wall time per batch, ``step_share`` the share of a core each of the
    step's threads gets, ``worker_share`` a worker's mean share over the loop."""

    step_s: float
    worker_s: float
    step_share: float
    worker_share: float


_FIXED_POINT_ROUNDS = 60
"""Rounds of the damped fixed-point iteration of :func:`_cycle` (its shares move by under
0.1% between the last rounds in every case tried)."""


def _cycle(
    workers: int,
    step_meas_s: float,
    reference_share: Optional[float],
    worker_cpu_s: float,
    worker_off_s: float,
    scale: float,
    receive_s: float,
    step_threads: float,
    others_runnable: float,
    cpus: float,
    worker_fixed_s: Optional[float] = None,
    pool_threads: int = 0,
) -> Cycle:
    """Step and worker times with ``workers`` (>= 1) workers. During the step, ``step_threads``
    + the runnable workers + ``others_runnable`` share ``cpus``; while the main process waits
    in ``next()``, only the workers and the others do. A worker runs ``worker_cpu_s`` per batch
    at its mean share plus ``worker_off_s`` off-CPU (x ``scale``, the calibration to the
    measured worker time), and is runnable only while it has a batch to make (its utilization:
    the loop's rate x its time per batch / workers). The step's time is ``step_meas_s`` x
    ``reference_share`` / its share now (``reference_share`` ``None``: the step is as measured,
    used to find the measured run's own shares; ``worker_fixed_s``: a worker's time per batch
    as measured, likewise). ``pool_threads`` > 0: the main process counts as that many
    threads runnable during the step, and its ``pool_threads - 1`` other threads for
    :data:`POOL_SPIN_S` after each step while it waits (:attr:`ThroughputModel.pool_threads`);
    the step is runnable all its time."""
    step_share = worker_share = 1.0
    if pool_threads > 0:
        step_threads = 1.0  # runnable all its time; its group is the pool below
    main_group = _main_group(step_threads, pool_threads)
    waiting: list[tuple[float, float]] = []
    step_s = step_meas_s
    for _ in range(_FIXED_POINT_ROUNDS):
        worker_s = scale * (worker_cpu_s / worker_share + worker_off_s)
        runnable_part = (scale * worker_cpu_s / worker_share) / worker_s if worker_s > 0 else 1.0
        if worker_fixed_s is not None:
            worker_s = worker_fixed_s
            runnable_part = min(worker_cpu_s / worker_share / worker_s, 1.0) if worker_s > 0 \
                else 1.0
        if reference_share is not None:
            step_s = scaled_step_s(step_meas_s, step_threads, reference_share / step_share)
        rate = min(workers / worker_s, 1.0 / (step_s + receive_s)) if worker_s > 0 else (
            1.0 / (step_s + receive_s))
        utilization = min(rate * worker_s / workers, 1.0)
        in_step = min(rate * step_s, 1.0)
        if pool_threads > 1:
            # After each step the pool's other threads spin POOL_SPIN_S, then sleep.
            spin = min(rate * POOL_SPIN_S / max(1.0 - in_step, 1e-9), 1.0)
            waiting = [(float(pool_threads - 1), spin)]
        want = runnable_part * utilization
        step_now, workers_in_step, _ = fair_shares(
            [main_group, (workers, want), (others_runnable, 1.0)], cpus)
        workers_between = fair_shares([(workers, want), (others_runnable, 1.0)] + waiting,
                                       cpus)[0]
        mean_share = in_step * workers_in_step + (1.0 - in_step) * workers_between
        step_share = 0.5 * step_share + 0.5 * step_now
        worker_share = 0.5 * worker_share + 0.5 * mean_share
    worker_s = scale * (worker_cpu_s / worker_share + worker_off_s)
    if worker_fixed_s is not None:
        worker_s = worker_fixed_s
    if reference_share is not None:
        step_s = scaled_step_s(step_meas_s, step_threads, reference_share / step_share)
    return Cycle(step_s=step_s, worker_s=worker_s, step_share=step_share,
                 worker_share=worker_share)


def scaled_step_s(step_meas_s: float, step_threads: float, slowdown: float) -> float:
    """The step's time in seconds when its runnable threads get ``slowdown`` times less CPU
    (share then / share now). Only the part of the step during which it is runnable stretches:
    a step that keeps ``step_threads`` < 1 runnable on average (it sleeps, waits on a GPU, a
    network or a lock the rest of the time) is runnable that fraction of its time; with one or
    more threads runnable it is runnable all of it."""
    runnable = min(max(step_threads, 0.0), 1.0)
    return step_meas_s * ((1.0 - runnable) + runnable * slowdown)


def _step_group(step_threads: float) -> tuple[float, float]:
    """The step as a group for :func:`fair_shares`: whole threads, each wanting an equal part
    of the step's cores."""
    threads = max(math.ceil(step_threads - 1e-9), 1)
    return float(threads), step_threads / threads


def step_alone_share(step_threads: float, others_runnable: float, cpus: float,
                     pool_threads: int = 0) -> float:
    """Share of its want the step gets beside other processes only (``num_workers=0``).
    ``pool_threads`` > 0 counts the step as that many runnable threads, as :func:`_cycle`
    does beside workers, so that the two shares compare like with like."""
    return fair_shares([_main_group(step_threads, pool_threads), (others_runnable, 1.0)],
                       cpus)[0]


def _main_group(step_threads: float, pool_threads: int) -> tuple[float, float]:
    """The main process during the step as a group for :func:`fair_shares`: its torch
    intra-op pool's threads, each runnable all the step, when the pool was active
    (:attr:`ThroughputModel.pool_threads`), else :func:`_step_group`."""
    return (float(pool_threads), 1.0) if pool_threads > 0 else _step_group(step_threads)


@dataclass(frozen=True)
class ThroughputModel:
    """The measured inputs of the what-if model (see the module docstring). Rates in batches/s,
    times and CPU in seconds per batch; ``assumptions`` lists, in words, what was assumed rather
    than measured for this run."""

    measured: LoaderSettings
    demand_batches_per_s: float
    per_worker_batches_per_s: float
    worker_cpu_per_batch_s: float
    main_cpu_per_batch_s: float
    usable_cpus: int
    receive_s: float
    sustained_batches_per_s: Optional[float]
    samples_per_batch: Optional[float]
    batch_times_s: tuple[float, ...]
    batches: int
    epochs: int
    cold_start_s: float
    warm_start_s: float
    assumptions: tuple[str, ...] = ()
    worker_class: Optional[str] = None
    """What production waits on (``cpu-bound``, ``io-bound``, ``latency-bound``, see
    :mod:`pipecheck.analysis.bound`); ``None`` when not classified."""
    shutdown_s: float = 0.0
    """Seconds an epoch without persistent workers waits at its end while torch shuts the
    workers down (measured; 0 when the run had persistent workers, none, or no epoch ended)."""
    load: Optional[HostLoad] = None
    """The CPU contention measured (:mod:`pipecheck.analysis.contention`); ``None``: the
    cores are shared only as the older CPU cap assumed (no step slowdown, no other load)."""
    worker_off_s: float = 0.0
    """Seconds per batch a worker neither runs nor waits for a core (sleep, network, storage):
    busy time less CPU and run-queue time. Unchanged by contention."""
    noise_fraction: float = 0.0
    """Relative half-width of the run's own per-batch noise (batch means,
    :func:`pipecheck.analysis.stats.batch_means_spread`), applied to every prediction."""
    worker_cpu_range_s: Optional[tuple[float, float]] = None
    """Lowest and highest plausible worker CPU seconds per batch when the point figure is
    uncertain beyond the run's noise (``num_workers=0`` production inflated by torch's
    intra-op threads: from the calling thread's CPU, or from free when the pool was starved
    (:attr:`pool_starved`), to the process's CPU; ``benchmarks/intra_op_cost.py``: on one
    thread a worker paid 1.0-1.9x the calling thread's CPU); ``None`` otherwise. The interval
    spans the predictions at both ends."""
    warmup_step_s: float = 0.0
    """Seconds the run's first step took beyond a steady one (lazy initialization, autotuning,
    compilation: :func:`~pipecheck.analysis.consumer.warmup_step_s`), paid once by any
    run whatever its loader settings; left out of the predictions (see the module
    docstring)."""
    pool_threads: int = 0
    """torch intra-op threads of the main process when measured at ``num_workers=0`` with its
    pool active (production or the step used CPU beyond the calling thread, by at least
    :data:`~pipecheck.analysis.producer.INTRA_OP_INFLATION_MIN`); 0 otherwise. Beside
    workers the pool's threads are runnable through the step (its parallel regions and the
    busy-waits between them) and its other threads for :data:`POOL_SPIN_S` after it (OpenMP
    busy-waits before it sleeps); docs/model.md has the measurements."""

    unstarved_step_s: Optional[float] = None
    """With ``num_workers=0`` measured and the step's intra-op pool starved of cores
    (:func:`starved_step_on_cpu`): the steady step's time had its calling thread not waited
    for a core (its CPU time over the sampled steps, scaled to the mean step): how far the
    step could speed up beside workers, named in the reasons as what a ``pipecheck stress``
    run would measure, and the high end of the interval with workers (:meth:`interval`). No
    point prediction uses it: the step's own ceiling (:meth:`step_s`, the measured step at
    ``num_workers=0``) bounds every one, and how the pool's waits change with workers cannot
    be told from the run (on ``benchmarks/prediction.py``'s latency pipeline beside a busy
    process the step took 88 ms at ``num_workers=0``, 43 ms of it on the calling thread's
    CPU, and 35 ms beside 4 workers; quiet, 8.4, 5.3 and 2.8 ms;
    ``python benchmarks/step_threads.py --busy --workers 0,4`` printed 91, 44 and 46 ms; but
    taken as the step beside workers it gave predictions up to twice the measured demand,
    issue 26). ``None`` otherwise."""

    main_threads: Optional[int] = None
    """torch intra-op threads the main process had during the run (``torch.get_num_threads``);
    ``None`` when not recorded."""
    step_thread_cores: Optional[float] = None
    """The calling thread's CPU per wall second of the sampled steps (0-1,
    :func:`~pipecheck.analysis.consumer.step_on_cpu_fraction`); ``None`` when not sampled."""

    @property
    def pool_starved(self) -> bool:
        """Whether the main process's active intra-op pool (:attr:`pool_threads`) had fewer
        cores than it wanted: its threads waited for a core at least
        1 - :data:`POOL_STARVED_SHARE` of the time they wanted one. Then every parallel region
        waits for a descheduled teammate while the others spin, and the serial run's production
        and step times measure that wait, which a worker (one thread, no team) does not pay;
        how much of them it is cannot be told from the run."""
        return (self.pool_threads > 0 and self.load is not None
                and self.load.share < POOL_STARVED_SHARE)

    @property
    def production_cpu_per_batch_s(self) -> float:
        """CPU seconds per batch production took as measured (in the main process at
        ``num_workers=0``, intra-op overhead included), which :attr:`worker_cpu_per_batch_s`
        may discount for a worker (:attr:`worker_cpu_range_s`)."""
        if self.worker_cpu_range_s is not None:
            return self.worker_cpu_range_s[1]
        return self.worker_cpu_per_batch_s

    @property
    def worker_cpu_fraction(self) -> float:
        """Worker CPU seconds per busy second (1.0 CPU-bound, near 0 latency-bound)."""
        return self.worker_cpu_per_batch_s * self.per_worker_batches_per_s

    def cpu_cap_batches_per_s(self) -> Optional[float]:
        """Batches/s the usable CPUs sustain, never below the steady rate the measured run
        sustained; ``None`` when workers use no measurable CPU (the older cap, used only
        without host data)."""
        cap = cpu_cap_batches_per_s(
            self.usable_cpus,
            self.worker_cpu_per_batch_s,
            self.main_cpu_per_batch_s,
            self.demand_batches_per_s,
        )
        if cap is None or self.sustained_batches_per_s is None:
            return cap
        return max(cap, self.sustained_batches_per_s)

    def one_thread_step_s(self) -> Optional[tuple[float, float, float]]:
        """The steady step's time in seconds with the main process on one intra-op thread,
        ``(point, low, high)``, for a run measured at ``num_workers=0`` with its pool active
        (:attr:`pool_threads` > 1), not starved (:attr:`pool_starved`), and its step
        sampled; ``None`` otherwise. One thread does all the step's CPU work: at least its
        calling thread's CPU (the pool's share of the work done on it), at most the process's
        CPU (the pool's spin-waits included, which a lone thread does not pay); the point is
        their geometric mean. Each is taken at the measured share of a core, plus the time
        that thread neither ran nor waited for a core.
        ``python benchmarks/step_threads.py --threads 1`` measured the one-thread step inside
        that range on four pipelines (docs/model.md, "Threads as a setting")."""
        steps = self._one_thread_steps()
        if steps is None:
            return None
        point, low, high = (step_s for step_s, _ in steps)
        return point, low, high

    def _one_thread_steps(self) -> Optional[list[tuple[float, float]]]:
        """:meth:`one_thread_step_s` as ``(step seconds, CPU seconds)`` pairs."""
        load = self.load
        if (self.pool_threads <= 1 or self.measured.num_workers != 0 or load is None
                or load.step_cores is None or self.step_thread_cores is None
                or self.pool_starved):
            return None  # a starved pool's CPU holds waits for cores a lone thread may not pay
        wall_s = 1.0 / self.demand_batches_per_s
        thread_cpu_s = wall_s * self.step_thread_cores
        process_cpu_s = max(wall_s * load.step_cores, thread_cpu_s)
        off_s = max(wall_s - thread_cpu_s / load.share, 0.0)
        return [(off_s + cpu_s / load.share, cpu_s)
                for cpu_s in (math.sqrt(thread_cpu_s * process_cpu_s), thread_cpu_s,
                              process_cpu_s)]

    def threads_priced(self, threads: Optional[int]) -> bool:
        """Whether the model can predict the main process on ``threads`` torch intra-op threads
        (``None``: as measured): as many as measured or more (an unused pool changes nothing),
        fewer where the pool was idle at ``num_workers=0``, and one thread where
        :meth:`one_thread_step_s` prices the step."""
        return self.thread_models(threads) is not None

    def thread_models(self, threads: Optional[int]) -> Optional[list["ThroughputModel"]]:
        """The models of the main process on ``threads`` intra-op threads: ``[self]`` where
        nothing changes, ``[point, low step, high step]`` for one thread, ``None`` where the
        model cannot tell (see :meth:`threads_priced`)."""
        if threads is None or (self.main_threads is not None and threads >= self.main_threads):
            return [self]
        if threads < 1:
            return None
        if self.pool_threads == 0:
            return [self] if self.measured.num_workers == 0 and self.load is not None else None
        steps = self._one_thread_steps()
        if threads != 1 or steps is None:
            return None
        load = self.load
        assert load is not None  # _one_thread_steps needs it
        # Production at num_workers=0 keeps its measured time: what one thread does to it
        # (no parallel ops, no spin) is not told by the run; workers are one thread anyway.
        return [replace(self, demand_batches_per_s=1.0 / step_s, pool_threads=0,
                        unstarved_step_s=None, main_threads=1,
                        load=replace(load, step_cores=cpu_s / step_s))
                for step_s, cpu_s in steps]

    def _for_threads(self, settings: LoaderSettings) -> list["ThroughputModel"]:
        """:meth:`thread_models` for ``settings.torch_num_threads``; ``ValueError`` where the
        model cannot price it."""
        models = self.thread_models(settings.torch_num_threads)
        if models is None:
            raise ValueError(
                f"torch_num_threads={settings.torch_num_threads} cannot be predicted from this "
                f"run (the main process had {self.main_threads} intra-op threads; the model "
                "prices one thread only from a num_workers=0 run with its pool active)")
        return models

    def pool_waits_beside(self, num_workers: int) -> bool:
        """Whether the main process's active intra-op pool (:attr:`pool_threads` > 1) gets
        under :data:`POOL_STARVED_SHARE` of the cores it wants during the step beside
        ``num_workers`` workers (the fixed point of :meth:`shares`). Each parallel region then
        ends waiting for a descheduled teammate, a cost the fair shares do not price:
        ``benchmarks/step_threads.py`` measured a 2-thread step 1.9-18x slower than the same
        step on one thread beside 2 CPU-bound workers on 2 cores (docs/model.md, "Threads as
        a setting")."""
        if self.pool_threads <= 1 or self.load is None or num_workers == 0:
            return False
        return self.shares(num_workers).step_share < POOL_STARVED_SHARE

    def shares(self, num_workers: int, others_cpus: Optional[float] = None) -> Cycle:
        """The step time and a worker's time per batch with ``num_workers`` (>= 1) workers
        under processor sharing (:mod:`pipecheck.analysis.contention`), ``others_cpus`` the
        other processes' load (cores; default the measured mean). Requires ``load``."""
        load = self.load
        assert load is not None
        step_meas_s = 1.0 / self.demand_batches_per_s
        others = load.group_runnable()
        cpus = load.cores_left(others_cpus)
        step_threads = load.step_threads()
        measured = self.measured.num_workers
        reference_share: Optional[float]
        if measured == 0:
            # The measured step's share, with the main process counted as the cycle below
            # counts it: a pool that shared the cores with others then is no slower now.
            reference_share = step_alone_share(step_threads, others, load.cores_left(),
                                               self.pool_threads)
            scale = 1.0
        else:
            at_measured = _cycle(measured, step_meas_s, None, self.worker_cpu_per_batch_s,
                                 self.worker_off_s, 1.0, self.receive_s, step_threads,
                                 others, load.cores_left(),
                                 worker_fixed_s=1.0 / self.per_worker_batches_per_s)
            reference_share = at_measured.step_share
            solo_s = self.worker_cpu_per_batch_s / at_measured.worker_share + self.worker_off_s
            scale = (1.0 / self.per_worker_batches_per_s) / solo_s if solo_s > 0 else 1.0
        return _cycle(num_workers, step_meas_s, reference_share, self.worker_cpu_per_batch_s,
                      self.worker_off_s, scale, self.receive_s, step_threads, others, cpus,
                      pool_threads=self.pool_threads)

    def step_s(self, num_workers: int, others_cpus: Optional[float] = None) -> float:
        """Predicted step time in seconds with ``num_workers`` workers: the measured one,
        slowed or sped up by the share of a core the step's threads get beside the workers and
        the other processes (as measured without host data), and never shorter than the step
        with no loader work beside it at the same load of the other processes (its time with
        ``num_workers=0``; for a ``num_workers=0`` run at its measured load, the measured
        steady step, ``1 / demand``). Workers only take cores from the step, so a step
        predicted faster than that could only come from a term that overreaches (the fixed
        point, a step measured with its intra-op pool starved): the step's own ceiling,
        ``1 / step_s``, bounds every prediction (:meth:`bounds`)."""
        contended_s = self._contended_step_s(num_workers, others_cpus)
        if num_workers == 0:
            return contended_s
        return max(contended_s, self._contended_step_s(0, others_cpus))

    def _contended_step_s(self, num_workers: int, others_cpus: Optional[float] = None) -> float:
        """The step's time in seconds under the fair shares alone (see :meth:`step_s`)."""
        step_meas_s = 1.0 / self.demand_batches_per_s
        if self.load is None:
            return step_meas_s
        if num_workers == 0:
            load = self.load
            if self.measured.num_workers == 0 and others_cpus is None:
                return step_meas_s
            threads = load.step_threads()
            reference = (step_alone_share(threads, load.group_runnable(), load.cores_left())
                         if self.measured.num_workers == 0
                         else self.shares(self.measured.num_workers).step_share)
            now = step_alone_share(threads, load.group_runnable(), load.cores_left(others_cpus))
            return scaled_step_s(step_meas_s, threads, reference / now)
        return self.shares(num_workers, others_cpus).step_s

    def bounds(self, settings: LoaderSettings, others_cpus: Optional[float] = None) -> Bounds:
        """The hard bounds on any rate predicted for ``settings`` at the other processes' load
        ``others_cpus`` (cores; default as measured): the step's own ceiling ``1 /``
        :meth:`step_s` and the producer's capacity (:meth:`capacity`), each finite and > 0.
        :meth:`predict` and :meth:`interval` hold every figure to them. ``ValueError`` for a
        ``torch_num_threads`` the model cannot price (:meth:`threads_priced`)."""
        model = self._for_threads(settings)[0]
        if model is not self:
            return model.bounds(replace(settings, torch_num_threads=None), others_cpus)
        capacity, _ = self.capacity(settings.num_workers, others_cpus)
        return _bounds(self.step_s(settings.num_workers, others_cpus), capacity)

    def capacity(self, num_workers: int, others_cpus: Optional[float] = None
                 ) -> tuple[float, str]:
        """Producer capacity in batches/s with ``num_workers`` workers and what limits it
        (``workers``, ``cpu`` or ``serial``). ``ValueError`` for a negative count."""
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if num_workers == 0:
            return self._serial_rate(others_cpus), "serial"
        if self.load is not None:
            cycle = self.shares(num_workers, others_cpus)
            rate = num_workers / max(cycle.worker_s, 1e-9)  # free production: no limit
            return rate, "cpu" if cycle.worker_share < 1.0 - 1e-9 else "workers"
        worker_limited = num_workers * self.per_worker_batches_per_s
        cap = self.cpu_cap_batches_per_s()
        if cap is not None and cap < worker_limited:
            return cap, "cpu"
        return worker_limited, "workers"

    def _serial_rate(self, others_cpus: Optional[float]) -> float:
        """Batches/s the main process produces with ``num_workers=0``."""
        load = self.load
        if load is None or (self.measured.num_workers == 0 and others_cpus is None):
            return self.per_worker_batches_per_s
        if self.measured.num_workers == 0:
            # Only the other processes' load changes: the producing threads keep their count
            # and their CPU as measured (intra-op overhead included: it stays in this process).
            cpu_s = self.production_cpu_per_batch_s
            threads = max(cpu_s * self.per_worker_batches_per_s / load.share, 1.0)
            before = step_alone_share(threads, load.group_runnable(), load.cores_left())
            after = step_alone_share(threads, load.group_runnable(),
                                     load.cores_left(others_cpus))
            wall_s = 1.0 / self.per_worker_batches_per_s
            return 1.0 / max(wall_s + cpu_s / after - cpu_s / before, 1e-12)
        share = step_alone_share(1.0, load.group_runnable(), load.cores_left(others_cpus))
        return 1.0 / (self.worker_cpu_per_batch_s / share + self.worker_off_s)

    def consumer_floor_s(self, num_workers: Optional[int] = None,
                         others_cpus: Optional[float] = None) -> float:
        """Least loop time per batch with workers: the (predicted) step plus receiving the
        batch; ``num_workers`` defaults to the measured count."""
        workers = self.measured.num_workers if num_workers is None else num_workers
        return self.step_s(workers, others_cpus) + self.receive_s

    def lead_s(self, settings: LoaderSettings) -> float:
        """Seconds between a batch's request and the step needing it: prefetch_factor x N
        batches ahead, consumed at ``min(consumer rate, capacity)`` batches/s (a new index is
        sent as each batch is received); 0 with no workers (production is inside ``next()``)."""
        if settings.num_workers == 0:
            return 0.0
        in_flight = settings.effective_prefetch_factor() * settings.num_workers
        capacity, _ = self.capacity(settings.num_workers)
        return in_flight * max(self.consumer_floor_s(settings.num_workers), 1.0 / capacity)

    def tail_wait_s(self, settings: LoaderSettings) -> float:
        """Mean extra wait per batch in seconds from batches slower than the lead (replayed
        sampled production times); 0 with no workers (the serial time already counts them)."""
        if settings.num_workers == 0 or not self.batch_times_s:
            return 0.0
        lead_s = self.lead_s(settings)
        # Batch times stretch as a worker's time per batch does under the new contention (from
        # num_workers=0: the modelled worker's time over the main process's, which may differ
        # by more than contention, e.g. without the intra-op pool's overhead).
        capacity, _ = self.capacity(settings.num_workers)
        stretch = settings.num_workers / capacity * self.per_worker_batches_per_s
        if self.load is None:
            stretch = 1.0
        times = [t * stretch for t in self.batch_times_s]
        if not settings.delivers_in_order:
            ordered = sorted(times)
            return max(ordered[len(ordered) // 2] - lead_s, 0.0)
        return sum(max(t - lead_s, 0.0) for t in times) / len(times)

    def predict(self, settings: LoaderSettings, *, epochs: Optional[int] = None,
                others_cpus: Optional[float] = None) -> Prediction:
        """Predict a run like the measured one under ``settings``; ``epochs`` (>= 1) overrides
        the measured epoch count (batches per epoch stay as measured); ``others_cpus`` the
        other processes' load in cores (default: as measured). ``ValueError`` for a
        negative worker count, fewer than one epoch or a ``torch_num_threads`` the model
        cannot price (:meth:`threads_priced`; one thread: :meth:`one_thread_step_s`'s
        point)."""
        model = self._for_threads(settings)[0]
        if model is not self:
            return model.predict(replace(settings, torch_num_threads=None), epochs=epochs,
                                 others_cpus=others_cpus)
        epochs = self.epochs if epochs is None else epochs
        if epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {epochs}")
        step_s = self.step_s(settings.num_workers, others_cpus)
        capacity, limit = self.capacity(settings.num_workers, others_cpus)
        if settings.num_workers == 0:
            steady_s = step_s + 1.0 / capacity
        else:
            floor_s = self.consumer_floor_s(settings.num_workers, others_cpus)
            mean_limited_s = max(floor_s, 1.0 / capacity)
            tail_limited_s = floor_s + self.tail_wait_s(settings)
            steady_s = max(mean_limited_s, tail_limited_s)
            if tail_limited_s > mean_limited_s:
                limit = "batch-time tail"
            elif floor_s >= 1.0 / capacity:
                limit = "step"
        batches = self.batches / self.epochs * epochs
        persistent = settings.persistent_workers and settings.num_workers > 0
        cold = 1 if persistent else epochs
        start_s = cold * self.cold_start_s + (epochs - cold) * self.warm_start_s
        if settings.num_workers > 0 and not persistent:
            start_s += epochs * self.shutdown_s
        total_s = (batches - epochs) * steady_s + epochs * step_s + start_s
        # The single clamp every prediction passes (see bounds()): the loop never outruns its
        # step nor its producer, whatever the terms above gave.
        bound = _bounds(step_s, capacity).batches_per_s  # = self.bounds(settings, others_cpus)
        batches_per_s = bounded_rate(batches / total_s if total_s > 0 else math.inf, bound)
        steady_batches_per_s = bounded_rate(1.0 / steady_s if steady_s > 0 else math.inf,
                                            bound)
        return Prediction(
            batches_per_s=batches_per_s,
            samples_per_s=None
            if self.samples_per_batch is None
            else batches_per_s * self.samples_per_batch,
            stall_fraction=_stall(step_s, batches_per_s),
            capacity_batches_per_s=_finite_bound(capacity),
            limit=limit,
            steady_batches_per_s=steady_batches_per_s,
            steady_stall_fraction=_stall(step_s, steady_batches_per_s),
        )

    def interval(self, settings: LoaderSettings, *, epochs: Optional[int] = None,
                 model_error: bool = True) -> tuple[float, float]:
        """90% interval ``(low, high)`` of the predicted batches/s from the run's own noise:
        the prediction at the other processes' low and high load
        (:data:`contention.OTHERS_PERCENTILES` of the host ticks), with workers at both ends
        of :attr:`worker_cpu_range_s` when set and, where the step's pool was starved
        (:attr:`unstarved_step_s`), with the step at its calling thread's CPU time; widened by
        :attr:`noise_fraction` (batch means of loop time per batch, so ``r / (1 + h)`` to
        ``r / (1 - h)``, ``h`` at most :data:`MAX_NOISE_FRACTION`), and with ``model_error``
        by the model's own error for this kind of prediction (:func:`model_error_band`).

        Bounded like every prediction: ``0 < low <= predict(settings).batches_per_s <= high``
        always holds (the point is one of the predictions spanned), and the high end never
        exceeds the step's own ceiling with no loader work beside it (``1 / step_s(0)``, or
        ``1 /`` :attr:`unstarved_step_s` where that is known) at the lowest load spanned:
        noise in loop time cannot make the loop outrun its step. The producer's capacity and
        the step's slowdown beside workers bound the point but not the high end: they are the
        model's estimates, whose error the interval is there to show. With the main process on
        one intra-op thread the interval spans those of :meth:`one_thread_step_s`'s three
        steps. ``ValueError`` as :meth:`predict`."""
        models = self._for_threads(settings)
        if models[0] is not self:
            plain = replace(settings, torch_num_threads=None)
            point = models[0].predict(plain, epochs=epochs).batches_per_s
            ends = [m.interval(plain, epochs=epochs, model_error=model_error) for m in models]
            return min(min(e[0] for e in ends), point), max(max(e[1] for e in ends), point)
        loads: list[Optional[float]] = [None]
        if self.load is not None:
            loads = [self.load.others_low, self.load.others_high]
        variants: list[tuple[ThroughputModel, Optional[float]]] = [(self, k) for k in loads]
        if self.worker_cpu_range_s is not None and settings.num_workers > 0:
            variants.extend((replace(self, worker_cpu_per_batch_s=cpu_s,
                                     worker_cpu_range_s=None), None)
                            for cpu_s in self.worker_cpu_range_s)
        unstarved = self.unstarved_step_s if settings.num_workers > 0 else None
        if unstarved is not None and unstarved > 0:
            variants.append((replace(self, demand_batches_per_s=1.0 / unstarved,
                                     unstarved_step_s=None), None))
        point = self.predict(settings, epochs=epochs).batches_per_s
        rates = [point] + [m.predict(settings, epochs=epochs, others_cpus=k).batches_per_s
                           for m, k in variants]
        ceiling = max(self.bounds(settings).batches_per_s,
                      *(_finite_bound(1.0 / max(self.step_s(0, k), 1e-300)) for k in loads),
                      _finite_bound(1.0 / unstarved) if unstarved else 0.0)
        # The noise is a relative half-width of loop time per batch: time t(1 - h)..t(1 + h)
        # is rate r/(1 + h)..r/(1 - h); h held below 1 (a spread that wide bounds nothing).
        spread = max(self.noise_fraction, 0.0) if math.isfinite(self.noise_fraction) else 0.0
        below, above = (model_error_band(self.measured.num_workers, settings.num_workers)
                        if model_error else (0.0, 0.0))
        low = min(rates) / (1.0 + spread) * (1.0 - below)
        high = max(rates) / (1.0 - min(spread, MAX_NOISE_FRACTION)) * (1.0 + above)
        return bounded_rate(min(low, point), point), bounded_rate(max(high, point), ceiling)

    def worker_cpu_spread(self, settings: LoaderSettings) -> Optional[WorkerCpuSpread]:
        """How far the unknown part of a worker's CPU moves the prediction for ``settings``:
        the batches/s predicted at both ends of :attr:`worker_cpu_range_s` (the serial run's
        pool did real work or spin-waited, which its CPU figures cannot tell apart), the main
        process on the threads ``settings`` asks for. ``None`` without workers in
        ``settings`` or without that range. ``ValueError`` as :meth:`predict`."""
        if self.worker_cpu_range_s is None or settings.num_workers <= 0:
            return None
        model = self._for_threads(settings)[0]
        plain = replace(settings, torch_num_threads=None)
        low_cpu_s, high_cpu_s = self.worker_cpu_range_s
        rates = [replace(model, worker_cpu_per_batch_s=cpu_s, worker_cpu_range_s=None)
                 .predict(plain).batches_per_s for cpu_s in (low_cpu_s, high_cpu_s)]
        return WorkerCpuSpread(low_cpu_s, high_cpu_s, min(rates), max(rates))


@dataclass(frozen=True)
class WorkerCpuSpread:
    """A prediction's dependence on the worker CPU the serial run cannot pin down
    (:meth:`ThroughputModel.worker_cpu_spread`): ``low_cpu_s`` / ``high_cpu_s`` a worker's CPU
    seconds per batch at either end of the plausible range, and ``slow_batches_per_s`` /
    ``fast_batches_per_s`` the predicted rates there (``0 < slow <= fast``)."""

    low_cpu_s: float
    high_cpu_s: float
    slow_batches_per_s: float
    fast_batches_per_s: float

    @property
    def ratio(self) -> float:
        """``fast / slow`` (>= 1): how many times over the unknown CPU can move the rate."""
        return self.fast_batches_per_s / self.slow_batches_per_s

    @property
    def unsure(self) -> bool:
        """Whether the unknown CPU alone can move the point by more than
        :data:`~pipecheck.records.UNSURE_POINT_ERROR`: a point anywhere in ``[slow, fast]``
        may then miss the rate the settings reach by more than that, whatever the run's
        noise."""
        return self.ratio > 1.0 / (1.0 - UNSURE_POINT_ERROR)


def _bounds(step_s: float, capacity_batches_per_s: float) -> Bounds:
    """:class:`Bounds` from a step time in seconds and a capacity in batches/s."""
    step_rate = 1.0 / step_s if step_s > 0 else math.inf
    return Bounds(step_batches_per_s=_finite_bound(step_rate),
                  producer_batches_per_s=_finite_bound(capacity_batches_per_s))


def _stall(step_s: float, batches_per_s: float) -> float:
    """The share of loop time (0-1) not spent stepping at ``batches_per_s``, ``step_s``
    seconds a step."""
    return min(max(1.0 - step_s * batches_per_s, 0.0), 1.0)


def measured_settings(run: RunRecord) -> LoaderSettings:
    """The run's loader settings; ``num_workers`` defaults to 0 for a main-process probe and to
    the number of worker records otherwise."""
    loader = run.loader
    num_workers = loader.num_workers
    if num_workers is None:
        num_workers = 0 if run.worker_probe == "main-process" else len(run.workers)
    return LoaderSettings(
        num_workers=num_workers,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=bool(loader.persistent_workers),
        in_order=loader.in_order is not False,
    )


def data_gaps(run: RunRecord, consumer: ConsumerSummary, producer: ProducerSummary) -> list[str]:
    """Why the measurements cannot support a model (empty when they can), one phrase each."""
    gaps = []
    if consumer.batches == 0:
        return ["the loader yielded no batch"]
    if run.worker_probe == "none":
        off = (run.probes_off or {}).get("workers")
        gaps.append(f"its producer side was not measured ({off})" if off else
                    "the loader is a generic iterable, so its producer side was not measured")
    elif producer.capacity_batches_per_s is None or producer.per_worker_batches_per_s is None:
        gaps.append("the worker probe recorded no finished batch")
    if consumer.demand_batches_per_s is None:
        gaps.append("no step time was measured")
    if not enough_steady_batches(run.consumer):
        gaps.append(f"only {steady_batch_count(run.consumer)} steady batches were measured "
                    f"(pipecheck needs {MIN_STEADY_BATCHES}, or {MIN_SLOW_STEADY_BATCHES} "
                    f"over {MIN_SLOW_STEADY_S:g} s)")
    return gaps


def build_model(
    run: RunRecord, consumer: ConsumerSummary, producer: ProducerSummary
) -> Optional[ThroughputModel]:
    """The what-if model of ``run``, or ``None`` when :func:`data_gaps` finds any gap."""
    if data_gaps(run, consumer, producer):
        return None
    settings = measured_settings(run)
    demand = consumer.demand_batches_per_s
    per_worker = producer.per_worker_batches_per_s
    assert demand is not None and per_worker is not None  # data_gaps() found neither missing
    assumptions = [
        "inter-process costs beyond the measured receive CPU, and worker start-up growing with "
        "num_workers, are not modeled",
        "CPU-bound work scales only up to the usable CPUs; latency-bound work scales with "
        "num_workers until the CPU cap",
        "per-worker rates were measured under this run's CPU contention",
    ]
    receive_s = wait_cpu_per_batch_s(run.consumer) if run.worker_probe == "workers" else None
    if receive_s is None:
        receive_s = estimated_receive_s(run.consumer.batch_tensors)
        assumptions.append(
            "the main thread's cost of receiving a batch from a worker was not measured (no "
            f"workers): estimated at {receive_s * 1e3:.2f} ms a batch from its tensor count "
            "(pipecheck's measurement of torch's hand-over)")
    worker_cpu = producer.cpu_per_batch_s
    if worker_cpu is None:
        worker_cpu = ASSUMED_PRODUCTION_CPU_FRACTION / per_worker
        assumptions.append("batch production CPU not measured: assumed CPU-bound")
    main_cpu = main_cpu_per_batch_s(producer.main_cpu_per_batch_s, consumer)
    assert main_cpu is not None  # demand > 0 gives a step time
    if producer.main_cpu_per_batch_s is None:
        assumptions.append("main-process CPU not measured: assumed one core during each step")
    record = run.consumer
    cold = cold_start_s(record, settings.persistent_workers) or 0.0
    # With persistent workers every epoch after the first started with live workers.
    warm = warm_start_s(record) if settings.persistent_workers else None
    if warm is None:
        warm = 1.0 / per_worker
        assumptions.append("first batch with live workers: one batch's production time")
    batch_times = tuple(b.fetch_s + b.collate_s for w in run.workers for b in w.recent)
    load: Optional[HostLoad] = host_load(
        run, ratio(record.sampled_compute_cpu_s, record.sampled_compute_wall_s))
    if run.host is None or run.host.status != "ok":
        load = None
        assumptions.append("no host data: other processes' load, the step's threads and the "
                           "run-queue wait are unknown, so the older CPU cap is used")
    else:
        assumptions.extend(_contention_assumptions(settings.num_workers))
    # Loop time per steady batch (each epoch's first and any unmeasured step left out).
    noise = batch_means_spread(
        b.wait_s + b.compute_s for i, b in enumerate(record.timeline)
        if i > 0 and b.epoch == record.timeline[i - 1].epoch and b.compute_s is not None)
    model = ThroughputModel(
        measured=settings,
        demand_batches_per_s=demand,
        per_worker_batches_per_s=per_worker,
        worker_cpu_per_batch_s=worker_cpu,
        main_cpu_per_batch_s=main_cpu,
        usable_cpus=run.environment.usable_cpus,
        receive_s=receive_s,
        sustained_batches_per_s=steady_batches_per_s(record),
        samples_per_batch=ratio(record.samples, record.batches),
        batch_times_s=batch_times,
        batches=_modelled_batches(run),
        epochs=max(started_epoch_count(record), 1),
        cold_start_s=cold,
        warm_start_s=warm,
        assumptions=tuple(assumptions),
        worker_class=producer.workers_class,
        shutdown_s=(shutdown_wait_s(record, settings.persistent_workers) or 0.0
                    if settings.num_workers > 0 else 0.0),
        warmup_step_s=warmup_step_s(record),
        load=load,
        noise_fraction=noise or 0.0,
        main_threads=run.environment.intra_op_threads,
        step_thread_cores=step_on_cpu_fraction(record),
    )
    if load is not None:
        # Off-CPU time from the CPU as measured: the pool's overhead took wall time too.
        model = replace(model, worker_off_s=_worker_off_s(model, producer))
    inflation = intra_op_inflation(run)
    on_cpu = starved_step_on_cpu(run)
    if on_cpu is not None and load is not None:
        model = replace(model, unstarved_step_s=on_cpu / demand, assumptions=model.assumptions + (
            f"the step's calling thread ran {on_cpu:.0%} of the step while its torch intra-op "
            "threads ran beside it (it waited for a core): beside workers it may run faster, "
            "but predictions keep the measured step, the step's own ceiling",))
    pool = active_pool_threads(run, inflation, load)
    if pool:
        model = replace(model, pool_threads=pool, assumptions=model.assumptions + (
            f"the main process's {pool} torch intra-op threads were active (their CPU beyond "
            "the calling thread's): beside workers all of them count as runnable during the "
            f"step, and the other threads for {POOL_SPIN_S * 1e3:g} ms after it (OpenMP's "
            "busy-wait before its threads sleep)",))
    if inflation is not None:
        # A worker does all of production on its one thread: never less than the calling
        # thread's share, unless that thread's CPU holds spin-waits for a starved pool.
        low = 0.0 if model.pool_starved else worker_cpu / inflation
        model = replace(model, worker_cpu_per_batch_s=worker_cpu / inflation,
                        worker_cpu_range_s=(low, worker_cpu), assumptions=model.assumptions + (
                            f"production ran on {run.environment.intra_op_threads} torch "
                            f"intra-op threads, using {inflation:.1f}x the calling thread's "
                            "CPU: a worker (one thread) is taken to pay the calling thread's "
                            "CPU, and the interval runs from "
                            + ("free production" if model.pool_starved
                               else "the calling thread's CPU") + " to the process's CPU",))
    if run.worker_probe == "main-process" and run.consumer.batch_bytes:
        model = with_shared_memory_cost(model, run.consumer.batch_bytes)
    return model


def with_shared_memory_cost(model: ThroughputModel, batch_bytes: int) -> ThroughputModel:
    """``model`` (measured at ``num_workers=0``) with the hand-over through shared memory
    that a worker pays and the measured run did not: :data:`SHM_WORKER_FIXED_S` +
    :data:`SHM_WORKER_S_PER_BYTE` x ``batch_bytes`` CPU seconds more per batch for a worker
    and :data:`SHM_MAIN_S_PER_BYTE` x ``batch_bytes`` more for the main process."""
    extra = SHM_WORKER_FIXED_S + SHM_WORKER_S_PER_BYTE * batch_bytes
    cpu_range = model.worker_cpu_range_s
    return replace(
        model,
        worker_cpu_per_batch_s=model.worker_cpu_per_batch_s + extra,
        worker_cpu_range_s=(None if cpu_range is None
                            else (cpu_range[0] + extra, cpu_range[1] + extra)),
        per_worker_batches_per_s=1.0 / (1.0 / model.per_worker_batches_per_s + extra),
        receive_s=model.receive_s + SHM_MAIN_S_PER_BYTE * batch_bytes,
        assumptions=model.assumptions + (
            f"a worker hands each {batch_bytes / 1e6:.2f} MB batch over through shared memory "
            f"for about {extra * 1e3:.2f} ms more CPU than production in the main process "
            "(pipecheck's measurement of torch's collation into /dev/shm)",))


def active_pool_threads(run: RunRecord, inflation: Optional[float],
                        load: Optional[HostLoad]) -> int:
    """The main process's torch intra-op threads (:attr:`ThroughputModel.pool_threads`) when
    the run, at ``num_workers=0`` with host data, shows its pool active: production inflated
    (``inflation``, :func:`~pipecheck.analysis.producer.intra_op_inflation`) or the step
    using at least :data:`~pipecheck.analysis.producer.INTRA_OP_INFLATION_MIN` cores, with
    the threads beside the calling one using at least :data:`POOL_EVIDENCE_MIN_CORES` over
    the sampled loop (:func:`pool_extra_cores`) where it was sampled; else 0.
    With workers measured the main process's CPU beside them is measured instead. A step on a
    CUDA device (the device probe recorded its batches) is taken to leave the pool idle once
    production moves to workers: its CPU side launches kernels, and what kept the pool busy
    at ``num_workers=0`` was production (an assumption: a CPU step's regions and the spin
    after them fall partly into the following wait, so the two cannot be told apart)."""
    threads = run.environment.intra_op_threads
    if (load is None or run.worker_probe != "main-process" or threads is None
            or threads <= 1):
        return 0
    if run.device is not None and run.device.status == "ok":
        return 0
    extra = pool_extra_cores(run.consumer)
    if extra is not None and extra < POOL_EVIDENCE_MIN_CORES:
        return 0
    stepping = load.step_cores is not None and load.step_cores >= INTRA_OP_INFLATION_MIN
    pooled_step = step_pool_inflation(run.consumer) >= INTRA_OP_INFLATION_MIN
    return threads if inflation is not None or stepping or pooled_step else 0


def pool_extra_cores(record: ConsumerRecord) -> Optional[float]:
    """Cores' worth of CPU the main process's threads other than the calling one used over the
    sampled waits and steps together (>= 0): the intra-op pool's work and spin, plus whatever
    else ran in the process then. ``None`` unless the calling thread's CPU was sampled in both
    (a phase without it could hold the pool's work unseen)."""
    wait_thread_s = record.sampled_wait_thread_cpu_s
    compute_thread_s = record.sampled_compute_thread_cpu_s
    wall = record.sampled_wait_wall_s + record.sampled_compute_wall_s
    if wait_thread_s is None or compute_thread_s is None or wall <= 0:
        return None
    other = (record.sampled_wait_cpu_s - wait_thread_s
             + record.sampled_compute_cpu_s - compute_thread_s)
    return max(other, 0.0) / wall


def step_pool_inflation(record: ConsumerRecord) -> float:
    """The main process's CPU over the calling thread's in the sampled steps: 1 when the step
    ran on that thread alone, up to the intra-op thread count when its pool worked (or spun)
    throughout; 1 when not sampled."""
    return ratio(record.sampled_compute_cpu_s, record.sampled_compute_thread_cpu_s) or 1.0


def starved_step_on_cpu(run: RunRecord) -> Optional[float]:
    """With ``num_workers=0``, more than one torch intra-op thread and the step not on a CUDA
    device: the calling thread's CPU per wall second of the sampled steps (0-1,
    :func:`~pipecheck.analysis.consumer.step_on_cpu_fraction`) when the step's pool worked
    beside it (:func:`step_pool_inflation` at least
    :data:`~pipecheck.analysis.producer.INTRA_OP_INFLATION_MIN`) and that thread ran under
    :data:`POOL_STARVED_SHARE` of the step: it waited for a core while its teammates held
    them (OpenMP regions end at a barrier, so each waits for the slowest thread). ``None``
    otherwise. A step that sleeps or waits on I/O with its pool busy would be taken for one
    (an assumption)."""
    threads = run.environment.intra_op_threads
    if run.worker_probe != "main-process" or threads is None or threads <= 1:
        return None
    if run.device is not None and run.device.status == "ok":
        return None
    on_cpu = step_on_cpu_fraction(run.consumer)
    if on_cpu is None or step_pool_inflation(run.consumer) < INTRA_OP_INFLATION_MIN:
        return None
    return on_cpu if on_cpu < POOL_STARVED_SHARE else None


def _modelled_batches(run: RunRecord) -> int:
    """Batches of the run the model predicts: the measured ones, or whole epochs of the
    loader's ``len()`` when the run stopped inside its epochs (a short look at a long epoch
    would otherwise spread one epoch's worker start-up over a few batches)."""
    record = run.consumer
    epochs = max(started_epoch_count(record), 1)
    per_epoch = run.loader.batches_per_epoch
    if per_epoch and record.batches < per_epoch * epochs:
        return per_epoch * epochs
    return record.batches


def _contention_assumptions(measured_workers: int) -> list[str]:
    words = [
        "processes outside this run and its CPU scheduling group keep the cores they used "
        "during it (the kernel schedules groups fairly: sessions, containers, jobs); the cores "
        "left are shared fairly among the step's threads, the workers, the run's own other "
        "children and other processes in its group",
    ]
    if measured_workers == 0:
        words.append(
            "a worker's CPU per batch is the main process's CPU time per batch while producing "
            "(all its threads): workers run one intra-op thread, so parallel work costs the "
            "same CPU there, and time lost waiting for a core is not counted; intra-op threads "
            "that spin while waiting make it an overestimate")
    return words


_OFF_CPU_ROUNDS = 8
"""Rounds that settle a worker's off-CPU time when its run-queue wait was not measured."""


def _worker_off_s(model: ThroughputModel, producer: ProducerSummary) -> float:
    """Seconds per batch a worker neither ran nor waited for a core. With workers: busy time
    less CPU and run-queue time (measured), or less CPU over the model's own share at the
    measured settings (run queue not measured). With ``num_workers=0``: the production time
    the main process neither ran nor wanted a core (CPU over the measured share)."""
    busy_s = 1.0 / model.per_worker_batches_per_s
    cpu_s = model.worker_cpu_per_batch_s
    load = model.load
    assert load is not None
    if model.measured.num_workers == 0:
        return max(busy_s - cpu_s / load.share, 0.0)
    queued = [w.runqueue_fraction for w in producer.workers if w.runqueue_fraction is not None]
    if queued:
        return max(busy_s * (1.0 - sum(queued) / len(queued)) - cpu_s, 0.0)
    off_s = max(busy_s - cpu_s, 0.0)
    for _ in range(_OFF_CPU_ROUNDS):
        share = _cycle(model.measured.num_workers, 1.0 / model.demand_batches_per_s, None,
                       cpu_s, off_s, 1.0, model.receive_s, load.step_threads(),
                       load.group_runnable(), load.cores_left(),
                       worker_fixed_s=busy_s).worker_share
        off_s = max(busy_s - cpu_s / share, 0.0)
    return off_s
