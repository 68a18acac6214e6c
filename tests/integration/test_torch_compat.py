"""The private parts of torch.utils.data that pipecheck relies on (pipecheck/_torch_compat.py),
checked against the installed torch: if a torch release moves them, these fail first."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from pipecheck import _torch_compat as compat
from transparency_datasets import CountingLoader, Numbers


class Tens(Numbers):
    def __getitem__(self, index: int) -> int:
        return 10 * index


def test_the_installed_torch_builds_iterators_through_get_iterator():
    assert compat.HAS_ITERATOR_HOOK, f"torch {torch.__version__} has no DataLoader._get_iterator"


def test_the_installed_torch_builds_fetchers_through_create_fetcher():
    assert compat.HAS_FETCHER_HOOK, f"torch {torch.__version__} has no create_fetcher"


def test_substitutes_reach_the_iterator_only_and_the_loader_keeps_its_class():
    loader = CountingLoader(Numbers(8), batch_size=4)
    seen = []

    def substitute(name, value):
        seen.append((name, value))
        return lambda batch: torch.tensor([10 * x for x in batch])

    substitutes = compat.register(loader, ("collate_fn",), substitute, always=True)
    assert type(loader) is CountingLoader  # no subclass, no copy
    assert [b.tolist() for b in loader] == [[0, 10, 20, 30], [40, 50, 60, 70]]
    assert seen == [("collate_fn", loader.collate_fn)]  # the current value, at build time
    assert substitutes.calls == 1 and "collate_fn" in vars(loader)
    compat.unregister(loader, substitutes)
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # as it was


def test_registration_leaves_other_loaders_alone_and_arms_one_build():
    measured, plain = DataLoader(Numbers(8), batch_size=4), DataLoader(Numbers(8), batch_size=4)
    substitutes = compat.register(measured, ("collate_fn",),
                                  lambda name, value: lambda batch: torch.tensor(batch) * 10,
                                  always=False)
    assert [b.tolist() for b in measured] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # not armed
    substitutes.arm()
    assert [b.tolist() for b in measured] == [[0, 10, 20, 30], [40, 50, 60, 70]]
    assert [b.tolist() for b in measured] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # one build only
    assert [b.tolist() for b in plain] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert substitutes.calls == 1


def test_the_identity_map_never_calls_the_keys_hash_or_eq_and_lets_them_go():
    import gc

    class Touchy:
        def __hash__(self):
            raise AssertionError("hashed")

        def __eq__(self, other):
            raise AssertionError("compared")

    from pipecheck._identity import IdentityWeakMap

    registry = IdentityWeakMap()
    key = Touchy()
    registry.set(key, 1)
    assert registry.get(key) == 1 and registry.get(Touchy()) is None and len(registry) == 1
    del key
    gc.collect()
    assert len(registry) == 0


@pytest.mark.parametrize("workers,in_order,expected", [
    (2, True, None), (1, True, "fewer than 2 workers"), (0, True, "_task_info"),
    (2, False, "in_order=False")])
def test_head_of_line_state_is_where_pipecheck_reads_it(workers, in_order, expected):
    kwargs = {"in_order": in_order} if "in_order" in DataLoader.__init__.__code__.co_varnames \
        else {}
    if not in_order and not kwargs:
        pytest.skip("this torch has no in_order")
    iterator = iter(DataLoader(Numbers(16), batch_size=2, num_workers=workers, **kwargs))
    reason = compat.head_of_line_unsupported(iterator)
    if expected is None:
        assert reason is None
        info, head = compat.awaited_batch(iterator)
        assert isinstance(info, dict) and head == 0
    else:
        assert expected in reason
    del iterator


def test_the_main_process_fetcher_is_where_sampling_points_it():
    from pipecheck._torch_compat import main_process_fetcher, set_fetcher_timed
    from pipecheck.probes.workers import WorkerProbe

    probe = WorkerProbe(0, run_start=0.0)
    try:
        loader = probe.instrument(DataLoader(list(range(8)), batch_size=2))
        iterator = iter(loader)
        fetcher = main_process_fetcher(iterator)
        assert fetcher is not None and fetcher.dataset is loader.dataset
        instrumented = fetcher.collate_fn
        assert instrumented.collate_fn is loader.collate_fn
        set_fetcher_timed(fetcher, False, loader.collate_fn)  # torch's own fetch, untimed
        assert fetcher.collate_fn is loader.collate_fn
        assert type(fetcher) is compat.TimedMapFetcher  # never re-classed (slower reads after)
        accumulator = instrumented.timer
        timed_before = accumulator.timed
        assert next(iterator).tolist() == [0, 1]
        assert accumulator.timed == timed_before  # untimed: nothing committed
        set_fetcher_timed(fetcher, True, instrumented)
        assert main_process_fetcher(iterator) is fetcher
        assert next(iterator).tolist() == [2, 3]
        assert accumulator.timed == timed_before + 1
        # A loader pipecheck does not time gets torch's own fetcher.
        assert main_process_fetcher(iter(DataLoader(list(range(8))))) is None
        assert main_process_fetcher(iter(DataLoader(list(range(8)), num_workers=1))) is None
        assert main_process_fetcher(iter([1, 2])) is None
    finally:
        probe.close()


def test_a_subclass_whose_get_iterator_calls_its_bases_is_substituted_once():
    class Overriding(DataLoader):
        def _get_iterator(self):
            return super()._get_iterator()

    plain = DataLoader(Numbers(4), batch_size=2)
    compat.register(plain, ("collate_fn",), lambda name, value: value, always=True)
    list(plain)  # DataLoader._get_iterator itself is hooked now too
    loader = Overriding(Numbers(8), batch_size=4)
    wrapped_values = []

    def substitute(name, value):
        wrapped_values.append(value)
        return lambda batch: torch.tensor(batch) * 10

    substitutes = compat.register(loader, ("collate_fn",), substitute, always=True)
    assert [b.tolist() for b in loader] == [[0, 10, 20, 30], [40, 50, 60, 70]]
    assert substitutes.calls == 1 and wrapped_values == [loader.collate_fn]


@pytest.mark.parametrize("workers", [0, 1])
def test_torchdata_checkpoints_have_the_layout_pipecheck_writes(workers):
    """Every key ``_torchdata_compat`` writes is in the installed torchdata, and a checkpoint
    it builds from a live iterator's figures is the one the loader writes itself (the batch
    sampler's state: a fresh pass over it taken as far)."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from pipecheck import _torchdata_compat as torchdata_compat

    keys = torchdata_compat.state_keys()
    assert keys is not None
    loader = stateful.StatefulDataLoader(Numbers(12), batch_size=2, num_workers=workers)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    assert torchdata_compat.live_iterator(loader) is iterator
    sampler_pass = iter(loader.batch_sampler)
    for _ in range(3):
        next(sampler_pass)
    built = torchdata_compat.untuned_state(
        keys, num_workers=workers, handed=3,
        index_sampler_state=torchdata_compat.serialize(loader.batch_sampler),
        sampler_iter_state=torchdata_compat.serialize(sampler_pass),
        seeds=torchdata_compat.iterator_seeds(iterator), finished=False)
    assert built == loader.state_dict()
    del iterator
