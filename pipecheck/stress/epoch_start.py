"""Does epoch start matter? Measure the best configuration's epoch restart with and without
``persistent_workers`` and decide whether keeping workers alive is worth recommending.

How it works, and why: docs/internals.md (``pipecheck/stress/epoch_start.py``).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable, Optional

from pipecheck.recommend.limits import PERSISTENT_START_SHARE
from pipecheck.report_sections import EpochStart, ExpectedRate, PersistentPair, StressChoice
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.trial import TrialLimits, TrialResult

RESTART_EPOCHS = 3
"""Epochs per epoch-start trial: the first starts the workers either way; the later ones are the
restarts compared."""

SHORT_EPOCH_BATCHES = 8
"""Batches per shortened epoch: enough for a steady rate, short enough that restarts dominate
the trial's time."""

RunTrial = Callable[[LoaderSettings, TrialLimits], TrialResult]


def measure_epoch_start(best: TrialResult, limits: TrialLimits,
                        run: RunTrial) -> EpochStart:
    """The stress section's ``epoch_start`` entry for ``best`` (a measured trial).

    ``run(config, limits)`` measures one trial. Returns ``status`` (``ok``, ``failed`` or
    ``skipped``) and ``reason``; with ``ok``: ``config`` (the best, without its
    ``persistent_workers``), ``restart_s`` and ``short_epoch_s``, each ``{"persistent": s,
    "not_persistent": s}`` (medians over the later epochs of the first batch's wait and of the
    shortened epoch's wall time, seconds), ``saving_s`` (the difference of ``short_epoch_s``,
    seconds per epoch, may be negative), ``epoch_s`` (a full epoch at the best trial's steady
    rate, seconds; ``None`` when the loader has no length), ``fraction`` (saving over a full
    epoch plus the saving, 0-1; ``None`` without ``epoch_s``), ``matters`` (bool, or ``None``
    without ``epoch_s``), ``method`` (``shortened`` or ``cut``) and ``trials`` (their
    entries)."""
    config = best.config
    if config.num_workers == 0:
        return EpochStart(status="skipped", reason="the best configuration has no workers")
    short = trial_limits(best, limits)
    results = {persistent: run(dataclasses.replace(config, persistent_workers=persistent), short)
               for persistent in (False, True)}
    trials = [r.entry() for r in results.values()]
    later = {persistent: _later_epochs(r) for persistent, r in results.items()}
    failures = [f"{r.config.label()}: {r.error or 'fewer than 2 epochs in its time limit'}"
                for persistent, r in results.items() if not later[persistent]]
    if failures:
        return EpochStart(status="failed", reason="; ".join(failures), trials=trials)
    restart = {p: statistics.median(e.first_batch_s for e in later[p]) for p in later}
    walls = {p: [e.wall_s for e in later[p]] for p in later}
    short_epoch = {p: statistics.median(walls[p]) for p in walls}
    saving = short_epoch[False] - short_epoch[True]
    spread = max(max(v) - min(v) for v in walls.values())
    epoch_s = _epoch_s(best)
    gained = max(saving, 0.0)
    fraction = None if epoch_s is None else gained / (epoch_s + gained)
    matters = (None if fraction is None
               else bool(fraction >= PERSISTENT_START_SHARE and saving > spread))
    exhausted = all(e.ended == "exhausted" for epochs in later.values() for e in epochs)
    return EpochStart(
        status="ok", reason=None,
        config={k: v for k, v in config.to_dict().items() if k != "persistent_workers"},
        restart_s=PersistentPair(persistent=restart[True], not_persistent=restart[False]),
        short_epoch_s=PersistentPair(persistent=short_epoch[True],
                                     not_persistent=short_epoch[False]),
        saving_s=saving, epoch_s=epoch_s, fraction=fraction, matters=matters,
        method="shortened" if exhausted else "cut", trials=trials,
    )


def trial_seconds(best: Optional[TrialResult], limits: TrialLimits) -> float:
    """Wall-clock limit of each epoch-start trial, in seconds: twice the time its
    :data:`RESTART_EPOCHS` epochs are expected to take at the best trial's rate (each a worker
    start, the best trial's first batch, plus :data:`SHORT_EPOCH_BATCHES` steady batches), or
    a sweep trial's ``limits.seconds`` when that is longer (the trial ends as soon as its epochs
    are done). ``best`` ``None`` or unmeasured: ``limits.seconds``."""
    if best is None or not best.batches_per_s:
        return limits.seconds
    epoch_s = (best.startup_s or 0.0) + SHORT_EPOCH_BATCHES / best.batches_per_s
    return max(limits.seconds, 2.0 * RESTART_EPOCHS * epoch_s)


def trial_limits(best: Optional[TrialResult], limits: TrialLimits) -> TrialLimits:
    """The limits of each epoch-start trial: :data:`RESTART_EPOCHS` epochs of at most
    :data:`SHORT_EPOCH_BATCHES` + 1 batches (map-style loaders end theirs at
    :data:`SHORT_EPOCH_BATCHES` with a truncated sampler) within :func:`trial_seconds`."""
    return TrialLimits(batches=(SHORT_EPOCH_BATCHES + 1) * RESTART_EPOCHS,
                       seconds=trial_seconds(best, limits), epochs=RESTART_EPOCHS,
                       epoch_batches=SHORT_EPOCH_BATCHES)


def apply(recommended: Optional[StressChoice], epoch_start: EpochStart
          ) -> Optional[StressChoice]:
    """The stress section's ``recommended`` entry with ``persistent_workers`` set (config and
    ``changes`` against its baseline): ``True`` when epoch start matters (with
    ``expected.epoch_saving_s``), else the baseline's own value, since the sweep's trials, all
    without persistent workers, say nothing against it. ``recommended`` itself is not changed:
    a new entry is returned, or ``recommended`` as it is for a configuration without workers
    (or none)."""
    if not recommended or not recommended.config.get("num_workers"):
        return recommended
    before = (recommended.baseline or {}).get("persistent_workers", False)
    matters = epoch_start.matters is True
    after = True if matters else bool(before)
    changes = {k: v for k, v in recommended.changes.items() if k != "persistent_workers"}
    if after != bool(before):
        changes["persistent_workers"] = [before, after]
    expected = recommended.expected
    if matters:
        expected = ExpectedRate(samples_per_s=expected.samples_per_s,
                                stall_fraction=expected.stall_fraction,
                                epoch_saving_s=epoch_start.saving_s)
    return dataclasses.replace(
        recommended, config={**recommended.config, "persistent_workers": after},
        changes=changes, expected=expected)


def _later_epochs(result: TrialResult) -> list[Any]:
    """The epochs after the first that delivered a batch (``EpochTiming``); empty when fewer
    than 2 did."""
    if result.record is None:
        return []
    epochs = [e for e in result.record.consumer.epochs if e.first_batch_s is not None]
    return epochs[1:]


def _epoch_s(best: TrialResult) -> Optional[float]:
    """A full epoch of the measured loader at the best trial's steady rate, in seconds."""
    batches = best.record.loader.batches_per_epoch if best.record is not None else None
    if not batches or not best.batches_per_s:
        return None
    return batches / best.batches_per_s

