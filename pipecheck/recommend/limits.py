"""The limits the recommendation rules hold to: pipecheck's choices (each constant's docstring
gives its source), and the model readings they are applied to (the worker count a starved pool,
``/dev/shm`` or the CPUs allow; the producer's class; whether a change gains enough).
"""

from __future__ import annotations

import math
from typing import Optional

from pipecheck.analysis.bound import CPU_BOUND_FRACTION
from pipecheck.analysis.memory import SHM_HEADROOM_FACTOR
from pipecheck.analysis.model import ThroughputModel
from pipecheck.loader_settings import LoaderSettings
from pipecheck.kinds import (
    CPU_BOUND,
    LATENCY_BOUND,
)
from pipecheck.records import (
    RunRecord,
)


MIN_GAIN_FRACTION = 0.05
"""A change must be predicted to raise steady throughput by at least 5%; the model sees no IPC
beyond the receive CPU and no shift in contention, so smaller gains are not worth a change."""


UP_HEADROOM = 1.2
"""More workers are sized for 1.2x the consumer's rate: the model has no jitter beyond the sampled
batch times, and a producer sized exactly at the demand stalls on every hiccup."""


DOWN_HEADROOM = 2.0
"""Fewer workers are proposed only if they keep capacity at 2x the demand or more (slack for
batch-time variance and contention the model does not see)."""


MAX_WORKERS_PER_CPU = 4
"""Upper bound on proposed workers per usable CPU, even for latency-bound work: it guards against
the epoch start the model does not price at worker counts it did not measure (with
``persistent_workers=False`` every epoch forks all the workers again and waits for their first
batches, and the epoch's tail leaves workers idle). pipecheck's choice
(docs/decisions.md#max_workers_per_cpu)."""


MAX_CPU_BOUND_WORKERS_PER_CPU = 2
"""Most CPU-bound workers proposed per usable CPU when the model knows the host's load: past
it, the fair-share model's assumptions (no cache or memory-bandwidth cost of more processes)
are untested. On the project's 2-core machine 2 CPU-bound workers beat 1 in 3 of 3 paired runs
(issue "Numbers that hold on real, busy machines"), so the older cap at the free cores was too
low. pipecheck's choice."""


MAX_PREFETCH_FACTOR = 16
"""Largest proposed prefetch_factor: past it the batches held in memory (prefetch_factor x
num_workers) cost more than fixing the slow samples would."""


PERSISTENT_START_SHARE = 0.05
"""persistent_workers=True is proposed when an epoch's start-up wait is at least 5% of an epoch."""


MIN_SHUTDOWN_S = 0.001
"""An epoch's end-of-epoch shutdown wait is named in the persistent_workers reason from 1 ms
up (below it, forked workers that exit at once, it would be noise in the sentence)."""


LATENCY_BOUND_CPU_FRACTION = CPU_BOUND_FRACTION
"""Without a worker class (:mod:`pipecheck.analysis.bound`), workers using less CPU than this
per busy second are treated as waiting (latency-bound) rather than CPU-bound."""


def gains(model: ThroughputModel, before: LoaderSettings, after: LoaderSettings) -> bool:
    """Whether ``after`` is predicted at least :data:`MIN_GAIN_FRACTION` faster than
    ``before`` in steady state. From the measured settings the bar is the higher of the
    model's account of them and the steady rate the run measured: a proposal must beat what
    was measured, not only the model's own figure for it."""
    old = model.predict(before).steady_batches_per_s
    if before == model.measured and model.sustained_batches_per_s:
        old = max(old, model.sustained_batches_per_s)
    return model.predict(after).steady_batches_per_s >= old * (1.0 + MIN_GAIN_FRACTION)


def pool_worker_limit(model: ThroughputModel) -> int:
    """Most CPU-bound workers proposed beside a main process whose intra-op pool is active
    (:attr:`~pipecheck.analysis.model.ThroughputModel.pool_threads`): the cores left to the
    run, rounded, at least 1. Past them the step's parallel regions stall whenever a pool
    thread waits for a core, which the fair-share model does not capture: on 2 cores
    (``benchmarks/prediction.py``, quiet) the FFT pipeline ran 48, 51.5 and 49 batches/s
    with 2, 3 and 4 workers and the JPEG one 12.3, 12.1 and 10.9, where the model gave
    +19% and +32% for 3 and 4 workers over 2. pipecheck's choice, from those measurements."""
    load = model.load
    assert load is not None  # pool_threads is set only with host data
    return max(1, math.floor(load.cores_left() + 0.5))


def shm_batches_cap(run: RunRecord) -> Optional[int]:
    """Most batches in flight (``prefetch_factor x num_workers``) that ``/dev/shm``'s free space
    holds with :data:`~pipecheck.analysis.memory.SHM_HEADROOM_FACTOR` headroom; ``None`` when
    its size or the batch size was not measured. Workers hand batches over through it, and a
    full ``/dev/shm`` kills them with a bus error, so no rule proposes more."""
    shm, batch_bytes = run.shared_memory, run.consumer.batch_bytes
    if shm is None or not batch_bytes:
        return None
    return int(shm.free_bytes // (SHM_HEADROOM_FACTOR * batch_bytes))


def producer_class(model: ThroughputModel) -> str:
    """What production waits on: the measured class (CPU + run-queue time, storage reads,
    iowait; :mod:`pipecheck.analysis.bound`), else CPU per busy second alone against
    :data:`LATENCY_BOUND_CPU_FRACTION`. Only ``cpu-bound`` work is held to
    :func:`cpu_bound_worker_limit`: waiting work (``io-bound``, ``latency-bound``) may use more
    workers than cores, up to :data:`MAX_WORKERS_PER_CPU` per CPU."""
    if model.worker_class is not None:
        return model.worker_class
    return CPU_BOUND if model.worker_cpu_fraction >= LATENCY_BOUND_CPU_FRACTION else LATENCY_BOUND


def cpu_bound_worker_limit(model: ThroughputModel) -> int:
    """Most CPU-bound workers worth running: the usable CPUs less the cores the main process
    keeps busy during the step (its CPU per batch x the step rate), rounded, at least 1.

    Why not let the CPU cap alone decide: it assumes oversubscribed cores lose nothing, and on
    the demo (2 CPUs, step on ~1 core) going from 1 to 2 CPU-bound workers was predicted at
    +11% but measured -3% (502 -> 485 samples/s): three busy processes on two cores slow the
    step. The issue's rule: never past the usable cores for CPU-bound work."""
    main_cores = model.main_cpu_per_batch_s * model.demand_batches_per_s
    return max(1, math.floor(model.usable_cpus - main_cores + 0.5))


def slower(expected_samples_per_s: Optional[float], floor_samples_per_s: Optional[float]) -> bool:
    """Whether an expected rate is below the rate it would replace (a relative 1e-9 absorbs
    float noise in an "unchanged" prediction); ``False`` when either is unknown."""
    if expected_samples_per_s is None or floor_samples_per_s is None:
        return False
    return expected_samples_per_s < floor_samples_per_s * (1.0 - 1e-9)
