"""The online tuner's pure parts: the trial schedule and choice fed synthetic loop times (no
loader, no clock), the shared cheapest-within-noise rule, and the guards' cgroup reading."""

from __future__ import annotations

import pytest

from pipecheck.analysis.choice import (MIN_WORTHWHILE_GAIN, NOISE_BLOCKS, block_rate_noise,
                                       cheapest_within, loop_noise, tolerance)
from pipecheck.records import TuneTrial
from pipecheck.loader_settings import LoaderSettings
from pipecheck.tune.controller import (MAX_TIE_TOLERANCE, MIN_BUDGET_WINDOWS, TuneController,
                                       TuneLimits, block_batches, pin_line, warmup_for)

from pipecheck.tune.guards import cgroup_cpu_quota, memory_refusal
from pipecheck.tune.watch import RETUNE_DROP, SUSTAINED_WINDOWS, RateWatch
from pipecheck.tune.window import TrialWindow

LIMITS = TuneLimits(min_batches=8, min_seconds=0.0, warmup_batches=2, budget_s=1e9,
                    budget_fraction=1.0)
START = LoaderSettings(num_workers=0)


def drive(controller: TuneController, seconds_per_batch, batches: int = 10_000,
          samples: int = 4) -> list[LoaderSettings]:
    """Feed ``controller`` batches whose loop time is ``seconds_per_batch(settings)`` for the
    settings in effect (all wait: an input-bound loop) until it settles; the switches made."""
    switches = []
    for _ in range(batches):
        loop = seconds_per_batch(controller.current)
        answer = controller.observe(loop, loop, samples)
        if answer is not None:
            switches.append(answer)
        if controller.settled:
            break
    return switches


def test_climbs_workers_while_measured_faster_then_keeps_the_cheapest_tie():
    # 0 workers: 10 ms a batch; 2: 5 ms; 4: 4.95 ms (a tie with 2); prefetch changes nothing
    times = {0: 0.010, 2: 0.005, 4: 0.00495}
    controller = TuneController(START, LIMITS, max_workers=4, change_workers=True, cuda=False)
    switches = drive(controller, lambda s: times[s.num_workers])
    tried = [t.settings for t in controller.trials]
    assert [s.num_workers for s in tried[:3]] == [0, 2, 4]
    assert controller.settled and controller.status == "settled"
    assert controller.chosen == LoaderSettings(num_workers=2, prefetch_factor=2)
    assert switches[-1] == controller.chosen  # the last switch goes to the kept settings
    assert controller.speedup() == pytest.approx(2.0)
    assert controller.cost_s() == pytest.approx(0.0)  # no trial was slower than the start


def test_a_tie_while_the_loop_waits_climbs_once_more_a_second_tie_stops():
    # 8 would be faster, but 2 and then 4 gained nothing; each loop still waits (all wait)
    times = {0: 0.010, 1: 0.010, 2: 0.010, 4: 0.010, 8: 0.001}
    controller = TuneController(START, LIMITS, max_workers=8, change_workers=True, cuda=False)
    drive(controller, lambda s: times[s.num_workers])
    counts = {t.settings.num_workers for t in controller.trials}
    assert 4 in counts and 8 not in counts
    assert controller.chosen == START  # the tie goes to the cheaper start


def test_one_worker_is_tried_when_two_lose_to_none():
    # The climb starts at 2: with 2 slower than 0, 1 is the count left between them.
    times = {0: 0.010, 1: 0.007, 2: 0.012, 4: 0.001}
    controller = TuneController(START, LIMITS, max_workers=8, change_workers=True, cuda=False)
    drive(controller, lambda s: times[s.num_workers])
    assert [t.settings.num_workers for t in controller.trials][:3] == [0, 2, 1]
    assert 4 not in {t.settings.num_workers for t in controller.trials}
    assert controller.chosen.num_workers == 1


def test_one_worker_is_not_tried_when_two_win():
    times = {0: 0.010, 1: 0.001, 2: 0.005, 4: 0.005, 8: 0.005}
    controller = TuneController(START, LIMITS, max_workers=8, change_workers=True, cuda=False)
    drive(controller, lambda s: times[s.num_workers])
    assert 1 not in {t.settings.num_workers for t in controller.trials}


def test_a_tie_found_past_a_tie_is_kept_when_it_gains():
    times = {0: 0.010, 2: 0.010, 4: 0.005}  # 2 ties with 0, 4 doubles the rate
    controller = TuneController(START, LIMITS, max_workers=4, change_workers=True, cuda=False)
    drive(controller, lambda s: times[s.num_workers])
    assert controller.chosen.num_workers == 4


def test_a_slower_step_stops_the_climb():
    times = {0: 0.010, 1: 0.015, 2: 0.020, 4: 0.001}  # 2 clearly slower: 4 is never tried
    controller = TuneController(START, LIMITS, max_workers=8, change_workers=True, cuda=False)
    drive(controller, lambda s: times[s.num_workers])
    assert 4 not in {t.settings.num_workers for t in controller.trials}
    assert controller.chosen == START


def test_never_more_workers_than_the_budget_and_slower_trials_cost():
    controller = TuneController(START, LIMITS, max_workers=1, change_workers=True, cuda=False)
    drive(controller, lambda s: 0.010 if s.num_workers == 0 else 0.020)
    counts = {t.settings.num_workers for t in controller.trials}
    assert max(counts) <= 1
    assert controller.chosen == START
    # the 1-worker trials took 20 ms for batches the start takes 10 ms for
    slow = [t for t in controller.trials if t.settings.num_workers == 1]
    expected = sum(t.seconds / 2 for t in slow) + 2 * 0.010 * len(slow)  # and their warm-ups
    assert controller.cost_s() == pytest.approx(expected)


def test_iterable_without_split_tries_prefetch_only():
    start = LoaderSettings(num_workers=1, prefetch_factor=2)
    controller = TuneController(start, LIMITS, max_workers=8, change_workers=False, cuda=True)
    drive(controller, lambda s: 0.010)
    tried = [t.settings for t in controller.trials]
    assert {s.num_workers for s in tried} == {1}
    assert LoaderSettings(num_workers=1, prefetch_factor=4) in tried
    assert LoaderSettings(num_workers=1, prefetch_factor=2, pin_memory=True) in tried  # CUDA


def test_budget_ends_the_trials_with_the_best_measured():
    limits = TuneLimits(min_batches=8, min_seconds=0.0, warmup_batches=0, budget_s=1e9,
                        budget_fraction=0.1)
    controller = TuneController(START, limits, max_workers=8, change_workers=True,
                                cuda=False, epoch_batches=200)
    drive(controller, lambda s: 0.010 / (1 + s.num_workers))
    assert controller.settled
    spent = sum(t.batches for t in controller.trials)
    # No trial starts once 10% of 200 batches are spent and MIN_BUDGET_WINDOWS trials are
    # measured (a short epoch's 10% alone would end tuning before a second setting).
    # The trial in progress when the budget ends runs on to its minimum window.
    assert MIN_BUDGET_WINDOWS <= len(controller.trials) <= MIN_BUDGET_WINDOWS + 1
    # each a minimum window: NOISE_BLOCKS blocks, of a batch of every worker at least
    assert spent == sum(NOISE_BLOCKS * block_batches(limits, t.settings)
                        for t in controller.trials)
    assert all(t.batches >= limits.min_batches for t in controller.trials)
    assert controller.chosen.num_workers > 0


def test_noisy_windows_run_longer_but_a_clear_gap_is_no_tie():
    limits = TuneLimits(min_batches=8, min_seconds=0.0, warmup_batches=0, max_blocks=8,
                        budget_s=1e9, budget_fraction=1.0)
    controller = TuneController(START, limits, max_workers=2, change_workers=True, cuda=False)
    state = {"n": 0}

    def jittery(settings):
        state["n"] += 1
        base = 0.010 if settings.num_workers == 0 else 0.007
        return base * (2.0 if state["n"] % 4 == 0 else 1.0)  # every 4th batch doubles

    drive(controller, jittery)
    first = controller.trials[0]
    assert first.batches > limits.min_batches  # noise extended the window
    assert controller.chosen.num_workers == 2  # 30% faster: beyond MAX_TIE_TOLERANCE


def test_refused_settings_are_not_tried():
    controller = TuneController(START, LIMITS, max_workers=8, change_workers=True, cuda=False)
    answer = None
    while answer is None:
        answer = controller.observe(0.01, 0.01, 4)
    assert answer.num_workers == 2
    following = controller.refuse(answer, "num_workers=2 not tried: no memory")
    assert controller.max_workers == 1
    assert "no memory" in controller.notes[-1]
    assert following.num_workers <= 1


def test_restart_window_drops_the_partial_window():
    controller = TuneController(START, LIMITS, max_workers=2, change_workers=True, cuda=False)
    for _ in range(5):
        controller.observe(0.01, 0.01, 4)
    controller.restart_window()
    assert controller.trials == []
    assert controller._warmup_left == warmup_for(START, LIMITS)


def test_limits_are_checked():
    with pytest.raises(ValueError, match="min_batches"):
        TuneLimits(min_batches=1)
    with pytest.raises(ValueError, match="budget_fraction"):
        TuneLimits(budget_fraction=0.0)
    with pytest.raises(ValueError, match="budget_s"):
        TuneLimits(budget_s=0)


def test_pin_line_and_labels():
    assert pin_line(LoaderSettings(num_workers=2, prefetch_factor=4)) == \
        "DataLoader(..., num_workers=2, prefetch_factor=4)"
    assert pin_line(LoaderSettings(num_workers=0, pin_memory=True)) == \
        "DataLoader(..., num_workers=0, pin_memory=True)"
    assert warmup_for(LoaderSettings(num_workers=2, prefetch_factor=4), TuneLimits()) == 3


def test_shared_choice_rule():
    rates = {"a": 100.0, "b": 98.0, "c": 80.0}
    cost = {"a": (2,), "b": (1,), "c": (0,)}
    assert cheapest_within(100.0, list(rates), rates.get, cost.get, 0.03) == "b"
    assert cheapest_within(100.0, list(rates), rates.get, cost.get, 0.25) == "c"
    with pytest.raises(ValueError):
        cheapest_within(200.0, list(rates), rates.get, cost.get, 0.03)
    assert tolerance(None) == MIN_WORTHWHILE_GAIN and tolerance(0.2) == 0.2
    assert block_rate_noise([10.0, 10.0, 10.0]) == 0.0
    assert block_rate_noise([10.0]) is None
    assert loop_noise([0.1] * 8) == 0.0
    assert loop_noise([0.1] * 7) is None
    assert MAX_TIE_TOLERANCE < 0.5


def test_cgroup_quota_v2_and_v1(tmp_path):
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/job/step\n")
    root = tmp_path / "cg"
    (root / "job" / "step").mkdir(parents=True)
    (root / "job" / "cpu.max").write_text("150000 100000\n")
    (root / "job" / "step" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(str(tmp_path / "proc"), str(root)) == pytest.approx(1.5)
    (proc / "cgroup").write_text("4:cpu,cpuacct:/slurm\n")
    (root / "cpu,cpuacct" / "slurm").mkdir(parents=True)
    (root / "cpu,cpuacct" / "slurm" / "cpu.cfs_quota_us").write_text("300000\n")
    (root / "cpu,cpuacct" / "slurm" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(str(tmp_path / "proc"), str(root)) == pytest.approx(3.0)
    (proc / "cgroup").write_text("0::/\n")
    assert cgroup_cpu_quota(str(tmp_path / "proc"), str(tmp_path / "none")) is None


def test_memory_refusal():
    assert memory_refusal(4, 2**30, available=lambda: 4 * 2**30) is not None
    assert memory_refusal(1, 2**30, available=lambda: 4 * 2**30) is None
    assert memory_refusal(4, None) is None


def test_limits_from_the_run_environment():
    from pipecheck.tune.controller import limits_from_text

    assert limits_from_text("1") == TuneLimits()
    assert limits_from_text("min_batches=4,min_seconds=0.5") == TuneLimits(min_batches=4,
                                                                           min_seconds=0.5)
    with pytest.raises(ValueError, match="unknown tune limit"):
        limits_from_text("speed=3")
    with pytest.raises(ValueError):
        limits_from_text("min_batches=lots")


def test_a_budget_too_short_for_two_windows_keeps_the_start_and_says_why():
    limits = TuneLimits(min_batches=32, min_seconds=0.0, warmup_batches=0, budget_s=0.25)
    controller = TuneController(START, limits, max_workers=2, change_workers=True,
                                cuda=False, epoch_batches=100_000)
    drive(controller, lambda s: 0.01)
    assert controller.settled and controller.chosen == START
    assert "ended before two settings were measured" in controller.settle_reason()


def test_a_window_longer_than_an_epoch_still_ends():
    """Epochs shorter than a window (here 2 whole blocks an epoch, 4 needed): each epoch drops
    only its block in progress and its warm-up, so the window ends in its second epoch instead
    of restarting for ever."""
    controller = TuneController(START, LIMITS, max_workers=2, change_workers=True, cuda=False)
    epochs = 0
    while not controller.trials and epochs < 10:
        for _ in range(7):  # 2 warm-up batches, 2 whole blocks of 2, 1 batch left in progress
            controller.observe(0.01, 0.01, 4)
        controller.restart_window()
        epochs += 1
    assert epochs == 2
    (trial,) = controller.trials
    assert trial.settings == START and trial.batches == 8 and trial.samples == 32
    assert trial.seconds == pytest.approx(0.08)


def _wobbly(base: float, amplitude: float):
    """Loop times around ``base`` seconds: blocks of 2 batches alternate between ``base x (1 +
    amplitude)`` and ``base x (1 - amplitude)``, so every window measures about ``amplitude``
    of block noise."""
    state = {"n": 0}

    def seconds(_settings):
        state["n"] += 1
        return base * (1 + amplitude if (state["n"] - 1) // 2 % 2 == 0 else 1 - amplitude)
    return seconds


RACE = TuneLimits(min_batches=8, min_seconds=0.0, warmup_batches=0, max_blocks=12, budget_s=1e9,
                  budget_fraction=1.0)


def _race(start_amplitude: float, two_seconds: float, two_amplitude: float) -> TuneController:
    """0 workers (10 ms a batch) against 2 workers, each wobbling by its amplitude."""
    controller = TuneController(START, RACE, max_workers=2, change_workers=True, cuda=False)
    wobble = {0: _wobbly(0.010, start_amplitude), 1: _wobbly(0.010, start_amplitude),
              2: _wobbly(two_seconds, two_amplitude)}
    drive(controller, lambda s: wobble[min(s.num_workers, 2)](s))
    return controller


def test_a_clear_gap_ends_a_noisy_window_at_its_minimum():
    """Windows as noisy as 6 % still end at NOISE_BLOCKS blocks when the race is clear (the
    start within MAX_TIE_TOLERANCE; 2 workers twice as fast): ranking them needs no more."""
    controller = _race(0.06, 0.005, 0.06)
    start, two = controller.trials[:2]
    assert 0.03 < start.noise_fraction <= MAX_TIE_TOLERANCE
    assert start.batches == two.batches == RACE.min_batches
    assert controller.chosen.num_workers == 2


def test_a_close_race_runs_its_window_until_it_is_as_precise_as_the_reference():
    """3 % apart: a noisier trial (8 % swings against the start's 5 %) is measured on until
    its noise is within the start's, and no longer (more batches cannot decide the race)."""
    start, two = _race(0.05, 0.0097, 0.08).trials[:2]
    assert start.batches == RACE.min_batches
    assert RACE.min_batches < two.batches < RACE.max_blocks * 2
    assert two.noise_fraction <= start.noise_fraction


def test_a_loop_that_barely_waits_is_not_tuned_further():
    """1 % of the loop waits: removing all of it gains 1 %, under MIN_WORTHWHILE_GAIN, so no
    setting is tried after the start (the loop cannot outrun its step)."""
    controller = TuneController(START, LIMITS, max_workers=8, change_workers=True, cuda=False)
    for _ in range(1000):
        if controller.observe(0.0001, 0.010, 4) is not None or controller.settled:
            break
    assert controller.settled and controller.chosen == START
    assert [t.settings for t in controller.trials] == [START]


def test_the_start_leaves_out_the_runs_first_steps_by_default():
    controller = TuneController(START, TuneLimits(min_batches=8, min_seconds=0.0),
                                max_workers=2, change_workers=True, cuda=False)
    for seconds in [1.5, 0.5, 0.3] + [0.01] * 100:  # lazy initialization, then steady
        controller.observe(seconds, seconds, 4)
        if controller.trials:
            break
    assert controller.trials[0].samples_per_s == pytest.approx(400.0)
    assert controller.tuning_batches() == 3 + 8
    assert controller.trials[0].warmup_batches == 3


def test_a_start_with_more_workers_than_needed_halves_them_while_they_tie():
    """The user's num_workers=8 where 2 do as well: no count above 8 is allowed, so the count
    halves while each half ties with the fastest (4, 2), stops at the first that is slower
    (1), and the cheapest tie is kept."""
    start = LoaderSettings(num_workers=8, prefetch_factor=2)
    times = {8: 0.0050, 4: 0.0050, 2: 0.00505, 1: 0.010}
    controller = TuneController(start, LIMITS, max_workers=8, change_workers=True, cuda=False)
    drive(controller, lambda s: times[s.num_workers])
    counts = [t.settings.num_workers for t in controller.trials]
    assert counts[:4] == [8, 4, 2, 1]
    assert 0 not in counts
    assert controller.chosen == LoaderSettings(num_workers=2, prefetch_factor=2)


def test_a_start_at_zero_workers_never_descends():
    times = {0: 0.010, 2: 0.005, 4: 0.006}
    controller = TuneController(START, LIMITS, max_workers=8, change_workers=True, cuda=False)
    drive(controller, lambda s: times[s.num_workers])
    counts = [t.settings.num_workers for t in controller.trials]
    assert 1 not in counts and counts[:3] == [0, 2, 4]
    assert controller.chosen.num_workers == 2


def _settle(controller: TuneController, seconds_per_batch) -> None:
    drive(controller, seconds_per_batch)
    assert controller.settled


def test_a_sustained_drop_starts_a_new_round_once_an_epoch():
    """Settled on 2 workers (5 ms a batch); then every setting gets 3x slower (a neighbour
    arrived) and 4 workers now help: one new round starts from the kept settings, with the
    dropped window as its start's trial, and settles on 4 workers; a second drop in the same
    epoch starts nothing, the next epoch may."""
    times = {0: 0.010, 2: 0.005, 4: 0.005}
    slow = {0: 0.030, 2: 0.015, 4: 0.006}
    controller = TuneController(START, LIMITS, max_workers=4, change_workers=True, cuda=False)
    _settle(controller, lambda s: times[s.num_workers])
    kept = controller.chosen
    assert kept.num_workers == 2 and controller.watching and controller.retunes == 0
    before = len(controller.trials)
    switches = []
    for _ in range(2000):
        loop = slow[controller.current.num_workers]
        answer = controller.observe(loop, loop, 4)
        if answer is not None:
            switches.append(answer)
        if controller.retunes and controller.settled:
            break
    assert controller.retunes == 1 and controller.settled
    assert controller.chosen.num_workers == 4
    assert switches and switches[-1] == controller.chosen
    first_of_round = controller.trials[before]
    assert first_of_round.settings == kept
    assert first_of_round.samples_per_s == pytest.approx(4 / 0.015)
    assert "re-tuned" in controller.notes[-1] and "fell from 800 to 267" in controller.notes[-1]
    assert controller.speedup() == pytest.approx(0.015 / 0.006)  # over the round's start
    # a second drop within the same epoch: watched, not re-tuned
    for _ in range(200):
        assert controller.observe(0.05, 0.05, 4) is None
    assert controller.retunes == 1
    controller.new_epoch()
    for _ in range(200):
        if controller.observe(0.05, 0.05, 4) is not None or not controller.settled:
            break
    assert controller.retunes == 2


def test_a_drop_within_the_margin_keeps_the_settings():
    times = {0: 0.010, 2: 0.005, 4: 0.005}
    controller = TuneController(START, LIMITS, max_workers=4, change_workers=True, cuda=False)
    _settle(controller, lambda s: times[s.num_workers])
    for _ in range(500):  # 15 % slower: under RETUNE_DROP
        assert controller.observe(0.0, 0.005 / 0.85, 4) is None
    assert controller.retunes == 0 and controller.settled


def _noisy_reference() -> TuneTrial:
    """A kept trial of 2 workers at 1,000 samples/s whose short window was too noisy (75 %)
    to resolve a 20 % drop."""
    return TuneTrial(settings=LoaderSettings(num_workers=2), batches=32, samples=128,
                     seconds=0.128, samples_per_s=1000.0, stall_fraction=0.0,
                     noise_fraction=0.75)


def _watch_windows(watch: RateWatch, seconds_per_batch: float, windows: int):
    """Feed ``windows`` whole watch windows (4 blocks of 2 batches of 4 samples); the first
    dropped trial returned, or ``None``."""
    for _ in range(windows * 8):
        dropped = watch.add(0.0, seconds_per_batch, 4)
        if dropped is not None:
            return dropped
    return None


def test_a_noisy_kept_trial_is_replaced_by_a_settled_window_so_a_later_drop_shows():
    watch = RateWatch(_noisy_reference(), lambda: TrialWindow(2, 0.0), warmup=0)
    assert _watch_windows(watch, 0.004, 1) is None  # steady at 1,000 samples/s: the reference
    assert watch.reference.samples_per_s == pytest.approx(1000.0)
    assert watch.reference.noise_fraction < RETUNE_DROP
    dropped = _watch_windows(watch, 0.008, SUSTAINED_WINDOWS)  # half as fast
    assert dropped is not None and dropped.samples_per_s == pytest.approx(500.0)
    assert "fell from 1,000 to 500" in watch.drop_line(dropped)


def test_against_a_noisy_kept_trial_a_drop_from_the_start_is_not_called():
    """The same halving with no settled window before it: the kept trial's own doubt covers
    it, so nothing is re-tuned (the honest limit), and the slow windows become the reference
    only while they are the less noisy measurement."""
    watch = RateWatch(_noisy_reference(), lambda: TrialWindow(2, 0.0), warmup=0)
    assert _watch_windows(watch, 0.008, 3) is None
    assert watch.reference.samples_per_s == pytest.approx(500.0)


def test_a_reference_that_resolves_a_drop_is_never_replaced():
    """A slow drift (10 % a window, each under RETUNE_DROP) cannot lower a reference that was
    precise enough: the drop adds up and is called."""
    reference = TuneTrial(settings=LoaderSettings(num_workers=2), batches=64, samples=256,
                          seconds=0.256, samples_per_s=1000.0, stall_fraction=0.0,
                          noise_fraction=0.02)
    watch = RateWatch(reference, lambda: TrialWindow(2, 0.0), warmup=0)
    dropped = None
    for step in range(1, 6):
        dropped = dropped or _watch_windows(watch, 0.004 / 0.9 ** step, 1)
        assert watch.reference is reference
    assert dropped is not None


def test_the_starts_own_warm_up_is_no_cost():
    controller = TuneController(START, TuneLimits(min_batches=8, min_seconds=0.0),
                                max_workers=2, change_workers=True, cuda=False)
    first = iter([2.0, 1.0, 0.5])
    drive(controller, lambda s: next(first, 0.010) if s.num_workers == 0 else 0.010)
    assert controller.cost_s() == pytest.approx(0.0)
