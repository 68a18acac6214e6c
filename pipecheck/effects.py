"""One arithmetic for the effect of recommended changes, and one table of words for a
capacity / demand ratio.

Every figure of time saved comes from :func:`saved_s_per_step` (seconds saved per step going
from one batch rate to another) times a number of steps: :data:`STEPS_PER_SAVING` steps, or
one epoch's batches (the loader's ``len()``). So a saving per epoch and per 10,000 steps always
agree: 10,000 steps at N batches an epoch are 10,000 / N epochs.

A model's recommendations are cumulative (each one's expected rate assumes the changes above
it, :mod:`pipecheck.recommend`); :func:`change_effects` splits them into what each change adds
on its own (``change_*``) and what every change up to it gives together (``total_*``, the
figures the JSON's ``expected`` holds). The per-change figures of a chain add up to the total.

:data:`CAPACITY_BANDS` is the one table that words a capacity / demand ratio; every sentence
that words one (the report's capacity line, the analysis' notes) takes it from
:func:`capacity_words`. Plain data and arithmetic: imports only :mod:`pipecheck.records`'s
types (for typing).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from pipecheck.records import Recommendation

STEPS_PER_SAVING = 10_000
"""Steps (batches) over which a recommendation's wall-time saving is stated."""

CHAINED_SETTINGS = frozenset({"num_workers", "torch_num_threads", "prefetch_factor",
                              "persistent_workers", "pin_memory"})
"""Settings the what-if model's rules propose in a chain (:mod:`pipecheck.recommend`): each
expected figure assumes the earlier ones of the chain. Other recommendations (``in_order``,
the sharding changes) are each predicted from the measured run alone."""


def saved_s_per_step(from_batches_per_s: Optional[float],
                     to_batches_per_s: Optional[float]) -> Optional[float]:
    """Wall seconds saved per step (one batch) going from ``from_batches_per_s`` to
    ``to_batches_per_s``: ``1 / from - 1 / to`` (negative when slower); ``None`` when either
    rate is unknown or not positive."""
    if not from_batches_per_s or not to_batches_per_s or from_batches_per_s <= 0 \
            or to_batches_per_s <= 0:
        return None
    return 1.0 / from_batches_per_s - 1.0 / to_batches_per_s


def saved_s(per_step_s: Optional[float], steps: Optional[int]) -> Optional[float]:
    """Seconds saved over ``steps`` steps at ``per_step_s`` seconds saved per step; ``None``
    when either is unknown (``steps`` 0 or ``None``: the loader has no ``len()``)."""
    if per_step_s is None or not steps:
        return None
    return per_step_s * steps


@dataclasses.dataclass(frozen=True)
class ChangeEffect:
    """A recommendation's effect on its own and with the changes above it.

    ``scope``: ``"chain"`` (a model rule: ``change_*`` is this change's own share, ``total_*``
    every change of the chain up to it), ``"alone"`` (predicted from the measured run alone:
    the two are equal) or ``"together"`` (a stress sweep's recommended configuration: every
    change together, not split; ``change_*`` is ``None``). Rates in samples/s, savings in
    seconds of wall time; ``None`` where not predicted."""

    scope: str
    change_gain_samples_per_s: Optional[float]
    total_gain_samples_per_s: Optional[float]
    change_saved_s_per_epoch: Optional[float]
    total_saved_s_per_epoch: Optional[float]
    change_saved_s_per_10k_steps: Optional[float]
    total_saved_s_per_10k_steps: Optional[float]

    @property
    def after_others(self) -> bool:
        """Whether changes above this one count in its totals (a chain's later change)."""
        return self.scope == "chain" and (
            self.change_gain_samples_per_s != self.total_gain_samples_per_s
            or self.change_saved_s_per_10k_steps != self.total_saved_s_per_10k_steps)


def _minus(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a - b


def _kept(stored: Optional[float], derived: Optional[float]) -> Optional[float]:
    return stored if stored is not None else derived


def change_effects(recommendations: Sequence["Recommendation"],
                   measured_samples_per_s: Optional[float],
                   measured_batches_per_s: Optional[float],
                   batches_per_epoch: Optional[int],
                   together: bool = False) -> list[ChangeEffect]:
    """Each recommendation's :class:`ChangeEffect`, in order.

    Totals are the report's own figures (``expected.gain_samples_per_s``,
    ``saved_s_per_epoch``, ``saved_s_per_10k_steps``: what the JSON holds), derived here with
    :func:`saved_s_per_step` from the expected and measured rates (``measured_*``, the run's
    whole-run rates) only where a report lacks them. A chained change's own share is its total
    minus the total of the previous chained change that has figures (0 for the first), so the
    shares of a chain add up to its last total. ``together``: every figure is one
    configuration's (a stress sweep), not split per change."""
    effects = []
    previous: tuple[Optional[float], ...] = (0.0, 0.0, 0.0)
    for rec in recommendations:
        expected = rec.expected
        total_step = saved_s_per_step(measured_batches_per_s, expected.batches_per_s)
        total = (
            _kept(expected.gain_samples_per_s,
                  _minus(expected.samples_per_s, measured_samples_per_s)),
            _kept(expected.saved_s_per_epoch, saved_s(total_step, batches_per_epoch)),
            _kept(expected.saved_s_per_10k_steps, saved_s(total_step, STEPS_PER_SAVING)),
        )
        own: tuple[Optional[float], ...]
        if together:
            scope, own = "together", (None, None, None)
        elif rec.setting in CHAINED_SETTINGS:
            scope = "chain"
            own = tuple(_minus(t, p) for t, p in zip(total, previous))
            if expected.samples_per_s is not None:
                previous = total
        else:
            scope, own = "alone", total
        effects.append(ChangeEffect(scope, own[0], total[0], own[1], total[1], own[2], total[2]))
    return effects


CAPACITY_BANDS: tuple[tuple[float, str], ...] = (
    (1.0, "the loader cannot keep up with the step"),
    (1.2, "the loader just keeps up with the step, with little headroom"),
    (2.0, "the loader keeps up with the step"),
    (float("inf"), "the loader keeps up with the step with room to spare"),
)
"""Words for a capacity / demand ratio, by band: the first whose bound the ratio (rounded to
the two decimals shown) is below. Below 1 only does a ratio say the loader cannot keep up."""


def capacity_words(ratio: float) -> str:
    """The words of :data:`CAPACITY_BANDS` for ``ratio`` (capacity / demand) as shown,
    rounded to two decimals: 1.57x and 1.61x read alike."""
    shown = round(ratio, 2)
    return next(words for bound, words in CAPACITY_BANDS if shown < bound)
