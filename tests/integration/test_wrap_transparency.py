"""The wrapper is invisible: whatever a user calls on it behaves as on the loader that yields
the batches (real DataLoaders, real fork and spawn workers)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import psutil
import pytest
import torch
from torch.utils.data import DataLoader

import pipecheck
from transparency_datasets import (BadPairs, CheckingLoader, CountingLoader, FrozenNumbers,
                                   LongerThanItSays, LoudStream, NestedBatches, NoSubclasses, Numbers,
                                   OwnIterLoader, Slotted, nested_collate, none_collate,
                                   opaque_collate, record_worker_dataset_class)
from paths import SUPPORT

# spawn (a fresh interpreter per worker, ~2 s) runs with the slow tests
WORKERS = [(0, None), (2, "fork"), pytest.param(2, "spawn", marks=pytest.mark.slow)]


def _skipping_errors(loader) -> tuple[list, list[str]]:
    """What a loop that skips bad batches (``except ValueError: continue``) gets."""
    got, errors = [], []
    iterator = iter(loader)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return got, errors
        except ValueError as err:
            errors.append(str(err).splitlines()[-1])
            continue
        got.append(batch.tolist())


@pytest.mark.parametrize("workers,context", WORKERS)
def test_an_exception_does_not_end_the_epoch(workers, context):
    def make():
        return DataLoader(BadPairs(), batch_size=2, num_workers=workers,
                          multiprocessing_context=context)

    plain = _skipping_errors(make())
    wrapped = pipecheck.wrap(make(), host=False)
    assert _skipping_errors(wrapped) == plain
    assert plain[0] == [[0, 1], [4, 5], [6, 7], [8, 9]]
    report = wrapped.report()
    assert report.consumer.batches == 4 and report.consumer.errors == 1
    assert report.consumer.status == "complete"  # the loop went on to the end
    assert "bad sample" in (report.consumer.error or "")
    wrapped.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_iter_starts_work_when_torch_does(workers):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = pipecheck.wrap(DataLoader(LoudStream(), num_workers=0), host=False)
        iterator = iter(wrapped)
        assert any("LoudStream iter()" in str(w.message) for w in caught)
    assert [b.item() for b in iterator] == [0, 1, 2, 3]
    wrapped.close()

    failing = pipecheck.wrap(DataLoader(LoudStream(fail=True), num_workers=workers), host=False)
    plain = DataLoader(LoudStream(fail=True), num_workers=workers)
    if workers == 0:
        with pytest.raises(RuntimeError, match="cannot open the stream"):
            iter(failing)
        with pytest.raises(RuntimeError, match="cannot open the stream"):
            iter(plain)
    else:  # torch starts the workers at iter(): the wrapped loader does too
        before = len(psutil.Process().children())
        iterator = iter(failing)
        assert len(psutil.Process().children()) >= before + 2
        del iterator
    failing.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_the_counters_cannot_read_never_raise(workers):
    loaders = [(NestedBatches(), nested_collate, 3), (Numbers(6), opaque_collate, 3),
               (Numbers(6), none_collate, 3)]
    for dataset, collate, batches in loaders:
        wrapped = pipecheck.wrap(DataLoader(dataset, batch_size=2, collate_fn=collate,
                                            num_workers=workers), host=False)
        got = list(wrapped)
        assert len(got) == batches
        report = wrapped.report()
        assert report.consumer.batches == batches and report.consumer.samples >= batches
        wrapped.close()


def test_a_user_sample_counter_that_raises_counts_one():
    def bad_counter(batch):
        raise KeyError("no such field")

    wrapped = pipecheck.wrap(DataLoader(Numbers(6), batch_size=2), samples=bad_counter,
                             tokens=bad_counter, host=False)
    assert len(list(wrapped)) == 3
    report = wrapped.report()
    assert report.consumer.samples == 3 and not report.consumer.tokens
    wrapped.close()


def test_attribute_writes_reach_the_loader_or_raise_as_torch_raises():
    loader = DataLoader(Numbers(), batch_size=4)
    wrapped = pipecheck.wrap(loader, host=False)
    with pytest.raises(ValueError) as wrapped_error:
        wrapped.batch_size = 8
    with pytest.raises(ValueError) as plain_error:
        DataLoader(Numbers(), batch_size=4).batch_size = 8
    assert str(wrapped_error.value) == str(plain_error.value)
    wrapped.pin_memory_device = "cpu"  # allowed by torch: it reaches the iterated loader
    assert wrapped.pin_memory_device == "cpu"
    wrapped.my_tag = "x"
    assert wrapped.my_tag == "x"
    del wrapped.my_tag
    assert not hasattr(wrapped, "my_tag")
    assert not hasattr(loader, "my_tag")  # the user's loader object is never modified
    assert wrapped.dataset is loader.dataset and wrapped.collate_fn is loader.collate_fn
    wrapped.close()


@pytest.mark.parametrize("workers,context", WORKERS)
def test_dataset_class_checks_hold_in_the_loader_and_the_workers(workers, context):
    loader = CheckingLoader(Numbers(), batch_size=4, num_workers=workers,
                            multiprocessing_context=context,
                            worker_init_fn=record_worker_dataset_class if workers else None)
    wrapped = pipecheck.wrap(loader, host=False)
    assert [b.tolist() for b in wrapped] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    report = wrapped.report()
    assert report.producer.probe == ("workers" if workers else "main-process")
    assert sum(w.samples for w in wrapped.record().workers) == 12
    wrapped.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_state_dict_is_the_iterated_loaders_and_resumes_exactly(workers):
    def make():
        return CountingLoader(Numbers(), batch_size=2, num_workers=workers)

    def resumed(wrap: bool) -> list:
        first = pipecheck.wrap(make(), host=False) if wrap else make()
        iterator = iter(first)
        for _ in range(3):
            next(iterator)
        state = first.state_dict()
        assert state == {"yielded": 3}
        del iterator
        second = pipecheck.wrap(make(), host=False) if wrap else make()
        second.load_state_dict(state)
        return [b.tolist() for b in second]

    assert resumed(wrap=True) == resumed(wrap=False) == [[6, 7], [8, 9], [10, 11]]


def test_a_loader_that_builds_its_own_iterator_is_measured_from_the_consumer_side():
    wrapped = pipecheck.wrap(OwnIterLoader(Numbers(4), batch_size=1), host=False)
    assert [b.tolist() for b in wrapped] == [[0], [1], [2], [3]]
    record = wrapped.record()
    assert record.worker_probe == "none" and "_get_iterator" in record.probes_off["workers"]
    report = wrapped.report()
    assert report.consumer.batches == 4
    assert "_get_iterator" in report.producer.capacity_basis
    wrapped.close()


def test_nothing_is_printed_at_exit_with_a_live_partly_consumed_iterator(tmp_path):
    script = tmp_path / "partial.py"
    script.write_text(textwrap.dedent("""
        import pipecheck
        from torch.utils.data import DataLoader
        from transparency_datasets import Numbers

        for workers in (0, 2):
            wrapped = pipecheck.wrap(DataLoader(Numbers(), batch_size=2, num_workers=workers))
            iterator = iter(wrapped)
            next(iterator)
            globals()[f"kept_{workers}"] = (wrapped, iterator)  # alive at interpreter exit
        print("done")
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(SUPPORT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    assert result.stderr == ""


def test_break_ends_the_epoch_at_once():
    wrapped = pipecheck.wrap(DataLoader(Numbers(), batch_size=2), host=False)
    for index, _ in enumerate(wrapped):
        if index == 1:
            break
    epochs = wrapped.record().consumer.epochs
    assert [e.ended for e in epochs] == ["break"] and epochs[0].batches == 2
    wrapped.close()


def test_len_and_repeat_epochs_follow_the_iterated_loader():
    loader = DataLoader(Numbers(10), batch_size=3, drop_last=True)
    wrapped = pipecheck.wrap(loader, host=False)
    assert len(wrapped) == len(loader) == 3
    assert [len(list(wrapped)) for _ in range(2)] == [3, 3]
    assert torch.equal(next(iter(wrapped)), torch.tensor([0, 1, 2]))
    wrapped.close()


@pytest.mark.parametrize("dataset_class", [FrozenNumbers, NoSubclasses, Slotted])
@pytest.mark.parametrize("workers", [0, 2])
def test_unusual_dataset_classes_are_timed_without_changing_batches(dataset_class, workers):
    def make():
        return DataLoader(dataset_class(8), batch_size=4, num_workers=workers)

    wrapped = pipecheck.wrap(make(), host=False)
    assert [b.tolist() for b in wrapped] == [b.tolist() for b in make()]
    record = wrapped.record()
    assert sum(w.samples for w in record.workers) == 8
    wrapped.close()


def test_pipecheck_reading_the_length_arms_no_torch_warning():
    def warnings_of(loader, call_len: bool) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if call_len:
                len(loader)
            list(loader)
        return [str(w.message) for w in caught if "IterableDataset" in str(w.message)]

    plain, wrapped = DataLoader(LongerThanItSays()), pipecheck.wrap(DataLoader(
        LongerThanItSays()), host=False)
    assert warnings_of(plain, call_len=False) == warnings_of(wrapped, call_len=False) == []
    plain, wrapped = DataLoader(LongerThanItSays()), pipecheck.wrap(DataLoader(
        LongerThanItSays()), host=False)
    assert warnings_of(plain, call_len=True) and warnings_of(wrapped, call_len=True)
    wrapped.close()


def test_the_epoch_iterator_answers_for_torchs_iterator():
    loader = DataLoader(Numbers(12), batch_size=4, num_workers=2)
    wrapped = pipecheck.wrap(loader, host=False)
    iterator = iter(wrapped)
    assert len(iterator) == len(iter(loader)) == 3
    assert len(iterator._workers) == 2  # torch's own iterator state, as code that joins reads it
    assert [b.tolist() for b in iterator] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(AttributeError):
        iterator.no_such_attribute
    wrapped.close()
