"""pipecheck never makes instances or subclasses of the user's classes, never runs their class
hooks on objects of its own, and keeps none of their objects alive: real DataLoaders (0 workers,
fork and spawn), wrapped, measured and dropped."""

from __future__ import annotations

import collections.abc
import copy
import gc
import io
import operator
import pickle
import weakref

import pytest
import torch
from torch.utils.data import DataLoader

import pipecheck
import user_classes as uc

WORKERS = [(0, None), (2, "fork"), pytest.param(2, "spawn", marks=pytest.mark.slow)]


def _options(workers, context):
    return {"num_workers": workers, "multiprocessing_context": context}


def _reset():
    uc.CREATED.clear()
    uc.DELETED.clear()
    uc.ReleasingLoader.released.clear()


@pytest.mark.parametrize("workers,context", WORKERS)
def test_no_instance_or_subclass_of_the_users_classes_is_ever_made(workers, context):
    _reset()
    registered, meta = len(uc.SUBCLASS_REGISTRY), len(uc.META_REGISTRY)
    dataset = uc.Squares(16)
    loader = uc.ReleasingLoader(dataset, batch_size=4, worker_init_fn=require_user_class_fn(),
                                **_options(workers, context))
    wrapped = pipecheck.wrap(loader, host=False, stacks=False)
    for _ in range(2):
        assert [b.flatten().tolist() for b in wrapped][1] == [16, 25, 36, 49]
    report = wrapped.report()
    assert report.producer.probe == ("workers" if workers else "main-process")
    # Timed inside: every batch in the workers; in the main process every batch of the epochs
    # it timed (fast batches: one epoch in FAST_BATCH_EPOCH_STRIDE, decided by their speed).
    probed = 2 if workers else wrapped.record().probed_epochs
    assert sum(w.batches for w in report.producer.workers) == 4 * probed
    wrapped.close()
    del wrapped
    gc.collect()
    # In this process: the user's two objects, nothing else of their classes; no class hook ran.
    assert uc.CREATED == {"Squares": 1, "ReleasingLoader": 1}
    assert uc.DELETED == {} and uc.ReleasingLoader.released == []
    assert len(uc.SUBCLASS_REGISTRY) == registered and len(uc.META_REGISTRY) == meta
    assert uc.Squares.__subclasses__() == [] and uc.ReleasingLoader.__subclasses__() == []
    assert type(loader) is uc.ReleasingLoader and type(loader.dataset) is uc.Squares


def require_user_class_fn():
    return uc.require_user_class


@pytest.mark.parametrize("workers,context", WORKERS)
def test_a_dataset_whose_del_closes_its_file_outlives_the_wrapper(tmp_path, workers, context):
    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(32)))
    _reset()
    dataset = uc.ClosingDataset(str(path))
    for _ in range(3):  # a validation loader rebuilt and wrapped each epoch
        wrapped = pipecheck.wrap(DataLoader(dataset, batch_size=8, **_options(workers, context)),
                                 host=False)
        assert [b.tolist() for b in wrapped][0] == list(range(8))
        wrapped.report()
        del wrapped
        gc.collect()
    assert dataset[3] == 3 and len(dataset) == 32 and not dataset.file.closed
    assert uc.DELETED.get("ClosingDataset", 0) == 0


def test_a_loader_subclass_with_del_runs_it_once_when_the_user_drops_it():
    _reset()
    loader = uc.ReleasingLoader(uc.Squares(8), batch_size=4)
    wrapped = pipecheck.wrap(loader, host=False)
    list(wrapped)
    wrapped.report()
    ref = weakref.ref(loader)
    del wrapped, loader
    gc.collect()
    assert ref() is None and uc.ReleasingLoader.released == ["released"]


@pytest.mark.parametrize("workers,context", WORKERS)
def test_slotted_forwarding_and_metaclass_datasets_load_as_unwrapped(workers, context):
    def outcome(loader):
        try:
            return [b.tolist() for b in loader]
        except Exception as err:  # the user's own bug shows the same either way
            return type(err)

    for dataset in (uc.SlottedDataset(12), uc.ForwardingDataset(list(range(12))),
                    uc.MetaDataset(12)):
        plain = outcome(DataLoader(dataset, batch_size=4, **_options(workers, context)))
        wrapped = pipecheck.wrap(DataLoader(dataset, batch_size=4, **_options(workers, context)),
                                 host=False)
        assert outcome(wrapped) == plain, type(dataset).__name__
        if isinstance(plain, list):
            report = wrapped.report()
            assert report.producer.probe == ("workers" if workers else "main-process")
            assert sum(w.batches for w in report.producer.workers) == 3
        wrapped.close()


@pytest.mark.parametrize("save", [False, True])
@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork")])
def test_nothing_of_the_users_outlives_their_last_reference(tmp_path, save, workers, context):
    dataset = uc.Squares(16)
    loader = DataLoader(dataset, batch_size=4, persistent_workers=bool(workers),
                        **_options(workers, context))
    wrapped = pipecheck.wrap(loader, save=tmp_path / "run.json" if save else None)
    iterator = iter(wrapped)
    next(iterator)  # dropped mid-epoch, as `break` does
    torch_iterator = iterator._iterator
    for _ in wrapped:
        pass
    refs = [weakref.ref(x) for x in (dataset, loader, torch_iterator, wrapped)]
    del dataset, loader, torch_iterator, wrapped, iterator
    gc.collect()
    assert [r() for r in refs] == [None] * 4


def test_pickle_deepcopy_and_torch_save_act_on_the_loader():
    loader = DataLoader(uc.Squares(8), batch_size=4)
    wrapped = pipecheck.wrap(loader, host=False)
    list(wrapped)
    assert pickle.dumps(wrapped) == pickle.dumps(loader)
    restored = pickle.loads(pickle.dumps(wrapped))
    assert type(restored) is DataLoader and [b.tolist() for b in restored] == \
        [b.tolist() for b in loader]
    deep, shallow = copy.deepcopy(wrapped), copy.copy(wrapped)
    assert type(deep) is type(shallow) is DataLoader and deep.dataset is not loader.dataset
    assert shallow.dataset is loader.dataset
    buffer = io.BytesIO()
    torch.save(wrapped, buffer)
    buffer.seek(0)
    assert type(torch.load(buffer, weights_only=False)) is DataLoader
    wrapped.close()


def test_an_unpicklable_loader_fails_wrapped_with_its_own_exception():
    loader = DataLoader(list(range(4)), collate_fn=lambda batch: batch)
    wrapped = pipecheck.wrap(loader, host=False)
    errors = []
    for target in (loader, wrapped):
        with pytest.raises(Exception) as caught:
            pickle.dumps(target)
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1]
    wrapped.close()


def test_protocols_and_class_checks_follow_the_loader(tmp_path):
    import webdataset as wds

    loader = DataLoader(uc.Squares(8), batch_size=4)
    wrapped = pipecheck.wrap(loader, host=False)
    assert isinstance(wrapped, DataLoader) and isinstance(wrapped, collections.abc.Sized)
    assert isinstance(wrapped, pipecheck.WrappedLoader) and len(wrapped) == 2
    assert wrapped.__class__ is DataLoader and type(wrapped) is not DataLoader
    wrapped.close()

    with wds.TarWriter(str(tmp_path / "s.tar")) as writer:
        for i in range(4):
            writer.write({"__key__": f"k{i}", "txt": "x"})
    web = wds.WebLoader(wds.WebDataset(str(tmp_path / "s.tar"), shardshuffle=False),
                        batch_size=None)
    wrapped_web = pipecheck.wrap(web, host=False)
    for check in (lambda x: isinstance(x, collections.abc.Sized), lambda x: hasattr(x, "__len__"),
                  lambda x: operator.length_hint(x, -7), lambda x: isinstance(x, DataLoader),
                  lambda x: isinstance(x, wds.WebLoader), bool):
        assert check(wrapped_web) == check(web)
    with pytest.raises(TypeError):
        len(wrapped_web)
    assert len(list(wrapped_web)) == 4
    wrapped_web.close()


def _storage(obj) -> list[type]:
    """What ``obj`` holds as the garbage collector sees it: its attribute values while they are
    inline (CPython 3.11+), one ``dict`` once something asked for its ``__dict__``."""
    return [type(value) for value in gc.get_referents(obj) if value is not type(obj)]


@pytest.mark.parametrize("tune", [False, True])
@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork")])
def test_the_users_objects_keep_their_attribute_storage_as_unwrapped(workers, context, tune):
    # Materializing an instance's __dict__ slows every later attribute load of its methods
    # (3.11-3.12): a pure-Python dataset ran 11-13% slower for the rest of the process.
    def storages(wrapping: bool) -> list[list[type]]:
        dataset = uc.TokenTable(64)
        loader = DataLoader(dataset, batch_size=4, shuffle=True, **_options(workers, context))
        runs = pipecheck.wrap(loader, tune=tune) if wrapping else loader
        for _ in range(2):
            for _ in runs:
                pass
        if wrapping:
            runs.report()
            runs.close()
        return [_storage(x) for x in (dataset, dataset.vocab, loader, loader.batch_sampler,
                                      loader.sampler)]

    assert storages(True) == storages(False)
