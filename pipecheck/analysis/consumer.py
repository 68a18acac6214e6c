"""The consumer's side of a run: stall, throughput, demand and epoch start-up, from the exact
counters of a :class:`~pipecheck.records.ConsumerRecord` (quantiles from its sampled timeline).

"Loop time" below is ``wait_s + compute_s``: the time spent inside the training loop, between
the first ``next()`` call and the end of the last step. Rates are per second of loop time, so
time the user spent outside the loop (evaluation between epochs, say) does not dilute them.

Figures over the run's epochs are taken from the listed ``ConsumerRecord.epochs`` plus the sums
of the epochs folded out of that list (``ConsumerRecord.folded_epochs``), so they cost the
same and come out the same however many epochs ran. An epoch "started" when it delivered a
batch (``batches > 0`` and a ``first_batch_s``); the run's first started epoch is always
listed.
"""

from __future__ import annotations

from typing import Optional

from pipecheck.analysis.stats import quantiles, ratio
from pipecheck.records import ConsumerRecord, ConsumerSummary, EpochTiming

# Epochs that ended this way lost their last step's compute time: the loop never called next()
# again (a break, or a pass still running), so that batch has no compute_s.
_ENDINGS_WITHOUT_LAST_COMPUTE = ("break", "running")


def summarize_consumer(record: ConsumerRecord) -> ConsumerSummary:
    """Summarize the consumer record; never raises on an empty run.

    * ``stall_fraction = wait_s / (wait_s + compute_s)`` over the whole run (0-1);
    * ``steady_stall_fraction``: the same without each epoch's first batch (its wait is
      ``EpochTiming.first_batch_s``, its step time taken as the mean); ``None`` when no batch is
      left after removing them;
    * ``samples_per_s``, ``batches_per_s``, ``tokens_per_s``: per second of loop time
      (``wait_s + compute_s``); ``tokens_per_s`` only when tokens were counted;
    * ``demand_batches_per_s = 1 / steady step time`` (:func:`steady_step_s`: the mean step
      without the run's first, a warm-up): what the step could take if data were free;
    * ``first_batch_s``: the first epoch's first-batch wait.

    With zero batches every rate and fraction is ``None``.
    """
    loop_s = record.wait_s + record.compute_s
    has_batches = record.batches > 0
    steady = steady_stall_fraction(record) if has_batches else None
    return ConsumerSummary(
        batches=record.batches,
        samples=record.samples,
        wall_s=record.wall_s,
        wait_s=record.wait_s,
        compute_s=record.compute_s,
        stall_fraction=ratio(record.wait_s, loop_s) if has_batches else None,
        samples_per_s=ratio(record.samples, loop_s) if has_batches else None,
        batches_per_s=ratio(record.batches, loop_s) if has_batches else None,
        tokens_per_s=ratio(record.tokens, loop_s) if has_batches else None,
        first_batch_s=record.epochs[0].first_batch_s if record.epochs else None,
        tokens=record.tokens,
        epochs=epoch_count(record),
        steady_stall_fraction=steady,
        demand_batches_per_s=ratio(1.0, steady_step_s(record)),
        wait_time_s=quantiles(b.wait_s for b in record.timeline),
        compute_time_s=quantiles(b.compute_s for b in record.timeline if b.compute_s is not None),
        status=record.status,
        error=record.error,
        errors=record.errors,
        untimed_batches=record.untimed_batches,
        sigterms_continued=record.sigterms_continued,
    )


def epoch_count(record: ConsumerRecord) -> int:
    """Epochs the run began (``iter()`` calls), listed or folded."""
    return len(record.epochs) + record.folded_epochs.epochs


def _started(record: ConsumerRecord) -> list[EpochTiming]:
    """The listed epochs that delivered a first batch, in epoch order."""
    return [e for e in record.epochs if e.batches > 0 and e.first_batch_s is not None]


def _first_wait_s(epoch: EpochTiming) -> float:
    return epoch.first_batch_s if epoch.first_batch_s is not None else 0.0


def started_epoch_count(record: ConsumerRecord) -> int:
    """Epochs that delivered a first batch (and so have a first-batch wait)."""
    return len(_started(record)) + record.folded_epochs.started


def first_batch_waits_s(record: ConsumerRecord) -> float:
    """Seconds of the started epochs' first-batch waits, summed."""
    return sum(_first_wait_s(e) for e in _started(record)) + record.folded_epochs.first_batch_s


def steady_batch_count(record: ConsumerRecord) -> int:
    """Batches that were not the first of their epoch."""
    return max(record.batches - started_epoch_count(record), 0)


def steady_wait_s(record: ConsumerRecord) -> float:
    """Total wait in seconds without each epoch's first-batch wait."""
    return max(record.wait_s - first_batch_waits_s(record), 0.0)


def started_steady_s(record: ConsumerRecord) -> tuple[int, float]:
    """The started epochs' batches after their first, and their wall seconds after the
    first batch came (``wall_s - first_batch_s`` per epoch, summed): the steady stretch of
    each pass, worker start-up left out."""
    started = _started(record)
    folded = record.folded_epochs
    batches = sum(e.batches - 1 for e in started) + folded.started_batches - folded.started
    seconds = (sum(max(e.wall_s - _first_wait_s(e), 0.0) for e in started)
               + max(folded.started_wall_s - folded.first_batch_s, 0.0))
    return batches, seconds


def first_step_s(record: ConsumerRecord) -> Optional[float]:
    """The run's first step in seconds (its first batch's compute time, timeline row 0), or
    ``None`` when it was not measured."""
    timeline = record.timeline
    if timeline and timeline[0].index == 0 and timeline[0].compute_s is not None:
        return timeline[0].compute_s
    return None


def steady_step_s(record: ConsumerRecord) -> Optional[float]:
    """Mean step time in seconds without the run's first step, when another was measured:
    the first holds one-time work that no loader setting changes (lazy module
    initialization, cuDNN autotuning, ``torch.compile``; 1.5 s against 88 ms steady in
    ``benchmarks/prediction.py``'s latency pipeline, where it added 37% to a 10-second run's
    mean). ``None`` when no step was measured."""
    measured = compute_measured_batches(record)
    first_s = first_step_s(record)
    if first_s is None or measured < 2:
        return ratio(record.compute_s, measured)
    return max(record.compute_s - first_s, 0.0) / (measured - 1)


def warmup_step_s(record: ConsumerRecord) -> float:
    """Seconds the run's first step took beyond a steady one (:func:`steady_step_s`); 0 when
    not measured."""
    first_s, step_s = first_step_s(record), steady_step_s(record)
    if first_s is None or step_s is None or compute_measured_batches(record) < 2:
        return 0.0
    return max(first_s - step_s, 0.0)


def step_on_cpu_fraction(record: ConsumerRecord) -> Optional[float]:
    """The calling thread's CPU per wall second of the sampled steps (0-1): short of 1 when
    that thread waited during the step (for a core, a GPU, I/O or a lock); ``None`` when no
    step was sampled or the record predates the measurement."""
    on_cpu = ratio(record.sampled_compute_thread_cpu_s, record.sampled_compute_wall_s)
    return None if on_cpu is None else min(on_cpu, 1.0)


def steady_stall_fraction(record: ConsumerRecord) -> Optional[float]:
    """``steady_wait / (steady_wait + steady_compute)``, 0-1, where each epoch's first batch
    is left out: its wait, and its step (the run's first as measured, the others at the
    steady step time, :func:`steady_step_s`); ``None`` with no steady batch."""
    steady = steady_batch_count(record)
    step_s = steady_step_s(record)
    if steady == 0 or step_s is None:
        return None
    wait_s = steady_wait_s(record)
    firsts = started_epoch_count(record)
    compute_s = max(record.compute_s - warmup_step_s(record) - firsts * step_s, 0.0)
    return ratio(wait_s, wait_s + compute_s)


def steady_batches_per_s(record: ConsumerRecord) -> Optional[float]:
    """Batches per second of loop time over the steady batches (the rate the pipeline actually
    sustained between epoch starts); ``None`` with no steady batch."""
    stall = steady_stall_fraction(record)
    step_s = steady_step_s(record)
    if stall is None or step_s is None or stall >= 1.0:
        return None
    # Each steady batch takes step / (1 - stall) of loop time.
    return (1.0 - stall) / step_s


def wait_cpu_per_batch_s(record: ConsumerRecord) -> Optional[float]:
    """Main-process CPU seconds per batch spent inside ``next()``: the sampled CPU per wall
    second while waiting x the mean wait. With workers that is the cost of receiving a batch
    (unpickling, mapping shared memory), paid even when the batch is ready; with
    ``num_workers=0`` it is batch production. ``None`` when not sampled or no batches."""
    cpu_per_wait_s = ratio(record.sampled_wait_cpu_s, record.sampled_wait_wall_s)
    mean_wait_s = ratio(record.wait_s, record.batches)
    if cpu_per_wait_s is None or mean_wait_s is None:
        return None
    return cpu_per_wait_s * mean_wait_s


def mean_steady_wait_s(record: ConsumerRecord) -> Optional[float]:
    """Mean wait per steady batch in seconds; ``None`` with no steady batch."""
    return ratio(steady_wait_s(record), steady_batch_count(record))


def compute_measured_batches(record: ConsumerRecord) -> int:
    """Batches whose step time was measured: all of them, less the last batch of an epoch that
    ended on ``break`` or is still running (the loop never came back for another batch)."""
    unmeasured = sum(
        1 for e in record.epochs if e.batches > 0 and e.ended in _ENDINGS_WITHOUT_LAST_COMPUTE
    ) + record.folded_epochs.without_last_compute
    return max(record.batches - unmeasured, 0)


def cold_start_s(record: ConsumerRecord, persistent_workers: Optional[bool]) -> Optional[float]:
    """Mean first-batch wait in seconds of the started epochs whose producer started from
    scratch: every one, or with ``persistent_workers=True`` only the first (later ones reuse
    live workers); ``None`` with no started epoch."""
    started = _started(record)
    if persistent_workers:
        return started[0].first_batch_s if started else None
    return ratio(first_batch_waits_s(record), started_epoch_count(record))


def warm_start_s(record: ConsumerRecord) -> Optional[float]:
    """Mean first-batch wait in seconds of the started epochs after the run's first (with
    ``persistent_workers=True``: the restarts that reuse live workers); ``None`` with fewer
    than two started epochs."""
    started = _started(record)
    if not started:
        return None
    return ratio(first_batch_waits_s(record) - _first_wait_s(started[0]),
                 started_epoch_count(record) - 1)


def shutdown_wait_s(record: ConsumerRecord, persistent_workers: Optional[bool]) -> Optional[float]:
    """Mean wait in seconds inside the final ``next()`` of the exhausted epochs that had
    batches, where torch shuts non-persistent workers down (``EpochTiming.last_wait_s``);
    ``None`` with ``persistent_workers=True`` (no shutdown there) or no such epoch."""
    if persistent_workers:
        return None
    waits = [e.last_wait_s for e in record.epochs
             if e.ended == "exhausted" and e.batches > 0 and e.last_wait_s is not None]
    folded = record.folded_epochs
    return ratio(sum(waits) + folded.last_wait_s, len(waits) + folded.last_waits)


def mean_epoch_wall_s(record: ConsumerRecord) -> Optional[float]:
    """Mean wall time in seconds of the epochs that ran to exhaustion, or of all started epochs
    when none did (a run cut short); ``None`` with no started epoch."""
    started = _started(record)
    folded = record.folded_epochs
    finished = [e.wall_s for e in started if e.ended == "exhausted"]
    if finished or folded.exhausted:
        return ratio(sum(finished) + folded.exhausted_wall_s, len(finished) + folded.exhausted)
    return ratio(sum(e.wall_s for e in started) + folded.started_wall_s,
                 len(started) + folded.started)


def stress_command(record: ConsumerRecord, workers: str = "") -> str:
    """The ``pipecheck stress`` command line that measures loader settings on this host with a
    step like this run's: ``--step-time`` the steady step (:func:`steady_step_s`, seconds) and
    ``--step-cpu`` the share of it the step's calling thread spent on the CPU
    (:func:`step_on_cpu_fraction`; left out when not measured or under 5%: a sleeping step is
    stress's default), ``--workers`` when ``workers`` (e.g. ``"0,1,2"``) is given. Quoted, as
    the reports print it."""
    parts = ["pipecheck stress FILE.py:make_loader"]
    if workers:
        parts.append(f"--workers {workers}")
    step_s = steady_step_s(record)
    if step_s is not None and step_s > 0:
        parts.append(f"--step-time {step_s:.3g}")
        on_cpu = step_on_cpu_fraction(record)
        if on_cpu is not None and on_cpu >= 0.05:
            parts.append(f"--step-cpu {on_cpu:.2f}")
    return "'" + " ".join(parts) + "'"
