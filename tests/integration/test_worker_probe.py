"""Tests for pipecheck.probes.workers (and its shared ring) with real DataLoaders and workers."""

from __future__ import annotations

import gc
import os
import pickle
import signal
import struct
import subprocess
import threading
import time

import pytest
import torch
from torch.utils.data import DataLoader, SequentialSampler

from helpers_datasets import (
    FailingDataset,
    GetitemsDataset,
    HangingDataset,
    IndexDataset,
    NoisyDataset,
    PlainRange,
    ShardedRange,
    SleepDataset,
    SlowCollate,
    SlowEndRange,
    UnsizedDataset,
    require_exact_dataset_class,
    shard_plain_range,
)
from pipecheck import _owned
from pipecheck.probes import _ring
from pipecheck.probes.workers import WorkerProbe, WorkerProbeUnsupported


@pytest.fixture
def make_probe():
    """Build probes that are closed at the end of the test even if it fails."""
    probes = []

    def make(num_workers: int, **kwargs) -> WorkerProbe:
        probe = WorkerProbe(num_workers, run_start=time.perf_counter(), **kwargs)
        probes.append(probe)
        return probe

    yield make
    for probe in probes:
        probe.close()


def assert_same_batches(expected, actual) -> None:
    assert len(expected) == len(actual)
    for left, right in zip(expected, actual):
        assert_same_value(left, right)


def assert_same_value(left, right) -> None:
    assert type(left) is type(right)
    if isinstance(left, torch.Tensor):
        assert left.dtype == right.dtype and torch.equal(left, right)
    elif isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            assert_same_value(left[key], right[key])
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right)
        for a, b in zip(left, right):
            assert_same_value(a, b)
    else:
        assert left == right


# ---------------------------------------------------------------------------------------------
# Fetch timing and exact counts under every start method
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("context", ["fork", "spawn", pytest.param("forkserver", marks=pytest.mark.slow)])
def test_fetch_time_and_exact_counts_per_worker(context, make_probe):
    sleep_s, samples, batch_size = 0.02, 24, 4
    loader = DataLoader(
        SleepDataset(samples, sleep_s),
        batch_size=batch_size,
        num_workers=2,
        multiprocessing_context=context,
    )
    probe = make_probe(2)
    batches = list(probe.instrument(loader))
    assert len(batches) == samples // batch_size

    records = probe.record()
    assert [r.id for r in records] == [0, 1]
    assert sum(r.batches for r in records) == samples // batch_size
    assert sum(r.samples for r in records) == samples
    for record in records:
        assert record.samples == record.batches * batch_size
        assert 0.8 * record.samples * sleep_s <= record.fetch_s <= 3 * record.samples * sleep_s
        assert record.busy_s == pytest.approx(record.fetch_s + record.collate_s)
        assert record.pid != os.getpid() and record.pids == [record.pid]
        assert 0 < record.first_at_s <= record.last_at_s
        assert len(record.recent) == record.batches
        assert sum(b.fetch_s for b in record.recent) == pytest.approx(record.fetch_s)
        assert [b.end_at_s for b in record.recent] == sorted(b.end_at_s for b in record.recent)
        assert {b.worker_id for b in record.recent} == {record.id}
    assert probe.pid_to_worker() == {r.pid: r.id for r in records}


def test_main_process_is_worker_minus_one(make_probe):
    sleep_s = 0.005
    loader = DataLoader(SleepDataset(12, sleep_s), batch_size=4)
    probe = make_probe(0)
    list(probe.instrument(loader))
    (record,) = probe.record()
    assert (record.id, record.pid, record.pids) == (-1, os.getpid(), [os.getpid()])
    assert (record.batches, record.samples) == (3, 12)
    assert 0.8 * 12 * sleep_s <= record.fetch_s <= 3 * 12 * sleep_s
    assert probe.pid_to_worker() == {os.getpid(): -1}


# ---------------------------------------------------------------------------------------------
# The instrumented clone yields exactly what the original yields
# ---------------------------------------------------------------------------------------------


def _map_shuffled(num_workers, persistent=False):
    return DataLoader(
        NoisyDataset(30),
        batch_size=4,
        shuffle=True,
        num_workers=num_workers,
        persistent_workers=persistent,
        generator=torch.Generator().manual_seed(1234),
    )


LOADER_FACTORIES = {
    "map-shuffled-main": lambda: _map_shuffled(0),
    "map-shuffled-2-workers": lambda: _map_shuffled(2),
    "map-shuffled-persistent": lambda: _map_shuffled(2, persistent=True),
    "getitems-2-workers": lambda: DataLoader(
        GetitemsDataset(22), batch_size=5, shuffle=True, num_workers=2,
        generator=torch.Generator().manual_seed(7),
    ),
    "iterable-split-in-iter": lambda: DataLoader(ShardedRange(0, 23), batch_size=3, num_workers=2),
    "iterable-split-by-worker-init-fn": lambda: DataLoader(
        PlainRange(0, 23), batch_size=3, num_workers=2, worker_init_fn=shard_plain_range
    ),
    "unbatched-main": lambda: DataLoader(NoisyDataset(7), batch_size=None),
    "unsized-with-sampler": lambda: DataLoader(
        UnsizedDataset(), batch_size=2, sampler=SequentialSampler(range(9)), num_workers=2
    ),
}


@pytest.mark.parametrize("name", sorted(LOADER_FACTORIES))
def test_clone_yields_identical_batches_over_epochs(name, make_probe):
    factory = LOADER_FACTORIES[name]
    epochs = 3
    torch.manual_seed(99)  # the main process draws from the global RNG when num_workers=0
    plain = factory()
    expected = [list(plain) for _ in range(epochs)]

    torch.manual_seed(99)
    original = factory()
    probe = make_probe(original.num_workers)
    clone = probe.instrument(original)
    actual = [list(clone) for _ in range(epochs)]

    for expected_epoch, actual_epoch in zip(expected, actual):
        assert_same_batches(expected_epoch, actual_epoch)
    delivered = sum(len(epoch) for epoch in actual)
    assert sum(r.batches for r in probe.record()) == delivered
    assert _len_or_error(clone) == _len_or_error(plain)


def _len_or_error(loader):
    try:
        return len(loader)
    except TypeError:  # unsized datasets: both must refuse len() the same way
        return TypeError


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_workers_fetch_from_the_users_own_dataset_object(context, make_probe):
    # No twin, no proxy: the dataset a worker's fetcher reads, and get_worker_info().dataset,
    # are the user's object of the user's exact class (a copy of it in a spawned worker).
    dataset = SleepDataset(8, 0.0)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context=context,
                        worker_init_fn=require_exact_dataset_class)
    probe = make_probe(2)
    assert len(list(probe.instrument(loader))) == 2
    assert sum(r.batches for r in probe.record()) == 2
    assert loader.dataset is dataset and type(dataset) is SleepDataset


def test_the_main_process_fetches_from_the_users_own_dataset_object(make_probe):
    from pipecheck._torch_compat import main_process_fetcher

    dataset = GetitemsDataset(8)
    loader = make_probe(0).instrument(DataLoader(dataset, batch_size=4))
    iterator = iter(loader)
    fetcher = main_process_fetcher(iterator)
    assert fetcher is not None and fetcher.dataset is dataset  # the user's own object
    assert len(next(iterator)["index"]) == 4


def test_a_list_dataset_is_timed_as_it_is(make_probe):
    samples = [torch.tensor([i]) for i in range(6)]
    probe = make_probe(0)
    batches = list(probe.instrument(DataLoader(samples, batch_size=3)))
    assert [b.tolist() for b in batches] == [[[0], [1], [2]], [[3], [4], [5]]]
    (record,) = probe.record()
    assert (record.batches, record.samples) == (2, 6)


def test_getitems_is_used_and_counted_per_sample(make_probe):
    dataset = GetitemsDataset(10)
    probe = make_probe(0)
    batches = list(probe.instrument(DataLoader(dataset, batch_size=4)))
    assert dataset.getitems_calls == len(batches) == 3  # torch fetched through __getitems__
    (record,) = probe.record()
    assert (record.batches, record.samples) == (3, 10)
    assert [b.samples for b in record.recent] == [4, 4, 2]


def test_the_instrumented_collate_pickles_as_the_users_collate_plus_the_probe(make_probe):
    from pipecheck.probes.workers import InstrumentedCollate

    collate = make_probe(2).collate(SlowCollate(0.0), "/no/such/folder")
    copied = pickle.loads(pickle.dumps(collate))  # as spawn workers receive it
    assert type(copied) is InstrumentedCollate and isinstance(copied.collate_fn, SlowCollate)
    assert copied.stage_folder == "/no/such/folder" and copied.key == collate.key
    assert copied([torch.tensor(1), torch.tensor(2)]).tolist() == [1, 2]  # untimed: no fetch


# ---------------------------------------------------------------------------------------------
# Collate time, unbatched loaders, iterable datasets
# ---------------------------------------------------------------------------------------------


def test_collate_heavy_collate_fn_dominates(make_probe):
    collate_sleep_s = 0.03
    loader = DataLoader(
        IndexDataset(16), batch_size=4, num_workers=2, collate_fn=SlowCollate(collate_sleep_s)
    )
    probe = make_probe(2)
    list(probe.instrument(loader))
    records = probe.record()
    collate_s = sum(r.collate_s for r in records)
    fetch_s = sum(r.fetch_s for r in records)
    assert sum(r.batches for r in records) == 4
    assert 0.8 * 4 * collate_sleep_s <= collate_s <= 3 * 4 * collate_sleep_s
    assert collate_s > 5 * fetch_s


def test_unbatched_loader_records_one_batch_per_sample(make_probe):
    probe = make_probe(0, ring_size=4)
    items = list(probe.instrument(DataLoader(IndexDataset(6), batch_size=None)))
    assert len(items) == 6
    (record,) = probe.record()
    assert (record.batches, record.samples) == (6, 6)
    assert [b.samples for b in record.recent] == [1, 1, 1, 1]  # the ring keeps the newest 4


def test_iterable_time_until_stop_iteration_counts_as_fetch(make_probe):
    end_sleep_s = 0.1
    probe = make_probe(0)
    batches = list(probe.instrument(DataLoader(SlowEndRange(10, end_sleep_s), batch_size=4)))
    assert [len(b) for b in batches] == [4, 4, 2]
    (record,) = probe.record()
    assert (record.batches, record.samples) == (3, 10)
    assert [b.samples for b in record.recent] == [4, 4, 2]
    assert 0.8 * end_sleep_s <= record.fetch_s <= 3 * end_sleep_s


# ---------------------------------------------------------------------------------------------
# Epochs: non-persistent workers are new processes that add to the same slot
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("persistent", [False, True])
def test_counters_accumulate_over_epochs(persistent, make_probe):
    loader = DataLoader(
        IndexDataset(16), batch_size=4, num_workers=2, persistent_workers=persistent
    )
    probe = make_probe(2)
    clone = probe.instrument(loader)
    list(clone)
    first = {r.id: r for r in probe.record()}
    list(clone)
    second = {r.id: r for r in probe.record()}

    assert sum(r.batches for r in second.values()) == 8
    assert sum(r.samples for r in second.values()) == 32
    for worker_id, record in second.items():
        assert record.batches == 2 * first[worker_id].batches
        assert record.fetch_s >= first[worker_id].fetch_s
        assert len(record.pids) == (1 if persistent else 2)
        assert len(set(record.pids)) == len(record.pids)
        assert record.pid == record.pids[-1]
    assert len(probe.pid_to_worker()) == (2 if persistent else 4)


# ---------------------------------------------------------------------------------------------
# Errors and crashes
# ---------------------------------------------------------------------------------------------


def _first_error(loader):
    iterator = iter(loader)
    try:
        for _ in iterator:
            pass
    except Exception as error:
        # Drop the frames that hold the iterator, so its workers shut down now (by refcount)
        # rather than in a later gc pass, where torch waits out its join timeouts.
        error.__traceback__ = None
        return error
    finally:
        del iterator
    raise AssertionError("the loader did not raise")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_worker_exception_reaches_user_unchanged(num_workers, make_probe):
    def make_loader():
        return DataLoader(FailingDataset(20, bad_index=5), batch_size=2, num_workers=num_workers)

    plain_error = _first_error(make_loader())
    probe = make_probe(num_workers)
    probed_error = _first_error(probe.instrument(make_loader()))

    assert type(probed_error) is type(plain_error) is ValueError
    if num_workers == 0:
        assert probed_error.args == plain_error.args == ("sample 5 is corrupt",)
    else:
        # torch re-raises with the worker's traceback text; the proxy adds frames to it, but
        # the headline and the original error line are the same.
        plain_lines, probed_lines = str(plain_error).splitlines(), str(probed_error).splitlines()
        assert probed_lines[0] == plain_lines[0]
        assert probed_lines[-1] == plain_lines[-1] == "ValueError: sample 5 is corrupt"

    records = probe.record()  # still readable; only successful batches are counted
    assert all(r.samples == 2 * r.batches for r in records)
    if num_workers == 0:
        assert sum(r.batches for r in records) == 2  # batches 0 and 1 came before index 5


def test_snapshot_after_a_worker_is_killed(make_probe):
    loader = DataLoader(
        HangingDataset(40, hang_index=8, hang_s=60.0),  # batch 4 goes to worker 0
        batch_size=2,
        num_workers=2,
        multiprocessing_context="fork",
    )
    probe = make_probe(2)
    iterator = iter(probe.instrument(loader))
    for _ in range(4):
        next(iterator)
    victim = next(pid for pid, worker_id in probe.pid_to_worker().items() if worker_id == 0)
    with pytest.raises(RuntimeError, match="exited unexpectedly|killed by signal") as caught:
        time.sleep(0.2)  # let worker 0 reach the hanging sample
        os.kill(victim, signal.SIGKILL)
        next(iterator)
    caught.value.__traceback__ = None  # release the iterator's frames: shut workers down now
    del iterator, caught

    records = {r.id: r for r in probe.record()}
    assert records[0].pid == victim
    assert records[0].batches >= 2
    for record in records.values():
        assert record.samples == 2 * record.batches
        assert len(record.recent) == record.batches


# ---------------------------------------------------------------------------------------------
# Snapshot during iteration, lifecycle, original untouched
# ---------------------------------------------------------------------------------------------


def test_snapshot_during_iteration_is_consistent(make_probe):
    loader = DataLoader(SleepDataset(40, 0.002), batch_size=4, num_workers=2)
    probe = make_probe(2)
    iterator = iter(probe.instrument(loader))
    for _ in range(3):
        next(iterator)
    during = probe.record()
    produced = sum(r.batches for r in during)
    assert 3 <= produced <= 10
    for record in during:
        assert record.samples == 4 * record.batches
        assert len(record.recent) == record.batches
        assert sum(b.samples for b in record.recent) == record.samples
    remaining = list(iterator)
    assert 3 + len(remaining) == 10
    assert sum(r.batches for r in probe.record()) == 10


def test_close_removes_the_file_and_keeps_the_last_snapshot(make_probe):
    probe = make_probe(0)
    list(probe.instrument(DataLoader(IndexDataset(8), batch_size=4)))
    assert os.path.exists(probe.path)
    before = probe.record()
    probe.close()
    probe.close()  # idempotent
    assert not os.path.exists(probe.path)
    assert probe.record() == before and before[0].batches == 2


def test_clone_keeps_working_silently_after_close(make_probe):
    probe = make_probe(2)
    clone = probe.instrument(DataLoader(IndexDataset(8), batch_size=4, num_workers=2))
    probe.close()
    assert len(list(clone)) == 2  # workers cannot open the deleted file: loading goes on


def test_pid_lookups_from_another_thread_survive_close(make_probe):
    # The host probe calls pid_to_worker() from its sampler thread while the driver closes.
    probe = make_probe(0)
    list(probe.instrument(DataLoader(IndexDataset(8), batch_size=4)))
    errors, seen = [], []

    def poll():
        try:
            for _ in range(2000):
                seen.append(probe.pid_to_worker())
        except Exception as error:  # surfaced by the assertion below
            errors.append(error)

    poller = threading.Thread(target=poll)
    poller.start()
    probe.close()
    poller.join()
    assert errors == []
    assert seen and all(pids == {os.getpid(): -1} for pids in seen)
    with pytest.raises(ValueError, match="closed"):
        probe.instrument(DataLoader(IndexDataset(8)))


def test_finalizer_removes_the_file_without_close():
    probe = WorkerProbe(2, run_start=time.perf_counter())
    path = probe.path
    assert os.path.exists(path)
    del probe
    gc.collect()
    assert not os.path.exists(path)


def test_files_of_killed_processes_are_swept(tmp_path):
    # A leftover has no owner holding its lock; a live file has (pipecheck._owned).
    stale = tmp_path / f"{_ring.AREA_PREFIX}{subprocess_pid_that_has_exited()}-abc.bin"
    stale.write_bytes(b"x")
    fd, live = _owned.create_file(str(tmp_path), _ring.AREA_PREFIX, ".bin")
    unrelated = tmp_path / "something-else.bin"
    unrelated.write_bytes(b"x")
    try:
        assert _ring.remove_stale_areas(str(tmp_path)) == [str(stale)]
        assert not stale.exists() and os.path.exists(live) and unrelated.exists()
    finally:
        _owned.remove(fd, live)


def subprocess_pid_that_has_exited() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_the_loader_is_registered_not_copied_and_keeps_its_attributes(make_probe):
    dataset, collate_fn = IndexDataset(8), SlowCollate(0.0)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=collate_fn)
    probe = make_probe(2)
    assert probe.instrument(loader) is loader and type(loader) is DataLoader
    assert len(list(loader)) == 2
    assert loader.dataset is dataset and loader.collate_fn is collate_fn  # the user's
    assert "collate_fn" in vars(loader) and vars(loader)["collate_fn"] is collate_fn
    assert sum(r.batches for r in probe.record()) == 2
    probe.close()  # unregistered: the loader builds as torch does
    before = sum(r.batches for r in probe.record())
    assert len(list(loader)) == 2 and sum(r.batches for r in probe.record()) == before


def test_rejects_mismatched_worker_count_and_started_persistent_workers(make_probe):
    probe = make_probe(2)
    with pytest.raises(ValueError, match="num_workers=0"):
        probe.instrument(DataLoader(IndexDataset(4)))
    started = DataLoader(IndexDataset(8), batch_size=4, num_workers=2, persistent_workers=True)
    list(started)  # torch reuses these workers: they were started without pipecheck's collate
    with pytest.raises(WorkerProbeUnsupported, match="persistent workers"):
        probe.instrument(started)
    with pytest.raises(ValueError):
        WorkerProbe(-1, run_start=0.0)
    with pytest.raises(ValueError):
        WorkerProbe(1, run_start=0.0, ring_size=0)


def test_datapipe_datasets_are_timed_without_changing_their_seeding(make_probe):
    from torch.utils.data.datapipes.iter import IterableWrapper

    def make():
        pipe = IterableWrapper(range(16)).shuffle().sharding_filter()
        return DataLoader(pipe, batch_size=4, num_workers=2, generator=torch.Generator()
                          .manual_seed(7))

    expected = [b.tolist() for b in make()]
    probe = make_probe(2)
    got = [b.tolist() for b in probe.instrument(make())]
    assert got == expected
    assert sum(r.samples for r in probe.record()) == 16


# ---------------------------------------------------------------------------------------------
# The shared ring: wrap-around, torn records, a writer killed mid-update
# ---------------------------------------------------------------------------------------------


def test_ring_keeps_the_newest_records_oldest_first(make_probe):
    probe = make_probe(0, ring_size=4)
    list(probe.instrument(DataLoader(IndexDataset(10), batch_size=1)))
    (record,) = probe.record()
    assert record.batches == 10 and len(record.recent) == 4
    ends = [b.end_at_s for b in record.recent]
    assert ends == sorted(ends) and ends[-1] == pytest.approx(record.last_at_s)


def test_torn_record_and_stuck_header_are_not_reported(make_probe):
    probe = make_probe(1, ring_size=8)
    layout = _ring.AreaLayout(num_slots=1, ring_size=8)
    writer = _ring.SlotWriter(os.open(probe.path, os.O_RDWR), layout, 0)
    try:
        writer.register_process(4242)
        for i in range(3):
            writer.add_batch(probe.run_start + i + 1.0, 0.5, 0.25, 16)
        (good,) = probe.record()
        assert (good.batches, good.samples, good.fetch_s) == (3, 48, 1.5)

        # A writer killed mid-record: record 4 carries a seq but the header never counted it.
        ring_at = layout.ring_word(0) * _ring.WORD_BYTES
        struct.pack_into("=qdddq", probe._area, ring_at + 3 * 40, 4, 9e9, 9e9, 9e9, 999)
        # ... and killed again with the header's seqlock left odd and a counter half-updated.
        header_at = layout.header_word(0) * _ring.WORD_BYTES
        seq = struct.unpack_from("=q", probe._area, header_at)[0]
        struct.pack_into("=qq", probe._area, header_at, seq + 1, 999)

        started = time.perf_counter()
        (stuck,) = probe.record()
        first_read_s = time.perf_counter() - started
        assert (stuck.batches, stuck.samples) == (3, 48)  # the last consistent header
        assert [b.samples for b in stuck.recent] == [16, 16, 16]
        started = time.perf_counter()
        probe.record()
        assert time.perf_counter() - started < max(first_read_s, 0.01)  # stuck seq remembered

        # The next process serving this id repairs the seqlock and carries on counting.
        struct.pack_into("=qq", probe._area, header_at, seq + 1, 3)
        writer.add_batch(probe.run_start + 5.0, 0.5, 0.25, 16)
        (repaired,) = probe.record()
        assert (repaired.batches, repaired.samples) == (4, 64)
        assert [b.end_at_s for b in repaired.recent] == [1.0, 2.0, 3.0, 5.0]
        assert repaired.pids == [4242]
    finally:
        writer.close()
