"""The recommended configuration is the cheapest measured one within the noise of the fastest:
ties go to in-order delivery, fewer workers, a smaller prefetch_factor."""

from __future__ import annotations

from pipecheck.render.sections.stress import tie_note
from pipecheck.stress.choice import cheapest_within_noise
from pipecheck.stress.search import MIN_WORTHWHILE_GAIN
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.trial import TrialResult
from report_factory import stress_of


def _trial(rate, workers, factor=2, in_order=True, batch_size=None):
    config = LoaderSettings(workers, factor if workers else None, in_order=in_order,
                         batch_size=batch_size)
    return TrialResult(config, rate, rate / 8, 0.1, 0.5, 50, 1.0)


def test_ties_go_to_in_order_then_fewer_workers_then_smaller_prefetch():
    best = _trial(1000.0, 4, in_order=False)
    trials = [_trial(400.0, 0), best, _trial(990.0, 4), _trial(985.0, 3, factor=4),
              _trial(980.0, 3), _trial(960.0, 2)]  # 4% below: not a tie at the 3% floor
    chosen, tolerance = cheapest_within_noise(best, trials)
    assert tolerance == MIN_WORTHWHILE_GAIN  # no record: no measured noise
    assert chosen.config == LoaderSettings(3, 2, in_order=True)


def test_the_best_stands_when_nothing_cheaper_ties_and_other_batch_sizes_never_do():
    best = _trial(1000.0, 2)
    trials = [best, _trial(999.0, 1, batch_size=64), _trial(900.0, 1), _trial(10.0, 0)]
    chosen, _ = cheapest_within_noise(best, trials)
    assert chosen is best


def test_a_cheaper_tie_is_explained_next_to_the_recommendation():
    stress = {"best": {"config": {"num_workers": 4, "in_order": False}},
              "recommended": {"config": {"num_workers": 4, "in_order": True},
                              "tolerance_fraction": 0.03}}
    assert tie_note(stress_of(stress)) == (" (within 3.0% of the best, a tie: ties go to "
                                           "in-order delivery, fewer workers, a smaller "
                                           "prefetch_factor)")
    stress["recommended"]["config"] = {"num_workers": 4, "in_order": False,
                                       "persistent_workers": True}
    assert tie_note(stress_of(stress)) == ""  # the best itself, persistent workers added
