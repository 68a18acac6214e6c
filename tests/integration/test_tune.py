"""wrap(tune=True) on real DataLoaders with real fork and spawn workers: the loop gets the
untuned samples in the untuned order across a mid-epoch switch and the next epoch, the global
RNG is left as untuned, an iterable dataset that does not split by worker never gets more
workers, a failure inside tuning leaves the run going, a sustained drop after settling starts a
new round (the order still kept), and the report's tune section renders."""

from __future__ import annotations

import gc
import json
import os
import time

import psutil
import pytest
import torch
from torch.utils.data import DataLoader

import pipecheck
from pipecheck.analysis.choice import NOISE_BLOCKS
from pipecheck.tune import TuneLimits
from pipecheck.tune.tuner import Tuner
from tune_datasets import EagerShuffle, FlakyPidSquares, NoSplitStream, PidSquares, SlowingSquares
from wrap_datasets import RangeStream

SHORT = TuneLimits(min_batches=4, min_seconds=0.0, warmup_batches=1, budget_fraction=1.0)
"""Trial windows of a few batches (blocks of a batch, and of a batch of every worker), so a
200-batch epoch holds the whole schedule."""


def map_loader(seeded: bool, size: int = 800, **kw) -> DataLoader:
    generator = torch.Generator().manual_seed(7) if seeded else None
    return DataLoader(PidSquares(size, sleep_s=0.002), batch_size=4, shuffle=True,
                      generator=generator, **kw)


def run_epochs(loader, epochs: int) -> tuple[list[list[int]], list[set[int]]]:
    """Each epoch's sample ids in order, and the pids that loaded each epoch's samples."""
    order, pids = [], []
    for _ in range(epochs):
        ids, seen = [], set()
        for x, pid in loader:
            ids += x.tolist()
            seen |= set(pid.tolist())
        order.append(ids)
        pids.append(seen)
    return order, pids


@pytest.mark.parametrize("seeded,workers,context", [
    (True, 0, None),
    # 1 worker (test_later_epochs... keeps a worker start in the default run), the twins, and
    # spawn: the slow run
    pytest.param(False, 1, "fork", marks=pytest.mark.slow),
    pytest.param(False, 0, None, marks=pytest.mark.slow),
    pytest.param(True, 1, "fork", marks=pytest.mark.slow),
    pytest.param(True, 1, "spawn", marks=pytest.mark.slow),
    pytest.param(False, 1, "spawn", marks=pytest.mark.slow)])
def test_mid_epoch_switch_keeps_samples_and_order(seeded, workers, context):
    kw = dict(num_workers=workers, multiprocessing_context=context)
    torch.manual_seed(3)
    plain, _ = run_epochs(map_loader(seeded, **kw), 2)
    plain_rng = torch.rand(3).tolist()

    torch.manual_seed(3)
    loader = map_loader(seeded, **kw)
    wrapped = pipecheck.wrap(loader, tune=SHORT, host=False)
    tuned, pids = run_epochs(wrapped, 2)
    assert tuned == plain  # the same samples, in the same order, in both epochs
    assert plain[0] != plain[1]  # the shuffle really differs per epoch
    assert torch.rand(3).tolist() == plain_rng  # the global RNG is where untuned leaves it
    section = wrapped.report().tune
    # settled within the two epochs; on a loaded host a drop after settling may start a new
    # round (retunes) that the second epoch's end finds still running
    assert section is not None and (section.status == "settled" or section.retunes), section
    assert [t.settings.num_workers for t in section.trials][:2] == [workers, 2]
    # the first epoch was loaded by the start's processes and the trial's workers: the
    # switch happened inside it (from 1 worker, the old worker's batches were drained first)
    if workers == 0:
        assert os.getpid() in pids[0] and len(pids[0]) > 1
    else:
        assert len(pids[0]) >= 3
        if 0 not in [t.settings.num_workers for t in section.trials]:  # no descent to 0
            assert os.getpid() not in pids[0]
    # the user's loader reads as the user set it
    assert (loader.num_workers, loader.pin_memory) == (workers, False)
    wrapped.close()


def test_a_sampler_that_draws_at_iter_keeps_the_untuned_order_in_every_epoch():
    """torch's build calls iter() on the index sampler once without workers and twice with
    them; a sampler that draws its permutation in iter() (here without automatic batching,
    where it is the index sampler) would shuffle later epochs differently under trial
    settings if the build's passes were not matched to the start's."""
    def loader():  # 10 ms of sleep an item: workers are faster however busy the machine
        # (at 6 ms, one loaded run in about thirty measured 2 workers no faster than none:
        # each one-item batch's hand-over then took about as long as the item)
        return DataLoader(PidSquares(120, sleep_s=0.010), batch_size=None,
                          sampler=EagerShuffle(120, seed=5))

    def epochs(source):
        order, pids = [], []
        for _ in range(3):
            batches = list(source)
            order.append([int(x) for x, _ in batches])
            pids.append({int(pid) for _, pid in batches})
        return order, pids

    plain, _ = epochs(loader())
    wrapped = pipecheck.wrap(loader(), tune=SHORT, host=False)
    tuned, pids = epochs(wrapped)
    assert tuned == plain
    assert plain[1] != plain[2]
    # a later epoch was built with workers (from the start's 0): its passes were matched
    assert os.getpid() not in pids[1] or os.getpid() not in pids[2], wrapped.report().tune
    wrapped.close()


def test_tuned_settings_apply_to_later_epochs_through_substitutes():
    loader = map_loader(True)
    wrapped = pipecheck.wrap(loader, tune=SHORT, host=False)
    _, pids = run_epochs(wrapped, 2)
    section = wrapped.report().tune
    assert section.status == "settled"
    if section.chosen.num_workers > 0:
        assert os.getpid() not in pids[1]  # the second epoch ran on the kept workers
    else:
        assert pids[1] == {os.getpid()}
    assert loader.num_workers == 0
    wrapped.close()


def test_iterable_that_does_not_split_never_gets_more_workers():
    loader = DataLoader(NoSplitStream(60, sleep_s=0.001), batch_size=4, num_workers=1)
    plain = [sorted(x.tolist()) for x, _ in loader]
    wrapped = pipecheck.wrap(loader, tune=SHORT, host=False)
    for epoch in range(4):
        ids, seen = [], set()
        for x, pid in wrapped:
            ids.append(sorted(x.tolist()))
            seen |= set(pid.tolist())
        assert ids == plain, epoch  # no sample repeated by a second worker
        assert len(seen) == 1 and os.getpid() not in seen  # one worker, always
    section = wrapped.report().tune
    assert {t.settings.num_workers for t in section.trials} == {1}
    assert any("only prefetch_factor tried" in note for note in section.notes)
    wrapped.close()


def test_iterable_without_split_and_no_workers_is_skipped():
    wrapped = pipecheck.wrap(DataLoader(NoSplitStream(8), batch_size=4), tune=True, host=False)
    assert [x.tolist() for x, _ in wrapped] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    section = wrapped.report().tune
    assert section.status == "skipped" and "get_worker_info" in section.reason
    wrapped.close()


def test_iterable_that_splits_changes_workers_at_epoch_starts_only():
    loader = DataLoader(RangeStream(64, sleep_s=0.002), batch_size=4)
    wrapped = pipecheck.wrap(loader, tune=SHORT, host=False)
    for _ in range(4):
        assert sorted(sum((x.flatten().tolist() for x in wrapped), [])) == list(range(64))
    section = wrapped.report().tune
    counts = [t.settings.num_workers for t in section.trials]
    assert counts[0] == 0 and 2 in counts, section
    assert loader.num_workers == 0
    wrapped.close()


def test_failure_inside_tuning_turns_it_off_and_the_run_goes_on(monkeypatch):
    def broken(self, *args):
        raise RuntimeError("injected build failure")

    monkeypatch.setattr(Tuner, "build", broken)
    torch.manual_seed(3)
    plain, _ = run_epochs(map_loader(True, size=200), 2)
    wrapped = pipecheck.wrap(map_loader(True, size=200), tune=SHORT, host=False)
    tuned, pids = run_epochs(wrapped, 2)
    assert tuned == plain
    assert pids[1] == {os.getpid()}  # later epochs: the user's own settings
    section = wrapped.report().tune
    assert section.status == "off" and "injected build failure" in section.reason
    wrapped.close()


def test_report_tune_section_renders_and_round_trips(tmp_path):
    wrapped = pipecheck.wrap(map_loader(True), tune=SHORT, host=False)
    run_epochs(wrapped, 1)
    report = wrapped.report()
    data = json.loads(report.to_json())
    assert data["tune"]["status"] == "settled"
    assert data["tune"]["pin_line"].startswith("DataLoader(..., num_workers=")
    assert len(data["tune"]["trials"]) >= 2
    path = report.save(tmp_path / "run.json")
    assert pipecheck.load(path).tune == report.tune
    text = report.render(width=120)
    assert "Online tuning" in text and report.tune.pin_line in text
    from pipecheck.render.markdown import MarkdownRenderer
    from pipecheck.render.html import HtmlRenderer

    assert report.tune.pin_line in MarkdownRenderer().render(report)
    assert "Online tuning" in HtmlRenderer().render(report)
    wrapped.close()


def test_tune_argument_is_checked():
    with pytest.raises(TypeError, match="tune must be"):
        pipecheck.wrap(map_loader(True), tune="yes")
    wrapped = pipecheck.wrap(map_loader(True), host=False)
    assert wrapped.report().tune is None  # off by default
    wrapped.close()


def loop_skipping_errors(loader, epochs: int) -> list:
    """Each epoch's batches as sample-id lists, and ``"error"`` where a batch raised (the loop
    goes on with the same iterator, as torch allows)."""
    out = []
    for _ in range(epochs):
        iterator, seen = iter(loader), []
        while True:
            try:
                x, _ = next(iterator)
            except StopIteration:
                break
            except ValueError:
                seen.append("error")
                continue
            seen.append(x.tolist())
        out.append(seen)
    return out


@pytest.mark.slow
def test_a_batch_that_raises_passes_through_and_the_order_holds():
    def make():
        return DataLoader(FlakyPidSquares(400, bad=137, sleep_s=0.002), batch_size=4,
                          shuffle=True, generator=torch.Generator().manual_seed(11),
                          num_workers=1)

    plain = loop_skipping_errors(make(), 2)
    assert plain[0].count("error") == 1
    wrapped = pipecheck.wrap(make(), tune=SHORT, host=False)
    assert loop_skipping_errors(wrapped, 2) == plain
    section = wrapped.report().tune
    assert section.status == "settled" or section.retunes, section  # a drop may start a round
    wrapped.close()


def test_without_automatic_batching_the_sampler_is_continued():
    def make():
        return DataLoader(PidSquares(160, sleep_s=0.004), batch_size=None, shuffle=True,
                          generator=torch.Generator().manual_seed(2))

    plain = [int(x) for x, _ in make()]
    loader = make()
    wrapped = pipecheck.wrap(loader, tune=SHORT, host=False)
    tuned, pids = [], set()
    for x, pid in wrapped:
        tuned.append(int(x))
        pids.add(int(pid))
        assert (loader.num_workers, loader.prefetch_factor) == (0, None)  # mid-tuning too
    assert tuned == plain
    assert len(pids) > 1  # switched to workers inside the epoch
    wrapped.close()


@pytest.mark.parametrize("seeded", [True, False], ids=["generator", "global-rng"])
def test_a_switch_whose_new_workers_prime_past_the_epoch_end_keeps_the_shuffle(
        monkeypatch, seeded):
    """Priming the new workers can run the sampler to its end inside the switch's build, and
    the sampler's last step draws from the shared generator: that draw is the untuned run's
    too, so nothing of the build may undo or add a draw (the next epoch's shuffle)."""
    monkeypatch.setattr(Tuner, "batches_needed", lambda self, settings: 0)  # switch anywhere

    def loader():
        generator = torch.Generator().manual_seed(11) if seeded else None
        return DataLoader(PidSquares(60, sleep_s=0.001), batch_size=4, shuffle=True,
                          generator=generator)

    torch.manual_seed(5)
    plain, _ = run_epochs(loader(), 3)
    plain_rng = torch.rand(2).tolist()
    torch.manual_seed(5)
    # The start's window is the epoch's first 12 of 15 batches: the switch to 2 workers comes
    # with 3 batches left, and priming them (2 x prefetch_factor 2 = 4) runs the sampler out.
    limits = TuneLimits(min_batches=12, min_seconds=0.0, warmup_batches=0,
                        max_blocks=NOISE_BLOCKS, budget_fraction=1.0)
    wrapped = pipecheck.wrap(loader(), tune=limits, host=False)
    tuned, pids = run_epochs(wrapped, 3)
    assert tuned == plain
    assert torch.rand(2).tolist() == plain_rng
    assert os.getpid() in pids[0] and len(pids[0]) > 1  # the switch came inside epoch 0
    wrapped.close()


@pytest.mark.parametrize("workers,by_count", [
    (0, True), (1, False),
    pytest.param(1, True, marks=pytest.mark.slow),
    pytest.param(0, False, marks=pytest.mark.slow)])
def test_later_epochs_keep_their_shuffle_however_the_loop_ends_each_epoch(workers, by_count):
    """A loop that ends each epoch by count (Lightning) never calls next() past the last batch,
    so with 0 workers the sampler's last step, a draw from the shared generator, never runs,
    while workers prefetch past the end and run it: the trials' and the kept settings' epochs
    must take that step exactly when the start settings would."""
    def loader():
        return DataLoader(PidSquares(48, sleep_s=0.001), batch_size=4, shuffle=True,
                          num_workers=workers, generator=torch.Generator().manual_seed(2))

    def run(source, epochs):
        order = []
        for _ in range(epochs):
            if by_count:  # range first: zip stops without a next() past the last batch
                order.append([x.tolist() for _, (x, _) in zip(range(len(source)), source)])
            else:
                order.append([x.tolist() for x, _ in source])
        return order

    plain = run(loader(), 5)
    limits = TuneLimits(min_batches=4, min_seconds=0.0, warmup_batches=0,
                        max_blocks=NOISE_BLOCKS, budget_fraction=1.0)
    wrapped = pipecheck.wrap(loader(), tune=limits, host=False)
    assert run(wrapped, 5) == plain
    section = wrapped.report().tune
    assert len({t.settings for t in section.trials}) >= 2, section
    wrapped.close()


class _Checkpointed(DataLoader):
    """A user's stateful loader: ``state_dict`` / ``load_state_dict`` as torchdata's."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_a_stateful_loader_of_an_unknown_layout_is_not_tuned():
    loader = _Checkpointed(PidSquares(16), batch_size=4, shuffle=True)
    wrapped = pipecheck.wrap(loader, tune=SHORT, host=False)
    assert sorted(sum((x.tolist() for x, _ in wrapped), [])) == list(range(16))
    section = wrapped.report().tune
    assert section.status == "skipped" and "state_dict" in section.reason
    wrapped.close()


CHECKPOINT_AT = (1, 37, 80, 100)
"""Batches of the first 100-batch epoch after which a checkpoint is taken: the first batch,
mid-trials (after in-epoch switches), later, and the epoch's end."""


def _stateful_run(stateful, workers, context, tune, resume=None):
    """Two epochs of a shuffling StatefulDataLoader over PidSquares(400) (100 batches an
    epoch): each epoch's sample ids, and a deep copy of ``state_dict()`` after each batch count
    in :data:`CHECKPOINT_AT` of the first epoch; ``resume``: a checkpoint loaded first."""
    import copy

    loader = stateful.StatefulDataLoader(
        PidSquares(400, sleep_s=0.001), batch_size=4, shuffle=True, num_workers=workers,
        generator=torch.Generator().manual_seed(7), multiprocessing_context=context)
    if resume is not None:
        loader.load_state_dict(copy.deepcopy(resume))
    source = pipecheck.wrap(loader, tune=SHORT, host=False) if tune else loader
    order, states = [], {}
    for epoch in range(2):
        ids = []
        for i, (x, _) in enumerate(source):
            ids += x.tolist()
            if resume is None and epoch == 0 and i + 1 in CHECKPOINT_AT:
                states[i + 1] = copy.deepcopy(loader.state_dict())
        order.append(ids)
    if tune:
        states["section"] = source.report().tune
        source.close()
    return order, states


def _equal_states(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            _equal_states(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("workers,context", [
    (0, None),
    pytest.param(2, "fork", marks=pytest.mark.slow),
    pytest.param(1, "spawn", marks=pytest.mark.slow)])
def test_a_stateful_dataloader_checkpoint_taken_while_tuning_resumes_exactly(workers, context):
    """torchdata's StatefulDataLoader, tuned: the loop's samples are the untuned run's in
    both epochs, and each checkpoint taken during the trials (after in-epoch switches to other
    worker counts) is the one the untuned loader writes at that batch, so it resumes exactly,
    in an untuned run and in a tuned one."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    plain, plain_states = _stateful_run(stateful, workers, context, tune=False)
    tuned, tuned_states = _stateful_run(stateful, workers, context, tune=True)
    assert tuned == plain
    section = tuned_states["section"]
    assert {t.settings.num_workers for t in section.trials} != {workers}, section
    assert any("StatefulDataLoader" in note for note in section.notes)
    for at in CHECKPOINT_AT:
        assert _equal_states(tuned_states[at], plain_states[at]), at
    for at in ((37,) if workers == 0 else (37, 100)):  # the epoch's end: the slow runs
        expected, _ = _stateful_run(stateful, workers, context, tune=False,
                                    resume=plain_states[at])
        assert expected[0] == plain[0][at * 4:] or at == 100
        for tune in (False, True):
            resumed, _ = _stateful_run(stateful, workers, context, tune=tune,
                                       resume=tuned_states[at])
            assert resumed == expected, (at, tune)


def test_a_stateful_dataloader_over_an_iterable_dataset_is_not_tuned():
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    loader = stateful.StatefulDataLoader(RangeStream(16), batch_size=4)
    wrapped = pipecheck.wrap(loader, tune=SHORT, host=False)
    assert [x.tolist() for x in wrapped] == [
        x.tolist() for x in stateful.StatefulDataLoader(RangeStream(16), batch_size=4)]
    section = wrapped.report().tune
    assert section.status == "skipped" and "IterableDataset" in section.reason
    wrapped.close()


@pytest.mark.slow  # about 10 s beside two busy processes
def test_a_drop_after_settling_re_tunes_and_keeps_the_order(tmp_path):
    """Items get 15x slower after a whole epoch at the settled settings (a neighbour arrived):
    the kept settings' rate falls far below what they measured for two whole windows, a new
    round of trials starts from them (a mid-epoch switch again), and the loop still gets the
    untuned order. The settled epoch comes first because a fast loader's tuning window may be
    too noisy to resolve a 20 % drop, and then the watch's settled windows are the
    reference."""
    flag = str(tmp_path / "slow")

    def loader() -> DataLoader:
        # 15x slower: a clear drop even for 8 workers on 2 busy cores, whose settled rate
        # is CPU-bound well under the 2 ms items' sleep-bound one
        return DataLoader(SlowingSquares(400, sleep_s=0.002, slow_s=0.030, flag=flag),
                          batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5))

    epochs = 6
    plain, _ = run_epochs(loader(), epochs)
    wrapped = pipecheck.wrap(loader(), tune=SHORT, host=False)
    tuned = []
    for _ in range(epochs):
        began_settled = wrapped.report().tune.status == "settled"
        tuned.append([int(i) for x, _pid in wrapped for i in x.tolist()])
        if began_settled and not os.path.exists(flag):
            open(flag, "w").close()
    assert tuned == plain
    section = wrapped.report().tune
    assert section.retunes >= 1, section
    assert any(n.startswith("re-tuned: ") and "lower" in n for n in section.notes), section.notes
    wrapped.close()


def _gone(pids: set[int], timeout_s: float = 10.0) -> bool:
    """Whether every process in ``pids`` has exited (and been reaped) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_persistent_workers_loader_is_tuned_and_keeps_order_and_workers(context):
    """persistent_workers=True: trials switch inside the first epoch and the start's worker
    stops once its batches are handed out; tuning settles well inside that 300-batch epoch, and
    the iterator of its end is the one the next epoch resets (its workers load on); the loop
    gets the untuned order in every epoch and the global RNG is left as untuned; no trial's
    workers outlive their use."""
    def loader() -> DataLoader:
        return map_loader(True, size=1200, num_workers=1, persistent_workers=True,
                          multiprocessing_context=context)

    epochs = 3
    torch.manual_seed(3)
    plain, _ = run_epochs(loader(), epochs)
    plain_rng = torch.rand(3).tolist()
    torch.manual_seed(3)
    user = loader()
    wrapped = pipecheck.wrap(user, tune=SHORT, host=False)
    tuned, pids = [], []
    for epoch in range(epochs):
        ids, batch_pids = [], []
        for x, pid in wrapped:
            ids += x.tolist()
            batch_pids.append(int(pid[0]))
            if epoch == 0 and len(batch_pids) == 60:  # the start's worker: stopped by now
                assert batch_pids[0] not in batch_pids[-10:]
                assert _gone({batch_pids[0]}), batch_pids
        tuned.append(ids)
        pids.append(batch_pids)
        section = wrapped.report().tune
        # settled; on a loaded host a drop after settling may start a new round (retunes)
        assert section.status == "settled" or section.retunes, (epoch, section)
    assert tuned == plain
    assert torch.rand(3).tolist() == plain_rng
    assert {t.settings.num_workers for t in section.trials} - {1}, section
    if section.chosen is not None and section.chosen.num_workers:
        # an epoch's last workers load the next epoch: its iterator was kept and reset
        assert all(pids[e][-1] in pids[e + 1] for e in range(epochs - 1)), section
    # every worker that loaded an earlier epoch and not the last one has stopped
    last = set(pids[-1]) - {os.getpid()}
    assert _gone(set().union(*map(set, pids[:-1])) - last - {os.getpid()})
    assert user.persistent_workers and user.num_workers == 1
    wrapped.close()
    del wrapped, user
    gc.collect()
    assert _gone(last)


def test_a_persistent_iterable_loader_changes_workers_at_epoch_starts():
    loader = DataLoader(RangeStream(64, sleep_s=0.002), batch_size=4, num_workers=1,
                        persistent_workers=True)
    wrapped = pipecheck.wrap(loader, tune=SHORT, host=False)
    for _ in range(5):
        batches = list(wrapped)
        assert sorted(sum((x.flatten().tolist() for x in batches), [])) == list(range(64))
    section = wrapped.report().tune
    assert section.status in ("settled", "tuning"), section
    assert len({t.settings.num_workers for t in section.trials}) >= 2, section
    wrapped.close()


def test_a_persistent_workers_loader_left_mid_epoch_keeps_the_untuned_order():
    """The loop leaves the first epoch after 60 batches (trials switched inside it): the
    untuned loader resets its kept iterator for the next epoch, the tuned one builds anew
    without drawing from the loader's generator, so both later epochs keep the untuned
    order."""
    def loader() -> DataLoader:
        return map_loader(True, size=400, num_workers=1, persistent_workers=True)

    def epochs(source) -> list[list[int]]:
        first = []
        for x, _pid in source:
            first += x.tolist()
            if len(first) >= 240:
                break
        return [first] + run_epochs(source, 2)[0]

    plain = epochs(loader())
    wrapped = pipecheck.wrap(loader(), tune=SHORT, host=False)
    assert epochs(wrapped) == plain
    assert len({t.settings.num_workers for t in wrapped.report().tune.trials}) >= 2
    wrapped.close()


def _one_persistent_worker() -> DataLoader:
    return map_loader(True, size=1200, num_workers=1, persistent_workers=True)


def _settled_on_other_workers():
    """A one-worker persistent loader, its tuned wrapper settled in one epoch on another worker
    count (the test skips otherwise), that epoch's samples and pids."""
    user = _one_persistent_worker()
    wrapped = pipecheck.wrap(user, tune=SHORT, host=False)
    tuned, pids = run_epochs(wrapped, 1)
    section = wrapped.report().tune
    assert section.status == "settled", section
    if section.chosen.num_workers == 1:
        pytest.skip("tuning kept the loader's own worker count: nothing to give back")
    return user, wrapped, tuned, pids


def test_a_persistent_workers_loader_gets_its_own_settings_back_when_tuning_stops(monkeypatch):
    """Tuning settles on other settings, then fails (turned off): the next epoch runs on the
    loader's own single worker, in the untuned order; after close(), the loader iterated
    directly builds with its own settings too, and the tuned workers have stopped."""
    plain, _ = run_epochs(_one_persistent_worker(), 3)
    user, wrapped, tuned, pids = _settled_on_other_workers()
    tuned_workers = pids[0] - {os.getpid()}

    def broken(self, *args):
        raise RuntimeError("injected observe failure")

    monkeypatch.setattr(Tuner, "observe", broken)
    later, later_pids = run_epochs(wrapped, 2)
    assert tuned + later == plain
    assert wrapped.report().tune.status == "off"
    assert len(later_pids[1] - {os.getpid()}) == 1  # the loader's own single worker
    wrapped.close()
    assert _gone(tuned_workers - later_pids[1])
    direct = {int(p) for _x, pid in user for p in pid.tolist()}
    assert len(direct) == 1 and direct == later_pids[1]  # its kept worker, reset


def test_a_closed_wrapper_leaves_a_persistent_loader_its_own_settings():
    """close() while the kept settings are in use: the tuned workers stop, and the loader
    iterated directly afterwards builds with its own single worker."""
    user, wrapped, _, pids = _settled_on_other_workers()
    wrapped.close()
    direct = {int(p) for _x, pid in user for p in pid.tolist()}
    assert len(direct) == 1 and os.getpid() not in direct
    assert _gone(pids[0] - direct - {os.getpid()})
